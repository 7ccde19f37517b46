/* reduce_sum.c — the `reduce-sum` stage: a global sum with a fixed fan-in.
 *
 * Each round, each of the fan_in contributors moves one tuple. The contributor whose tuple
 * completes the round adds them field by field; the sum goes one stage down as a single move,
 * and the total that the stage below then observes is what every contributor's next observe of
 * that round returns. Rounds never mix: round r lives in slot r % ROUND_SLOTS, and a contributor
 * moves round r + ROUND_SLOTS only after observing round r, so contributors may drift up to
 * ROUND_SLOTS rounds apart; a move further ahead of the caller's own observes is refused.
 *
 * Going down is done by one "driver" at a time (the last contributor of a round, or any waiting
 * observer), strictly in round order. A downward call that times out leaves the round pending,
 * and the next waiting caller drives it again, so every operation can time out without losing or
 * repeating a round. No lock and no allocation on the way: small contributions are packed on the
 * line of the round's arrival count, larger ones go to per-contributor cache-line-padded buffers;
 * hand-offs are atomics; waits spin, then yield, then sleep.
 *
 * The link below is the stage's one link, used by one thread at a time: the driver, or a caller
 * whose first, last, observe(i), delta or axe the stage passes on; the driving flag guards it.
 *
 * Forwarding: a sum directly on a sum (a tree of sums in one process) only moves its rounds down;
 * the sum below takes them without waiting, and this stage's observers read the totals straight
 * from the root, the lowest sum of the chain, which alone goes further down. Round r of every sum
 * in a chain is round r of its root. So whichever thread completes the root's round completes it
 * for every thread of the tree at once, and no hand-off waits for a thread to be scheduled per
 * level. Root slots are safe to read: an upper sum moves round r + ROUND_SLOTS only when all its
 * contributors moved it, each after observing round r at the root.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "stage_base.h"
#include "stage_kinds.h"
#include "waitpoint.h"

enum { ROUND_SLOTS = 4, CACHE_LINE = 64, MAX_FAN_IN = 4096 };

enum { PACKED_BYTES = 48, INLINE_TOTAL = 40 };

/* What movers write and what the driver writes for observers sit on lines of their own, so an
 * observer waiting on `ready` finds the total on the same line and nobody else's writes. Small
 * contributions (fan_in of them in PACKED_BYTES) sit on the line of the arrival count: a mover
 * takes one line to contribute, and the contributor completing the round adds them up without
 * fetching anyone's line. */
typedef struct round_slot {
    _Alignas(CACHE_LINE) _Atomic uint64_t arrived; /* contributions this slot ever took: round r is
                                      complete when it reaches (r / ROUND_SLOTS + 1) * fan_in */
    _Atomic uint64_t summed;      /* round + 1 once its sum is complete */
    unsigned char packed[PACKED_BYTES];
    _Alignas(CACHE_LINE) _Atomic uint64_t ready; /* round + 1 once its total (or error) is in `total` */
    int status;                   /* the downward status of the round */
    ps_waitpoint ready_wp;        /* its observers wait here */
    unsigned char total_inline[INLINE_TOTAL];
    _Alignas(CACHE_LINE) unsigned char *contributions; /* `packed`, or fan_in buffers of `stride` bytes */
    unsigned char *sum;           /* a line of its own */
    unsigned char *total;         /* total_inline, or a buffer of its own for larger tuples */
    unsigned char *buffers;       /* what was allocated for the above */
    char why[PS_STAGE_ERROR_MAX]; /* a failed round: what the stages below said to its driver */
} round_slot;

typedef struct reduce_sum_stage {
    ps_stage base;
    struct reduce_sum_stage *root; /* the sum whose totals this stage's observers read: itself,
                                      or, on a chain of sums, the lowest one (see Forwarding) */
    uint32_t fan_in;
    size_t stride;
    _Atomic int stalled;           /* 1 from a downward call that timed out until a driver takes
                                      the rounds on: read by every waiting observer, written rarely */
    round_slot slots[ROUND_SLOTS];
    _Alignas(CACHE_LINE) _Atomic int driving; /* 1 while a thread uses the link below: driving rounds down,
                                      or passing another operation on (first, last, ...) */
    _Atomic int link_waiters;      /* threads waiting to pass an operation on */
    _Atomic uint64_t down_moved;   /* rounds moved down */
    _Atomic uint64_t down_observed;/* rounds whose total came back */
    _Alignas(CACHE_LINE) ps_waitpoint link_wp; /* the link below comes free: passers-on wait here */
} reduce_sum_stage;

