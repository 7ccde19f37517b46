/* kernel_run.c — a kernel run in this process: a context per local thread, one pthread each
 * behind a start gate, CPU binding, and what each thread left when it ended. */
#include <pthread.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>

#include "kernel_context.h"

static _Atomic int live_runs; /* runs made and not freed yet */

int ps_kernel_runs_here(void) { return atomic_load(&live_runs); }

ps_kernel_run *ps_kernel_run_new(int local, const int *thread_ids, int threads, const char *node,
                                 int spans_processes, const ps_kernel_hooks *hooks) {
    if (local < 1 || threads < local || !thread_ids || !node || !hooks || !hooks->acquire || !hooks->release)
        return NULL;
    ps_kernel_run *run = calloc(1, sizeof *run);
    if (!run) return NULL;
    atomic_fetch_add(&live_runs, 1);
    run->threads = threads;
    run->local = local;
    run->spans_processes = spans_processes;
    run->hooks = *hooks;
    run->node = strdup(node);
    run->contexts = aligned_alloc(64, (size_t)local * sizeof *run->contexts);
    if (!run->node || !run->contexts) {
        ps_kernel_run_free(run);
        return NULL;
    }
    for (int i = 0; i < local; i++) {
        memset(&run->contexts[i], 0, sizeof run->contexts[i]);
        run->contexts[i].run = run;
        run->contexts[i].thread = thread_ids[i];
        run->contexts[i].local = i;
    }
    ps_waitpoint_init(&run->barrier.changed);
    ps_waitpoint_init(&run->gate);
    ps_waitpoint_init(&run->ending);
    atomic_init(&run->first_failed, -1);
    return run;
}

int ps_kernel_run_arg(ps_kernel_run *run, const char *key, const char *value) {
    if (!key || !*key || !value) return PS_EINVAL;
    ps_kernel_arg *grown = realloc(run->args, (size_t)(run->arg_count + 1) * sizeof *grown);
    if (!grown) return PS_ENOMEM;
    run->args = grown;
    ps_kernel_arg *arg = &run->args[run->arg_count];
    arg->key = strdup(key);
    arg->value = strdup(value);
    if (!arg->key || !arg->value) {
        free(arg->key);
        free(arg->value);
        return PS_ENOMEM;
    }
    run->arg_count++;
    return PS_OK;
}

void *ps_kernel_ctx_data(const paths_kernel_ctx *c) { return c->run->data; }

/* Waits until the gate opens: 0 to run, -1 when the run was abandoned. */
static int pass_gate(ps_kernel_run *run) {
    uint32_t spins = 0;
    for (;;) {
        uint32_t seen = ps_waitpoint_sequence(&run->gate);
        int state = atomic_load(&run->gate_state);
        if (state != 0) return state > 0 ? 0 : -1;
        ps_waitpoint_wait(&run->gate, seen, PS_FOREVER, &spins);
    }
}

/* As a thread ends: a misuse of the API fails a kernel that returned PATHS_OK, saying which call,
 * and a failure with nothing said is explained by what a stage on one of its handles said. */
static void settle(paths_kernel_ctx *c) {
    if (c->status == PS_OK && c->misuse != PS_OK) {
        c->status = c->misuse;
        paths_fail(c, c->status, "%s (a refused call fails the thread: the kernel returned PATHS_OK)",
                   c->misuse_error);
        return;
    }
    if (c->status == PS_OK || c->failed || c->error[0]) return;
    for (int i = 0; i < c->held_count; i++) {
        char why[PS_STAGE_ERROR_MAX];
        ps_stage_error(c->held[i]->stage, why, sizeof why);
        if (!*why) continue;
        paths_fail(c, c->status, "%s", why);
        return;
    }
}

static void end_thread(paths_kernel_ctx *c) {
    ps_kernel_run *run = c->run;
    ps_context_runs_kernel(NULL);
    ps_context_flush_held(c);
    settle(c);
    if (c->status != PS_OK) {
        int none = -1;
        atomic_compare_exchange_strong(&run->first_failed, &none, c->local);
        atomic_fetch_add(&run->failed, 1);
    }
    atomic_store(&c->ended, 1);
    atomic_fetch_add(&run->ended, 1);
    ps_waitpoint_wake(&run->ending);
}

/* A kernel that ends its thread with pthread_exit returns no status: it fails, saying so (after
 * what it said itself), and its thread ends as one that returned does (the run waited for it for
 * ever). A kernel's thread is the run's: it cannot be cancelled, in a PATHS call or anywhere. */
static void ended_without_returning(void *arg) {
    paths_kernel_ctx *c = arg;
    static const char what[] = "the kernel ended its thread with pthread_exit instead of returning a status";
    c->status = c->failed ? paths_fail(c, PATHS_EFAILED, "%s (then %s)", c->failure, what)
                          : paths_fail(c, PATHS_EFAILED, "%s", what);
    end_thread(c);
}

