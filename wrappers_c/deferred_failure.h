/* deferred_failure.h — a failure of work a stage did on a caller's behalf after the caller's call
 * had returned (a batch's sender, a pipelined delay's courier), kept for the caller's next
 * operation to report: the first failure's status and cause (failure_cause.h), and how many of
 * the moves that the failed work held took effect, and of the others how many may have too. Written by the stage's thread, taken by the
 * caller's, to whom the cause then goes.
 */
#ifndef WRAPPERS_DEFERRED_FAILURE_H
#define WRAPPERS_DEFERRED_FAILURE_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include "failure_cause.h"

typedef struct ps_deferred_failure {
    _Atomic int status;   /* PS_OK: nothing to report */
    pthread_mutex_t lock; /* guards the counts and the cause */
    uint32_t done, of;    /* moves that took effect, of those the failed work held */
    uint32_t unsure;      /* of the others, those that may have too (their answer was lost) */
    void *cause;          /* the first failure's, taken from the thread that met it (NULL: none) */
    ps_cause_drop drop;
} ps_deferred_failure;

void ps_deferred_failure_init(ps_deferred_failure *f);
void ps_deferred_failure_destroy(ps_deferred_failure *f);
/* Adds a failure: `done` of `of` moves took effect, and `unsure` of the others may have too. `met_here`: a call this thread made just now
 * failed so, and the cause it left this thread (failure_cause.h), if any, goes with the failure.
 * The status and cause kept are the first one's (a later one's cause is dropped). */
void ps_deferred_failure_record(ps_deferred_failure *f, int status, uint32_t done, uint32_t of, uint32_t unsure,
                                int met_here);
/* Whether a failure waits to be reported. */
static inline int ps_deferred_failure_pending(ps_deferred_failure *f) {
    return atomic_load_explicit(&f->status, memory_order_acquire) != 0;
}
/* The failure not reported yet, cleared: its status (with its counts, and its cause made the
 * calling thread's), or PS_OK. */
int ps_deferred_failure_take(ps_deferred_failure *f, uint32_t *done, uint32_t *of, uint32_t *unsure);

#endif
