/* pipeline.h — a remote stage caller's pipelined requests whose answers are not read yet, oldest
 * first: a ring of at most `window`, each kept whole (its op, argument and payload), so that those
 * a server did not run can be sent again, in order. The ring and each payload's room are made as
 * first needed and kept: a caller that pipelines allocates nothing per request once they suffice. */
#ifndef WRAPPERS_PIPELINE_H
#define WRAPPERS_PIPELINE_H

#include <stddef.h>
#include <stdint.h>

typedef struct ps_pending {
    uint8_t op;
    int64_t argument;
    uint32_t tuples;        /* tuples it carries */
    unsigned char *payload; /* its copy */
    size_t length, capacity;
} ps_pending;

typedef struct ps_pipeline {
    ps_pending *entries;    /* `window` of them, NULL until the first request */
    uint32_t window, head, count;
    uint64_t tuples;        /* tuples all of them carry */
} ps_pipeline;

/* Keeps a request as the newest: PS_OK, or PS_ENOMEM (nothing kept). At most `window` are kept. */
int ps_pipeline_push(ps_pipeline *p, uint32_t window, uint8_t op, int64_t argument, const void *payload,
                     size_t length, uint32_t tuples);
/* The i-th oldest request kept (i < count). */
ps_pending *ps_pipeline_at(const ps_pipeline *p, uint32_t i);
/* Forgets the oldest. */
void ps_pipeline_pop(ps_pipeline *p);
/* The first `tuples` of the oldest request's tuples (of tuple_size bytes each) took effect: it
 * keeps the rest. */
void ps_pipeline_took(ps_pipeline *p, uint32_t tuples, size_t tuple_size);
void ps_pipeline_free(ps_pipeline *p);

#endif
