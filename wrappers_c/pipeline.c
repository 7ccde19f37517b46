/* pipeline.c — the ring of a caller's pipelined requests not answered yet. */
#include "pipeline.h"

#include <stdlib.h>
#include <string.h>

#include "pastset.h"

int ps_pipeline_push(ps_pipeline *p, uint32_t window, uint8_t op, int64_t argument, const void *payload,
                     size_t length, uint32_t tuples) {
    if (!p->entries) {
        p->entries = calloc(window, sizeof *p->entries);
        if (!p->entries) return PS_ENOMEM;
        p->window = window;
    }
    if (p->count == p->window) return PS_ENOMEM;
    ps_pending *e = ps_pipeline_at(p, p->count);
    if (e->capacity < length) {
        unsigned char *grown = realloc(e->payload, length);
        if (!grown) return PS_ENOMEM;
        e->payload = grown;
        e->capacity = length;
    }
    memcpy(e->payload, payload, length);
    e->op = op;
    e->argument = argument;
    e->length = length;
    e->tuples = tuples;
    p->count++;
    p->tuples += tuples;
    return PS_OK;
}

ps_pending *ps_pipeline_at(const ps_pipeline *p, uint32_t i) {
    uint32_t at = p->head + i; /* both below window: no division */
    return &p->entries[at < p->window ? at : at - p->window];
}

void ps_pipeline_pop(ps_pipeline *p) {
    p->tuples -= p->entries[p->head].tuples;
    p->head = p->head + 1 < p->window ? p->head + 1 : 0;
    p->count--;
}

void ps_pipeline_took(ps_pipeline *p, uint32_t tuples, size_t tuple_size) {
    ps_pending *e = ps_pipeline_at(p, 0);
    if (tuples > e->tuples) tuples = e->tuples;
    memmove(e->payload, e->payload + (size_t)tuples * tuple_size, (size_t)(e->tuples - tuples) * tuple_size);
    e->tuples -= tuples;
    e->length = (size_t)e->tuples * tuple_size;
    p->tuples -= tuples;
}

void ps_pipeline_free(ps_pipeline *p) {
    for (uint32_t i = 0; p->entries && i < p->window; i++) free(p->entries[i].payload);
    free(p->entries);
    memset(p, 0, sizeof *p);
}
