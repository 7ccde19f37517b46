/* stress_remote.c — a standalone stress test of the remote stage and the server on the direct
 * transport (wrappers_c/ over pastset/, no Python): a server in this process, its BUILD requests
 * answered by a thread here instead of Python, and many client threads with links of their own,
 * over TCP and Unix sockets.
 *
 * tests/test_c_stress.py builds it plain, under AddressSanitizer + UBSan and under ThreadSanitizer.
 * Usage: stress_remote [rounds]   (default 500). Exits 1 on any failure; a watchdog ends a run
 * that hangs, naming the scene.
 *
 *   sum     THREADS client links (half tcp, half ipc; every other one pipelining its move with
 *           window 2) into one server-side reduce-sum of THREADS over an element: every round's
 *           total exact for every thread, and the element's history one total per round, in order.
 *   queue   PRODUCERS move distinct jobs through links of their own (tcp, window 16, batch 4; the
 *           last one with move_many of 1 to 3000 jobs at a time, frames of at most 2048, on ipc)
 *           while CONSUMERS take jobs with next-observes through theirs (tcp and ipc): every job
 *           taken exactly once, and each consumer sees each producer's jobs in the order they were
 *           moved.
 *   churn   threads open a link, make a round trip, and release it, over and over, beside the
 *           others: the server hands over and reaps every one of them; none is abandoned.
 *   batched THREADS threads move distinct values through batch -> remote (tcp and ipc, one and two
 *           buffers, a timer on some), asking last() now and then, and fence: the element holds
 *           every value once, each thread's in order. Then readers through caches that prefetch
 *           windows over remote read it all back right, one request per window; and a range
 *           beyond the bound is refused by the remote stage before it is sent, naming the bound.
 *   ranges  a writer moves tuples (each its own index) in move_many's of 1 to 3000, while readers
 *           over tcp and ipc ask for ranges of three slices and more (observe_range) from anywhere
 *           in what exists: every answer consecutive from where it was asked, none missing, as
 *           long as what existed (the server reads a range a slice at a time, beside the moves).
 *   axes    the ranges' element, its first 4000 tuples axed further and further through a remote
 *           stage while readers read them over and over by index through caches above that same
 *           stage that hold copies of all of them (one prefetching all, one windows): every read the
 *           right tuple or refused as axed, and none begun after an axe returned gets a tuple that
 *           axe freed.
 *   streams writers move distinct values in move_many's of 1 to 9000 (up to 5 frames, streamed)
 *           through remote stages (tcp and ipc; the last one pipelining, window 8), each call with
 *           a timeout of 5 ms and what is left of it called again, into an element bounded to 2500
 *           unread, whose reader pauses 10 ms now and then: streams are cut (a frame cut short,
 *           those after it not run) and sent again, pipelined frames held back and sent again,
 *           and the reader takes every value once, each writer's in order.
 *   allreduce  groups of allreduce members, each in a thread of its own, all finding each other
 *           through this process's server (PEER): 6 by recursive doubling over tcp (two past the
 *           largest power of two), 7 up and down a tree of fan-in 3 over ipc, 4 whose every call
 *           has a timeout of 1 us and is retried, the core yielded between tries, until it goes
 *           through (joining and rounds left half done and taken up again). Every round's total
 *           exact at every member, its double field the same bits at every member, and rank 0's
 *           element one total per round, in order. Before the first group starts, connections
 *           that present garbage, a wrong secret or no partner's rank are made to its rank 0: each
 *           refused and counted.
 *   auth    a second server, over CURVE, admits only the client keys it lists (zap_handler.c),
 *           listed before the first client comes, while a thread replaces its list over and
 *           over: every PING of a client with a listed key is answered, no PING of a client
 *           with another key is.
 *   slow    a direct connection whose sends wait at most 300 ms for room, to a peer that reads
 *           16 KiB every 20 ms: a send of 1 MiB, about 1.3 s of reading, goes through (the peer
 *           reads, if slowly), and once the peer stops reading, the next one fails.
 */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <zmq.h>

#include "direct_channel.h"
#include "pastset.h"
#include "peer_directory.h"
#include "server.h"
#include "stage.h"
#include "wire.h"
#include "zmq_context.h"

enum { THREADS = 8, PRODUCERS = 3, CONSUMERS = 3, CHURNERS = 4, MAX_LINKS = 4096, MAX_REPORTS = 20 };

#define MS 1000000LL
#define WAIT (10000 * MS)               /* the longest a call waits for what must come */
#define RUN_BUDGET (55000 * MS)         /* the whole run (the pytest timeout is 60 s) */

#include "stress_report.h"
#include "stage_setup.h"

static const char *const SUM_SPEC = "{\"version\":1,\"path\":[[\"reduce-sum\",{\"num_threads\":8}],"
                                    "[\"core\",{\"name\":\"SUM\",\"format\":\"q\"}]]}";
static const char *const JOBS_SPEC = "{\"version\":1,\"path\":[[\"core\",{\"name\":\"JOBS\",\"format\":\"q\"}]]}";
static const char *const CHURN_SPEC = "{\"version\":1,\"path\":[[\"core\",{\"name\":\"CHURN\",\"format\":\"q\"}]]}";
static const char *const BATCHED_SPEC =
    "{\"version\":1,\"path\":[[\"core\",{\"name\":\"BATCHED\",\"format\":\"q\"}]]}";
static const char *const RANGES_SPEC = "{\"version\":1,\"path\":[[\"core\",{\"name\":\"RANGES\",\"format\":\"q\"}]]}";
static const char *const STREAMS_SPEC =
    "{\"version\":1,\"path\":[[\"core\",{\"name\":\"STREAMS\",\"format\":\"q\"}]]}";

/* ---- the server: BUILDs answered here by attaching to stages made in advance ---------------------- */

typedef struct served {
    ps_server *server;
    ps_stage *sum, *jobs, *churn, *batched, *ranges, *streams; /* what each spec names, built once */
    ps_stage *sum_element;          /* the element below the sum */
    struct { uint64_t id; ps_link *link; } links[MAX_LINKS]; /* the links handed over, until reaped */
    atomic_bool stop;
} served;

