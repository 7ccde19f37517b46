/* forks.c — counts the forks that made this process (forks.h). */
#include "forks.h"

#include <pthread.h>
#include <stdatomic.h>

static _Atomic unsigned forks;

static void forked(void) { atomic_fetch_add(&forks, 1); }

/* From the library's load on: a stage asks on every call, so the ask is one load. */
__attribute__((constructor)) static void count_forks(void) { pthread_atfork(NULL, NULL, forked); }

unsigned ps_forks(void) { return atomic_load_explicit(&forks, memory_order_relaxed); }
