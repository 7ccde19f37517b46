/* delay.c — the `delay` stage: emulates a slow link, so a wide-area experiment runs on one
 * machine. Every move, observe, observe_at and exchange through it waits `ms` (plus or minus up
 * to `jitter_ms`) on the way there and again on the way back, as a message crossing a link both
 * ways would; first, last, delta and axe pass at once.
 *
 * No crossing outlasts the caller's timeout:
 *   - on the way there, the call returns PS_ETIMEDOUT with nothing done. The caller's message
 *     stays on its way, though: the same operation called again by that caller within
 *     REPEAT_WITHIN_NS (as a caller that waits in slices does: Python every 0.1 s, a server per
 *     slice) continues the crossing instead of starting a new one, so it still arrives after ms;
 *     so does one that timed out below, which does not cross again;
 *   - on the way back, the operation has taken effect, so its answer is returned, at the
 *     timeout if the crossing would take longer.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "stage_base.h"

enum { REPEAT_WITHIN_NS = 10 * 1000 * 1000 };

enum crossing_op { CROSS_MOVE = 1, CROSS_OBSERVE, CROSS_OBSERVE_AT, CROSS_EXCHANGE };

/* One caller's message on its way down (or arrived, its operation below not done yet). */
typedef struct in_flight {
    int op;               /* crossing_op; 0: none */
    int64_t index;        /* observe_at's */
    int64_t arrives_ns;   /* when it reaches the stage below */
    int64_t expires_ns;   /* a repeat after this is a new message */
} in_flight;

typedef struct delay_stage {
    ps_stage base;
    int64_t delay_ns, jitter_ns;
    in_flight *messages;  /* one per caller slot; only that caller touches its own */
    _Atomic uint64_t random_state;
    _Atomic int64_t delayed_ns;  /* total time spent waiting here */
} delay_stage;

static delay_stage *delay_of(ps_link *link) { return (delay_stage *)link->stage; }

static uint64_t next_random(delay_stage *d) {
    uint64_t z = atomic_fetch_add_explicit(&d->random_state, 0x9E3779B97F4A7C15ULL, memory_order_relaxed);
    z += 0x9E3779B97F4A7C15ULL;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

/* How long one crossing of the emulated link takes. */
static int64_t crossing_ns(delay_stage *d) {
    int64_t wait = d->delay_ns;
    if (d->jitter_ns > 0) wait += (int64_t)(next_random(d) % (uint64_t)(2 * d->jitter_ns + 1)) - d->jitter_ns;
    return wait > 0 ? wait : 0;
}

/* Sleeps until `until` or the deadline, whichever comes first; returns when it woke. */
static int64_t sleep_until(delay_stage *d, int64_t until, int64_t deadline) {
    if (deadline != PS_FOREVER && deadline < until) until = deadline;
    int64_t now = ps_now_ns();
    if (until > now) {
        struct timespec at = {until / 1000000000LL, until % 1000000000LL};
        while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &at, NULL) == EINTR) {
        }
        int64_t woke = ps_now_ns();
        atomic_fetch_add_explicit(&d->delayed_ns, woke - now, memory_order_relaxed);
        now = woke;
    }
    return now;
}

/* The way there: PS_OK once the caller's message has arrived below, PS_ETIMEDOUT at the deadline
 * (the message stays on its way for a repeat). */
static int go(ps_link *link, int op, int64_t index, int64_t deadline) {
    delay_stage *d = delay_of(link);
    in_flight *m = &d->messages[link->slot];
    int64_t now = ps_now_ns();
    if (m->op != op || m->index != index || now > m->expires_ns) {
        m->op = op;
        m->index = index;
        m->arrives_ns = now + crossing_ns(d);
    }
    m->expires_ns = INT64_MAX; /* on its way: only the end of this call sets a time to forget it */
    return sleep_until(d, m->arrives_ns, deadline) >= m->arrives_ns ? PS_OK : PS_ETIMEDOUT;
}

/* The way back, with the status of the operation below (rc: PS_ETIMEDOUT when it was not done,
 * moved: an exchange's move took effect all the same). Returns the caller's status. */
static int come_back(ps_link *link, int rc, int moved, int64_t deadline) {
    delay_stage *d = delay_of(link);
    in_flight *m = &d->messages[link->slot];
    if (rc == PS_ETIMEDOUT && !moved) { /* nothing done: a repeat made at once goes on with it */
        m->expires_ns = ps_now_ns() + REPEAT_WITHIN_NS;
        return rc;
    }
    m->op = 0; /* answered */
    sleep_until(d, ps_now_ns() + crossing_ns(d), deadline);
    return rc;
}