static void *serve(void *arg) {
    served *s = arg;
    ps_build_request *request = malloc(sizeof *request);
    while (request && !atomic_load(&s->stop)) {
        uint64_t reaped[64];
        size_t n = ps_server_reap(s->server, reaped, 64);
        for (size_t i = 0; i < n; i++) {
            int at = 0;
            while (at < MAX_LINKS && !(s->links[at].link && s->links[at].id == reaped[i])) at++;
            if (at == MAX_LINKS) {
                fail("reaped link id %" PRIu64 " was never handed over", reaped[i]);
                continue;
            }
            ps_link_detach(s->links[at].link);
            free(s->links[at].link);
            s->links[at].link = NULL;
        }
        if (ps_server_next_build(s->server, 20 * MS, request) != PS_OK) continue;
        ps_stage *target = strcmp(request->spec, SUM_SPEC) == 0    ? s->sum
                           : strcmp(request->spec, JOBS_SPEC) == 0 ? s->jobs
                           : strcmp(request->spec, CHURN_SPEC) == 0 ? s->churn
                           : strcmp(request->spec, BATCHED_SPEC) == 0 ? s->batched
                           : strcmp(request->spec, RANGES_SPEC) == 0 ? s->ranges
                           : strcmp(request->spec, STREAMS_SPEC) == 0 ? s->streams
                                                                      : NULL;
        ps_link *link = target ? malloc(sizeof *link) : NULL;
        if (link && ps_stage_attach(target, link) != PS_OK) {
            free(link);
            link = NULL;
        }
        uint64_t id = 0;
        if (ps_server_answer_build(s->server, request, link, link ? NULL : "unknown spec", &id) != PS_OK || !link)
            continue;
        int at = 0;
        while (at < MAX_LINKS && s->links[at].link) at++;
        if (at == MAX_LINKS) {
            fail("more than %d links at once: beyond the test's table", MAX_LINKS);
            continue;
        }
        s->links[at].id = id;
        s->links[at].link = link;
    }
    free(request);
    return NULL;
}

static int64_t server_counter(served *s, const char *name) {
    ps_server_counters c;
    ps_server_read_counters(s->server, &c);
    if (strcmp(name, "builds") == 0) return c.builds;
    if (strcmp(name, "direct") == 0) return c.direct;
    if (strcmp(name, "live") == 0) return c.live;
    if (strcmp(name, "abandoned") == 0) return c.abandoned;
    return c.bad_frames;
}

/* A remote stage reaching the server's `spec` on `proto`. */
static ps_stage *remote_stage(const char *endpoint, const char *proto, const char *spec, int window, int batch) {
    ps_param_value values[] = {str_param("host", endpoint), str_param("proto", proto), int_param("timeout_ms", 10000),
                               int_param("window", window), int_param("batch", batch), str_param("format", "q"),
                               str_param("path", spec)};
    return create_stage(NULL, "remote", values, sizeof values / sizeof values[0], NULL);
}

/* ---- sum ------------------------------------------------------------------------------------------ */

typedef struct sum_job {
    ps_stage *remote;
    int thread;
    int64_t rounds;
} sum_job;

static void *sum_thread(void *arg) {
    sum_job *job = arg;
    ps_link link;
    attach_or_die(job->remote, &link);
    for (int64_t r = 0; r < job->rounds; r++) {
        int64_t mine = r * 1000 + job->thread, total = -1;
        int rc = link_move(&link, &mine, WAIT);
        if (rc == PS_OK) rc = link_observe(&link, &total, WAIT);
        int64_t expected = r * 1000 * THREADS + THREADS * (THREADS - 1) / 2;
        CHECK(rc == PS_OK && total == expected, "sum thread %d round %" PRId64 ": %s, total %" PRId64 " (expected %"
              PRId64 "): %s", job->thread, r, ps_status_name(rc), total, expected, stage_error(job->remote));
        if (rc != PS_OK) break;
    }
    ps_link_detach(&link);
    return NULL;
}

static void run_sum(served *s, const char *endpoint, int64_t rounds) {
    atomic_store(&scene_running, "sum");
    ps_stage *remotes[4] = {remote_stage(endpoint, "tcp", SUM_SPEC, 1, 1), remote_stage(endpoint, "tcp", SUM_SPEC, 2, 1),
                            remote_stage(endpoint, "ipc", SUM_SPEC, 1, 1), remote_stage(endpoint, "ipc", SUM_SPEC, 2, 1)};
    pthread_t threads[THREADS];
    sum_job jobs[THREADS];
    for (int t = 0; t < THREADS; t++) {
        jobs[t] = (sum_job){remotes[t % 4], t, rounds};
        start_thread(&threads[t], sum_thread, &jobs[t]);
    }
    for (int t = 0; t < THREADS; t++) pthread_join(threads[t], NULL);
    ps_link history;
    attach_or_die(s->sum_element, &history);
    int64_t last = -1;
    link_value(&history, PS_OP_LAST, &last);
    CHECK(last == rounds, "sum: the element holds %" PRId64 " totals, expected %" PRId64, last, rounds);
    for (int64_t r = 0; r < last && r < rounds; r++) {
        int64_t total = -1;
        link_observe_at(&history, r, &total, WAIT);
        CHECK(total == r * 1000 * THREADS + THREADS * (THREADS - 1) / 2, "sum: total %" PRId64 " in place %" PRId64,
              total, r);
    }
    ps_link_detach(&history);
    for (int i = 0; i < 4; i++) ps_stage_release(remotes[i]);
}

/* ---- queue ---------------------------------------------------------------------------------------- */

enum { MOVE_MANY_MOST = 3000 }; /* jobs a move_many producer moves at once, at most */

/* The next length of a run of 1 to `most` tuples, from a writer's own random sequence. */
static int64_t random_run(uint64_t *state, int64_t most) {
    *state = *state * 6364136223846793005ULL + 1442695040888963407ULL;
    return 1 + (int64_t)((*state >> 33) % (uint64_t)most);
}

typedef struct queue_job {
    ps_stage *remote;
    int index;
    bool many;                 /* a producer that moves its jobs by move_many */
    int64_t jobs;              /* per producer */
    _Atomic int64_t *taken;    /* jobs taken so far, by every consumer */
    _Atomic unsigned char *seen; /* per job: times taken */
} queue_job;

static void *producer(void *arg) {
    queue_job *job = arg;
    ps_link link;
    attach_or_die(job->remote, &link);
    int64_t *values = malloc(MOVE_MANY_MOST * sizeof *values);
    uint64_t random = 0x9E3779B97F4A7C15ULL * (uint64_t)(job->index + 1);
    for (int64_t i = 0; values && i < job->jobs;) {
        int64_t n = job->many ? random_run(&random, MOVE_MANY_MOST) : 1;
        if (n > job->jobs - i) n = job->jobs - i;
        for (int64_t k = 0; k < n; k++) values[k] = (int64_t)job->index * job->jobs + i + k;
        uint32_t done = 0;
        int rc = job->many ? link_move_many(&link, values, (uint32_t)n, WAIT, &done) : link_move(&link, values, WAIT);
        CHECK(rc == PS_OK, "producer %d jobs %" PRId64 "..%" PRId64 ": %s (%u done)", job->index, i, i + n - 1,
              ps_status_name(rc), done);
        if (rc != PS_OK) break;
        i += n;
    }
    free(values);
    ps_link_detach(&link); /* sends what its batch holds, then releases */
    return NULL;
}

