/* waitpoint.c — spin, then yield, then sleep on a futex. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* syscall (the futex), clock_gettime: C11 itself has neither */
#endif
#include "waitpoint.h"

#include <errno.h>
#include <linux/futex.h>
#include <sched.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "pastset.h"

/* A spin lasts a few microseconds at most (a pause takes 10-40 ns): about what a yield that
 * hands the core to another thread costs, so a spin that comes to nothing costs no more. */
enum { SPIN_ROUNDS = 4, SPIN_PAUSES = 16, YIELD_ROUNDS = 200 };

/* After a wait whose spinning saw nothing, a thread goes straight to yielding: what it waits for
 * is likely a thread that needs its core. It tries spinning again on one wait in RETRY_EVERY, so
 * spinning comes back when cores come free. The verdict is the thread's own: threads sharing a
 * core and threads with a core each may wait on the same waitpoint.
 * Likewise for yielding: a yield that took longer than LONG_YIELD_NS gave the core to a whole
 * time slice of other work (another program on a loaded machine), and every yield after it
 * would too, each costing a slice before the thread looks again. So the thread's next waits
 * sleep after spinning instead, woken the moment what they wait for comes; one wait in
 * RETRY_EVERY yields again to see whether the core is free of such work. */
enum { RETRY_EVERY = 256 };
static const int64_t LONG_YIELD_NS = 2000000;

static _Thread_local uint32_t waits_begun;
static _Thread_local int spin_failed;
static _Thread_local int yield_failed;

static int spinning_pays(void) { return !spin_failed || waits_begun % RETRY_EVERY == 0; }
static int yielding_pays(void) { return !yield_failed || waits_begun % RETRY_EVERY == 0; }

int ps_waitpoint_sleeps_next(uint32_t spins) {
    return spins >= SPIN_ROUNDS + YIELD_ROUNDS || (spins >= SPIN_ROUNDS && !yielding_pays());
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
    int64_t now = ps_now_ns();
    return timeout_ns > INT64_MAX - now ? PS_FOREVER : now + timeout_ns; /* past the clock's end: no limit */
}

static _Thread_local int64_t call_deadline; /* 0: no call in slices */

int64_t ps_call_deadline_set(int64_t deadline_ns) {
    int64_t before = call_deadline;
    call_deadline = deadline_ns;
    return before;
}

int64_t ps_call_deadline(int64_t deadline_ns) {
    if (!call_deadline || deadline_ns == PS_FOREVER) return deadline_ns;
    return call_deadline == PS_FOREVER || call_deadline > deadline_ns ? call_deadline : deadline_ns;
}

int64_t ps_remaining(int64_t deadline_ns) {
    if (deadline_ns == PS_FOREVER) return PS_FOREVER;
    int64_t left = deadline_ns - ps_now_ns();
    return left > 0 ? left : 0;
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

ps_wait_step ps_wait_next(uint32_t *spins) {
    uint32_t round = *spins;
    if (round != UINT32_MAX) *spins = round + 1; /* stops there: 0 is only ever a first wait */
    if (round == 0) {
        waits_begun++;
        if (!spinning_pays()) { /* this wait is the first yield */
            round = SPIN_ROUNDS;
            *spins = SPIN_ROUNDS + 1;
        }
    }
    if (round < SPIN_ROUNDS) return PS_WAIT_SPIN;
    return round < SPIN_ROUNDS + YIELD_ROUNDS && yielding_pays() ? PS_WAIT_YIELD : PS_WAIT_SLEEP;
}

void ps_wait_yield(void) {
    int64_t started = ps_now_ns();
    sched_yield();
    yield_failed = ps_now_ns() - started > LONG_YIELD_NS;
}

void ps_wait_spun(uint32_t spins, int paid) {
    if (paid || spins == SPIN_ROUNDS) spin_failed = !paid; /* the verdict on the thread's spins */
}

static int spin_for(const _Atomic uint32_t *word, uint32_t seen) {
    int moved = 0;
    for (int i = 0; i < SPIN_PAUSES && !moved; i++) {
        moved = atomic_load_explicit(word, memory_order_acquire) != seen;
        cpu_relax();
    }
    return moved;
}

void ps_wait_pause(void) {
    for (int i = 0; i < SPIN_PAUSES; i++) cpu_relax();
}

int ps_waitpoint_wait(ps_waitpoint *w, uint32_t seen, int64_t deadline_ns, uint32_t *spins) {
    switch (ps_wait_next(spins)) {
    case PS_WAIT_SPIN: {
        int moved = spin_for(&w->sequence, seen);
        ps_wait_spun(*spins, moved);
        return !moved && timed_out(deadline_ns) ? PS_ETIMEDOUT : 0;
    }
    case PS_WAIT_YIELD:
        ps_wait_yield();
        return timed_out(deadline_ns) ? PS_ETIMEDOUT : 0;
    case PS_WAIT_SLEEP:
        break;
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
