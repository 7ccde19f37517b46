/* stress_batch.c — a standalone stress test of the aggregation stages (wrappers_c/ over pastset/, no
 * Python): `batch`, the fence, and the prefetching `cache` with observe_range.
 *
 * tests/test_c_stress.py builds it plain, under AddressSanitizer + UBSan and under ThreadSanitizer.
 * Usage: stress_batch [moves]   (default 4000: each caller's moves in the order scenes). Exits 1 on
 * any failure; a watchdog ends a run that hangs, naming the scene.
 *
 *   order     CALLERS threads move (caller, seq) through one batch stage over an element, with
 *             every buffer trigger at once (a small max_moves; buffers 1, 2 and 3; flush_us or
 *             not, with pauses longer than it), asking last() now and then (which must count all
 *             their own moves); half fence
 *             at the end, half just leave: the history holds every caller's moves once, in order.
 *   timer     for each flush_us of `order`, one move with no operation after it goes down by
 *             the timer alone.
 *   bound     the same over an element whose delta bound a slow consumer keeps full, with moves
 *             of tiny timeouts retried: the sender thread's sends time out and go on, nothing is
 *             lost or doubled, and the consumer takes each caller's moves in order.
 *   failing   a batch over a stage kind of this test that refuses the 3rd move of every buffer: the
 *             next operation fails with its status, the stage's error says how many took effect,
 *             and the moves dropped are counted. Then a cache over that kind, which refuses a read
 *             as axed saying no axe point: the cache serves none of its copies before that read.
 *   fence     CALLERS contributors of a reduce-sum, each through its own batch, move 3 rounds
 *             (held back), then fence: every fence returns once all rounds are down, the totals exact.
 *   prefetch  readers through a cache that prefetches windows read every tuple a writer is still
 *             moving: every value right; then one reader alone fetches one range per window.
 *   churn     readers through a cache of 4 entries read 64 tuples in orders of their own, so that
 *             their misses refill the entries the others are reading: no hit gives a tuple
 *             another index held, or one half written.
 *   wire      the order scene's callers through a pipelined delay (moves streamed by its courier
 *             thread), alone and below a batch: every move once, in order, none dropped, also
 *             of the callers that leave without a fence. Then the callers through a pipelined
 *             delay over the refusing kind (below): what took effect of each caller's moves is in
 *             order, each once, and a prefix up to each failure: every gap in it ends at the move
 *             that heard of a failure (not taken), and every move taken either took effect or is
 *             counted dropped.
 */
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pastset.h"
#include "stage_base.h"

enum { CALLERS = 8, READERS = 3, MAX_REPORTS = 20 };

#define US 1000LL
#define MS 1000000LL
#define WAIT (10000 * MS)        /* the longest a call waits for what must come */
#define RUN_BUDGET (55000 * MS)  /* the whole run (the pytest timeout is 60 s) */

#include "stress_report.h"
#include "stage_setup.h"

typedef struct pair {
    int64_t caller, seq;
} pair;

static ps_stage *create_batch(ps_space *space, int64_t max_moves, int64_t buffers, int64_t flush_us, ps_stage *below) {
    ps_param_value values[] = {int_param("max_moves", max_moves), int_param("buffers", buffers),
                               int_param("flush_us", flush_us)};
    return create_stage(space, "batch", values, 3, below);
}

static int link_simple(ps_link *link, ps_op_kind kind, int64_t timeout_ns) {
    ps_op op = {.kind = kind, .timeout_ns = timeout_ns};
    return ps_link_call(link, &op);
}

/* Every caller's moves once, in order, in the history of `element` (pairs). */
static void check_history(ps_element *element, const char *scene, int callers, int64_t moves) {
    int64_t last = ps_last(element), next[CALLERS] = {0};
    CHECK(last == callers * moves, "%s: the element holds %" PRId64 " moves, expected %" PRId64, scene, last,
          callers * moves);
    for (int64_t i = 0; i < last; i++) {
        pair p = {-1, -1};
        ps_observe_at(element, i, &p, WAIT);
        bool known = p.caller >= 0 && p.caller < callers;
        CHECK(known && p.seq == next[p.caller], "%s: tuple %" PRId64 " is (%" PRId64 ", %" PRId64 "), expected seq %"
              PRId64, scene, i, p.caller, p.seq, known ? next[p.caller] : -1);
        if (known) next[p.caller] = p.seq + 1;
    }
}