static void *consumer(void *arg) {
    queue_job *job = arg;
    ps_link link;
    attach_or_die(job->remote, &link);
    int64_t total = job->jobs * PRODUCERS, last_of[PRODUCERS];
    for (int p = 0; p < PRODUCERS; p++) last_of[p] = -1;
    while (atomic_load(job->taken) < total) {
        int64_t value = -1;
        int rc = link_observe(&link, &value, 20 * MS);
        if (rc == PS_ETIMEDOUT) continue; /* the others may have taken the rest */
        CHECK(rc == PS_OK && value >= 0 && value < total, "consumer %d: %s, job %" PRId64, job->index,
              ps_status_name(rc), value);
        if (rc != PS_OK || value < 0 || value >= total) break;
        int p = (int)(value / job->jobs);
        CHECK(value > last_of[p], "consumer %d: job %" PRId64 " of producer %d after %" PRId64, job->index, value, p,
              last_of[p]);
        last_of[p] = value;
        atomic_fetch_add(&job->seen[value], 1);
        atomic_fetch_add(job->taken, 1);
    }
    ps_link_detach(&link);
    return NULL;
}

static void run_queue(const char *endpoint, int64_t jobs) {
    atomic_store(&scene_running, "queue");
    int64_t total = jobs * PRODUCERS;
    _Atomic unsigned char *seen = calloc((size_t)total, 1);
    _Atomic int64_t taken = 0;
    ps_stage *moving = remote_stage(endpoint, "tcp", JOBS_SPEC, 16, 4);
    ps_stage *batching = remote_stage(endpoint, "ipc", JOBS_SPEC, 1, 1);
    ps_stage *taking[2] = {remote_stage(endpoint, "tcp", JOBS_SPEC, 1, 1), remote_stage(endpoint, "ipc", JOBS_SPEC, 1, 1)};
    pthread_t threads[PRODUCERS + CONSUMERS];
    queue_job work[PRODUCERS + CONSUMERS];
    for (int i = 0; i < PRODUCERS + CONSUMERS; i++) {
        int producing = i < PRODUCERS, many = i == PRODUCERS - 1;
        work[i] = (queue_job){producing ? (many ? batching : moving) : taking[i % 2], producing ? i : i - PRODUCERS,
                              many, jobs, &taken, seen};
        start_thread(&threads[i], producing ? producer : consumer, &work[i]);
    }
    for (int i = 0; i < PRODUCERS + CONSUMERS; i++) pthread_join(threads[i], NULL);
    int64_t lost = 0, doubled = 0;
    for (int64_t v = 0; v < total; v++) {
        lost += seen[v] == 0;
        doubled += seen[v] > 1;
    }
    CHECK(lost == 0 && doubled == 0, "queue: %" PRId64 " jobs lost, %" PRId64 " taken twice, of %" PRId64, lost, doubled,
          total);
    free((void *)seen);
    ps_stage_release(moving);
    ps_stage_release(batching);
    ps_stage_release(taking[0]);
    ps_stage_release(taking[1]);
}

/* ---- churn ---------------------------------------------------------------------------------------- */

typedef struct churn_job {
    ps_stage *remote;
    int index;
    int64_t cycles;
} churn_job;

static void *churner(void *arg) {
    churn_job *job = arg;
    for (int64_t i = 0; i < job->cycles; i++) {
        ps_link link;
        attach_or_die(job->remote, &link);
        int64_t last = -1;
        int rc = link_value(&link, PS_OP_LAST, &last);
        CHECK(rc == PS_OK && last == 0, "churn %d: last() %s, %" PRId64, job->index, ps_status_name(rc), last);
        ps_link_detach(&link);
    }
    return NULL;
}

static void run_churn(served *s, const char *endpoint, int64_t cycles) {
    atomic_store(&scene_running, "churn");
    int64_t builds = server_counter(s, "builds"), abandoned = server_counter(s, "abandoned");
    ps_stage *remotes[2] = {remote_stage(endpoint, "tcp", CHURN_SPEC, 1, 1), remote_stage(endpoint, "ipc", CHURN_SPEC, 1, 1)};
    pthread_t threads[CHURNERS];
    churn_job jobs[CHURNERS];
    for (int t = 0; t < CHURNERS; t++) {
        jobs[t] = (churn_job){remotes[t % 2], t, cycles};
        start_thread(&threads[t], churner, &jobs[t]);
    }
    for (int t = 0; t < CHURNERS; t++) pthread_join(threads[t], NULL);
    ps_stage_release(remotes[0]);
    ps_stage_release(remotes[1]);
    CHECK(server_counter(s, "builds") - builds == CHURNERS * cycles, "churn: %" PRId64 " links handed over, expected %"
          PRId64, server_counter(s, "builds") - builds, CHURNERS * cycles);
    int64_t deadline = ps_now_ns() + WAIT;
    while (server_counter(s, "live") > 0 && ps_now_ns() < deadline) {
        struct timespec tick = {0, MS};
        nanosleep(&tick, NULL);
    }
    CHECK(server_counter(s, "live") == 0, "churn: %" PRId64 " links still served", server_counter(s, "live"));
    CHECK(server_counter(s, "abandoned") == abandoned, "churn: released links counted as abandoned");
}

/* ---- batched ------------------------------------------------------------------------------------ */

typedef struct batched_job {
    ps_stage *top;   /* batch -> remote, or cache -> remote */
    int index;
    int64_t values;  /* per thread */
} batched_job;

static void *batching_thread(void *arg) {
    batched_job *job = arg;
    ps_link link;
    attach_or_die(job->top, &link);
    int rc = PS_OK;
    for (int64_t i = 0; i < job->values && rc == PS_OK; i++) {
        int64_t value = (int64_t)job->index * job->values + i;
        rc = link_move(&link, &value, WAIT);
        if (rc == PS_OK && i % 101 == 100) {
            int64_t last = -1;
            rc = link_value(&link, PS_OP_LAST, &last);
            CHECK(rc != PS_OK || last >= i + 1, "batched %d: last() %" PRId64 " after its move %" PRId64, job->index,
                  last, i);
        }
    }
    if (rc == PS_OK) {
        ps_op fence = {.kind = PS_OP_FENCE, .timeout_ns = WAIT};
        rc = ps_link_call(&link, &fence);
    }
    CHECK(rc == PS_OK, "batched %d: %s: %s", job->index, ps_status_name(rc), stage_error(job->top));
    ps_link_detach(&link);
    return NULL;
}

static void *prefetching_thread(void *arg) {
    batched_job *job = arg;
    ps_link link;
    attach_or_die(job->top, &link);
    int64_t total = job->values * THREADS, next[THREADS] = {0};
    for (int64_t i = 0; i < total; i++) {
        int64_t value = -1;
        int rc = link_observe_at(&link, i, &value, WAIT);
        int t = (int)(value / job->values);
        CHECK(rc == PS_OK && value >= 0 && value < total && value == t * job->values + next[t],
              "prefetch %d: tuple %" PRId64 " is %" PRId64 " (%s)", job->index, i, value, ps_status_name(rc));
        if (rc != PS_OK || value < 0 || value >= total) break;
        next[t]++;
    }
    ps_link_detach(&link);
    return NULL;
}

