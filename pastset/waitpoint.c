/* waitpoint.c — spin, then yield, then sleep on a futex. */
#include "waitpoint.h"

#include <errno.h>
#include <linux/futex.h>
#include <sched.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "pastset.h"

enum { SPIN_ROUNDS = 20, SPIN_PAUSES = 32, YIELD_ROUNDS = 50 };

/* Threads spinning right now, in the whole process. Spinning only pays while every spinner has
 * a core of its own: with more waiters than cores a spinner burns the time slice the thread it
 * waits for needs, so beyond that the waiter goes straight to sleep. */
static _Atomic int spinning_threads;
static int spin_limit;

static int spinners_allowed(void) {
    int limit = atomic_load_explicit((_Atomic int *)&spin_limit, memory_order_relaxed);
    if (limit == 0) {
        long cpus = sysconf(_SC_NPROCESSORS_ONLN);
        limit = cpus > 1 ? (int)cpus - 1 : 1;
        atomic_store_explicit((_Atomic int *)&spin_limit, limit, memory_order_relaxed);
    }
    return limit;
}

void ps_waitpoint_init(ps_waitpoint *w) {
    atomic_init(&w->sequence, 0);
    atomic_init(&w->sleepers, 0);
}

int64_t ps_now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

int64_t ps_deadline(int64_t timeout_ns) {
    if (timeout_ns < 0) return PS_FOREVER;
    return ps_now_ns() + timeout_ns;
}

void ps_waitpoint_wake(ps_waitpoint *w) {
    atomic_fetch_add_explicit(&w->sequence, 1, memory_order_seq_cst);
    if (atomic_load_explicit(&w->sleepers, memory_order_seq_cst) != 0)
        syscall(SYS_futex, &w->sequence, FUTEX_WAKE_PRIVATE, INT32_MAX, NULL, NULL, 0);
}

static inline void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
}

int ps_waitpoint_wait(ps_waitpoint *w, uint32_t seen, int64_t deadline_ns, uint32_t *spins) {
    uint32_t round = (*spins)++;
    if (round < SPIN_ROUNDS) {
        if (atomic_fetch_add_explicit(&spinning_threads, 1, memory_order_relaxed) < spinners_allowed()) {
            int moved = 0;
            for (int i = 0; i < SPIN_PAUSES && !moved; i++) {
                moved = ps_waitpoint_sequence(w) != seen;
                cpu_relax();
            }
            atomic_fetch_sub_explicit(&spinning_threads, 1, memory_order_relaxed);
            if (moved) return 0;
            return deadline_ns != PS_FOREVER && ps_now_ns() >= deadline_ns ? PS_ETIMEDOUT : 0;
        }
        atomic_fetch_sub_explicit(&spinning_threads, 1, memory_order_relaxed);
        *spins = SPIN_ROUNDS; /* more waiters than cores: yield the core instead of spinning */
    }
    if (round < SPIN_ROUNDS + YIELD_ROUNDS) {
        sched_yield();
        return deadline_ns != PS_FOREVER && ps_now_ns() >= deadline_ns ? PS_ETIMEDOUT : 0;
    }
    struct timespec relative, *timeout = NULL;
    if (deadline_ns != PS_FOREVER) {
        int64_t left = deadline_ns - ps_now_ns();
        if (left <= 0) return PS_ETIMEDOUT;
        relative.tv_sec = left / 1000000000LL;
        relative.tv_nsec = left % 1000000000LL;
        timeout = &relative;
    }
    atomic_fetch_add_explicit(&w->sleepers, 1, memory_order_seq_cst);
    long rc = syscall(SYS_futex, &w->sequence, FUTEX_WAIT_PRIVATE, seen, timeout, NULL, 0);
    int err = errno;
    atomic_fetch_sub_explicit(&w->sleepers, 1, memory_order_seq_cst);
    if (rc == -1 && err == ETIMEDOUT) return PS_ETIMEDOUT;
    return 0;
}