static reduce_sum_stage *sum_of(ps_link *link) { return (reduce_sum_stage *)link->stage; }

static int forwards(const reduce_sum_stage *s) { return s->root != s; }

/* A round to drive down now: summed but not yet moved, or moved and its total not yet back. */
static int pending(reduce_sum_stage *s) {
    uint64_t moved = atomic_load(&s->down_moved), observed = atomic_load(&s->down_observed);
    if (moved > observed && !forwards(s)) return 1;
    return atomic_load(&s->slots[moved % ROUND_SLOTS].summed) == moved + 1;
}

static void wake_observers(reduce_sum_stage *s) {
    for (int i = 0; i < ROUND_SLOTS; i++) ps_waitpoint_wake(&s->slots[i].ready_wp);
}

/* The round's status is what its downward call (begun at `began`, in this thread) returned. */
static void finish_round(reduce_sum_stage *s, round_slot *slot, uint64_t round, int status, ps_error_mark began) {
    slot->status = status;
    if (status != PS_OK) ps_stage_said_since(began, slot->why, sizeof slot->why); /* read on failure only */
    atomic_store_explicit(&slot->ready, round + 1, memory_order_release);
    atomic_store(&s->down_observed, round + 1);
    ps_waitpoint_wake(&slot->ready_wp);
}

/* Moves summed rounds down and observes their totals (forwarding: only moves them), in order,
 * while nobody else does.
 * Returns PS_ETIMEDOUT if a downward call timed out (the round stays pending), else PS_OK. */
static int drive(reduce_sum_stage *s, int64_t timeout_ns) {
    ps_link *down = &s->base.next;
    for (;;) {
        if (atomic_exchange(&s->driving, 1)) return PS_OK;
        if (atomic_load_explicit(&s->stalled, memory_order_relaxed)) atomic_store(&s->stalled, 0);
        int rc = PS_OK;
        for (;;) {
            uint64_t moved = atomic_load_explicit(&s->down_moved, memory_order_relaxed);
            uint64_t observed = atomic_load_explicit(&s->down_observed, memory_order_relaxed);
            if (moved > observed && !forwards(s)) {
                round_slot *slot = &s->slots[observed % ROUND_SLOTS];
                ps_op observe = {.kind = PS_OP_OBSERVE, .out = slot->total, .timeout_ns = timeout_ns};
                ps_error_mark began = ps_stage_error_mark();
                rc = ps_link_call(down, &observe);
                if (rc == PS_ETIMEDOUT) break;
                finish_round(s, slot, observed, rc, began);
            } else {
                round_slot *slot = &s->slots[moved % ROUND_SLOTS];
                if (atomic_load_explicit(&slot->summed, memory_order_acquire) != moved + 1) break;
                if (forwards(s)) {
                    /* The sum below takes the arrival at once and cannot refuse it: this link is
                     * never ahead, since its answer is read at the root by our observers and so
                     * nothing is left to observe here. The root drives the round down. */
                    atomic_store(&s->down_moved, moved + 1);
                    ps_op move = {.kind = PS_OP_MOVE, .in = slot->sum, .timeout_ns = timeout_ns};
                    ps_link_call(down, &move);
                    down->observes = down->moves;
                } else {
                    /* Move the sum down and observe the total: one round trip through a remote. */
                    ps_op exchange = {.kind = PS_OP_EXCHANGE, .in = slot->sum, .out = slot->total,
                                      .timeout_ns = timeout_ns};
                    ps_error_mark began = ps_stage_error_mark();
                    rc = ps_link_call(down, &exchange);
                    int did_move = exchange.done != 0;
                    if (did_move) atomic_store(&s->down_moved, moved + 1);
                    if (rc == PS_ETIMEDOUT) break; /* moved: the observe is left pending; else both are */
                    if (!did_move) atomic_store(&s->down_moved, moved + 1); /* a failed move: no total comes */
                    finish_round(s, slot, moved, rc, began);
                }
            }
            rc = PS_OK;
        }
        if (rc == PS_ETIMEDOUT) atomic_store(&s->stalled, 1);
        atomic_store(&s->driving, 0);
        if (atomic_load(&s->link_waiters)) ps_waitpoint_wake(&s->link_wp);
        if (rc == PS_ETIMEDOUT) {
            wake_observers(s); /* let a waiting observer retry the round */
            return rc;
        }
        if (!pending(s)) return PS_OK;
    }
}

