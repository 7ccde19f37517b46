/* reduce_sum.c — the `reduce-sum` stage: a global sum with a fixed fan-in.
 *
 * Each round, each of the fan_in contributors moves one tuple. The contributor whose tuple
 * completes the round adds them field by field; the sum goes one stage down as a single move,
 * and the total that the stage below then observes is what every contributor's next observe of
 * that round returns. Rounds never mix: round r lives in slot r % ROUND_SLOTS until all its
 * contributors have observed it, so contributors may drift up to ROUND_SLOTS rounds apart; a
 * mover further ahead waits for its slot.
 *
 * Going down is done by one "driver" at a time (the last contributor of a round, or any waiting
 * observer), strictly in round order. A downward call that times out leaves the round pending,
 * and the next waiting caller drives it again, so every operation can time out without losing or
 * repeating a round. No lock and no allocation on the way: contributions go to per-contributor,
 * cache-line-padded buffers; hand-offs are atomics; waits spin, then yield, then sleep.
 *
 * The link below is the stage's one link, used by one thread at a time: the driver, or a caller
 * whose first, last, observe(i), delta or axe the stage passes on; the driving flag guards it.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "stage_base.h"
#include "waitpoint.h"

enum { ROUND_SLOTS = 4, CACHE_LINE = 64, MAX_FAN_IN = 4096 };

enum { INLINE_TOTAL = 48 };

/* What movers write and what the driver writes for observers sit on lines of their own, so an
 * observer spinning on `ready` finds the total on the same line and nobody else's writes. */
typedef struct round_slot {
    _Alignas(CACHE_LINE) _Atomic uint64_t accepting; /* the round whose contributions this slot takes */
    _Atomic uint32_t arrived;     /* contributions to it so far */
    _Atomic uint32_t collected;   /* contributors that have observed its total */
    _Atomic uint64_t summed;      /* round + 1 once its sum is complete */
    unsigned char *contributions; /* fan_in buffers of `stride` bytes */
    unsigned char *sum;
    unsigned char *total;         /* total_inline, or a buffer of its own for larger tuples */
    _Alignas(CACHE_LINE) _Atomic uint64_t ready; /* round + 1 once its total (or error) is in `total` */
    int status;                   /* the downward status of the round */
    unsigned char total_inline[INLINE_TOTAL];
} round_slot;

typedef struct reduce_sum_stage {
    ps_stage base;
    uint32_t fan_in;
    size_t stride;
    round_slot slots[ROUND_SLOTS];
    _Alignas(CACHE_LINE) _Atomic int driving; /* 1 while a thread uses the link below: driving rounds down,
                                      or passing another operation on (first, last, ...) */
    _Atomic int link_waiters;      /* threads waiting to pass an operation on */
    _Atomic uint64_t down_moved;   /* rounds moved down */
    _Atomic uint64_t down_observed;/* rounds whose total came back */
    _Alignas(CACHE_LINE) ps_waitpoint ready_wp; /* totals arrive: observers wait here */
    _Alignas(CACHE_LINE) ps_waitpoint free_wp;  /* slots free up: movers wait here */
} reduce_sum_stage;

static reduce_sum_stage *sum_of(ps_link *link) { return (reduce_sum_stage *)link->stage; }

static int pending(reduce_sum_stage *s) {
    uint64_t moved = atomic_load(&s->down_moved), observed = atomic_load(&s->down_observed);
    if (moved > observed) return 1;
    return atomic_load(&s->slots[moved % ROUND_SLOTS].summed) == moved + 1;
}

static void finish_round(reduce_sum_stage *s, round_slot *slot, uint64_t round, int status) {
    slot->status = status;
    atomic_store_explicit(&slot->ready, round + 1, memory_order_release);
    atomic_store(&s->down_observed, round + 1);
    ps_waitpoint_wake(&s->ready_wp);
}

/* Moves summed rounds down and observes their totals, in order, while nobody else does.
 * Returns PS_ETIMEDOUT if a downward call timed out (the round stays pending), else PS_OK. */