/* ---- order ---------------------------------------------------------------------------------- */

typedef struct order_job {
    ps_stage *batch;
    int caller;
    int64_t moves;
    bool fence;       /* else it leaves with its moves held back */
    int64_t timeout;  /* each move's; a timeout is retried */
} order_job;

static void *order_caller(void *arg) {
    order_job *job = arg;
    ps_link link;
    attach_or_die(job->batch, &link);
    for (int64_t seq = 0; seq < job->moves; seq++) {
        pair p = {job->caller, seq};
        int rc;
        while ((rc = link_move(&link, &p, job->timeout)) == PS_ETIMEDOUT) {
        }
        CHECK(rc == PS_OK, "caller %d move %" PRId64 ": %s", job->caller, seq, ps_status_name(rc));
        if (seq % 211 == 105) { /* a pause: buffers age, and the timer sends them */
            struct timespec pause = {0, 300 * US};
            nanosleep(&pause, NULL);
        }
        if (seq % 53 == 52) {
            int64_t last = -1;
            rc = link_value(&link, PS_OP_LAST, &last);
            CHECK(rc == PS_OK && last >= seq + 1, "caller %d: last() %s %" PRId64 " after its move %" PRId64,
                  job->caller, ps_status_name(rc), last, seq);
        }
    }
    if (job->fence) {
        int rc;
        while ((rc = link_simple(&link, PS_OP_FENCE, job->timeout)) == PS_ETIMEDOUT) {
        }
        CHECK(rc == PS_OK, "caller %d fence: %s", job->caller, ps_status_name(rc));
    }
    ps_link_detach(&link); /* sends what is held back */
    return NULL;
}

static void run_callers(ps_stage *batch, int64_t moves, int64_t timeout) {
    pthread_t threads[CALLERS];
    order_job jobs[CALLERS];
    for (int c = 0; c < CALLERS; c++) {
        jobs[c] = (order_job){batch, c, moves, c % 2 == 0, timeout};
        start_thread(&threads[c], order_caller, &jobs[c]);
    }
    for (int c = 0; c < CALLERS; c++) pthread_join(threads[c], NULL);
}

static void run_order(ps_space *space, int64_t moves) {
    static const int64_t configs[][3] = {{7, 1, 0}, {16, 2, 0}, {5, 3, 50}, {64, 2, 20}, {100000, 1, 100}};
    for (size_t k = 0; k < sizeof configs / sizeof configs[0]; k++) {
        char name[32];
        snprintf(name, sizeof name, "ORDER%zu", k);
        atomic_store(&scene_running, "order");
        ps_stage *core = create_core(space, name, "qq");
        ps_stage *batch = create_batch(space, configs[k][0], configs[k][1], configs[k][2], core);
        run_callers(batch, moves, WAIT);
        CHECK(counter_of(batch, "moves_sent") == CALLERS * moves && counter_of(batch, "dropped") == 0,
              "order %zu: %" PRId64 " moves sent, %" PRId64 " dropped", k, counter_of(batch, "moves_sent"),
              counter_of(batch, "dropped"));
        ps_stage_release(batch);
        ps_element *element = enter_or_die(space, name, "qq");
        check_history(element, "order", CALLERS, moves);
        ps_leave(element);
        ps_stage_release(core);
    }
}

/* ---- timer ---------------------------------------------------------------------------------- */

/* For each flush_us of the order scene: one move, and no other operation after it, goes down by
 * the timer alone (waited for up to WAIT: on a loaded machine the sender may be slow to run). */
static void run_timer(ps_space *space) {
    static const int64_t flushes[][2] = {{5, 50}, {64, 20}, {100000, 100}};
    for (size_t k = 0; k < sizeof flushes / sizeof flushes[0]; k++) {
        char name[32];
        snprintf(name, sizeof name, "TIMER%zu", k);
        atomic_store(&scene_running, "timer");
        ps_stage *core = create_core(space, name, "qq");
        ps_stage *batch = create_batch(space, flushes[k][0], 2, flushes[k][1], core);
        ps_element *element = enter_or_die(space, name, "qq");
        ps_link link;
        attach_or_die(batch, &link);
        CHECK(link_move(&link, &(pair){0, 0}, WAIT) == PS_OK, "timer %zu: the move failed", k);
        int64_t deadline = ps_now_ns() + WAIT;
        while (ps_last(element) == 0 && ps_now_ns() < deadline) {
            struct timespec pause = {0, 100 * US};
            nanosleep(&pause, NULL);
        }
        CHECK(ps_last(element) == 1 && counter_of(batch, "timed_sends") == 1,
              "timer %zu: %" PRId64 " moves down by %" PRId64 " timed sends, expected 1 by 1", k, ps_last(element),
              counter_of(batch, "timed_sends"));
        ps_link_detach(&link);
        ps_leave(element);
        ps_stage_release(batch);
        ps_stage_release(core);
    }
}

