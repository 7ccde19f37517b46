/* delay.c — the `delay` stage: emulates a slow link, so a wide-area experiment runs on one
 * machine. Every operation that may wait (move, observe, observe_at, exchange, move_many) waits
 * `ms` (plus or minus up to `jitter_ms`) on the way there and again on the way back, as a message
 * crossing a link both ways would; first, last, delta and axe pass at once.
 *
 * No crossing outlasts the caller's timeout:
 *   - on the way there, the call returns PS_ETIMEDOUT with nothing done. The caller's message
 *     stays on its way, though: the same operation called again by that caller within
 *     REPEAT_WITHIN_NS (as a caller that waits in slices does: Python every 0.1 s, a server per
 *     slice) continues the crossing instead of starting a new one, so it still arrives after ms;
 *     so does one that timed out below, which does not cross again, nor does what is left of it
 *     when a part took effect there (the rest of a move_many, an exchange's observe);
 *   - on the way back, the operation has taken effect, so its answer is returned, at the
 *     timeout if the crossing would take longer (the whole call's, for a caller that waits in
 *     slices: ps_call_deadline).
 *
 * Pipelined (pipelined=1), moves stream as on a wire, whose latency delays each message but does
 * not hold back the next one: a move or move_many is queued with the time it arrives and the call
 * returns at once, all its tuples sent; the stage's courier thread passes each on below, on its
 * caller's link, when it arrives, in the order sent. Any other operation of the caller follows its
 * moves on the same wire: it crosses as above, then waits (by its timeout) until the courier has
 * applied them, so a caller observes its own moves. A move that failed below is reported by the
 * caller's next operation, which does nothing else, with how many of its tuples took effect in
 * the stage's error; the courier drops the caller's messages after it until the caller has heard
 * (a move first waits for them), so that what took effect of a caller's moves is a prefix of
 * them. A move waits (by its timeout) while QUEUE_MESSAGES are on their way.
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "deferred_failure.h"
#include "forks.h"
#include "stage_base.h"
#include "stage_kinds.h"
#include "waitpoint.h"
#include "wire.h"

enum { REPEAT_WITHIN_NS = 10 * 1000 * 1000, QUEUE_MESSAGES = 64, CACHE_LINE = 64 };
enum { NO_CALLER = PS_PASS_THROUGH_CALLERS }; /* a queued message's slot once its caller went (drop_queued) */
static const int64_t COURIER_SLICE_NS = 100000000LL;  /* the courier looks at `stopping` and `leaving` this often */
static const int64_t RELEASE_WAIT_NS = 1000000000LL;  /* a caller that goes waits this long for its moves */
static const int64_t EARLY_WAKE_NS = 150000;         /* a sleep's wake-up may come this late */

/* One caller's message on its way down (or arrived, its operation below not done yet). */
typedef struct in_flight {
    int op;               /* the operation's kind + 1; 0: none */
    int64_t argument;     /* its argument */
    int64_t arrives_ns;   /* when it reaches the stage below */
    int64_t expires_ns;   /* a repeat after this is a new message */
} in_flight;

/* Pipelined: a move on the wire. Its caller fills it at the queue's tail; the courier reads it
 * until it moves the head past it. */
typedef struct queued {
    uint32_t slot, count;  /* its caller; its tuples */
    ps_op_kind kind;       /* move or move_many */
    int64_t arrives_ns;
    unsigned char *tuples; /* grown to the largest message so far, never shrunk */
    size_t capacity;
} queued;

/* Pipelined: one caller's moves on the wire. */
typedef struct wire_caller {
    _Alignas(CACHE_LINE) uint64_t sent;  /* messages it queued: its own, written under queue_lock */
    _Atomic uint64_t delivered;          /* of those, the ones the courier is done with */
    _Atomic int leaving;                 /* it goes: the courier drops what it cannot deliver at once */
    ps_deferred_failure failure;
    _Atomic uint64_t dropped_after;      /* moves the courier dropped after the failure, whole */
    unsigned forks;                      /* ps_forks() when it attached: another count, and it is a parent's */
} wire_caller;