static int drive(reduce_sum_stage *s, int64_t timeout_ns) {
    ps_link *down = &s->base.next;
    for (;;) {
        if (atomic_exchange(&s->driving, 1)) return PS_OK;
        int rc = PS_OK;
        for (;;) {
            uint64_t moved = atomic_load_explicit(&s->down_moved, memory_order_relaxed);
            uint64_t observed = atomic_load_explicit(&s->down_observed, memory_order_relaxed);
            if (moved > observed) {
                round_slot *slot = &s->slots[observed % ROUND_SLOTS];
                rc = ps_link_observe(down, slot->total, timeout_ns);
                if (rc == PS_ETIMEDOUT) break;
                finish_round(s, slot, observed, rc);
            } else {
                round_slot *slot = &s->slots[moved % ROUND_SLOTS];
                if (atomic_load_explicit(&slot->summed, memory_order_acquire) != moved + 1) break;
                /* Move the sum down and observe the total: one round trip through a remote. */
                int did_move = 0;
                rc = ps_link_exchange(down, slot->sum, slot->total, timeout_ns, &did_move);
                if (did_move) atomic_store(&s->down_moved, moved + 1);
                if (rc == PS_ETIMEDOUT) break; /* moved: the observe is left pending; else both are */
                if (!did_move) atomic_store(&s->down_moved, moved + 1); /* a failed move: no total comes */
                finish_round(s, slot, moved, rc);
            }
            rc = PS_OK;
        }
        atomic_store(&s->driving, 0);
        if (atomic_load(&s->link_waiters)) ps_waitpoint_wake(&s->ready_wp);
        if (rc == PS_ETIMEDOUT) {
            ps_waitpoint_wake(&s->ready_wp); /* let a waiting observer retry the round */
            return rc;
        }
        if (!pending(s)) return PS_OK;
    }
}

static int64_t remaining(int64_t deadline) {
    if (deadline == PS_FOREVER) return PS_FOREVER;
    int64_t left = deadline - ps_now_ns();
    return left > 0 ? left : 0;
}

static int sum_move(ps_link *link, const void *tuple, int64_t timeout_ns) {
    reduce_sum_stage *s = sum_of(link);
    uint64_t round = link->moves;
    round_slot *slot = &s->slots[round % ROUND_SLOTS];
    int64_t deadline = 0;
    uint32_t spins = 0;
    for (;;) {
        uint32_t seen = ps_waitpoint_sequence(&s->free_wp);
        if (atomic_load_explicit(&slot->accepting, memory_order_acquire) == round) break;
        if (spins == 0) {
            atomic_fetch_add_explicit(&s->base.waits, 1, memory_order_relaxed);
            deadline = ps_deadline(timeout_ns);
        }
        if (ps_waitpoint_wait(&s->free_wp, seen, deadline, &spins) == PS_ETIMEDOUT) return PS_ETIMEDOUT;
    }
    memcpy(slot->contributions + link->slot * s->stride, tuple, s->base.tuple_size);
    link->moves = round + 1;
    if (atomic_fetch_add_explicit(&slot->arrived, 1, memory_order_acq_rel) + 1 == s->fan_in) {
        memcpy(slot->sum, slot->contributions, s->base.tuple_size);
        for (uint32_t c = 1; c < s->fan_in; c++)
            ps_tuple_add(&s->base.format, slot->sum, slot->contributions + c * s->stride);
        atomic_store(&slot->summed, round + 1);
        drive(s, spins ? remaining(deadline) : timeout_ns); /* a timeout leaves it to the observers */
    }
    return PS_OK;
}

