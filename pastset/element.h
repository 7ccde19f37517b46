/* element.h — the inside of a PastSet element, shared by element.c and space.c only. */
#ifndef PASTSET_ELEMENT_H
#define PASTSET_ELEMENT_H

#include <pthread.h>

#include "pastset.h"
#include "waitpoint.h"

struct ps_element {
    char *name;
    ps_tuple_format format;
    size_t tuple_size;
    uint32_t chunk_shift;     /* a chunk holds 1 << chunk_shift tuples */
    size_t chunk_bytes;

    pthread_mutex_t lock;     /* guards everything below */
    char **directory;         /* directory[k] holds chunk chunk_base + k */
    size_t directory_capacity;
    size_t chunk_count;
    int64_t chunk_base;
    char *spare;              /* a freed chunk kept for reuse */
    int64_t first, last, axed, delta;
    int64_t bytes_held, moves, observes, waits;

    ps_waitpoint arrived;     /* bumped by move: observers wait here */
    ps_waitpoint departed;    /* bumped when unread tuples fall: movers at the bound wait here */
};

ps_element *ps_element_new(const char *name, const ps_tuple_format *format);
void ps_element_free(ps_element *e);

#endif