typedef struct delay_stage {
    ps_stage base;
    int64_t delay_ns, jitter_ns;
    in_flight *messages;  /* one per caller slot; only that caller touches its own */
    _Atomic uint64_t random_state;
    _Atomic int64_t delayed_ns;  /* total time spent waiting here */
    int pipelined;
    /* pipelined only: */
    wire_caller *callers;        /* one per slot */
    pthread_mutex_t queue_lock;  /* guards head and tail */
    uint64_t head, tail;         /* the next message to deliver, the next free one */
    queued queue[QUEUE_MESSAGES];
    ps_waitpoint queued_wp;      /* the courier waits here */
    ps_waitpoint delivered_wp;   /* callers wait here: for room, or for their moves to be applied */
    pthread_t courier;
    int has_courier;
    _Atomic int stopping;
    _Atomic int64_t streamed, dropped;
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

/* Sleeps until `until` or the deadline, whichever comes first; returns when it woke. The kernel
 * wakes a sleeper late, by 100 us and more on a virtual machine (a 0.2 ms crossing took 0.3-0.45 ms),
 * and a yield may hand the core away for a whole time slice: so the sleep ends EARLY_WAKE_NS
 * before, and the rest is spun away. */
static int64_t sleep_until(delay_stage *d, int64_t until, int64_t deadline) {
    if (deadline != PS_FOREVER && deadline < until) until = deadline;
    int64_t start = ps_now_ns(), now = start;
    if (until - EARLY_WAKE_NS > now) {
        int64_t wake = until - EARLY_WAKE_NS;
        struct timespec at = {wake / 1000000000LL, wake % 1000000000LL};
        while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &at, NULL) == EINTR) {
        }
    }
    while ((now = ps_now_ns()) < until) ps_wait_pause();
    if (now > start) atomic_fetch_add_explicit(&d->delayed_ns, now - start, memory_order_relaxed);
    return now;
}

/* The way there: PS_OK once the caller's message has arrived below, PS_ETIMEDOUT at the deadline
 * (the message stays on its way for a repeat). */
static int go(ps_link *link, const ps_op *op, int64_t deadline) {
    delay_stage *d = delay_of(link);
    in_flight *m = &d->messages[link->slot];
    int64_t now = ps_now_ns();
    if (m->op != (int)op->kind + 1 || m->argument != op->argument || now > m->expires_ns) {
        m->op = (int)op->kind + 1;
        m->argument = op->argument;
        m->arrives_ns = now + crossing_ns(d);
    }
    m->expires_ns = INT64_MAX; /* on its way: only the end of this call sets a time to forget it */
    return sleep_until(d, m->arrives_ns, deadline) >= m->arrives_ns ? PS_OK : PS_ETIMEDOUT;
}

/* The way back, with the status rc of the operation below. Returns the caller's status. */
static int come_back(ps_link *link, const ps_op *op, int rc, int64_t deadline) {
    delay_stage *d = delay_of(link);
    in_flight *m = &d->messages[link->slot];
    if (rc == PS_ETIMEDOUT) { /* not done, or done in part: a repeat made at once goes on with what is left */
        if (op->kind == PS_OP_EXCHANGE && op->done) m->op = (int)PS_OP_OBSERVE + 1; /* its move went */
        m->expires_ns = ps_now_ns() + REPEAT_WITHIN_NS;
        return rc;
    }
    m->op = 0; /* answered */
    sleep_until(d, ps_now_ns() + crossing_ns(d), ps_call_deadline(deadline)); /* not cut by a slice's end */
    return rc;
}

/* ---- pipelined: moves on the wire -------------------------------------------------------------- */

/* A failure of the courier's that the caller has not heard of: its status (explained), or PS_OK.
 * op (NULL: the caller goes) then says how many of the caller's moves sent ahead did not take
 * effect (op->dropped), so that a stage above that counted them (a batch) counts them off. */