static int sum_observe(ps_link *link, void *out, int64_t timeout_ns) {
    reduce_sum_stage *s = sum_of(link);
    uint64_t round = link->observes;
    if (round >= link->moves) return PS_ESTATE; /* each observe answers one earlier move */
    round_slot *slot = &s->slots[round % ROUND_SLOTS];
    int64_t deadline = 0;
    uint32_t spins = 0;
    int waited = 0;
    for (;;) {
        uint32_t seen = ps_waitpoint_sequence(&s->ready_wp);
        if (atomic_load_explicit(&slot->ready, memory_order_acquire) == round + 1) break;
        if (!waited) {
            waited = 1;
            atomic_fetch_add_explicit(&s->base.waits, 1, memory_order_relaxed);
            deadline = ps_deadline(timeout_ns);
        }
        if (!atomic_load_explicit(&s->driving, memory_order_relaxed) && pending(s)) {
            if (drive(s, remaining(deadline)) == PS_ETIMEDOUT) return PS_ETIMEDOUT;
            continue;
        }
        if (ps_waitpoint_wait(&s->ready_wp, seen, deadline, &spins) == PS_ETIMEDOUT) return PS_ETIMEDOUT;
    }
    memcpy(out, slot->total, s->base.tuple_size);
    int status = slot->status;
    link->observes = round + 1;
    if (atomic_fetch_add_explicit(&slot->collected, 1, memory_order_acq_rel) + 1 == s->fan_in) {
        atomic_store_explicit(&slot->arrived, 0, memory_order_relaxed);
        atomic_store_explicit(&slot->collected, 0, memory_order_relaxed);
        atomic_store_explicit(&slot->accepting, round + ROUND_SLOTS, memory_order_release);
        ps_waitpoint_wake(&s->free_wp);
    }
    return status;
}

/* ---- operations passed on: first, last, observe_at, delta, axe ------------------------------- */

/* The link below is the stage's one link: the round driver uses it, so an operation passed on
 * takes it the same way (the driving flag), and gives it back to the rounds afterwards. */
static const int64_t PASS_ON_TIMEOUT_NS = 10000000000LL; /* for the calls that take no timeout */

static int take_link(reduce_sum_stage *s, int64_t timeout_ns) {
    int64_t deadline = ps_deadline(timeout_ns);
    uint32_t spins = 0;
    int rc = PS_OK;
    atomic_fetch_add(&s->link_waiters, 1);
    for (;;) {
        uint32_t seen = ps_waitpoint_sequence(&s->ready_wp);
        if (!atomic_exchange(&s->driving, 1)) break;
        if ((rc = ps_waitpoint_wait(&s->ready_wp, seen, deadline, &spins)) == PS_ETIMEDOUT) break;
    }
    atomic_fetch_sub(&s->link_waiters, 1);
    return rc;
}

/* Gives the link back; rounds that completed meanwhile are driven by the observers woken. */
static void give_link(reduce_sum_stage *s) {
    atomic_store(&s->driving, 0);
    ps_waitpoint_wake(&s->ready_wp);
}

/* Tuple `index` may only come with a round this stage drives down: so the link is held for a
 * short look at a time, never for the whole wait, and the rounds go on in between. */
static const int64_t LOOK_NS = 1000000;

static int sum_observe_at(ps_link *link, int64_t index, void *out, int64_t timeout_ns) {
    reduce_sum_stage *s = sum_of(link);
    int64_t deadline = ps_deadline(timeout_ns);
    for (;;) {
        int64_t left = remaining(deadline);
        if (take_link(s, left) != PS_OK) return PS_ETIMEDOUT;
        int64_t look = left == PS_FOREVER || left > LOOK_NS ? LOOK_NS : left;
        int rc = ps_link_observe_at(&s->base.next, index, out, look);
        give_link(s);
        if (rc != PS_ETIMEDOUT || remaining(deadline) == 0) return rc;
        if (pending(s)) drive(s, remaining(deadline));
    }
}

static int sum_first(ps_link *link, int64_t *out) {
    reduce_sum_stage *s = sum_of(link);
    if (take_link(s, PASS_ON_TIMEOUT_NS) != PS_OK) return PS_ETIMEDOUT;
    int rc = ps_link_first(&s->base.next, out);
    give_link(s);
    return rc;
}

static int sum_last(ps_link *link, int64_t *out) {
    reduce_sum_stage *s = sum_of(link);
    if (take_link(s, PASS_ON_TIMEOUT_NS) != PS_OK) return PS_ETIMEDOUT;
    int rc = ps_link_last(&s->base.next, out);
    give_link(s);
    return rc;
}