static ps_stage *create_batch(int64_t buffers, int64_t flush_us, ps_stage *below) {
    ps_param_value values[] = {int_param("max_moves", 32), int_param("buffers", buffers), int_param("flush_us", flush_us)};
    return create_stage(NULL, "batch", values, 3, below);
}

static ps_stage *create_prefetching(ps_stage *below, int64_t window) {
    ps_param_value values[] = {int_param("capacity", 1024), str_param("prefetch", "window"), int_param("window", window)};
    return create_stage(NULL, "cache", values, 3, below);
}

static void run_batched(const char *endpoint, int64_t values) {
    atomic_store(&scene_running, "batched");
    ps_stage *remotes[2] = {remote_stage(endpoint, "tcp", BATCHED_SPEC, 1, 1),
                            remote_stage(endpoint, "ipc", BATCHED_SPEC, 1, 1)};
    ps_stage *batches[4] = {create_batch(1, 0, remotes[0]), create_batch(2, 0, remotes[1]),
                            create_batch(2, 50, remotes[0]), create_batch(1, 200, remotes[1])};
    pthread_t threads[THREADS];
    batched_job jobs[THREADS];
    for (int t = 0; t < THREADS; t++) {
        jobs[t] = (batched_job){batches[t % 4], t, values};
        start_thread(&threads[t], batching_thread, &jobs[t]);
    }
    for (int t = 0; t < THREADS; t++) pthread_join(threads[t], NULL);
    for (int i = 0; i < 4; i++) ps_stage_release(batches[i]);
    int64_t window = 97, total = values * THREADS;
    ps_stage *caches[2] = {create_prefetching(remotes[0], window), create_prefetching(remotes[1], window)};
    for (int t = 0; t < 2; t++) {
        jobs[t] = (batched_job){caches[t], t, values};
        start_thread(&threads[t], prefetching_thread, &jobs[t]);
    }
    for (int t = 0; t < 2; t++) pthread_join(threads[t], NULL);
    for (int i = 0; i < 2; i++) {
        ps_counter counters[16];
        int n = ps_stage_counters(caches[i], counters, 16);
        int64_t ranges = -1;
        for (int k = 0; k < n; k++)
            if (strcmp(counters[k].name, "ranges") == 0) ranges = counters[k].value;
        int64_t windows = (total + window - 1) / window;
        CHECK(ranges == windows, "batched: %" PRId64 " ranges fetched %" PRId64 " values, expected %" PRId64, ranges,
              total, windows);
        ps_stage_release(caches[i]);
    }
    ps_link link; /* a range beyond the bound: refused before it is sent */
    attach_or_die(remotes[0], &link);
    int64_t *room = malloc(sizeof(int64_t));
    ps_op range = {.kind = PS_OP_OBSERVE_RANGE, .argument = 0, .count = ps_op_range_max(8) + 1, .out = room,
                   .timeout_ns = WAIT};
    int rc = ps_link_call(&link, &range);
    CHECK(rc == PS_EINVAL && strstr(stage_error(remotes[0]), "observe_range: asked for 524289 tuples; one answer "
                                                                "carries 1 to 524288 tuples of 8 bytes (4 MiB)"),
          "batched: a range beyond the bound: %s, '%s'", ps_status_name(rc), stage_error(remotes[0]));
    int64_t last = -1;
    CHECK(link_value(&link, PS_OP_LAST, &last) == PS_OK && last == total, "batched: the link goes on: last %" PRId64,
          last);
    free(room);
    ps_link_detach(&link);
    for (int i = 0; i < 2; i++) ps_stage_release(remotes[i]);
}

/* ---- ranges --------------------------------------------------------------------------------------- */

enum { RANGE_ASKED = 3 * 8192 + 7, RANGE_READERS = 2 }; /* 'q' tuples: the server reads 8192 at a time */

typedef struct ranges_job {
    ps_stage *stage;
    int64_t tuples;
    _Atomic int64_t *moved; /* the writer's progress */
} ranges_job;

static void *range_writer(void *arg) {
    ranges_job *job = arg;
    ps_link link;
    attach_or_die(job->stage, &link);
    int64_t *values = malloc(3000 * sizeof *values);
    for (int64_t next = 0, n = 1; values && next < job->tuples; n = (n * 7 + 977) % 3000 + 1) {
        if (n > job->tuples - next) n = job->tuples - next;
        for (int64_t i = 0; i < n; i++) values[i] = next + i;
        uint32_t done = 0;
        int rc = link_move_many(&link, values, (uint32_t)n, WAIT, &done);
        CHECK(rc == PS_OK && done == n, "ranges: moving %" PRId64 " at %" PRId64 ": %s", n, next, ps_status_name(rc));
        if (rc != PS_OK) break;
        next += n;
        atomic_store(job->moved, next);
    }
    free(values);
    ps_link_detach(&link);
    return NULL;
}

static void *range_reader(void *arg) {
    ranges_job *job = arg;
    ps_link link;
    attach_or_die(job->stage, &link);
    int64_t *got = malloc(RANGE_ASKED * sizeof *got);
    uint64_t seed = (uint64_t)(uintptr_t)job * 2654435761u;
    for (int done = 0; got && !done;) {
        done = atomic_load(job->moved) == job->tuples;
        int64_t moved = atomic_load(job->moved);
        seed = seed * 6364136223846793005u + 1442695040888963407u;
        int64_t start = moved ? (int64_t)((seed >> 33) % (uint64_t)moved) : 0;
        if (done) start = moved > RANGE_ASKED ? moved - RANGE_ASKED + 1 : 0; /* the tail, now complete */
        ps_op range = {.kind = PS_OP_OBSERVE_RANGE, .argument = start, .count = RANGE_ASKED, .out = got,
                       .timeout_ns = WAIT};
        int rc = ps_link_call(&link, &range);
        bool right = rc == PS_OK && range.value >= 1 && range.value <= RANGE_ASKED;
        for (int64_t i = 0; right && i < range.value; i++) right = got[i] == start + i;
        CHECK(right, "ranges: observe_range(%" PRId64 ", %d): %s, %" PRId64 " tuples", start, RANGE_ASKED,
              ps_status_name(rc), range.value);
        if (done) CHECK(!right || range.value == job->tuples - start, "ranges: the tail from %" PRId64 " gave %" PRId64
                        " tuples, expected %" PRId64, start, range.value, job->tuples - start);
        if (!right) break;
    }
    free(got);
    ps_link_detach(&link);
    return NULL;
}

