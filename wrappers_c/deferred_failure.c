/* deferred_failure.c — see deferred_failure.h. */
#include "deferred_failure.h"

#include "pastset.h"

void ps_deferred_failure_init(ps_deferred_failure *f) {
    atomic_init(&f->status, PS_OK);
    pthread_mutex_init(&f->lock, NULL);
    f->done = f->of = f->unsure = 0;
    f->cause = NULL;
}

void ps_deferred_failure_destroy(ps_deferred_failure *f) {
    if (f->cause) f->drop(f->cause);
    pthread_mutex_destroy(&f->lock);
}

void ps_deferred_failure_record(ps_deferred_failure *f, int status, uint32_t done, uint32_t of, uint32_t unsure,
                                int met_here) {
    ps_cause_drop drop = NULL;
    void *cause = met_here ? ps_failure_cause_take(&drop) : NULL;
    pthread_mutex_lock(&f->lock);
    f->done += done;
    f->of += of;
    f->unsure += unsure;
    int none = PS_OK;
    int first = atomic_compare_exchange_strong(&f->status, &none, status);
    if (first && cause) {
        f->cause = cause;
        f->drop = drop;
        cause = NULL;
    }
    pthread_mutex_unlock(&f->lock);
    if (cause) drop(cause);
}

int ps_deferred_failure_take(ps_deferred_failure *f, uint32_t *done, uint32_t *of, uint32_t *unsure) {
    if (atomic_load_explicit(&f->status, memory_order_acquire) == PS_OK) return PS_OK;
    pthread_mutex_lock(&f->lock);
    int status = atomic_exchange(&f->status, PS_OK);
    *done = f->done;
    *of = f->of;
    *unsure = f->unsure;
    f->done = f->of = f->unsure = 0;
    void *cause = f->cause;
    ps_cause_drop drop = f->drop;
    f->cause = NULL;
    pthread_mutex_unlock(&f->lock);
    if (cause) ps_failure_cause_set(cause, drop);
    return status;
}