static int take_failure(delay_stage *d, wire_caller *c, ps_op *op) {
    uint32_t done, of, unsure;
    int status = ps_deferred_failure_take(&c->failure, &done, &of, &unsure);
    if (status == PS_OK) return PS_OK;
    char after[96] = "";
    uint64_t dropped = atomic_exchange(&c->dropped_after, 0);
    if (dropped)
        snprintf(after, sizeof after, ", and the %llu moves sent after them were dropped", (unsigned long long)dropped);
    ps_stage_explain_moves(&d->base, status, done, of, unsure, "sent ahead", "their delivery failed", after);
    if (op) op->dropped = (int64_t)(of - done + dropped);
    return status;
}

/* Waits until the courier is done with every move the caller sent, by the deadline. */
static int wait_delivered(delay_stage *d, wire_caller *c, int64_t deadline) {
    uint32_t spins = 0;
    for (;;) {
        uint32_t seen = ps_waitpoint_sequence(&d->delivered_wp);
        if (atomic_load_explicit(&c->delivered, memory_order_acquire) == c->sent) return PS_OK;
        if (ps_waitpoint_wait(&d->delivered_wp, seen, deadline, &spins) == PS_ETIMEDOUT) return PS_ETIMEDOUT;
    }
}

/* Tuples one message on the wire holds at most (a move_many's frame): so the queue's room, which
 * the stage's footprint counts, is bounded. */
static uint32_t message_tuples(size_t tuple_size) { return (uint32_t)ps_wire_batch_tuples(tuple_size); }

/* Queues the next message of the caller's move (or move_many: up to message_tuples of its tuples
 * not queued yet, op->done counting them) to arrive one crossing from now; PS_ETIMEDOUT when the
 * queue stays full until the deadline (nothing more sent), PS_ENOMEM. */
static int send_ahead(delay_stage *d, ps_link *link, ps_op *op, int64_t deadline) {
    uint32_t left = ps_op_tuples_in(op) - op->done, most = message_tuples(d->base.tuple_size);
    size_t bytes = (size_t)(left < most ? left : most) * d->base.tuple_size;
    uint32_t spins = 0;
    queued *q;
    for (;;) {
        uint32_t seen = ps_waitpoint_sequence(&d->delivered_wp);
        pthread_mutex_lock(&d->queue_lock);
        if (d->tail - d->head < QUEUE_MESSAGES) break;
        pthread_mutex_unlock(&d->queue_lock);
        if (ps_waitpoint_wait(&d->delivered_wp, seen, deadline, &spins) == PS_ETIMEDOUT) return PS_ETIMEDOUT;
    }
    q = &d->queue[d->tail % QUEUE_MESSAGES];
    if (bytes > q->capacity) {
        unsigned char *grown = realloc(q->tuples, bytes);
        if (!grown) {
            pthread_mutex_unlock(&d->queue_lock);
            return PS_ENOMEM;
        }
        q->tuples = grown;
        q->capacity = bytes;
    }
    memcpy(q->tuples, (const unsigned char *)op->in + (size_t)op->done * d->base.tuple_size, bytes);
    q->slot = link->slot;
    q->kind = op->kind;
    q->count = (uint32_t)(bytes / d->base.tuple_size);
    q->arrives_ns = ps_now_ns() + crossing_ns(d);
    op->done += q->count; /* the entry is the courier's once the lock is given back */
    d->callers[link->slot].sent++;
    d->tail++;
    pthread_mutex_unlock(&d->queue_lock);
    ps_waitpoint_wake(&d->queued_wp);
    return PS_OK;
}

/* Passes one message on below when it arrives, in slices until it went, failed, or its caller
 * left or the stage stops (then what did not go is dropped, as a failure the caller hears of).
 * After a failure the caller has not heard of, it is dropped whole: no later move of the caller
 * takes effect after one that did not. */