static void run_ranges(ps_stage *element, const char *endpoint, int64_t tuples) {
    atomic_store(&scene_running, "ranges");
    _Atomic int64_t moved = 0;
    ps_stage *remotes[RANGE_READERS] = {remote_stage(endpoint, "tcp", RANGES_SPEC, 1, 1),
                                        remote_stage(endpoint, "ipc", RANGES_SPEC, 1, 1)};
    ranges_job writer = {element, tuples, &moved}, readers[RANGE_READERS];
    pthread_t threads[RANGE_READERS + 1];
    start_thread(&threads[0], range_writer, &writer);
    for (int r = 0; r < RANGE_READERS; r++) {
        readers[r] = (ranges_job){remotes[r], tuples, &moved};
        start_thread(&threads[r + 1], range_reader, &readers[r]);
    }
    for (int t = 0; t <= RANGE_READERS; t++) pthread_join(threads[t], NULL);
    for (int r = 0; r < RANGE_READERS; r++) ps_stage_release(remotes[r]);
}

/* ---- axes ------------------------------------------------------------------------------------------ */

enum { AXE_READERS = 2, AXE_TUPLES = 4000, AXE_STEP = 50 }; /* the caches hold copies of all of them (at most) */

typedef struct axes_job {
    ps_stage *stage;        /* the remote stage (the axer), or a cache above it (a reader) */
    int64_t tuples;
    _Atomic int64_t *axed;  /* the axer's progress: a floor for any read begun later */
    atomic_bool *axer_done;
} axes_job;

static void *axer(void *arg) {
    axes_job *job = arg;
    ps_link link;
    attach_or_die(job->stage, &link);
    for (int64_t point = AXE_STEP; point <= job->tuples; point += AXE_STEP) {
        ps_op axe = {.kind = PS_OP_AXE, .argument = point};
        int rc = ps_link_call(&link, &axe);
        CHECK(rc == PS_OK, "axes: axe(%" PRId64 "): %s", point, ps_status_name(rc));
        if (rc != PS_OK) break;
        atomic_store(job->axed, point);
        struct timespec pause = {0, 200000}; /* the readers sweep their copies meanwhile */
        nanosleep(&pause, NULL);
    }
    atomic_store(job->axer_done, true);
    ps_link_detach(&link);
    return NULL;
}

static void *axed_reader(void *arg) {
    axes_job *job = arg;
    ps_link link;
    attach_or_die(job->stage, &link);
    bool right = true;
    for (bool last_sweep = false; right && !last_sweep;) {
        last_sweep = atomic_load(job->axer_done);
        for (int64_t i = 0; right && i < job->tuples; i += 7) {
            int64_t floor = atomic_load(job->axed), value = -1;
            int rc = link_observe_at(&link, i, &value, WAIT);
            right = rc == PS_EAXED || (rc == PS_OK && value == i && i >= floor);
            CHECK(right, "axes: observe_at(%" PRId64 ") after an axe at %" PRId64 " returned: %s, %" PRId64, i, floor,
                  ps_status_name(rc), value);
        }
    }
    ps_link_detach(&link);
    return NULL;
}

static void run_axes(const char *endpoint, int64_t moved) {
    atomic_store(&scene_running, "axes");
    int64_t tuples = moved < AXE_TUPLES ? moved : AXE_TUPLES;
    _Atomic int64_t axed = 0;
    atomic_bool axer_done = false;
    ps_stage *remote = remote_stage(endpoint, "tcp", RANGES_SPEC, 1, 1);
    axes_job jobs[AXE_READERS + 1] = {{remote, tuples, &axed, &axer_done}};
    pthread_t threads[AXE_READERS + 1];
    for (int r = 1; r <= AXE_READERS; r++) {
        ps_param_value values[] = {int_param("capacity", 4096), str_param("prefetch", r == 1 ? "all" : "window"),
                                   int_param("window", 1000)};
        jobs[r] = (axes_job){create_stage(NULL, "cache", values, 3, remote), tuples, &axed, &axer_done};
        start_thread(&threads[r], axed_reader, &jobs[r]);
    }
    start_thread(&threads[0], axer, &jobs[0]);
    for (int t = 0; t <= AXE_READERS; t++) pthread_join(threads[t], NULL);
    for (int r = 1; r <= AXE_READERS; r++) ps_stage_release(jobs[r].stage);
    ps_stage_release(remote);
}

/* ---- streams -------------------------------------------------------------------------------------- */

enum { STREAM_WRITERS = 3, STREAM_MOST = 9000, STREAM_BOUND = 2500, PAUSE_EVERY = 2000 };
#define STREAM_CALL_WAIT (5 * MS) /* a writer's timeout per call: shorter than the reader's pauses */

typedef struct streams_job {
    ps_stage *stage;           /* a writer's remote stage; the reader's: the element */
    int index;
    int64_t tuples;            /* per writer */
    int pipelined;             /* its remote stage has window > 1: a fence waits for its moves */
} streams_job;

static void *stream_writer(void *arg) {
    streams_job *job = arg;
    ps_link link;
    attach_or_die(job->stage, &link);
    int64_t *values = malloc(STREAM_MOST * sizeof *values);
    uint64_t random = 0xD1B54A32D192ED03ULL * (uint64_t)(job->index + 1);
    for (int64_t next = 0; values && next < job->tuples;) {
        int64_t n = random_run(&random, STREAM_MOST);
        if (n > job->tuples - next) n = job->tuples - next;
        for (int64_t i = 0; i < n; i++) values[i] = job->index * job->tuples + next + i;
        int rc = PS_ETIMEDOUT;
        int64_t deadline = ps_now_ns() + WAIT;
        for (int64_t moved = 0; rc == PS_ETIMEDOUT && ps_now_ns() < deadline;) {
            uint32_t done = 0;
            rc = link_move_many(&link, values + moved, (uint32_t)(n - moved), STREAM_CALL_WAIT, &done);
            moved += done;
            CHECK(rc == PS_ETIMEDOUT || (rc == PS_OK && moved == n), "streams: writer %d moving %" PRId64 " at %"
                  PRId64 ": %s (%" PRId64 " done): %s", job->index, n, next, ps_status_name(rc), moved,
                  stage_error(job->stage));
        }
        CHECK(rc == PS_OK, "streams: writer %d: %" PRId64 " at %" PRId64 " not moved within %lld ms", job->index, n,
              next, WAIT / MS);
        if (rc != PS_OK) break;
        next += n;
    }
    if (job->pipelined) { /* its last frames may still wait at the server, or in the stage */
        ps_op fence = {.kind = PS_OP_FENCE, .timeout_ns = WAIT};
        int rc = ps_link_call(&link, &fence);
        CHECK(rc == PS_OK, "streams: writer %d: fence: %s: %s", job->index, ps_status_name(rc), stage_error(job->stage));
    }
    free(values);
    ps_link_detach(&link);
    return NULL;
}

