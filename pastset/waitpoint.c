/* waitpoint.c — spin, then yield, then sleep on a futex. */
#include "waitpoint.h"

#include <errno.h>
#include <linux/futex.h>
#include <sched.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "pastset.h"

enum { SPIN_ROUNDS = 20, SPIN_PAUSES = 32, YIELD_ROUNDS = 200 };

/* Threads waiting awake (spinning or yielding) right now, in the whole process. Spinning only
 * pays while each of them has a core of its own; beyond that a spinner burns the time slice the
 * thread it waits for needs, so the waiter yields its core instead. */
static _Atomic int awake_waiters;
static _Atomic int cores;

static int spinning_pays(void) {
    int n = atomic_load_explicit(&cores, memory_order_relaxed);
    if (n == 0) {
        long online = sysconf(_SC_NPROCESSORS_ONLN);
        n = online > 1 ? (int)online : 1;
        atomic_store_explicit(&cores, n, memory_order_relaxed);
    }
    /* The thread being waited for needs a core too. */
    return atomic_load_explicit(&awake_waiters, memory_order_relaxed) < n;
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

static int timed_out(int64_t deadline_ns) { return deadline_ns != PS_FOREVER && ps_now_ns() >= deadline_ns; }

int ps_waitpoint_wait(ps_waitpoint *w, uint32_t seen, int64_t deadline_ns, uint32_t *spins) {
    uint32_t round = (*spins)++;
    if (round < SPIN_ROUNDS + YIELD_ROUNDS) {
        atomic_fetch_add_explicit(&awake_waiters, 1, memory_order_relaxed);
        int moved = 0;
        if (round < SPIN_ROUNDS && spinning_pays()) {
            for (int i = 0; i < SPIN_PAUSES && !moved; i++) {
                moved = ps_waitpoint_sequence(w) != seen;
                cpu_relax();
            }
        } else {
            if (round < SPIN_ROUNDS) *spins = SPIN_ROUNDS; /* more waiters than cores: go on yielding */
            sched_yield();
        }
        atomic_fetch_sub_explicit(&awake_waiters, 1, memory_order_relaxed);
        return !moved && timed_out(deadline_ns) ? PS_ETIMEDOUT : 0;
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