static void deliver(delay_stage *d, const queued *q) {
    wire_caller *c = &d->callers[q->slot];
    if (ps_deferred_failure_pending(&c->failure)) { /* the caller takes it only once this is done */
        atomic_fetch_add_explicit(&d->dropped, q->count, memory_order_relaxed);
        atomic_fetch_add_explicit(&c->dropped_after, q->count, memory_order_relaxed);
        return;
    }
    while (!atomic_load(&c->leaving) && !atomic_load(&d->stopping) &&
           sleep_until(d, q->arrives_ns, ps_deadline(COURIER_SLICE_NS)) < q->arrives_ns) {
    }
    size_t size = d->base.tuple_size;
    uint32_t done = 0, unsure = 0;
    int rc = PS_ETIMEDOUT;
    while (rc == PS_ETIMEDOUT && ps_now_ns() >= q->arrives_ns && !atomic_load(&c->leaving) &&
           !atomic_load(&d->stopping)) {
        ps_op op = {.kind = q->kind, .in = q->tuples + (size_t)done * size, .count = q->count - done,
                    .timeout_ns = COURIER_SLICE_NS};
        if (op.count == 1) op.kind = PS_OP_MOVE;
        rc = ps_link_call(&d->base.caller_links[q->slot], &op);
        done += rc == PS_OK ? op.count : op.done;
        unsure = ps_op_unsure(&op, rc);
    }
    atomic_fetch_add_explicit(&d->streamed, 1, memory_order_relaxed);
    if (rc != PS_OK) {
        atomic_fetch_add_explicit(&d->dropped, q->count - done, memory_order_relaxed);
        ps_deferred_failure_record(&c->failure, rc, done, q->count, unsure, 1);
    }
}

static void *courier_loop(void *arg) {
    delay_stage *d = arg;
    while (!atomic_load(&d->stopping)) {
        uint32_t seen = ps_waitpoint_sequence(&d->queued_wp);
        pthread_mutex_lock(&d->queue_lock);
        queued *q = d->head != d->tail ? &d->queue[d->head % QUEUE_MESSAGES] : NULL;
        pthread_mutex_unlock(&d->queue_lock);
        if (!q) { /* one wait, which escalates to a sleep: an idle courier holds no core */
            uint32_t spins = 0;
            int64_t slice = ps_deadline(COURIER_SLICE_NS);
            while (ps_waitpoint_sequence(&d->queued_wp) == seen && !atomic_load(&d->stopping) &&
                   ps_waitpoint_wait(&d->queued_wp, seen, slice, &spins) != PS_ETIMEDOUT) {
            }
            continue;
        }
        wire_caller *c = q->slot == NO_CALLER ? NULL : &d->callers[q->slot]; /* NULL: dropped, done with */
        if (c) deliver(d, q);
        pthread_mutex_lock(&d->queue_lock);
        /* A waiter is woken by what it waits for: room on a full wire, or the last move its caller
         * sent applied. Not by every message: a caller settling behind many would wake, look and
         * sleep again on each, taking the core the deliveries need. */
        int wanted = d->tail - d->head == QUEUE_MESSAGES ||
                     (c && c->sent == atomic_load_explicit(&c->delivered, memory_order_relaxed) + 1);
        d->head++;
        pthread_mutex_unlock(&d->queue_lock);
        if (c) atomic_fetch_add_explicit(&c->delivered, 1, memory_order_release);
        if (wanted) ps_waitpoint_wake(&d->delivered_wp);
    }
    return NULL;
}

/* A caller that goes drops its messages queued behind the one the courier delivers (which may be
 * another caller's, stuck below): each is a failure it hears of, and done with at once, so that
 * nothing of its is left for the next caller of its slot. The courier passes them by. */
static void drop_queued(delay_stage *d, uint32_t slot) {
    wire_caller *c = &d->callers[slot];
    pthread_mutex_lock(&d->queue_lock);
    for (uint64_t i = d->head + 1; i < d->tail; i++) {
        queued *q = &d->queue[i % QUEUE_MESSAGES];
        if (q->slot != slot) continue;
        q->slot = NO_CALLER;
        atomic_fetch_add_explicit(&d->dropped, q->count, memory_order_relaxed);
        ps_deferred_failure_record(&c->failure, PS_ETIMEDOUT, 0, q->count, 0, 0);
        atomic_fetch_add_explicit(&c->delivered, 1, memory_order_release);
    }
    pthread_mutex_unlock(&d->queue_lock);
}

/* Pipelined: another operation of the caller comes after its moves, on the same wire: once it
 * has crossed, it waits (by the deadline) until they have been applied, and reports a failed
 * delivery first instead of going on. */