/* Takes every value, pausing 10 ms (past a writer's call) every PAUSE_EVERY. */
static void *stream_reader(void *arg) {
    streams_job *job = arg;
    ps_link link;
    attach_or_die(job->stage, &link);
    int64_t total = job->tuples * STREAM_WRITERS, last_of[STREAM_WRITERS];
    unsigned char *seen = calloc((size_t)total, 1);
    for (int w = 0; w < STREAM_WRITERS; w++) last_of[w] = -1;
    for (int64_t taken = 0; seen && taken < total; taken++) {
        int64_t value = -1;
        int rc = link_observe(&link, &value, WAIT);
        CHECK(rc == PS_OK && value >= 0 && value < total && !seen[value], "streams: take %" PRId64 ": %s, value %"
              PRId64 "%s", taken, ps_status_name(rc), value, rc == PS_OK && value >= 0 && value < total ? " again" : "");
        if (rc != PS_OK || value < 0 || value >= total || seen[value]) break;
        int w = (int)(value / job->tuples);
        CHECK(value > last_of[w], "streams: writer %d's %" PRId64 " after its %" PRId64, w, value, last_of[w]);
        last_of[w] = value;
        seen[value] = 1;
        if (taken % PAUSE_EVERY == PAUSE_EVERY - 1) nanosleep(&(struct timespec){0, 10 * MS}, NULL);
    }
    free(seen);
    ps_link_detach(&link);
    return NULL;
}

static void run_streams(ps_stage *element, const char *endpoint, int64_t tuples) {
    atomic_store(&scene_running, "streams");
    ps_link bounding;
    attach_or_die(element, &bounding);
    ps_op bound = {.kind = PS_OP_DELTA, .argument = STREAM_BOUND};
    CHECK(ps_link_call(&bounding, &bound) == PS_OK, "streams: delta(%d)", STREAM_BOUND);
    ps_link_detach(&bounding);
    const char *protos[STREAM_WRITERS] = {"tcp", "ipc", "tcp"};
    ps_stage *remotes[STREAM_WRITERS];
    streams_job writers[STREAM_WRITERS], reader = {element, 0, tuples, 0};
    pthread_t threads[STREAM_WRITERS + 1];
    start_thread(&threads[STREAM_WRITERS], stream_reader, &reader);
    for (int w = 0; w < STREAM_WRITERS; w++) {
        int pipelined = w == STREAM_WRITERS - 1;
        remotes[w] = remote_stage(endpoint, protos[w], STREAMS_SPEC, pipelined ? 8 : 1, 1);
        writers[w] = (streams_job){remotes[w], w, tuples, pipelined};
        start_thread(&threads[w], stream_writer, &writers[w]);
    }
    for (int t = 0; t <= STREAM_WRITERS; t++) pthread_join(threads[t], NULL);
    int64_t cut = 0, resent = 0;
    for (int w = 0; w < STREAM_WRITERS; w++) {
        cut += counter_of(remotes[w], "streams_cut");
        resent += counter_of(remotes[w], "resent");
        CHECK(counter_of(remotes[w], "dropped") == 0, "streams: writer %d dropped moves", w);
        ps_stage_release(remotes[w]);
    }
    CHECK(tuples * STREAM_WRITERS < PAUSE_EVERY || cut > 0, "streams: no stream was cut");
    printf("streams: %" PRId64 " streams cut and sent on, %" PRId64 " pipelined frames sent again\n", cut, resent);
}

/* ---- allreduce ------------------------------------------------------------------------------------ */

enum { GROUP_MOST = 8 };

typedef struct partial {
    int64_t count;
    double share; /* not exact in binary: the order of its additions shows in its bits */
} partial;

typedef struct member_job {
    ps_stage *member;
    int rank, size;
    int64_t rounds;
    bool impatient;  /* every call with a timeout of 1 us, retried until it goes through */
    double *shares;  /* the share field of every round's total, as this member got it */
} member_job;

static void *member_thread(void *arg) {
    member_job *job = arg;
    ps_link link;
    attach_or_die(job->member, &link);
    int64_t timeout = job->impatient ? 1000 : WAIT;
    for (int64_t r = 0; r < job->rounds; r++) {
        partial mine = {r * 100 + job->rank, 1.0 / (3 + job->rank + r % 7)}, total = {-1, 0.0};
        /* An impatient member that spun through its tries would hold a core the partners it
         * waits for need: on a loaded machine, for whole time slices per round. */
        int rc;
        while ((rc = link_move(&link, &mine, timeout)) == PS_ETIMEDOUT && job->impatient) sched_yield();
        if (rc == PS_OK)
            while ((rc = link_observe(&link, &total, timeout)) == PS_ETIMEDOUT && job->impatient) sched_yield();
        int64_t expected = r * 100 * job->size + job->size * (job->size - 1) / 2;
        CHECK(rc == PS_OK && total.count == expected, "allreduce member %d of %d round %" PRId64 ": %s, total %"
              PRId64 " (expected %" PRId64 "): %s", job->rank, job->size, r, ps_status_name(rc), total.count, expected,
              stage_error(job->member));
        if (rc != PS_OK) break;
        job->shares[r] = total.share;
    }
    ps_link_detach(&link);
    return NULL;
}

/* Connects to rank 0 of `group` as hostile peers would: garbage, a wrong secret, the right
 * secret from no partner's rank. Returns how many connections it made. */
static int hostile_peers(const char *group) {
    char endpoint[PS_PEER_ENDPOINT_MAX], error[256];
    unsigned char secret[PS_WIRE_SECRET], wrong[PS_WIRE_SECRET], garbage[PS_WIRE_HEADER], news[PS_PEER_NEWS];
    unsigned char frame[PS_WIRE_HEADER + PS_WIRE_SECRET];
    uint64_t shape;
    if (ps_peer_find(group, 0, endpoint, secret, news, &shape) != PS_OK) {
        fail("allreduce: group '%s' rank 0 is not listed", group);
        return 0;
    }
    memset(garbage, 0xff, sizeof garbage);
    memcpy(wrong, secret, sizeof wrong);
    wrong[7] ^= 1;
    ps_frame hellos[] = {{PS_WIRE_CONNECT, 0, 0, 1, 0, (int64_t)shape, wrong, PS_WIRE_SECRET},
                         {PS_WIRE_CONNECT, 0, 0, 0, 0, (int64_t)shape, secret, PS_WIRE_SECRET}};
    int made = 0;
    for (int i = 0; i < 3; i++) {
        ps_channel c;
        if (ps_channel_connect(endpoint, sizeof frame, WAIT, ps_now_ns() + WAIT, &c, error, sizeof error) != PS_OK) {
            fail("allreduce: cannot connect to '%s': %s", endpoint, error);
            continue;
        }
        if (i == 0) ps_channel_send(&c, garbage, sizeof garbage, 0);
        else ps_channel_send(&c, frame, ps_wire_encode(&hellos[i - 1], frame, sizeof frame), 0);
        ps_channel_close(&c);
        made++;
    }
    return made;
}