static int delay_move(ps_link *link, const void *tuple, int64_t timeout_ns) {
    int64_t deadline = ps_deadline(timeout_ns);
    int rc = go(link, CROSS_MOVE, -1, deadline);
    if (rc == PS_OK) rc = ps_forward_move(link, tuple, ps_remaining(deadline));
    return come_back(link, rc, 0, deadline);
}

static int delay_observe(ps_link *link, void *out, int64_t timeout_ns) {
    int64_t deadline = ps_deadline(timeout_ns);
    int rc = go(link, CROSS_OBSERVE, -1, deadline);
    if (rc == PS_OK) rc = ps_forward_observe(link, out, ps_remaining(deadline));
    return come_back(link, rc, 0, deadline);
}

static int delay_observe_at(ps_link *link, int64_t index, void *out, int64_t timeout_ns) {
    int64_t deadline = ps_deadline(timeout_ns);
    int rc = go(link, CROSS_OBSERVE_AT, index, deadline);
    if (rc == PS_OK) rc = ps_forward_observe_at(link, index, out, ps_remaining(deadline));
    return come_back(link, rc, 0, deadline);
}

static int delay_exchange(ps_link *link, const void *tuple, void *out, int64_t timeout_ns, int *moved) {
    int64_t deadline = ps_deadline(timeout_ns);
    *moved = 0;
    int rc = go(link, CROSS_EXCHANGE, -1, deadline);
    if (rc == PS_OK) rc = ps_forward_exchange(link, tuple, out, ps_remaining(deadline), moved);
    return come_back(link, rc, *moved, deadline);
}

/* A caller gone leaves nothing on its way for the next caller of its slot. */
static void delay_detach(ps_stage *stage, uint32_t slot) { ((delay_stage *)stage)->messages[slot].op = 0; }

static int delay_counters(ps_stage *stage, ps_counter *out, int max) {
    if (max < 1) return 0;
    out[0] = (ps_counter){"delayed_ns", atomic_load(&((delay_stage *)stage)->delayed_ns)};
    return 1;
}

static void delay_destroy(ps_stage *stage) { free(((delay_stage *)stage)->messages); }

static const ps_stage_ops DELAY_OPS = {
    delay_move, delay_observe, delay_observe_at, ps_forward_first, ps_forward_last, ps_forward_delta,
    ps_forward_axe, delay_counters, delay_destroy, delay_exchange, NULL, delay_detach,
};

static int delay_create(const ps_params *params, const ps_build_context *context, ps_stage *below,
                        ps_stage **out, char *error, size_t error_size) {
    (void)context;
    if (!below) {
        snprintf(error, error_size, "stage 'delay': needs a stage below it (a path ends with 'core')");
        return PS_EINVAL;
    }
    double ms = ps_params_float(params, "ms"), jitter_ms = ps_params_float(params, "jitter_ms");
    if (jitter_ms > ms) {
        snprintf(error, error_size, "stage 'delay': jitter_ms (%g) must not exceed ms (%g)", jitter_ms, ms);
        return PS_EINVAL;
    }
    delay_stage *d = calloc(1, sizeof *d);
    if (!d) return PS_ENOMEM;
    d->delay_ns = (int64_t)(ms * 1e6);
    d->jitter_ns = (int64_t)(jitter_ms * 1e6);
    atomic_init(&d->random_state, (uint64_t)ps_now_ns());
    int rc = ps_stage_init(&d->base, &DELAY_OPS, ps_stage_format(below), 0, below, PS_PASS_THROUGH);
    if (rc == PS_OK && !(d->messages = calloc(PS_PASS_THROUGH_CALLERS, sizeof *d->messages))) rc = PS_ENOMEM;
    if (rc != PS_OK) {
        delay_destroy(&d->base);
        ps_stage_abandon(&d->base);
        return rc;
    }
    *out = &d->base;
    return PS_OK;
}

static const ps_param_spec DELAY_PARAMS[] = {
    {"ms", PS_PARAM_FLOAT, 1, NULL, 0, 60000, NULL, "one-way delay in milliseconds, paid going and coming back"},
    {"jitter_ms", PS_PARAM_FLOAT, 0, "0", 0, 60000, NULL, "uniform jitter, +/- milliseconds (at most ms)"},
};

const ps_stage_kind ps_kind_delay = {
    "delay", "Emulates a slow link: each operation waits ms (+/- jitter_ms) going down and again coming back, "
    "never past its timeout.",
    DELAY_PARAMS, sizeof DELAY_PARAMS / sizeof DELAY_PARAMS[0], delay_create, PS_PASS_THROUGH,
};