static int sum_move(ps_link *link, const void *tuple, int64_t timeout_ns) {
    reduce_sum_stage *s = sum_of(link);
    uint64_t round = link->moves;
    /* Slot round % ROUND_SLOTS still holds a round this caller has not observed: only its own
     * observe can free it. Having observed that round, the caller knows every contributor
     * moved it, so no slot is taken back while anyone still needs it. */
    if (round >= link->observes + ROUND_SLOTS) {
        ps_stage_explain(&s->base, "reduce-sum: a sum holds %d rounds ahead of a caller's observes, and this caller "
                         "has moved %d it has not observed yet: observe first", ROUND_SLOTS, ROUND_SLOTS);
        return PS_ESTATE;
    }
    round_slot *slot = &s->slots[round % ROUND_SLOTS];
    memcpy(slot->contributions + link->slot * s->stride, tuple, s->base.tuple_size);
    link->moves = round + 1;
    uint64_t complete = (round / ROUND_SLOTS + 1) * s->fan_in;
    if (atomic_fetch_add_explicit(&slot->arrived, 1, memory_order_acq_rel) + 1 == complete) {
        memcpy(slot->sum, slot->contributions, s->base.tuple_size);
        for (uint32_t c = 1; c < s->fan_in; c++)
            ps_tuple_add(&s->base.format, slot->sum, slot->contributions + c * s->stride);
        atomic_store(&slot->summed, round + 1);
        drive(s, timeout_ns); /* a timeout leaves it to the observers */
    }
    return PS_OK;
}

/* Rounds are driven by the contributor that completes them; a waiting observer takes over only
 * after a downward call timed out. It looks for that on any turn when the root says a call
 * stalled (so calls with timeouts too short for a second turn still take rounds on), and now and
 * then otherwise. */
enum { TAKE_OVER_LOOK = 8, NOTHING_STALLED = -1 };

/* Drives the rounds left pending by a timeout on the way from `s` down to its root. Returns
 * NOTHING_STALLED, PS_OK after driving, or PS_ETIMEDOUT. */
static int drive_stalled(reduce_sum_stage *s, int64_t timeout_ns) {
    for (;;) {
        if (!atomic_load_explicit(&s->driving, memory_order_relaxed) && pending(s))
            return drive(s, timeout_ns);
        if (!forwards(s)) return NOTHING_STALLED;
        s = (reduce_sum_stage *)s->base.below;
    }
}

/* Waits until round `round` (one this caller moved and has not observed) has come back from
 * below: its total, or its failure, is in its slot at the root. PS_OK or PS_ETIMEDOUT. */
static int wait_round(ps_link *link, uint64_t round, int64_t timeout_ns) {
    reduce_sum_stage *s = sum_of(link);
    round_slot *slot = &s->root->slots[round % ROUND_SLOTS];
    int64_t deadline = 0;
    uint32_t spins = 0, turns = 0;
    for (;; turns++) {
        uint32_t seen = ps_waitpoint_sequence(&slot->ready_wp);
        if (atomic_load_explicit(&slot->ready, memory_order_acquire) == round + 1) return PS_OK;
        if (turns == 0) {
            ps_link_count_wait(link);
            deadline = ps_deadline(timeout_ns);
        }
        int look = atomic_load_explicit(&s->root->stalled, memory_order_relaxed) ||
                   turns % TAKE_OVER_LOOK == TAKE_OVER_LOOK - 1 || ps_waitpoint_sleeps_next(spins);
        int stalled = look ? drive_stalled(s, ps_remaining(deadline)) : NOTHING_STALLED;
        if (stalled == PS_ETIMEDOUT) return PS_ETIMEDOUT;
        if (stalled == PS_OK) continue;
        if (ps_waitpoint_wait(&slot->ready_wp, seen, deadline, &spins) == PS_ETIMEDOUT) return PS_ETIMEDOUT;
    }
}