static void *kernel_thread(void *arg) {
    paths_kernel_ctx *c = arg;
    pthread_setcancelstate(PTHREAD_CANCEL_DISABLE, NULL);
    if (pass_gate(c->run) != 0) return NULL;
    ps_context_runs_kernel(c);
    pthread_cleanup_push(ended_without_returning, c);
    c->status = c->run->kernel(c);
    pthread_cleanup_pop(0);
    end_thread(c);
    return NULL;
}

/* Local thread t of n goes on allowed CPU t * cpus / n: neighbouring threads share a CPU, as the
 * contributors of one sum in a tree do, and every CPU gets its even share. A binding the system
 * refuses leaves the thread unbound. */
static void bind_to_cpu(pthread_attr_t *attr, const cpu_set_t *allowed, int thread, int threads) {
    int cpus = CPU_COUNT(allowed), wanted = (int)((int64_t)thread * cpus / threads), seen = 0;
    for (int cpu = 0; cpu < CPU_SETSIZE; cpu++) {
        if (!CPU_ISSET(cpu, allowed) || seen++ != wanted) continue;
        cpu_set_t one;
        CPU_ZERO(&one);
        CPU_SET(cpu, &one);
        pthread_attr_setaffinity_np(attr, sizeof one, &one);
        return;
    }
}

int ps_kernel_run_start(ps_kernel_run *run, paths_kernel_fn kernel, void *data, int pin) {
    run->kernel = kernel;
    run->data = data;
    run->ids = calloc((size_t)run->local, sizeof *run->ids);
    cpu_set_t allowed;
    if (pin && sched_getaffinity(0, sizeof allowed, &allowed) != 0) pin = 0;
    while (run->ids && run->started < run->local) {
        pthread_attr_t attr;
        pthread_attr_init(&attr);
        if (pin) bind_to_cpu(&attr, &allowed, run->started, run->local);
        int rc = pthread_create(&run->ids[run->started], &attr, kernel_thread, &run->contexts[run->started]);
        pthread_attr_destroy(&attr);
        if (rc != 0) break;
        run->started++;
    }
    int complete = run->started == run->local;
    run->begin_ns = ps_now_ns();
    atomic_store(&run->gate_state, complete ? 1 : -1);
    ps_waitpoint_wake(&run->gate);
    return complete ? PS_OK : PS_ENOMEM;
}

int ps_kernel_run_wait(ps_kernel_run *run, int64_t timeout_ns, int until_failure) {
    int64_t deadline = ps_deadline(timeout_ns);
    uint32_t spins = 0;
    for (;;) {
        uint32_t seen = ps_waitpoint_sequence(&run->ending);
        if (atomic_load(&run->gate_state) < 0 || atomic_load(&run->ended) == run->local) return PS_OK;
        if (until_failure && atomic_load(&run->failed) > 0) return PATHS_EFAILED;
        if (ps_waitpoint_wait(&run->ending, seen, deadline, &spins) == PS_ETIMEDOUT) return PS_ETIMEDOUT;
    }
}

void ps_kernel_run_join(ps_kernel_run *run) {
    for (int t = 0; t < run->started; t++) pthread_join(run->ids[t], NULL);
    run->seconds = (double)(ps_now_ns() - run->begin_ns) / 1e9;
    free(run->ids);
    run->ids = NULL;
    run->started = 0;
}

int ps_kernel_run_execute(ps_kernel_run *run, paths_kernel_fn kernel, void *data, int pin) {
    int rc = ps_kernel_run_start(run, kernel, data, pin);
    ps_kernel_run_join(run);
    return rc;
}

int ps_kernel_run_ended(const ps_kernel_run *run, int local) { return atomic_load(&run->contexts[local].ended); }
int ps_kernel_run_first_failed(const ps_kernel_run *run) { return atomic_load(&run->first_failed); }
double ps_kernel_run_seconds(const ps_kernel_run *run) { return run->seconds; }
int ps_kernel_run_status(const ps_kernel_run *run, int local) { return run->contexts[local].status; }
const char *ps_kernel_run_error(const ps_kernel_run *run, int local) {
    const paths_kernel_ctx *c = &run->contexts[local];
    return c->failed ? c->failure : c->error;
}
int ps_kernel_run_report_count(const ps_kernel_run *run, int local) { return run->contexts[local].report_count; }

const char *ps_kernel_run_report(const ps_kernel_run *run, int local, int index, double *value) {
    const ps_report *report = &run->contexts[local].reports[index];
    *value = report->value;
    return report->name;
}

void ps_kernel_run_free(ps_kernel_run *run) {
    if (!run) return;
    if (run->ids) ps_kernel_run_join(run);
    for (int t = 0; run->contexts && t < run->local; t++) ps_context_release_all(&run->contexts[t]);
    for (int i = 0; i < run->arg_count; i++) {
        free(run->args[i].key);
        free(run->args[i].value);
    }
    free(run->args);
    free(run->contexts);
    free(run->node);
    free(run);
    atomic_fetch_sub(&live_runs, 1);
}
