/* stage_base.h — what every stage kind's C file builds on: the generic stage struct, its set-up,
 * and forwarding operations for kinds that pass an operation straight down. Not for C++.
 */
#ifndef WRAPPERS_STAGE_BASE_H
#define WRAPPERS_STAGE_BASE_H

#include <pthread.h>
#include <stdatomic.h>

#include "stage.h"

typedef struct ps_stage_ops {
    int (*move)(ps_link *link, const void *tuple, int64_t timeout_ns);
    int (*observe)(ps_link *link, void *out, int64_t timeout_ns);
    int (*observe_at)(ps_link *link, int64_t index, void *out, int64_t timeout_ns);
    int (*first)(ps_link *link, int64_t *out);
    int (*last)(ps_link *link, int64_t *out);
    /* bound >= 0 sets the bound; bound < 0 only reads it. */
    int (*delta)(ps_link *link, int64_t bound, int64_t *out);
    int (*axe)(ps_link *link, int64_t index);
    /* Fills up to max kind-specific counters; returns how many. May be NULL. */
    int (*counters)(ps_stage *stage, ps_counter *out, int max);
    /* Flushes and frees the kind's own state (not the stage struct, not the next link). */
    void (*destroy)(ps_stage *stage);
    /* Optional: move then observe as one operation (a remote stage does it in one round trip).
     * *moved tells whether the move part took effect, so a timed-out observe can be retried. */
    int (*exchange)(ps_link *link, const void *tuple, void *out, int64_t timeout_ns, int *moved);
    /* Optional: a new caller got `slot` (a remote stage connects it to its server here). */
    int (*attach)(ps_stage *stage, uint32_t slot);
    /* Optional: the caller in `slot` is gone (a remote stage releases its server link here). */
    void (*detach)(ps_stage *stage, uint32_t slot);
} ps_stage_ops;

/* The part of every stage that the generic code owns. Kinds embed it first in their struct. */
struct ps_stage {
    const ps_stage_ops *ops;
    const ps_stage_kind *kind;
    _Atomic int32_t references;
    _Atomic uint32_t links;        /* links attached so far: the next slot to give out */
    uint32_t max_links;            /* fan-in; 0 = any number of callers */
    ps_stage *below;               /* the next stage toward the element (NULL for the core) */
    ps_link next;                  /* this stage's own link to `below` (not for pass-through) */
    ps_link *caller_links;         /* pass-through stages: one link to `below` per caller slot */
    ps_tuple_format format;        /* of the tuples flowing through, from the element */
    size_t tuple_size;
    uint32_t *free_slots;          /* pass-through stages: slots of callers gone, for new ones */
    uint32_t free_count;
    pthread_mutex_t links_lock;    /* guards free slots and the fields below (attach, detach, reading) */
    ps_link **attached;            /* the links attached now, whose counters are live */
    uint32_t attached_count, attached_capacity;
    int64_t retired_operations;    /* counters of links already detached */
    int64_t retired_bytes, retired_waits;
    char error[256];               /* the last failure worth explaining, for messages */
};

/* A pass-through stage serves at most this many callers at once (a slot freed by a caller that
 * left is given to the next one). */
enum { PS_PASS_THROUGH_CALLERS = 1024 };

/* Sets up the generic fields of a freshly allocated stage above `below` (NULL for a bottom
 * stage). Returns PS_ESTATE if below's fan-in is exhausted, PS_ENOMEM. On failure the caller
 * frees the stage with ps_stage_abandon. */
int ps_stage_init(ps_stage *stage, const ps_stage_ops *ops, const ps_tuple_format *format,
                  uint32_t max_links, ps_stage *below, ps_stage_joining joining);
/* Undoes ps_stage_init for a stage whose constructor failed, and frees it. */
void ps_stage_abandon(ps_stage *stage);

/* The link an operation arriving on `link` continues on, toward the element. */
static inline ps_link *ps_stage_down(ps_link *link) {
    ps_stage *s = link->stage;
    return s->caller_links ? &s->caller_links[link->slot] : &s->next;
}

/* Counts a call on `link` that had to wait (by the link's one user, like its other counters). */
static inline void ps_link_count_wait(ps_link *link) {
    __atomic_store_n(&link->waits, link->waits + 1, __ATOMIC_RELAXED);
}

/* Forwarding implementations, for kinds that pass an operation straight down. */
int ps_forward_move(ps_link *link, const void *tuple, int64_t timeout_ns);
int ps_forward_observe(ps_link *link, void *out, int64_t timeout_ns);
int ps_forward_observe_at(ps_link *link, int64_t index, void *out, int64_t timeout_ns);
int ps_forward_first(ps_link *link, int64_t *out);
int ps_forward_last(ps_link *link, int64_t *out);
int ps_forward_delta(ps_link *link, int64_t bound, int64_t *out);
int ps_forward_axe(ps_link *link, int64_t index);
int ps_forward_exchange(ps_link *link, const void *tuple, void *out, int64_t timeout_ns, int *moved);

#endif