/* A round's status for one of its callers: a failure told again in the caller's own thread, in
 * its driver's words (ps_stage_error_since finds them for the caller's call). */
static int round_status(reduce_sum_stage *s, const round_slot *slot) {
    if (slot->status != PS_OK && slot->why[0]) ps_stage_explain(&s->base, "%s", slot->why);
    return slot->status;
}

static int sum_observe(ps_link *link, void *out, int64_t timeout_ns) {
    reduce_sum_stage *s = sum_of(link);
    uint64_t round = link->observes;
    if (round >= link->moves) {
        ps_stage_explain(&s->base, "reduce-sum: each observe answers one earlier move of its caller, and this "
                         "caller has observed all %llu it moved: move first", (unsigned long long)round);
        return PS_ESTATE;
    }
    int rc = wait_round(link, round, timeout_ns);
    if (rc != PS_OK) return rc;
    round_slot *slot = &s->root->slots[round % ROUND_SLOTS];
    memcpy(out, slot->total, s->base.tuple_size);
    link->observes = round + 1;
    return round_status(s, slot);
}

/* A move_many is that many contributions, of consecutive rounds: taken whole when they all fit in
 * the caller's rounds ahead (ROUND_SLOTS beyond its observes), else refused, nothing moved. The
 * rounds it completes are driven down within its one timeout. */
static int sum_move_many(ps_link *link, ps_op *op) {
    if (link->moves + op->count > link->observes + ROUND_SLOTS) {
        ps_stage_explain(link->stage, "reduce-sum: a sum holds %d rounds ahead of a caller's observes, and these %u "
                         "moves do not fit after the %llu this caller has not observed yet: observe first",
                         ROUND_SLOTS, op->count, (unsigned long long)(link->moves - link->observes));
        return PS_ESTATE;
    }
    const unsigned char *tuples = op->in;
    size_t size = link->stage->tuple_size;
    int64_t deadline = ps_deadline(op->timeout_ns);
    for (uint32_t i = 0; i < op->count; i++) sum_move(link, tuples + (size_t)i * size, ps_remaining(deadline));
    return PS_OK;
}

/* ---- operations passed on: first, last, observe_at, delta, axe, and any other --------------- */

/* The link below is the stage's one link: the round driver uses it, so an operation passed on
 * takes it the same way (the driving flag), and gives it back to the rounds afterwards. */
static const int64_t PASS_ON_TIMEOUT_NS = 10000000000LL; /* for the calls that take no timeout */

static int take_link(reduce_sum_stage *s, int64_t timeout_ns) {
    int64_t deadline = ps_deadline(timeout_ns);
    uint32_t spins = 0;
    int rc = PS_OK;
    atomic_fetch_add(&s->link_waiters, 1);
    for (;;) {
        uint32_t seen = ps_waitpoint_sequence(&s->link_wp);
        if (!atomic_exchange(&s->driving, 1)) break;
        if ((rc = ps_waitpoint_wait(&s->link_wp, seen, deadline, &spins)) == PS_ETIMEDOUT) break;
    }
    atomic_fetch_sub(&s->link_waiters, 1);
    return rc;
}

/* Gives the link back; rounds that completed meanwhile are driven by the observers woken. */
static void give_link(reduce_sum_stage *s) {
    atomic_store(&s->driving, 0);
    ps_waitpoint_wake(&s->link_wp);
    wake_observers(s);
}

/* What an operation that waits (observe_at: a tuple still to come) waits for may only come with a
 * round this stage drives down: so the link is held for a short look at a time, never for the
 * whole wait, and the rounds go on in between. */
static const int64_t LOOK_NS = 1000000;

