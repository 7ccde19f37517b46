/* space.c — a PastSet: the table of elements addressed by (name, format). */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "element.h"

enum { NAME_MAX_BYTES = 255 };

struct ps_space {
    pthread_mutex_t lock;
    ps_element **elements;
    size_t count, capacity;
};

static const char *const STATUS_NAMES[PS_STATUS_COUNT] = {
    "ok", "timed out", "axed", "bad index", "bad format", "format mismatch", "out of memory",
    "invalid argument", "closed", "wrong state", "not supported", "remote failure", "interrupted",
};

const char *ps_status_name(int status) {
    if (status < 0 || status >= PS_STATUS_COUNT) return "unknown status";
    return STATUS_NAMES[status];
}

ps_space *ps_space_new(void) {
    ps_space *space = calloc(1, sizeof *space);
    if (!space) return NULL;
    pthread_mutex_init(&space->lock, NULL);
    return space;
}

void ps_space_free(ps_space *space) {
    if (!space) return;
    for (size_t i = 0; i < space->count; i++) ps_element_free(space->elements[i]);
    free(space->elements);
    pthread_mutex_destroy(&space->lock);
    free(space);
}

int ps_enter(ps_space *space, const char *name, const char *format, ps_element **out) {
    *out = NULL;
    if (!name || !*name || strlen(name) > NAME_MAX_BYTES) return PS_EINVAL;
    ps_tuple_format parsed;
    if (ps_tuple_format_parse(format, &parsed, NULL, 0) != 0) return PS_EFORMAT;
    pthread_mutex_lock(&space->lock);
    int rc = PS_OK;
    for (size_t i = 0; i < space->count; i++) {
        ps_element *e = space->elements[i];
        if (strcmp(e->name, name) == 0) {
            if (strcmp(e->format.text, parsed.text) == 0) *out = e;
            else rc = PS_EMISMATCH;
            pthread_mutex_unlock(&space->lock);
            return rc;
        }
    }
    if (space->count == space->capacity) {
        size_t capacity = space->capacity ? space->capacity * 2 : 8;
        ps_element **grown = realloc(space->elements, capacity * sizeof *grown);
        if (!grown) rc = PS_ENOMEM;
        else {
            space->elements = grown;
            space->capacity = capacity;
        }
    }
    if (rc == PS_OK) {
        ps_element *e = ps_element_new(name, &parsed);
        if (!e) rc = PS_ENOMEM;
        else *out = space->elements[space->count++] = e;
    }
    pthread_mutex_unlock(&space->lock);
    return rc;
}

size_t ps_space_count(ps_space *space) {
    pthread_mutex_lock(&space->lock);
    size_t count = space->count;
    pthread_mutex_unlock(&space->lock);
    return count;
}

ps_element *ps_space_element(ps_space *space, size_t i) {
    pthread_mutex_lock(&space->lock);
    ps_element *e = i < space->count ? space->elements[i] : NULL;
    pthread_mutex_unlock(&space->lock);
    return e;
}
