/* element.h — the inside of a PastSet element, shared by element.c and space.c only. */
#ifndef PASTSET_ELEMENT_H
#define PASTSET_ELEMENT_H

#include <pthread.h>
#include <stdatomic.h>

#include "pastset.h"
#include "waitpoint.h"

enum { PS_CACHE_LINE = 64 };

/* Fixed at creation: name to chunk_bytes. The lock guards every other field. A move or observe
 * writes only the lock's line (the cursor and the counts sit on it) and the tuple's line; it
 * reads the next line, written only when chunks come and go or someone waits; and it touches
 * a waitpoint only when someone waits there. So an operation from another core fetches two
 * lines. */
struct ps_element {
    char *name;
    ps_tuple_format format;
    size_t tuple_size;
    uint32_t chunk_shift;     /* a chunk holds 1 << chunk_shift tuples */
    size_t chunk_bytes;
    size_t directory_capacity;
    char *spare;              /* a freed chunk kept for reuse */
    int64_t bytes_held, waits;

    _Alignas(PS_CACHE_LINE) pthread_mutex_t lock;
    int64_t first, last;      /* the next unread tuple; tuples moved (the element's moves) */
    int64_t observes;
    _Alignas(PS_CACHE_LINE) char **directory; /* directory[k] holds chunk chunk_base + k */
    int64_t chunk_base;
    size_t chunk_count;
    int64_t axed, delta;
    int64_t observers_waiting; /* operations waiting on `arrived` now */
    int64_t movers_waiting;    /* operations waiting on `departed` now */

    _Alignas(PS_CACHE_LINE) ps_waitpoint arrived; /* bumped by move: observers wait here */
    ps_waitpoint departed;    /* bumped when unread tuples fall: movers at the bound wait here */

    /* The space's bookkeeping (space.c, under the space's lock), on a line no operation touches. */
    _Alignas(PS_CACHE_LINE) struct {
        uint64_t hash;            /* of the name */
        ps_element *next_in_bucket;
        ps_element *older, *newer; /* creation order */
        _Atomic int64_t holds;    /* ps_enter's not yet given back by ps_leave */
    } in_space;
};

ps_element *ps_element_new(const char *name, const ps_tuple_format *format);
void ps_element_free(ps_element *e);

#endif
