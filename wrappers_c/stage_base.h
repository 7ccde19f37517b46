/* stage_base.h — what every stage kind's C file builds on: the generic stage struct, its set-up,
 * and the two ways a kind hands on an operation it does not do itself. Not for C++.
 */
#ifndef WRAPPERS_STAGE_BASE_H
#define WRAPPERS_STAGE_BASE_H

#include <pthread.h>
#include <stdatomic.h>

#include "stage.h"

/* The part of every stage that the generic code owns. Kinds embed it first in their struct. */
struct ps_stage {
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
    char error[PS_STAGE_ERROR_MAX]; /* the last failure worth explaining, for messages (a server's refusal) */
    uint64_t error_serial;         /* when it was written, in the process's order of stage errors */
    int moves_queued;              /* its moves return once on their way, before they take effect (a
                                      pipelined delay): a stage above need not send them from a thread */
    const int64_t *axe_point;      /* the element's axe point (ps_axe_point), where the stage passes
                                      indexed reads and axes to it unchanged, or a stage's own word of
                                      what its answers showed of it (remote's: it may run ahead, to an
                                      axe whose answer was lost); copies before it are not served;
                                      NULL: not seen from here */
};

/* Whether an axe that returned rc may have taken effect: done, or with its outcome unknown (an
 * answer lost, a timeout, a stage's error after it passed the axe on). Only a refusal of its index,
 * or of the operation, says nothing was done. A stage that keeps copies raises its axe point on
 * either, so that it never serves a copy such an axe may have freed (reads of them go down). */
static inline int ps_axe_may_have_taken_effect(int rc) {
    return rc != PS_EINDEX && rc != PS_ENOTSUP && rc != PS_ESTATE;
}

/* Sets the stage's error (its explanation of a failure) to the formatted text, cut to fit; every
 * stage's error is written here (and counted for ps_stage_error_since). */
void ps_stage_explain(ps_stage *stage, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* A caller's link made in its parent process (forks.h): what the stage holds for it (buffers, a
 * thread's queue, a connection) is the parent's, for the parent to send. Says so in the stage's
 * error, naming what it holds; returns PS_ESTATE: nothing was done. */
int ps_stage_refuse_inherited(ps_stage *stage, const char *held);

/* Sets the stage's error to say what became of `of` moves it sent down that failed with `status`:
 * "<kind>: <done> of <of> moves <sent> took effect, then <failed> (<status>)<after>: <the
 * explanation below>", where `unsure` moves whose answer was lost (ps_op_unsure) make done "at
 * least <done>" and are said to may have taken effect too. */
void ps_stage_explain_moves(ps_stage *stage, int status, uint32_t done, uint32_t of, uint32_t unsure,
                            const char *sent, const char *failed, const char *after);

/* The element's axe point as the stage shows it (a pass-through's is the one below it; a remote
 * stage's, what its answers showed), 0 where it shows none. Inline: a cache reads it at each hit,
 * a server with each answer. */
static inline int64_t ps_stage_axe_point(const ps_stage *stage) {
    return stage->axe_point ? __atomic_load_n(stage->axe_point, __ATOMIC_ACQUIRE) : 0;
}

/* Raises an axe-point word (read with __atomic_load_n) to `index`, if that is higher. */
static inline void ps_axe_point_raise(int64_t *word, int64_t index) {
    int64_t seen = __atomic_load_n(word, __ATOMIC_RELAXED);
    while (seen < index && !__atomic_compare_exchange_n(word, &seen, index, 1, __ATOMIC_RELEASE, __ATOMIC_RELAXED)) {
    }
}

/* A pass-through stage serves at most this many callers at once (a slot freed by a caller that
 * left is given to the next one). */
enum { PS_PASS_THROUGH_CALLERS = 1024 };

/* Sets up the generic fields of a freshly allocated stage of `kind` above `below` (NULL for a
 * bottom stage), reaching it as the kind's role says. Returns PS_ESTATE if below's fan-in is
 * exhausted, PS_ENOMEM. On failure the caller frees the stage with ps_stage_abandon. */
int ps_stage_init(ps_stage *stage, const ps_stage_kind *kind, const ps_tuple_format *format, uint32_t max_links,
                  ps_stage *below);
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

/* Hands the operation, unchanged, to the caller's link below: what a pass-through stage does with
 * every kind it has nothing to add to (the op may be one it has never heard of). */
static inline int ps_stage_pass(ps_link *link, ps_op *op) { return ps_link_call(ps_stage_down(link), op); }

/* Does an operation the stage does not take whole as the simpler ones it is made of (an exchange
 * as a move then an observe, a move_many as its moves in order), each through the stage's own
 * call; any other kind is refused with PS_ENOTSUP, and the stage's error says which. */
int ps_op_fallback(ps_link *link, ps_op *op);

/* What a stage that adds tuples (reduce-sum, allreduce) sums: the format of the stage below it,
 * which it needs and whose fields must all add. PS_OK with *out, or a status with a reason naming
 * the kind in `error`. */
int ps_summed_format(const char *kind, ps_stage *below, const ps_tuple_format **out, char *error, size_t error_size);

/* The generic part of ps_stage_footprint for a kind (its links and slots), in bytes. */
size_t ps_stage_base_footprint(const ps_stage_kind *kind);

#endif