/* ---- wire ----------------------------------------------------------------------------------- */

static void run_wire(ps_space *space, int64_t moves) {
    for (int batched = 0; batched < 2; batched++) {
        char name[32];
        snprintf(name, sizeof name, "WIRE%d", batched);
        atomic_store(&scene_running, "wire");
        ps_stage *core = create_core(space, name, "qq");
        ps_param_value values[] = {float_param("ms", 0.05), int_param("pipelined", 1)};
        ps_stage *delay = create_stage(space, "delay", values, 2, core);
        ps_stage *top = batched ? create_batch(space, 7, 2, 0, delay) : delay;
        run_callers(top, moves, WAIT);
        CHECK(counter_of(delay, "dropped") == 0 && counter_of(delay, "streamed") > 0,
              "wire %d: %" PRId64 " streamed, %" PRId64 " dropped", batched, counter_of(delay, "streamed"),
              counter_of(delay, "dropped"));
        if (batched) ps_stage_release(top);
        ps_stage_release(delay);
        ps_element *element = enter_or_die(space, name, "qq");
        check_history(element, "wire", CALLERS, moves);
        ps_leave(element);
        ps_stage_release(core);
    }
}

static void run_wire_failing(ps_space *space, int64_t moves);

/* ---- bound ---------------------------------------------------------------------------------- */

typedef struct consumer_job {
    ps_element *element;
    int64_t total;
    int64_t next[CALLERS];
} consumer_job;

static void *slow_consumer(void *arg) {
    consumer_job *job = arg;
    for (int64_t taken = 0; taken < job->total; taken++) {
        pair p = {-1, -1};
        int rc = ps_observe(job->element, &p, NULL, WAIT);
        bool known = rc == PS_OK && p.caller >= 0 && p.caller < CALLERS;
        CHECK(known && p.seq == job->next[p.caller], "bound: took (%" PRId64 ", %" PRId64 "): %s", p.caller, p.seq,
              ps_status_name(rc));
        if (!known) break;
        job->next[p.caller]++;
        if (taken % 512 == 0) {
            struct timespec pause = {0, 200 * US};
            nanosleep(&pause, NULL);
        }
    }
    return NULL;
}

static void run_bound(ps_space *space, int64_t moves) {
    atomic_store(&scene_running, "bound");
    ps_stage *core = create_core(space, "BOUND", "qq");
    ps_element *element = enter_or_die(space, "BOUND", "qq");
    ps_set_delta(element, 24);
    ps_stage *batch = create_batch(space, 10, 2, 0, core);
    consumer_job consumer = {element, CALLERS * moves, {0}};
    pthread_t taker;
    start_thread(&taker, slow_consumer, &consumer);
    run_callers(batch, moves, 50 * US);
    pthread_join(taker, NULL);
    for (int c = 0; c < CALLERS; c++)
        CHECK(consumer.next[c] == moves, "bound: caller %d's moves taken: %" PRId64, c, consumer.next[c]);
    CHECK(counter_of(batch, "dropped") == 0, "bound: %" PRId64 " moves dropped", counter_of(batch, "dropped"));
    ps_stage_release(batch);
    ps_leave(element);
    ps_stage_release(core);
}

/* ---- failing: a kind of this test that refuses every 3rd move it is given -------------------- */

typedef struct refusing_stage {
    ps_stage base;
    _Atomic int64_t moves;
    _Atomic int64_t axed; /* indexed reads below it are refused as axed, with no axe point said */
} refusing_stage;

static int refusing_call(ps_link *link, ps_op *op) {
    refusing_stage *r = (refusing_stage *)link->stage;
    if (op->kind == PS_OP_MOVE_MANY) return ps_op_fallback(link, op); /* as its moves, counting how many went */
    if (op->kind == PS_OP_MOVE && atomic_fetch_add(&r->moves, 1) % 3 == 2) return PS_ECLOSED;
    if (op->kind == PS_OP_OBSERVE_AT && op->argument < atomic_load(&r->axed)) return PS_EAXED;
    return ps_stage_pass(link, op);
}