/* One group of `size` members, all finding each other through the server at `endpoint`. */
static void run_group(ps_space *space, const char *endpoint, const char *group, int size, const char *algorithm,
                      int fanin, const char *proto, bool impatient, bool hostile, int64_t rounds) {
    char nodes[GROUP_MOST * 64] = "", name[64];
    for (int k = 0; k < size; k++)
        snprintf(nodes + strlen(nodes), sizeof nodes - strlen(nodes), "%s%s", k ? "," : "", endpoint);
    ps_stage *elements[GROUP_MOST], *members[GROUP_MOST];
    member_job jobs[GROUP_MOST];
    pthread_t threads[GROUP_MOST];
    for (int k = 0; k < size; k++) {
        snprintf(name, sizeof name, "AR-%s-%d", group, k);
        elements[k] = create_core(space, name, "qd");
        ps_param_value values[] = {str_param("group", group), str_param("nodes", nodes), int_param("rank", k),
                                   str_param("algorithm", algorithm), int_param("fanin", fanin),
                                   str_param("proto", proto), int_param("timeout_ms", 10000)};
        members[k] = create_stage(space, "allreduce", values, sizeof values / sizeof values[0], elements[k]);
        jobs[k] = (member_job){members[k], k, size, rounds, impatient, calloc((size_t)rounds, sizeof(double))};
    }
    int refused = hostile ? hostile_peers(group) : 0;
    for (int k = 0; k < size; k++) start_thread(&threads[k], member_thread, &jobs[k]);
    for (int k = 0; k < size; k++) pthread_join(threads[k], NULL);
    for (int k = 1; k < size; k++)
        CHECK(memcmp(jobs[k].shares, jobs[0].shares, (size_t)rounds * sizeof(double)) == 0,
              "allreduce '%s': member %d's totals are not the same bits as member 0's", group, k);
    CHECK(counter_of(members[0], "refused") == refused, "allreduce '%s': %" PRId64 " connections refused, %d hostile",
          group, counter_of(members[0], "refused"), refused);
    ps_link history;
    attach_or_die(elements[0], &history);
    int64_t last = -1;
    link_value(&history, PS_OP_LAST, &last);
    CHECK(last == rounds, "allreduce '%s': rank 0's element holds %" PRId64 " totals, expected %" PRId64, group, last,
          rounds);
    for (int64_t r = 0; r < last && r < rounds; r++) {
        partial total = {-1, 0.0};
        link_observe_at(&history, r, &total, WAIT);
        CHECK(total.count == r * 100 * size + size * (size - 1) / 2 && total.share == jobs[0].shares[r],
              "allreduce '%s': total %" PRId64 " in place %" PRId64, group, total.count, r);
    }
    ps_link_detach(&history);
    for (int k = 0; k < size; k++) {
        ps_stage_release(members[k]);
        ps_stage_release(elements[k]);
        free(jobs[k].shares);
    }
}

static void run_allreduce(ps_space *space, const char *endpoint, int64_t rounds) {
    atomic_store(&scene_running, "allreduce");
    run_group(space, endpoint, "doubling-6", 6, "doubling", 2, "tcp", false, true, rounds);
    run_group(space, endpoint, "tree-7", 7, "tree", 3, "ipc", false, false, rounds);
    atomic_store(&scene_running, "allreduce, impatient");
    run_group(space, endpoint, "impatient-4", 4, "doubling", 2, "tcp", true, false, rounds / 4);
}

/* ---- auth ----------------------------------------------------------------------------------------- */

enum { AUTH_CLIENTS = 4 };

typedef struct auth_scene {
    ps_server *server;
    char server_public[41];
    char listed_public[41], listed_secret[41];
    int64_t tries;
    atomic_bool stop;
} auth_scene;

/* Answers PINGs (ps_server_next_build does) until the scene stops; it builds nothing. */
static void *auth_serve(void *arg) {
    auth_scene *a = arg;
    ps_build_request *request = malloc(sizeof *request);
    while (request && !atomic_load(&a->stop)) {
        uint64_t id;
        if (ps_server_next_build(a->server, 20 * MS, request) == PS_OK)
            ps_server_answer_build(a->server, request, NULL, "no builds here", &id);
    }
    free(request);
    return NULL;
}

/* Replaces the server's list over and over; the listed key is on every one of them. */
static void *auth_lister(void *arg) {
    auth_scene *a = arg;
    for (int64_t n = 0; !atomic_load(&a->stop); n++) {
        ps_client_key keys[3] = {{"", "other"}, {"", "listed"}, {"", "third"}};
        char secret[41];
        zmq_curve_keypair(keys[0].public_key, secret);
        memcpy(keys[1].public_key, a->listed_public, 41);
        zmq_curve_keypair(keys[2].public_key, secret);
        char error[128];
        CHECK(ps_server_allow_clients(a->server, keys + n % 2, 2, error, sizeof error) == PS_OK, "auth: %s", error);
    }
    return NULL;
}

/* Whether a PING from a client with this key pair is answered within wait_ms. */
static bool pinged(auth_scene *a, const char *public_key, const char *secret_key, int wait_ms) {
    void *socket = zmq_socket(ps_zmq_context(), ZMQ_DEALER);
    int zero = 0;
    zmq_setsockopt(socket, ZMQ_LINGER, &zero, sizeof zero);
    zmq_setsockopt(socket, ZMQ_CURVE_SERVERKEY, a->server_public, 41);
    zmq_setsockopt(socket, ZMQ_CURVE_PUBLICKEY, public_key, 41);
    zmq_setsockopt(socket, ZMQ_CURVE_SECRETKEY, secret_key, 41);
    zmq_connect(socket, ps_server_endpoint(a->server));
    unsigned char frame[PS_WIRE_HEADER];
    ps_frame ping = {PS_WIRE_PING, 0, 1, 0, 0, 0, NULL, 0}, answer;
    zmq_send(socket, frame, ps_wire_encode(&ping, frame, sizeof frame), 0);
    zmq_pollitem_t item = {socket, 0, ZMQ_POLLIN, 0};
    bool answered = zmq_poll(&item, 1, wait_ms) == 1;
    if (answered) {
        int length = zmq_recv(socket, frame, sizeof frame, 0);
        answered = length == PS_WIRE_HEADER && ps_wire_decode(frame, (size_t)length, &answer) == 0 &&
                   answer.op == PS_WIRE_PING && answer.status == PS_OK;
    }
    zmq_close(socket);
    return answered;
}

static void *auth_client(void *arg) {
    auth_scene *a = arg;
    for (int64_t i = 0; i < a->tries; i++) {
        char stranger_public[41], stranger_secret[41];
        zmq_curve_keypair(stranger_public, stranger_secret);
        CHECK(pinged(a, a->listed_public, a->listed_secret, (int)(WAIT / MS)), "auth: a listed client got no answer");
        CHECK(!pinged(a, stranger_public, stranger_secret, 50), "auth: a client with another key was answered");
    }
    return NULL;
}