static int settle(delay_stage *d, ps_link *link, ps_op *op, int64_t deadline) {
    wire_caller *c = &d->callers[link->slot];
    if (wait_delivered(d, c, deadline) != PS_OK) return PS_ETIMEDOUT;
    return take_failure(d, c, op);
}

/* ---- the stage's call -------------------------------------------------------------------------- */

/* An operation that may wait (move, observe, observe_at, exchange, move_many) crosses the link
 * both ways; the others pass at once (pipelined: behind the caller's moves). */
static int delay_call(ps_link *link, ps_op *op) {
    delay_stage *d = delay_of(link);
    if (d->pipelined && d->callers[link->slot].forks != ps_forks())
        return ps_stage_refuse_inherited(&d->base, "wire and courier thread");
    int64_t deadline = ps_deadline(op->timeout_ns);
    if (d->pipelined && (op->kind == PS_OP_MOVE || op->kind == PS_OP_MOVE_MANY)) {
        wire_caller *c = &d->callers[link->slot];
        /* A failure is heard only once every move sent before is done with (dropped): one heard
         * with moves still on the wire would let them through after the failed one. A failure
         * recorded after this look is heard by the next operation. */
        int rc = PS_OK;
        if (ps_deferred_failure_pending(&c->failure)) {
            if (wait_delivered(d, c, deadline) != PS_OK) return PS_ETIMEDOUT;
            rc = take_failure(d, c, op);
        }
        while (rc == PS_OK && op->done < ps_op_tuples_in(op)) rc = send_ahead(d, link, op, deadline);
        return rc;
    }
    int waits = (ps_op_kinds[op->kind].shape & PS_OP_WAITS) != 0;
    int rc = waits ? go(link, op, deadline) : PS_OK;
    if (rc == PS_OK && d->pipelined) rc = settle(d, link, op, waits ? deadline : ps_held_moves_due(op));
    if (rc == PS_OK) {
        int64_t timeout_ns = op->timeout_ns;
        op->timeout_ns = ps_remaining(deadline);
        rc = ps_stage_pass(link, op);
        op->timeout_ns = timeout_ns;
    }
    return waits ? come_back(link, op, rc, deadline) : rc;
}

static int delay_attach(ps_stage *stage, uint32_t slot) {
    delay_stage *d = (delay_stage *)stage;
    if (d->pipelined) d->callers[slot].forks = ps_forks();
    return PS_OK;
}

/* A caller gone leaves nothing on its way for the next caller of its slot. Pipelined, its moves
 * are applied first, within RELEASE_WAIT_NS; what cannot be (a stage below that stays full, a
 * failure nobody will hear of now) is said on stderr, never dropped silently. A forked child's
 * copy of its parent's caller only goes: what is on the wire is the parent's. */
static void delay_detach(ps_stage *stage, uint32_t slot) {
    delay_stage *d = (delay_stage *)stage;
    d->messages[slot].op = 0;
    if (!d->pipelined) return;
    wire_caller *c = &d->callers[slot];
    if (c->forks != ps_forks()) return;
    if (wait_delivered(d, c, ps_deadline(RELEASE_WAIT_NS)) != PS_OK) {
        atomic_store(&c->leaving, 1); /* the courier gives up its message within a slice */
        drop_queued(d, slot);
        wait_delivered(d, c, PS_FOREVER);
    }
    if (take_failure(d, c, NULL) != PS_OK) ps_stage_print_error(&d->base, "a caller left stage 'delay' unaware");
    atomic_store(&c->leaving, 0);
}

static int delay_counters(ps_stage *stage, ps_counter *out, int max) {
    delay_stage *d = (delay_stage *)stage;
    const ps_counter mine[] = {
        {"delayed_ns", atomic_load(&d->delayed_ns)},
        {"streamed", atomic_load(&d->streamed)},
        {"dropped", atomic_load(&d->dropped)},
    };
    int n = 0;
    for (size_t i = 0; i < (d->pipelined ? 3u : 1u) && n < max; i++) out[n++] = mine[i];
    return n;
}