static size_t refusing_footprint(const ps_params *params, size_t tuple_size) {
    (void)params;
    (void)tuple_size;
    return sizeof(refusing_stage);
}

static int refusing_create(const ps_params *params, const ps_build_context *context, ps_stage *below,
                           ps_stage **out, char *error, size_t error_size);

static const ps_stage_kind REFUSING = {
    .version = PS_STAGE_KIND_VERSION,
    .name = "refusing",
    .doc = "refuses every 3rd move, and reads before its axe point (a test's own kind)",
    .role = PS_PASS_THROUGH,
    .needs_below = 1,
    .create = refusing_create,
    .call = refusing_call,
    .footprint = refusing_footprint,
};

static int refusing_create(const ps_params *params, const ps_build_context *context, ps_stage *below,
                           ps_stage **out, char *error, size_t error_size) {
    (void)params;
    (void)context;
    (void)error;
    (void)error_size;
    refusing_stage *r = calloc(1, sizeof *r);
    if (!r) return PS_ENOMEM;
    int rc = ps_stage_init(&r->base, &REFUSING, ps_stage_format(below), 0, below);
    if (rc != PS_OK) {
        ps_stage_abandon(&r->base);
        return rc;
    }
    *out = &r->base;
    return PS_OK;
}

/* A refusing stage over `below`, or the end of the test. */
static ps_stage *create_refusing(ps_space *space, ps_stage *below) {
    ps_params none = {NULL, 0};
    ps_build_context context = {space};
    ps_stage *refusing = NULL;
    char error[256] = "";
    if (ps_stage_create(&REFUSING, &none, &context, below, &refusing, error, sizeof error) != PS_OK) {
        fprintf(stderr, "FAIL: create the refusing stage: %s\n", error);
        exit(1);
    }
    return refusing;
}

static void run_failing(ps_space *space) {
    atomic_store(&scene_running, "failing");
    ps_stage *core = create_core(space, "FAILING", "qq");
    ps_stage *refusing = create_refusing(space, core);
    for (int buffers = 1; buffers <= 2; buffers++) {
        ps_stage *batch = create_batch(space, 5, buffers, 0, refusing);
        ps_link link;
        attach_or_die(batch, &link);
        int rc = PS_OK;
        for (int64_t seq = 0; seq < 5 && rc == PS_OK; seq++) rc = link_move(&link, &(pair){buffers, seq}, WAIT);
        /* Full at the 5th move: sent at once (buffers=1, the move fails) or by the sender (the next
         * operation fails). The refusing stage took moves 0 and 1 of it, then refused. */
        if (rc == PS_OK) rc = link_simple(&link, PS_OP_FLUSH, WAIT);
        CHECK(rc == PS_ECLOSED, "failing, buffers=%d: %s, expected PS_ECLOSED", buffers, ps_status_name(rc));
        CHECK(strstr(stage_error(batch), "batch: 2 of 5 moves sent down together took effect") != NULL,
              "failing, buffers=%d: the error says '%s'", buffers, stage_error(batch));
        CHECK(counter_of(batch, "dropped") == 3, "failing, buffers=%d: %" PRId64 " dropped, expected 3", buffers,
              counter_of(batch, "dropped"));
        rc = link_simple(&link, PS_OP_FENCE, WAIT);
        CHECK(rc == PS_OK, "failing, buffers=%d: reported once, then %s", buffers, ps_status_name(rc));
        ps_link_detach(&link);
        ps_stage_release(batch);
        atomic_store(&((refusing_stage *)refusing)->moves, 0);
    }
    /* A read refused as axed with no axe point said still tells a cache above that the axe point
     * is past its index: it serves no copy before it. */
    ps_link writer;
    attach_or_die(core, &writer);
    for (int64_t i = 0; i < 10; i++) CHECK(link_move(&writer, &(pair){-1, i}, WAIT) == PS_OK, "failing: move");
    ps_link_detach(&writer);
    ps_param_value values[] = {int_param("capacity", 16)};
    ps_stage *cache = create_stage(space, "cache", values, 1, refusing);
    ps_link link;
    attach_or_die(cache, &link);
    pair p;
    for (int64_t i = 0; i < 5; i++) CHECK(link_observe_at(&link, i, &p, WAIT) == PS_OK, "failing: read %" PRId64, i);
    atomic_store(&((refusing_stage *)refusing)->axed, 7);
    CHECK(link_observe_at(&link, 6, &p, WAIT) == PS_EAXED, "failing: a read below the cache was not refused as axed");
    for (int64_t i = 0; i < 5; i++)
        CHECK(link_observe_at(&link, i, &p, WAIT) == PS_EAXED, "failing: the cache served its copy of tuple %" PRId64
              " after a read of tuple 6 was refused as axed", i);
    ps_link_detach(&link);
    ps_stage_release(cache);
    ps_stage_release(refusing);
    ps_stage_release(core);
}

