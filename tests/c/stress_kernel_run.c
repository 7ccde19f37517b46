/* stress_kernel_run.c — a standalone stress test of kernel runs (wrappers_c/kernel_run.c,
 * kernel_context.c, paths_handle.c: the C side of paths.h) with no Python: the run's hooks attach
 * links to reduce-sum trees built here, as the Python runtime would build them.
 *
 * tests/test_c_stress.py builds it plain, under AddressSanitizer + UBSan and under ThreadSanitizer.
 * Usage: stress_kernel_run [rounds]. Exits 1 on any failure; every wait has a finite timeout.
 *   memory    16 threads, `rounds` rounds each of paths_barrier (in memory: one process) and a sum
 *             of thread+1 through a two-level tree (4 sums of 4, then one of 4): no thread leaves
 *             a barrier before every thread has come to it, every total exact, every report
 *             back, the release hook sees each link exactly once.
 *   spanning  the same with the barrier through the sum element paths.barrier, as a run that
 *             spans processes does.
 *   turns     `memory` with every barrier waited in turns of 20 us, tried again on each timeout:
 *             the timed-out threads take their arrivals back while the last one opens the
 *             barrier, and still no thread leaves early, misses an opening, or is counted twice.
 *   failing   thread 3 fails at once; the others time out in the barrier waiting for it. The run
 *             names thread 3 as the first to fail (ps_kernel_run_wait returns as soon as it has),
 *             with its own line; the others say their barrier timed out; nothing leaks.
 */
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kernel_run.h"
#include "pastset.h"

enum { THREADS = 16, GROUP = 4, MAX_REPORTS = 20 };
#define WAIT (20LL * 1000 * 1000 * 1000)

#include "stress_report.h"

/* What the hooks hand out: a link on the leaf sum of the thread's group of S, or on the flat sum
 * of paths.barrier, and how many links went out and came back. */
typedef struct world {
    ps_space *space;
    ps_stage *stages[8]; /* every stage made, to release at the end */
    int stage_count;
    ps_stage *leaves[THREADS / GROUP];
    ps_stage *barrier;
    atomic_int acquired, released;
} world;

static ps_stage *make(world *w, const char *kind, const char *name, int64_t fan_in, ps_stage *below) {
    ps_param_value values[2] = {{"name", PS_PARAM_STR, 0, 0.0, name}, {"format", PS_PARAM_STR, 0, 0.0, "q"}};
    ps_param_value sum = {"num_threads", PS_PARAM_INT, fan_in, 0.0, NULL};
    ps_params params = below ? (ps_params){&sum, 1} : (ps_params){values, 2};
    ps_build_context context = {w->space};
    ps_stage *stage = NULL;
    char error[256] = "";
    if (ps_stage_create(ps_stage_kind_find(kind), &params, &context, below, &stage, error, sizeof error) != PS_OK) {
        fprintf(stderr, "FAIL: create %s: %s\n", kind, error);
        exit(1);
    }
    return w->stages[w->stage_count++] = stage;
}

static void world_build(world *w) {
    memset(w, 0, sizeof *w);
    w->space = ps_space_new();
    ps_stage *top = make(w, "reduce-sum", NULL, THREADS / GROUP, make(w, "core", "S", 0, NULL));
    for (int g = 0; g < THREADS / GROUP; g++) w->leaves[g] = make(w, "reduce-sum", NULL, GROUP, top);
    w->barrier = make(w, "reduce-sum", NULL, THREADS, make(w, "core", PS_BARRIER_ELEMENT, 0, NULL));
}

static void world_free(world *w) {
    CHECK(atomic_load(&w->released) == atomic_load(&w->acquired), "%d links acquired, %d released",
          atomic_load(&w->acquired), atomic_load(&w->released));
    while (w->stage_count > 0) ps_stage_release(w->stages[--w->stage_count]);
    ps_space_free(w->space);
}

static ps_link *acquire(void *data, int thread, const char *element, const char *format, int *status, char *error,
                        size_t error_size) {
    world *w = data;
    ps_stage *stage = strcmp(element, "S") == 0 ? w->leaves[thread / GROUP]
                      : strcmp(element, PS_BARRIER_ELEMENT) == 0 ? w->barrier : NULL;
    ps_link *link = stage && strcmp(format, "q") == 0 ? calloc(1, sizeof *link) : NULL;
    if (!link || (*status = ps_stage_attach(stage, link)) != PS_OK) {
        free(link);
        *status = PS_EINVAL;
        snprintf(error, error_size, "no element (%s, %s) here", element, format);
        return NULL;
    }
    atomic_fetch_add(&w->acquired, 1);
    return link;
}

static void release(void *data, int thread, ps_link *link) {
    (void)thread;
    ps_link_detach(link);
    free(link);
    atomic_fetch_add(&((world *)data)->released, 1);
}

/* Arrivals at the barriers of a scene: after barrier r every thread has counted itself r + 1 times. */
static atomic_llong arrivals;

/* How long one wait in a barrier lasts before it is tried again (0: one wait of WAIT). */
static int64_t turn_ns;

static int64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static int barrier(paths_kernel_ctx *c) {
    if (!turn_ns) return paths_barrier(c, WAIT);
    int64_t deadline = now_ns() + WAIT;
    int rc;
    while ((rc = paths_barrier(c, turn_ns)) == PATHS_ETIMEDOUT && now_ns() < deadline) {}
    return rc;
}