static void delay_destroy(ps_stage *stage) {
    delay_stage *d = (delay_stage *)stage;
    if (d->has_courier) {
        atomic_store(&d->stopping, 1);
        ps_waitpoint_wake(&d->queued_wp);
        pthread_join(d->courier, NULL);
    }
    if (d->pipelined) pthread_mutex_destroy(&d->queue_lock);
    for (int i = 0; i < QUEUE_MESSAGES; i++) free(d->queue[i].tuples);
    for (uint32_t i = 0; d->callers && i < PS_PASS_THROUGH_CALLERS; i++) ps_deferred_failure_destroy(&d->callers[i].failure);
    free(d->callers);
    free(d->messages);
}

static size_t delay_footprint(const ps_params *params, size_t tuple_size) {
    size_t wire = ps_params_int(params, "pipelined") ? PS_PASS_THROUGH_CALLERS * sizeof(wire_caller) +
                                                           QUEUE_MESSAGES * (size_t)message_tuples(tuple_size) * tuple_size
                                                     : 0; /* the queue's messages, at their largest */
    return sizeof(delay_stage) + PS_PASS_THROUGH_CALLERS * sizeof(in_flight) + wire;
}

/* Pipelined: the callers' records, the queue and the courier. */
static int start_wire(delay_stage *d) {
    pthread_mutex_init(&d->queue_lock, NULL);
    d->callers = aligned_alloc(CACHE_LINE, PS_PASS_THROUGH_CALLERS * sizeof *d->callers);
    if (!d->callers) return PS_ENOMEM;
    memset(d->callers, 0, PS_PASS_THROUGH_CALLERS * sizeof *d->callers);
    for (uint32_t i = 0; i < PS_PASS_THROUGH_CALLERS; i++) ps_deferred_failure_init(&d->callers[i].failure);
    ps_waitpoint_init(&d->queued_wp);
    ps_waitpoint_init(&d->delivered_wp);
    if (pthread_create(&d->courier, NULL, courier_loop, d) != 0) return PS_ENOMEM;
    d->has_courier = 1;
    return PS_OK;
}

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
    d->pipelined = ps_params_int(params, "pipelined") && d->delay_ns > 0; /* no latency: nothing to pipeline */
    atomic_init(&d->random_state, (uint64_t)ps_now_ns());
    int rc = ps_stage_init(&d->base, &ps_kind_delay, ps_stage_format(below), 0, below);
    if (rc == PS_OK && !(d->messages = calloc(PS_PASS_THROUGH_CALLERS, sizeof *d->messages))) rc = PS_ENOMEM;
    if (rc == PS_OK && d->pipelined) rc = start_wire(d);
    d->base.moves_queued = d->pipelined;
    if (rc != PS_OK) {
        delay_destroy(&d->base);
        ps_stage_abandon(&d->base);
        return rc;
    }
    *out = &d->base;
    return PS_OK;
}

static const ps_param_spec DELAY_PARAMS[] = {
    {"ms", PS_PARAM_FLOAT, 1, NULL, 0, 60000, NULL, "one-way delay in milliseconds, paid going and coming back",
     PS_PARAM_GIVEN},
    {"jitter_ms", PS_PARAM_FLOAT, 0, "0", 0, 60000, NULL, "uniform jitter, +/- milliseconds (at most ms)",
     PS_PARAM_GIVEN},
    {"pipelined", PS_PARAM_INT, 0, "0", 0, 1, NULL,
     "1: moves stream as on a wire, each arriving ms later without holding back the caller's next one",
     PS_PARAM_GIVEN},
};

const ps_stage_kind ps_kind_delay = {
    .version = PS_STAGE_KIND_VERSION,
    .name = "delay",
    .doc = "Emulates a slow link: each operation that may wait crosses it in ms (+/- jitter_ms) going down "
           "and again coming back, never past its timeout; pipelined=1: moves stream without waiting.",
    .params = DELAY_PARAMS,
    .param_count = sizeof DELAY_PARAMS / sizeof DELAY_PARAMS[0],
    .role = PS_PASS_THROUGH,
    .needs_below = 1,
    .create = delay_create,
    .call = delay_call,
    .footprint = delay_footprint,
    .counters = delay_counters,
    .destroy = delay_destroy,
    .attach = delay_attach,
    .detach = delay_detach,
};
