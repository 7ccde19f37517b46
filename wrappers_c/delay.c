/* delay.c — the `delay` stage: emulates a slow link, so a wide-area experiment runs on one
 * machine. Every operation through it waits `ms` (plus or minus up to `jitter_ms`) on the way
 * there and again on the way back, as a message crossing a link both ways would. */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "stage_base.h"

typedef struct delay_stage {
    ps_stage base;
    int64_t delay_ns, jitter_ns;
    _Atomic uint64_t random_state;
    _Atomic int64_t delayed_ns;  /* total time spent waiting here */
} delay_stage;

static uint64_t next_random(delay_stage *d) {
    uint64_t z = atomic_fetch_add_explicit(&d->random_state, 0x9E3779B97F4A7C15ULL, memory_order_relaxed);
    z += 0x9E3779B97F4A7C15ULL;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

/* One crossing of the emulated link. */
static void cross(ps_link *link) {
    delay_stage *d = (delay_stage *)link->stage;
    int64_t wait = d->delay_ns;
    if (d->jitter_ns > 0) wait += (int64_t)(next_random(d) % (uint64_t)(2 * d->jitter_ns + 1)) - d->jitter_ns;
    if (wait <= 0) return;
    struct timespec ts = {wait / 1000000000LL, wait % 1000000000LL};
    while (nanosleep(&ts, &ts) != 0) {
    }
    atomic_fetch_add_explicit(&d->delayed_ns, wait, memory_order_relaxed);
}

static int delay_move(ps_link *link, const void *tuple, int64_t timeout_ns) {
    cross(link);
    int rc = ps_forward_move(link, tuple, timeout_ns);
    cross(link);
    return rc;
}

static int delay_observe(ps_link *link, void *out, int64_t timeout_ns) {
    cross(link);
    int rc = ps_forward_observe(link, out, timeout_ns);
    cross(link);
    return rc;
}

static int delay_observe_at(ps_link *link, int64_t index, void *out, int64_t timeout_ns) {
    cross(link);
    int rc = ps_forward_observe_at(link, index, out, timeout_ns);
    cross(link);
    return rc;
}

static int delay_exchange(ps_link *link, const void *tuple, void *out, int64_t timeout_ns, int *moved) {
    cross(link);
    int rc = ps_link_exchange(ps_stage_down(link), tuple, out, timeout_ns, moved);
    cross(link);
    return rc;
}

static int delay_counters(ps_stage *stage, ps_counter *out, int max) {
    if (max < 1) return 0;
    out[0] = (ps_counter){"delayed_ns", atomic_load(&((delay_stage *)stage)->delayed_ns)};
    return 1;
}

static const ps_stage_ops DELAY_OPS = {
    delay_move, delay_observe, delay_observe_at, ps_forward_first, ps_forward_last, ps_forward_delta,
    ps_forward_axe, delay_counters, NULL, delay_exchange, NULL,
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
    if (rc != PS_OK) {
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
    "delay", "Emulates a slow link: each operation waits ms (+/- jitter_ms) going down and again coming back.",
    DELAY_PARAMS, sizeof DELAY_PARAMS / sizeof DELAY_PARAMS[0], delay_create, PS_PASS_THROUGH,
};
