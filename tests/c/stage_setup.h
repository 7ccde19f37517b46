/* stage_setup.h — what the stage-level C stress tests share: a watchdog that turns a hang into a
 * failure naming the scene that hung, threads that must start, stages made by kind name with
 * typed parameters (ps_stage_create), attached to or the end of the test, and operations through
 * a link as one-line calls (each one operation value through ps_link_call). Include after
 * stress_report.h. */
#ifndef STAGE_SETUP_H
#define STAGE_SETUP_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "pastset.h"
#include "stage.h"

/* ---- the watchdog ---------------------------------------------------------------------------- */

static _Atomic(const char *) scene_running = "start-up";
static _Atomic int64_t run_deadline;
static atomic_bool run_finished;

static void *watchdog(void *arg) {
    (void)arg;
    while (!atomic_load(&run_finished)) {
        struct timespec tick = {0, 20000000};
        nanosleep(&tick, NULL);
        if (ps_now_ns() > atomic_load(&run_deadline) && !atomic_load(&run_finished)) {
            fprintf(stderr, "FAIL: scene '%s' still running after the deadline: a hang\n", atomic_load(&scene_running));
            fflush(stderr);
            _exit(1);
        }
    }
    return NULL;
}

static void start_thread(pthread_t *thread, void *(*body)(void *), void *arg) {
    if (pthread_create(thread, NULL, body, arg) != 0) {
        fprintf(stderr, "FAIL: pthread_create\n");
        exit(1);
    }
}

/* A run of a stress test: its size (argv[1], else `fallback`; exits 2 below 8), and a watchdog
 * that ends it once `budget_ns` has passed. */
typedef struct stress_run {
    const char *name;
    int64_t rounds, started;
    pthread_t watchdog;
} stress_run;

static stress_run stress_begin(const char *name, int argc, char **argv, int64_t fallback, int64_t budget_ns) {
    stress_run run = {name, argc > 1 ? strtoll(argv[1], NULL, 10) : fallback, ps_now_ns(), 0};
    if (run.rounds < 8) {
        fprintf(stderr, "usage: %s [rounds >= 8]\n", argv[0]);
        exit(2);
    }
    atomic_store(&run_deadline, run.started + budget_ns);
    start_thread(&run.watchdog, watchdog, NULL);
    return run;
}

/* Stops the watchdog and says how the run went; returns the exit code. */
static int stress_end(stress_run *run) {
    atomic_store(&run_finished, true);
    pthread_join(run->watchdog, NULL);
    int failed = atomic_load(&failures);
    printf("%s: %s; %.2f s\n", run->name, failed ? "FAILED" : "all scenes passed",
           (double)(ps_now_ns() - run->started) / 1e9);
    if (failed) fprintf(stderr, "%s: %d failure(s)\n", run->name, failed);
    return failed ? 1 : 0;
}

/* ---- stages by kind name --------------------------------------------------------------------- */

static inline ps_param_value int_param(const char *name, int64_t value) {
    return (ps_param_value){name, PS_PARAM_INT, value, 0.0, NULL};
}
static inline ps_param_value float_param(const char *name, double value) {
    return (ps_param_value){name, PS_PARAM_FLOAT, 0, value, NULL};
}
static inline ps_param_value str_param(const char *name, const char *value) {
    return (ps_param_value){name, PS_PARAM_STR, 0, 0.0, value};
}

static ps_stage *create_stage(ps_space *space, const char *kind_name, const ps_param_value *values, size_t count,
                              ps_stage *below) {
    const ps_stage_kind *kind = ps_stage_kind_find(kind_name);
    if (!kind) {
        fprintf(stderr, "FAIL: no stage kind '%s'\n", kind_name);
        exit(1);
    }
    ps_params params = {values, count};
    ps_build_context context = {space};
    ps_stage *stage = NULL;
    char error[256] = "";
    int rc = ps_stage_create(kind, &params, &context, below, &stage, error, sizeof error);
    if (rc != PS_OK || !stage) {
        fprintf(stderr, "FAIL: create stage '%s': %s (%s)\n", kind_name, ps_status_name(rc), error);
        exit(1);
    }
    return stage;
}

static ps_stage *create_core(ps_space *space, const char *name, const char *format) {
    ps_param_value values[] = {str_param("name", name), str_param("format", format)};
    return create_stage(space, "core", values, 2, NULL);
}

static ps_stage *create_sum(ps_space *space, int fan_in, ps_stage *below) {
    ps_param_value values[] = {int_param("num_threads", fan_in)};
    return create_stage(space, "reduce-sum", values, 1, below);
}

/* What the stage or one below it said of its last failure: the calling thread's copy, until its
 * next call. */
static const char *stage_error(ps_stage *stage) {
    static _Thread_local char line[PS_STAGE_ERROR_MAX];
    ps_stage_error(stage, line, sizeof line);
    return line;
}

static void attach_or_die(ps_stage *stage, ps_link *link) {
    int rc = ps_stage_attach(stage, link);
    if (rc != PS_OK) {
        fprintf(stderr, "FAIL: attach to '%s': %s (%s)\n", ps_stage_kind_name(stage), ps_status_name(rc),
                stage_error(stage));
        exit(1);
    }
}

/* A stage's counter by name, -1 if it has none. */
static int64_t counter_of(ps_stage *stage, const char *name) {
    ps_counter values[32];
    int n = ps_stage_counters(stage, values, 32);
    for (int i = 0; i < n; i++)
        if (strcmp(values[i].name, name) == 0) return values[i].value;
    return -1;
}

/* ---- operations through a link ------------------------------------------------------------- */

static inline int link_move(ps_link *link, const void *tuple, int64_t timeout_ns) {
    ps_op op = {.kind = PS_OP_MOVE, .in = tuple, .timeout_ns = timeout_ns};
    return ps_link_call(link, &op);
}

static inline int link_observe(ps_link *link, void *out, int64_t timeout_ns) {
    ps_op op = {.kind = PS_OP_OBSERVE, .out = out, .timeout_ns = timeout_ns};
    return ps_link_call(link, &op);
}

static inline int link_observe_at(ps_link *link, int64_t index, void *out, int64_t timeout_ns) {
    ps_op op = {.kind = PS_OP_OBSERVE_AT, .argument = index, .out = out, .timeout_ns = timeout_ns};
    return ps_link_call(link, &op);
}

/* first or last: the operation's value into *out. */
static inline int link_value(ps_link *link, ps_op_kind kind, int64_t *out) {
    ps_op op = {.kind = kind};
    int rc = ps_link_call(link, &op);
    *out = op.value;
    return rc;
}

/* A move then an observe; *moved: whether the move took effect (after a timeout, only the observe
 * is left to do). */
static inline int link_exchange(ps_link *link, const void *tuple, void *out, int64_t timeout_ns, int *moved) {
    ps_op op = {.kind = PS_OP_EXCHANGE, .in = tuple, .out = out, .timeout_ns = timeout_ns};
    int rc = ps_link_call(link, &op);
    *moved = op.done != 0;
    return rc;
}

/* n tuples moved in order as one operation; *done: how many took effect. */
static inline int link_move_many(ps_link *link, const void *tuples, uint32_t n, int64_t timeout_ns, uint32_t *done) {
    ps_op op = {.kind = PS_OP_MOVE_MANY, .in = tuples, .count = n, .timeout_ns = timeout_ns};
    int rc = ps_link_call(link, &op);
    *done = op.done;
    return rc;
}

#endif
