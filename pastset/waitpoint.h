/* waitpoint.h — the one way a thread waits in PATHS: spin briefly, then yield, then sleep.
 *
 * A waitpoint is a 32-bit sequence number. A waiter reads the sequence, checks its condition,
 * and if the condition is false waits for the sequence to change. A waker changes the state the
 * condition reads, then bumps the sequence; it makes a system call only when a waiter sleeps.
 * Spinning first matters: a condition-variable wake-up alone costs tens of microseconds. But a
 * spinner holds a core that the thread it waits for may need (more threads than cores), so a
 * thread whose recent spins came to nothing yields at once, and one whose yields give the core
 * to other programs for whole time slices sleeps instead.
 */
#ifndef PASTSET_WAITPOINT_H
#define PASTSET_WAITPOINT_H

#include <stdatomic.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ps_waitpoint {
    _Atomic uint32_t sequence;
    _Atomic uint32_t sleepers;
} ps_waitpoint;

void ps_waitpoint_init(ps_waitpoint *w);

static inline uint32_t ps_waitpoint_sequence(ps_waitpoint *w) {
    return atomic_load_explicit(&w->sequence, memory_order_acquire);
}

/* Wakes every waiter. Call after changing the state waiters check. */
void ps_waitpoint_wake(ps_waitpoint *w);

/* Waits until the sequence differs from `seen` or the deadline passes. `spins` is the caller's
 * running count of waits for this operation (start at 0; it never wraps back to 0): it escalates
 * spin -> yield -> sleep.
 * Returns 0 when the sequence moved (or may have), PS_ETIMEDOUT at the deadline. */
int ps_waitpoint_wait(ps_waitpoint *w, uint32_t seen, int64_t deadline_ns, uint32_t *spins);

/* True when the next wait with this `spins` would sleep until woken (or the deadline). */
int ps_waitpoint_sleeps_next(uint32_t spins);

/* The policy itself, for a wait on something other than a waitpoint (a socket): the caller
 * looks at what it waits for, and if it is not there asks what to do next. A spin is one
 * ps_wait_pause() (then the caller looks again, and reports with ps_wait_spun whether the
 * spin found it); a yield is ps_wait_yield(); a sleep is the caller's own blocking call, with its
 * deadline. `spins` is the wait's running count, as for ps_waitpoint_wait. */
typedef enum ps_wait_step { PS_WAIT_SPIN, PS_WAIT_YIELD, PS_WAIT_SLEEP } ps_wait_step;
ps_wait_step ps_wait_next(uint32_t *spins);
void ps_wait_pause(void);
/* A yield step: sched_yield(), timed, so that a thread whose yields hand its core to other work
 * for whole time slices sleeps instead. */
void ps_wait_yield(void);
/* After a spin step: whether the look that followed found what the thread waits for. */
void ps_wait_spun(uint32_t spins, int paid);

#ifdef __cplusplus
}
#endif

#endif