/* rounds x (barrier, then move thread+1 into S and observe the total), checked; reports. */
static int summing(paths_kernel_ctx *c) {
    int64_t rounds = 0, total = 0, threads = paths_threads(c);
    int rc = paths_arg_int(c, "rounds", &rounds);
    paths_handle *sum = rc == PATHS_OK ? paths_acquire(c, "S", "q") : NULL;
    if (!sum) return PATHS_EFAILED;
    for (int64_t r = 0; r < rounds && rc == PATHS_OK; r++) {
        int64_t mine = paths_thread(c) + 1 + r * threads;
        atomic_fetch_add(&arrivals, 1);
        rc = barrier(c);
        if (rc == PATHS_OK && atomic_load(&arrivals) < (r + 1) * threads)
            rc = paths_fail(c, PATHS_EFAILED, "left barrier %lld after %lld arrivals", (long long)r,
                            (long long)atomic_load(&arrivals));
        if (rc == PATHS_OK) rc = paths_move(sum, &mine, WAIT);
        if (rc == PATHS_OK) rc = paths_observe(sum, &total, WAIT);
        if (rc == PATHS_OK && total != threads * (threads + 1) / 2 + r * threads * threads)
            rc = paths_fail(c, PATHS_EFAILED, "round %lld: total %lld", (long long)r, (long long)total);
    }
    paths_release(c, sum);
    paths_report(c, "thread", paths_thread(c));
    paths_report(c, "last_total", (double)total);
    return rc;
}

/* Thread 3 fails; the others, once it is about to, wait for it in a barrier, briefly. */
static atomic_int giving_up;

static int failing(paths_kernel_ctx *c) {
    if (paths_thread(c) == 3) {
        atomic_store(&giving_up, 1);
        return paths_fail(c, PATHS_EFAILED, "thread 3 gives up");
    }
    while (!atomic_load(&giving_up)) sched_yield();
    return paths_barrier(c, 200 * 1000 * 1000);
}

static ps_kernel_run *new_run(world *w, int spans_processes, int64_t rounds) {
    int ids[THREADS];
    for (int t = 0; t < THREADS; t++) ids[t] = t;
    ps_kernel_hooks hooks = {acquire, release, w};
    ps_kernel_run *run = ps_kernel_run_new(THREADS, ids, THREADS, "here", spans_processes, &hooks);
    char text[32];
    snprintf(text, sizeof text, "%lld", (long long)rounds);
    if (!run || ps_kernel_run_arg(run, "rounds", text) != PS_OK) {
        fprintf(stderr, "FAIL: a new run\n");
        exit(1);
    }
    return run;
}

static void summing_scene(const char *scene, int spans_processes, int64_t rounds) {
    world w;
    world_build(&w);
    atomic_store(&arrivals, 0);
    ps_kernel_run *run = new_run(&w, spans_processes, rounds);
    CHECK(ps_kernel_run_execute(run, summing, NULL, 0) == PS_OK, "%s: not every thread started", scene);
    int64_t expected = THREADS * (THREADS + 1) / 2 + (rounds - 1) * THREADS * THREADS;
    for (int t = 0; t < THREADS; t++) {
        CHECK(ps_kernel_run_status(run, t) == PS_OK, "%s: thread %d: %s %s", scene, t,
              paths_strerror(ps_kernel_run_status(run, t)), ps_kernel_run_error(run, t));
        CHECK(ps_kernel_run_report_count(run, t) == 2, "%s: thread %d reported %d columns", scene, t,
              ps_kernel_run_report_count(run, t));
        double value = -1;
        const char *name = ps_kernel_run_report(run, t, 0, &value);
        CHECK(strcmp(name, "thread") == 0 && value == t, "%s: thread %d reported %s=%g", scene, t, name, value);
        name = ps_kernel_run_report(run, t, 1, &value);
        CHECK(strcmp(name, "last_total") == 0 && value == (double)expected, "%s: thread %d: %s=%g, not %lld", scene,
              t, name, value, (long long)expected);
    }
    CHECK(ps_kernel_run_first_failed(run) == -1, "%s: a thread failed", scene);
    ps_kernel_run_free(run);
    world_free(&w);
}

static void failing_scene(void) {
    world w;
    world_build(&w);
    ps_kernel_run *run = new_run(&w, 0, 1);
    CHECK(ps_kernel_run_start(run, failing, NULL, 1) == PS_OK, "failing: not every thread started");
    CHECK(ps_kernel_run_wait(run, WAIT, 1) == PATHS_EFAILED, "failing: the wait did not end at the failure");
    CHECK(ps_kernel_run_first_failed(run) == 3 && ps_kernel_run_ended(run, 3), "failing: first failed %d",
          ps_kernel_run_first_failed(run));
    ps_kernel_run_join(run);
    CHECK(strcmp(ps_kernel_run_error(run, 3), "thread 3 gives up") == 0, "failing: thread 3 said '%s'",
          ps_kernel_run_error(run, 3));
    for (int t = 0; t < THREADS; t++) {
        int status = ps_kernel_run_status(run, t);
        CHECK(t == 3 ? status == PATHS_EFAILED : status == PATHS_ETIMEDOUT, "failing: thread %d: %s", t,
              paths_strerror(status));
        CHECK(t == 3 || strcmp(ps_kernel_run_error(run, t), "paths_barrier: timed out") == 0,
              "failing: thread %d said '%s'", t, ps_kernel_run_error(run, t));
    }
    ps_kernel_run_free(run);
    world_free(&w);
}

int main(int argc, char **argv) {
    int64_t rounds = argc > 1 ? atoll(argv[1]) : 2000;
    summing_scene("memory", 0, rounds);
    summing_scene("spanning", 1, rounds / 4 + 1);
    turn_ns = 20 * 1000;
    summing_scene("turns", 0, rounds);
    turn_ns = 0;
    failing_scene();
    int failed = atomic_load(&failures);
    printf("stress_kernel_run: %lld rounds x %d threads, %d failures\n", (long long)rounds, THREADS, failed);
    return failed ? 1 : 0;
}