/* ---- fence through a sum ---------------------------------------------------------------------- */

typedef struct fence_job {
    ps_stage *batch;
    int caller;
    pthread_barrier_t *moved;
    int64_t totals[3];
} fence_job;

static void *fencing_contributor(void *arg) {
    fence_job *job = arg;
    ps_link link;
    attach_or_die(job->batch, &link);
    for (int64_t r = 0; r < 3; r++) {
        int64_t value = (r + 1) * 100 + job->caller;
        CHECK(link_move(&link, &value, WAIT) == PS_OK, "fence: a move failed");
    }
    pthread_barrier_wait(job->moved); /* every caller's moves are held back now */
    int rc = link_simple(&link, PS_OP_FENCE, WAIT);
    CHECK(rc == PS_OK, "fence: caller %d: %s", job->caller, ps_status_name(rc));
    for (int r = 0; r < 3; r++) CHECK(link_observe(&link, &job->totals[r], WAIT) == PS_OK, "fence: an observe failed");
    ps_link_detach(&link);
    return NULL;
}

static void run_fence(ps_space *space, int64_t rounds) {
    atomic_store(&scene_running, "fence");
    for (int64_t round = 0; round < rounds; round++) {
        char name[32];
        snprintf(name, sizeof name, "FENCE%" PRId64, round);
        ps_stage *core = create_core(space, name, "q");
        ps_stage *sum = create_sum(space, CALLERS, core);
        ps_stage *batches[CALLERS];
        pthread_barrier_t moved;
        pthread_barrier_init(&moved, NULL, CALLERS);
        pthread_t threads[CALLERS];
        fence_job jobs[CALLERS];
        for (int c = 0; c < CALLERS; c++) {
            batches[c] = create_batch(space, 16, 1 + c % 2, 0, sum);
            jobs[c] = (fence_job){batches[c], c, &moved, {0}};
            start_thread(&threads[c], fencing_contributor, &jobs[c]);
        }
        for (int c = 0; c < CALLERS; c++) pthread_join(threads[c], NULL);
        for (int c = 0; c < CALLERS; c++)
            for (int r = 0; r < 3; r++) {
                int64_t expected = (r + 1) * 100 * CALLERS + CALLERS * (CALLERS - 1) / 2;
                CHECK(jobs[c].totals[r] == expected, "fence: caller %d round %d total %" PRId64 ", expected %" PRId64,
                      c, r, jobs[c].totals[r], expected);
            }
        pthread_barrier_destroy(&moved);
        for (int c = 0; c < CALLERS; c++) ps_stage_release(batches[c]);
        ps_stage_release(sum);
        ps_stage_release(core);
    }
}

/* ---- prefetch --------------------------------------------------------------------------------- */

typedef struct reader_job {
    ps_stage *cache;
    int64_t tuples;
} reader_job;

static void *prefetching_reader(void *arg) {
    reader_job *job = arg;
    ps_link link;
    attach_or_die(job->cache, &link);
    for (int64_t i = 0; i < job->tuples; i++) {
        pair p = {-1, -1};
        int rc = link_observe_at(&link, i, &p, WAIT);
        CHECK(rc == PS_OK && p.caller == i && p.seq == 3 * i, "prefetch: tuple %" PRId64 ": %s (%" PRId64 ", %" PRId64
              ")", i, ps_status_name(rc), p.caller, p.seq);
        if (rc != PS_OK) break;
    }
    ps_link_detach(&link);
    return NULL;
}