static int pass_on(ps_link *link, ps_op *op) {
    reduce_sum_stage *s = sum_of(link);
    int waits = ps_op_kinds[op->kind].shape & PS_OP_WAITS;
    int64_t deadline = ps_deadline(waits ? op->timeout_ns : PASS_ON_TIMEOUT_NS);
    int64_t timeout_ns = op->timeout_ns;
    for (;;) {
        int64_t left = ps_remaining(deadline);
        if (take_link(s, left) != PS_OK) return PS_ETIMEDOUT;
        if (waits) op->timeout_ns = left == PS_FOREVER || left > LOOK_NS ? LOOK_NS : left;
        int rc = ps_link_call(&s->base.next, op);
        op->timeout_ns = timeout_ns;
        give_link(s);
        if (rc != PS_ETIMEDOUT || !waits || op->done || ps_remaining(deadline) == 0) return rc;
        if (pending(s)) drive(s, ps_remaining(deadline));
    }
}

/* A fence: the caller's moves are applied below once the round of its last move has come back
 * (the caller's moves counted against the rounds gone down, which stalls while another
 * contributor still holds back its move of that round); then the fence goes on down. A round
 * whose move failed below fails the fence with its status. */
static int sum_fence(ps_link *link, ps_op *op) {
    int64_t deadline = ps_deadline(op->timeout_ns);
    if (link->moves > link->observes) {
        uint64_t last = link->moves - 1;
        int rc = wait_round(link, last, op->timeout_ns);
        if (rc == PS_OK) rc = round_status(sum_of(link), &sum_of(link)->root->slots[last % ROUND_SLOTS]);
        if (rc != PS_OK) return rc;
    }
    int64_t timeout_ns = op->timeout_ns;
    op->timeout_ns = ps_remaining(deadline);
    int rc = pass_on(link, op);
    op->timeout_ns = timeout_ns;
    return rc;
}

static int sum_call(ps_link *link, ps_op *op) {
    switch (op->kind) {
    case PS_OP_MOVE: return sum_move(link, op->in, op->timeout_ns);
    case PS_OP_OBSERVE: return sum_observe(link, op->out, op->timeout_ns);
    case PS_OP_MOVE_MANY: return sum_move_many(link, op);
    case PS_OP_EXCHANGE: return ps_op_fallback(link, op); /* a contribution, then its round's total */
    case PS_OP_FENCE: return sum_fence(link, op);
    default: return pass_on(link, op);
    }
}

static int sum_counters(ps_stage *stage, ps_counter *out, int max) {
    reduce_sum_stage *s = (reduce_sum_stage *)stage;
    if (max < 2) return 0;
    uint64_t rounds = forwards(s) ? atomic_load(&s->down_moved) : atomic_load(&s->down_observed);
    out[0] = (ps_counter){"rounds", (int64_t)rounds};
    out[1] = (ps_counter){"fan_in", (int64_t)s->fan_in};
    return 2;
}

/* Rounds summed that have not gone down. */
static uint64_t rounds_not_down(reduce_sum_stage *s) {
    uint64_t round = atomic_load(&s->down_moved), n = 0;
    while (n < ROUND_SLOTS && atomic_load(&s->slots[(round + n) % ROUND_SLOTS].summed) == round + n + 1) n++;
    return n;
}

static const int64_t RELEASE_WAIT_NS = 1000000000LL; /* how long the rounds left pending wait below at the end */

/* The last caller went: rounds its callers completed that a timed-out downward call left pending
 * go down now, each waiting up to RELEASE_WAIT_NS below; what cannot is said on stderr, never
 * dropped silently. */
static void sum_destroy(ps_stage *stage) {
    reduce_sum_stage *s = (reduce_sum_stage *)stage;
    if (pending(s)) drive(s, RELEASE_WAIT_NS);
    uint64_t lost = rounds_not_down(s);
    if (lost)
        fprintf(stderr, "paths: stage 'reduce-sum': %llu round(s) summed when its last caller left did not go down "
                "within %lld ms: lost\n", (unsigned long long)lost, (long long)(RELEASE_WAIT_NS / 1000000));
    for (int i = 0; i < ROUND_SLOTS; i++) free(s->slots[i].buffers);
}

