/* forks.c — counts the forks that made this process (forks.h). */
#include "forks.h"

#include <pthread.h>
#include <stdatomic.h>

static _Atomic unsigned forks;
static pthread_once_t counting = PTHREAD_ONCE_INIT;

static void forked(void) { atomic_fetch_add(&forks, 1); }

static void count_forks(void) { pthread_atfork(NULL, NULL, forked); }

unsigned ps_forks(void) {
    pthread_once(&counting, count_forks);
    return atomic_load(&forks);
}