static void run_prefetch(ps_space *space, int64_t tuples) {
    atomic_store(&scene_running, "prefetch");
    ps_stage *core = create_core(space, "PREFETCH", "qq");
    ps_param_value values[] = {int_param("capacity", 512), str_param("prefetch", "window"), int_param("window", 61)};
    ps_stage *cache = create_stage(space, "cache", values, 3, core);
    pthread_t readers[READERS];
    reader_job job = {cache, tuples};
    for (int r = 0; r < READERS; r++) start_thread(&readers[r], prefetching_reader, &job);
    ps_link writer;
    attach_or_die(core, &writer);
    for (int64_t i = 0; i < tuples; i++) CHECK(link_move(&writer, &(pair){i, 3 * i}, WAIT) == PS_OK, "prefetch: move");
    ps_link_detach(&writer);
    for (int r = 0; r < READERS; r++) pthread_join(readers[r], NULL);
    int64_t ranges = counter_of(cache, "ranges"), misses = counter_of(cache, "misses");
    CHECK(ranges > 0 && ranges <= misses, "prefetch: %" PRId64 " ranges for %" PRId64 " misses", ranges, misses);
    CHECK(counter_of(cache, "hits") + misses == READERS * tuples, "prefetch: hits and misses do not add up");
    ps_stage_release(cache);
    /* Once written, a reader alone fetches one range per window. */
    cache = create_stage(space, "cache", values, 3, core);
    job.cache = cache;
    prefetching_reader(&job);
    int64_t windows = (tuples + 60) / 61;
    CHECK(counter_of(cache, "ranges") == windows && counter_of(cache, "misses") == windows,
          "prefetch: %" PRId64 " ranges, %" PRId64 " misses for %" PRId64 " windows", counter_of(cache, "ranges"),
          counter_of(cache, "misses"), windows);
    ps_stage_release(cache);
    ps_stage_release(core);
}

typedef struct churn_job {
    ps_stage *cache;
    int64_t reads;
    uint64_t seed;
} churn_job;

static void *churning_reader(void *arg) {
    churn_job *job = arg;
    ps_link link;
    attach_or_die(job->cache, &link);
    uint64_t state = job->seed;
    for (int64_t r = 0; r < job->reads; r++) {
        state = state * 6364136223846793005ULL + 1442695040888963407ULL;
        int64_t i = (int64_t)(state >> 58), p[8] = {0};
        int rc = link_observe_at(&link, i, p, WAIT);
        bool right = rc == PS_OK;
        for (int w = 0; w < 8; w++) right = right && p[w] == i * 8 + w;
        CHECK(right, "churn: tuple %" PRId64 ": %s (%" PRId64 ", ..., %" PRId64 ")", i, ps_status_name(rc), p[0], p[7]);
        if (!right) break;
    }
    ps_link_detach(&link);
    return NULL;
}

static void run_churn(ps_space *space, int64_t reads) {
    atomic_store(&scene_running, "churn");
    ps_stage *core = create_core(space, "CHURN", "8q");
    ps_link writer;
    attach_or_die(core, &writer);
    for (int64_t i = 0; i < 64; i++) {
        int64_t tuple[8];
        for (int w = 0; w < 8; w++) tuple[w] = i * 8 + w;
        CHECK(link_move(&writer, tuple, WAIT) == PS_OK, "churn: move");
    }
    ps_link_detach(&writer);
    ps_param_value values[] = {int_param("capacity", 4)};
    ps_stage *cache = create_stage(space, "cache", values, 1, core);
    pthread_t readers[READERS];
    churn_job jobs[READERS];
    for (int r = 0; r < READERS; r++) {
        jobs[r] = (churn_job){cache, reads, (uint64_t)r + 1};
        start_thread(&readers[r], churning_reader, &jobs[r]);
    }
    for (int r = 0; r < READERS; r++) pthread_join(readers[r], NULL);
    CHECK(counter_of(cache, "hits") + counter_of(cache, "misses") == READERS * reads,
          "churn: %" PRId64 " hits and %" PRId64 " misses for %" PRId64 " reads", counter_of(cache, "hits"),
          counter_of(cache, "misses"), READERS * reads);
    CHECK(counter_of(cache, "hits") > 0, "churn: no hit at all");
    ps_stage_release(cache);
    ps_stage_release(core);
}

/* ---- wire failing: a pipelined delay over the refusing kind ------------------------------------ */

typedef struct wire_failing_job {
    ps_stage *delay;
    int caller;
    int64_t moves, taken;
    bool *heard; /* one per move: heard[seq], the call of move seq returned a failure it heard of (not taken) */
} wire_failing_job;