/* Where a sum of fan_in contributors keeps tuples of `size` bytes: packed on the arrival count's
 * line when they fit (spread 0), else a cache-line-padded buffer each; plus, per round slot, a
 * line for the sum and one for the total. */
typedef struct layout {
    int packs;
    size_t stride, line, spread;
} layout;

static layout layout_of(size_t size, uint32_t fan_in) {
    size_t words = (size + 7) / 8 * 8; /* packed contributions stay 8-byte aligned */
    layout l;
    l.packs = words * fan_in <= PACKED_BYTES;
    l.line = (size + CACHE_LINE - 1) / CACHE_LINE * CACHE_LINE;
    l.stride = l.packs ? words : l.line;
    l.spread = l.packs ? 0 : l.stride * fan_in;
    return l;
}

static size_t stage_bytes(void) { return (sizeof(reduce_sum_stage) + CACHE_LINE - 1) / CACHE_LINE * CACHE_LINE; }

static size_t sum_footprint(const ps_params *params, size_t tuple_size) {
    layout l = layout_of(tuple_size, (uint32_t)ps_params_int(params, "num_threads"));
    return stage_bytes() + ROUND_SLOTS * (l.spread + 2 * l.line);
}

static int sum_create(const ps_params *params, const ps_build_context *context, ps_stage *below,
                      ps_stage **out, char *error, size_t error_size) {
    (void)context;
    const ps_tuple_format *format;
    int checked = ps_summed_format("reduce-sum", below, &format, error, error_size);
    if (checked != PS_OK) return checked;
    reduce_sum_stage *s = aligned_alloc(CACHE_LINE, stage_bytes());
    if (!s) return PS_ENOMEM;
    memset(s, 0, sizeof *s);
    s->fan_in = (uint32_t)ps_params_int(params, "num_threads");
    s->root = below->kind == &ps_kind_reduce_sum ? ((reduce_sum_stage *)below)->root : s;
    layout l = layout_of(format->size, s->fan_in);
    s->stride = l.stride;
    int rc = ps_stage_init(&s->base, &ps_kind_reduce_sum, format, s->fan_in, below);
    if (rc == PS_ESTATE) snprintf(error, error_size, "stage 'reduce-sum': the stage below has no free caller slot");
    for (int i = 0; rc == PS_OK && i < ROUND_SLOTS; i++) {
        round_slot *slot = &s->slots[i];
        slot->buffers = aligned_alloc(CACHE_LINE, l.spread + 2 * l.line);
        if (!slot->buffers) rc = PS_ENOMEM;
        else {
            slot->contributions = l.packs ? slot->packed : slot->buffers;
            slot->sum = slot->buffers + l.spread;
            slot->total = format->size <= INLINE_TOTAL ? slot->total_inline : slot->sum + l.line;
        }
    }
    ps_waitpoint_init(&s->link_wp);
    for (int i = 0; i < ROUND_SLOTS; i++) ps_waitpoint_init(&s->slots[i].ready_wp);
    if (rc != PS_OK) {
        sum_destroy(&s->base);
        ps_stage_abandon(&s->base);
        return rc;
    }
    *out = &s->base;
    return PS_OK;
}

static const ps_param_spec SUM_PARAMS[] = {
    {"num_threads", PS_PARAM_INT, 1, NULL, 1, MAX_FAN_IN, NULL, "the fan-in: contributors per round", PS_PARAM_GIVEN},
};

const ps_stage_kind ps_kind_reduce_sum = {
    .version = PS_STAGE_KIND_VERSION,
    .name = "reduce-sum",
    .doc = "Adds one tuple from each of num_threads contributors per round; each gets the round's total.",
    .params = SUM_PARAMS,
    .param_count = sizeof SUM_PARAMS / sizeof SUM_PARAMS[0],
    .role = PS_JOINING,
    .needs_below = 1,
    .create = sum_create,
    .call = sum_call,
    .footprint = sum_footprint,
    .counters = sum_counters,
    .destroy = sum_destroy,
};