static void run_auth(int64_t tries) {
    atomic_store(&scene_running, "auth");
    auth_scene a = {.tries = tries};
    char server_secret[41], error[256] = "";
    zmq_curve_keypair(a.server_public, server_secret);
    zmq_curve_keypair(a.listed_public, a.listed_secret);
    if (ps_server_start("tcp://127.0.0.1:*", server_secret, 1, &a.server, error, sizeof error) != PS_OK) {
        fail("auth: server: %s", error);
        return;
    }
    ps_client_key listed = {"", "listed"}; /* a server lists no client until told: the list comes first */
    memcpy(listed.public_key, a.listed_public, sizeof listed.public_key);
    CHECK(ps_server_allow_clients(a.server, &listed, 1, error, sizeof error) == PS_OK, "auth: %s", error);
    pthread_t server_thread, lister, clients[AUTH_CLIENTS];
    start_thread(&server_thread, auth_serve, &a);
    start_thread(&lister, auth_lister, &a);
    for (int t = 0; t < AUTH_CLIENTS; t++) start_thread(&clients[t], auth_client, &a);
    for (int t = 0; t < AUTH_CLIENTS; t++) pthread_join(clients[t], NULL);
    atomic_store(&a.stop, true);
    pthread_join(lister, NULL);
    pthread_join(server_thread, NULL);
    ps_server_stop(a.server, -1);
}

/* ---- slow: a peer that reads slowly is not one that reads nothing ---------------------------- */

enum { SLOW_SEND = 1 << 20, SLOW_READ = 16384 };
#define SLOW_WAIT (300 * MS)      /* the longest the sender waits for room */
#define SLOW_PAUSE (20 * MS)      /* between the reader's reads */

typedef struct slow_reader {
    int fd;
    _Atomic size_t until;         /* bytes to read, then stop reading */
    _Atomic size_t read;
} slow_reader;

/* Reads what has come, SLOW_READ bytes at most, every SLOW_PAUSE (the channel's socket does not
 * block), until it has read `until` bytes or the sender is gone. */
static void *read_slowly(void *arg) {
    slow_reader *r = arg;
    char buffer[SLOW_READ];
    while (atomic_load(&r->read) < atomic_load(&r->until)) {
        ssize_t n = recv(r->fd, buffer, sizeof buffer, 0);
        if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) break;
        if (n > 0) atomic_fetch_add(&r->read, (size_t)n);
        nanosleep(&(struct timespec){0, SLOW_PAUSE}, NULL);
    }
    return NULL;
}

static void run_slow(void) {
    atomic_store(&scene_running, "slow");
    int listener;
    char endpoint[PS_CHANNEL_ENDPOINT_MAX];
    ps_channel sender, peer;
    char error[256] = "";
    if (ps_channel_listen(PS_TRANSPORT_IPC, NULL, &listener, endpoint, sizeof endpoint) != PS_OK ||
        ps_channel_connect(endpoint, SLOW_READ, SLOW_WAIT, ps_now_ns() + WAIT, &sender, error, sizeof error) != PS_OK ||
        ps_channel_accept(listener, SLOW_READ, SLOW_WAIT, &peer) != PS_OK) {
        fail("slow: cannot connect over '%s': %s", endpoint, error);
        return;
    }
    int room = SLOW_READ; /* a small buffer, so that the send waits for the reader over and over */
    setsockopt(sender.fd, SOL_SOCKET, SO_SNDBUF, &room, sizeof room);
    unsigned char *bytes = calloc(1, SLOW_SEND);
    slow_reader reader = {.fd = peer.fd, .until = SLOW_SEND};
    pthread_t thread;
    start_thread(&thread, read_slowly, &reader);
    struct iovec whole = {bytes, SLOW_SEND};
    int64_t started = ps_now_ns();
    int rc = ps_channel_send_parts(&sender, &whole, 1);
    CHECK(rc == PS_OK, "slow: a send to a peer that reads %d bytes every %lld ms failed (%s) after %lld ms, %zu of "
          "%d bytes read", SLOW_READ, SLOW_PAUSE / MS, ps_status_name(rc), (ps_now_ns() - started) / MS,
          atomic_load(&reader.read), SLOW_SEND);
    if (rc != PS_OK) atomic_store(&reader.until, 0); /* what is left will not come */
    pthread_join(thread, NULL); /* it read everything: now it reads nothing */
    whole = (struct iovec){bytes, SLOW_SEND};
    started = ps_now_ns();
    rc = ps_channel_send_parts(&sender, &whole, 1);
    int64_t waited = ps_now_ns() - started;
    CHECK(rc == PS_EREMOTE && waited < WAIT, "slow: a send to a peer that reads nothing returned %s after %lld ms",
          ps_status_name(rc), waited / MS);
    free(bytes);
    ps_channel_close(&sender);
    ps_channel_close(&peer);
    close(listener);
}

int main(int argc, char **argv) {
    stress_run run = stress_begin("stress_remote", argc, argv, 500, RUN_BUDGET);
    int64_t rounds = run.rounds;
    ps_space *space = ps_space_new();
    served s = {0};
    char error[256] = "";
    if (!space || ps_server_start("tcp://127.0.0.1:*", NULL, 0, &s.server, error, sizeof error) != PS_OK) {
        fprintf(stderr, "FAIL: server: %s\n", error);
        return 1;
    }
    s.sum_element = create_core(space, "SUM", "q");
    s.sum = create_sum(space, THREADS, s.sum_element);
    s.jobs = create_core(space, "JOBS", "q");
    s.churn = create_core(space, "CHURN", "q");
    s.batched = create_core(space, "BATCHED", "q");
    s.ranges = create_core(space, "RANGES", "q");
    s.streams = create_core(space, "STREAMS", "q");
    pthread_t server_thread;
    start_thread(&server_thread, serve, &s);
    const char *endpoint = ps_server_endpoint(s.server);
    printf("stress_remote: server %s, %" PRId64 " rounds\n", endpoint, rounds);

    run_sum(&s, endpoint, rounds);
    run_queue(endpoint, rounds * 4);
    run_churn(&s, endpoint, rounds / 8);
    run_batched(endpoint, rounds);
    run_ranges(s.ranges, endpoint, rounds * 40);
    run_axes(endpoint, rounds * 40); /* what the ranges moved */
    run_streams(s.streams, endpoint, rounds * 8);
    run_allreduce(space, endpoint, rounds);
    run_auth(rounds / 50 + 1);
    run_slow();
    CHECK(server_counter(&s, "direct") == server_counter(&s, "builds"), "not every link was direct");
    CHECK(server_counter(&s, "bad_frames") == 0, "%" PRId64 " frames refused", server_counter(&s, "bad_frames"));

    atomic_store(&s.stop, true);
    pthread_join(server_thread, NULL);
    ps_server_stop(s.server, -1);
    for (int i = 0; i < MAX_LINKS; i++)
        if (s.links[i].link) {
            ps_link_detach(s.links[i].link);
            free(s.links[i].link);
        }
    ps_stage_release(s.sum);
    ps_stage_release(s.sum_element);
    ps_stage_release(s.jobs);
    ps_stage_release(s.churn);
    ps_stage_release(s.batched);
    ps_stage_release(s.ranges);
    ps_stage_release(s.streams);
    int code = stress_end(&run);
    ps_space_free(space);
    return code;
}