static int sum_delta(ps_link *link, int64_t bound, int64_t *out) {
    reduce_sum_stage *s = sum_of(link);
    if (take_link(s, PASS_ON_TIMEOUT_NS) != PS_OK) return PS_ETIMEDOUT;
    int rc = ps_link_delta(&s->base.next, bound, out);
    give_link(s);
    return rc;
}

static int sum_axe(ps_link *link, int64_t index) {
    reduce_sum_stage *s = sum_of(link);
    if (take_link(s, PASS_ON_TIMEOUT_NS) != PS_OK) return PS_ETIMEDOUT;
    int rc = ps_link_axe(&s->base.next, index);
    give_link(s);
    return rc;
}

static int sum_counters(ps_stage *stage, ps_counter *out, int max) {
    reduce_sum_stage *s = (reduce_sum_stage *)stage;
    if (max < 2) return 0;
    out[0] = (ps_counter){"rounds", (int64_t)atomic_load(&s->down_observed)};
    out[1] = (ps_counter){"fan_in", (int64_t)s->fan_in};
    return 2;
}

static void sum_destroy(ps_stage *stage) {
    reduce_sum_stage *s = (reduce_sum_stage *)stage;
    for (int i = 0; i < ROUND_SLOTS; i++) free(s->slots[i].contributions);
}

static const ps_stage_ops SUM_OPS = {
    sum_move, sum_observe, sum_observe_at, sum_first, sum_last, sum_delta, sum_axe, sum_counters, sum_destroy,
};

static int sum_create(const ps_params *params, const ps_build_context *context, ps_stage *below,
                      ps_stage **out, char *error, size_t error_size) {
    (void)context;
    if (!below) {
        snprintf(error, error_size, "stage 'reduce-sum': needs a stage below it (a path ends with 'core')");
        return PS_EINVAL;
    }
    const ps_tuple_format *format = ps_stage_format(below);
    if (!ps_tuple_format_summable(format)) {
        snprintf(error, error_size,
                 "stage 'reduce-sum': format '%s' has fields that cannot be added (expected native-order integers "
                 "and floats, e.g. 'q' or 'qd')", format->text);
        return PS_EFORMAT;
    }
    reduce_sum_stage *s = aligned_alloc(CACHE_LINE, (sizeof *s + CACHE_LINE - 1) / CACHE_LINE * CACHE_LINE);
    if (!s) return PS_ENOMEM;
    memset(s, 0, sizeof *s);
    s->fan_in = (uint32_t)ps_params_int(params, "num_threads");
    s->stride = (format->size + CACHE_LINE - 1) / CACHE_LINE * CACHE_LINE;
    int rc = ps_stage_init(&s->base, &SUM_OPS, format, s->fan_in, below, PS_JOINING);
    if (rc == PS_ESTATE) snprintf(error, error_size, "stage 'reduce-sum': the stage below has no free caller slot");
    for (int i = 0; rc == PS_OK && i < ROUND_SLOTS; i++) {
        round_slot *slot = &s->slots[i];
        atomic_init(&slot->accepting, (uint64_t)i);
        slot->contributions = aligned_alloc(CACHE_LINE, s->stride * (s->fan_in + 2));
        if (!slot->contributions) rc = PS_ENOMEM;
        else {
            slot->sum = slot->contributions + s->stride * s->fan_in;
            slot->total = format->size <= INLINE_TOTAL ? slot->total_inline : slot->sum + s->stride;
        }
    }
    ps_waitpoint_init(&s->ready_wp);
    ps_waitpoint_init(&s->free_wp);
    if (rc != PS_OK) {
        sum_destroy(&s->base);
        ps_stage_abandon(&s->base);
        return rc;
    }
    *out = &s->base;
    return PS_OK;
}

static const ps_param_spec SUM_PARAMS[] = {
    {"num_threads", PS_PARAM_INT, 1, NULL, 1, MAX_FAN_IN, NULL, "the fan-in: contributors per round"},
};

const ps_stage_kind ps_kind_reduce_sum = {
    "reduce-sum", "Adds one tuple from each of num_threads contributors per round; each gets the round's total.",
    SUM_PARAMS, sizeof SUM_PARAMS / sizeof SUM_PARAMS[0], sum_create, PS_JOINING,
};