static void *wire_failing_caller(void *arg) {
    wire_failing_job *job = arg;
    ps_link link;
    attach_or_die(job->delay, &link);
    for (int64_t seq = 0; seq < job->moves; seq++) {
        int rc = link_move(&link, &(pair){job->caller, seq}, WAIT);
        CHECK(rc == PS_OK || rc == PS_ECLOSED, "wire failing: caller %d move %" PRId64 ": %s", job->caller, seq,
              ps_status_name(rc));
        job->heard[seq] = rc != PS_OK;
        job->taken += rc == PS_OK;
    }
    int rc;
    while ((rc = link_simple(&link, PS_OP_FENCE, WAIT)) == PS_ECLOSED) { /* a failure it had not heard of yet */
    }
    CHECK(rc == PS_OK, "wire failing: caller %d fence: %s", job->caller, ps_status_name(rc));
    ps_link_detach(&link);
    return NULL;
}

static void run_wire_failing(ps_space *space, int64_t moves) {
    atomic_store(&scene_running, "wire failing");
    ps_stage *core = create_core(space, "WIREFAIL", "qq");
    ps_stage *refusing = create_refusing(space, core);
    ps_param_value values[] = {float_param("ms", 0.05), int_param("pipelined", 1)};
    ps_stage *delay = create_stage(space, "delay", values, 2, refusing);
    pthread_t threads[CALLERS];
    wire_failing_job jobs[CALLERS];
    for (int c = 0; c < CALLERS; c++) {
        jobs[c] = (wire_failing_job){delay, c, moves, 0, calloc((size_t)moves, sizeof(bool))};
        CHECK(jobs[c].heard != NULL, "wire failing: calloc");
        if (!jobs[c].heard) exit(1);
        start_thread(&threads[c], wire_failing_caller, &jobs[c]);
    }
    for (int c = 0; c < CALLERS; c++) pthread_join(threads[c], NULL);
    int64_t dropped = counter_of(delay, "dropped"), taken = 0;
    ps_stage_release(delay);
    ps_element *element = enter_or_die(space, "WIREFAIL", "qq");
    int64_t last = ps_last(element), next[CALLERS] = {0};
    for (int c = 0; c < CALLERS; c++) taken += jobs[c].taken;
    CHECK(last + dropped == taken, "wire failing: %" PRId64 " took effect and %" PRId64 " were dropped of %" PRId64
          " moves taken", last, dropped, taken);
    for (int64_t i = 0; i < last; i++) {
        pair p = {-1, -1};
        ps_observe_at(element, i, &p, WAIT);
        bool known = p.caller >= 0 && p.caller < CALLERS && p.seq >= next[p.caller] && p.seq < moves;
        CHECK(known, "wire failing: tuple %" PRId64 " is (%" PRId64 ", %" PRId64 "): not after its caller's last",
              i, p.caller, p.seq);
        if (!known) break;
        wire_failing_job *job = &jobs[p.caller];
        CHECK(!job->heard[p.seq], "wire failing: caller %" PRId64 "'s move %" PRId64 " took effect, though its call "
              "failed", p.caller, p.seq);
        CHECK(p.seq == next[p.caller] || job->heard[p.seq - 1], "wire failing: caller %" PRId64 "'s moves %" PRId64
              " to %" PRId64 " did not take effect but %" PRId64 " did, with no failure heard before it", p.caller,
              next[p.caller], p.seq - 1, p.seq);
        next[p.caller] = p.seq + 1;
    }
    ps_leave(element);
    for (int c = 0; c < CALLERS; c++) free(jobs[c].heard);
    ps_stage_release(refusing);
    ps_stage_release(core);
}

int main(int argc, char **argv) {
    stress_run run = stress_begin("stress_batch", argc, argv, 4000, RUN_BUDGET);
    int64_t moves = run.rounds;
    ps_space *space = ps_space_new();
    if (!space) return 1;
    printf("stress_batch: %d callers, %" PRId64 " moves each\n", CALLERS, moves);
    run_order(space, moves);
    run_timer(space);
    run_bound(space, moves / 4);
    run_failing(space);
    run_fence(space, moves / 100 + 1);
    run_prefetch(space, moves * 2);
    run_churn(space, moves * 25);
    run_wire(space, moves / 4);
    run_wire_failing(space, moves / 8);
    int code = stress_end(&run);
    ps_space_free(space);
    return code;
}
