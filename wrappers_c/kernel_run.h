/* kernel_run.h — running a kernel in this process: one thread per thread of the run that the map
 * places here, each with its context (paths_kernel_ctx), released together by a start gate,
 * optionally bound to CPUs; the barrier, the reports and each thread's status come back.
 *
 * What the run needs from outside comes in `ps_kernel_hooks`: how to get a handle for
 * (element, format) and how to give it back. The module fills them with the Python runtime (the
 * acquire hook and build_path); a C test fills them with stages of its own. Kernels see none of
 * this: they see paths.h. Usable from C and C++ (the run is opaque).
 */
#ifndef WRAPPERS_KERNEL_RUN_H
#define WRAPPERS_KERNEL_RUN_H

#include <stddef.h>
#include <stdint.h>

#include "paths.h"
#include "stage.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef int (*paths_kernel_fn)(paths_kernel_ctx *c);

/* The sum element paths_barrier goes through when the run spans several processes: each thread
 * moves 1 and observes the total, once per barrier. */
#define PS_BARRIER_ELEMENT "paths.barrier"

/* How a run gets and gives back handles. Called from kernel threads, several at once. */
typedef struct ps_kernel_hooks {
    /* A new handle on (element, format) for global thread `thread`: its link, or NULL with a
     * status in *status and one line in error. */
    ps_link *(*acquire)(void *data, int thread, const char *element, const char *format, int *status,
                        char *error, size_t error_size);
    /* The kernel is done with the link (paths_release, or the end of the run). */
    void (*release)(void *data, int thread, ps_link *link);
    void *data;
} ps_kernel_hooks;

typedef struct ps_kernel_run ps_kernel_run;

/* How many runs this process holds now (made and not freed): a process that runs kernels does
 * not start PATHS again (paths_init refuses). */
int ps_kernel_runs_here(void);

/* A run of `threads` threads in all, of which the `local` ones with global indices thread_ids[]
 * run here, on `node`. With spans_processes, other processes run the other threads, and
 * paths_barrier goes through the sum element PS_BARRIER_ELEMENT; otherwise it stays in memory.
 * NULL when out of memory or the arguments make no sense. */
ps_kernel_run *ps_kernel_run_new(int local, const int *thread_ids, int threads, const char *node,
                                 int spans_processes, const ps_kernel_hooks *hooks);
/* Adds --arg key=value (copied). PS_EINVAL for an empty key, PS_ENOMEM. */
int ps_kernel_run_arg(ps_kernel_run *run, const char *key, const char *value);

/* Starts kernel(ctx) once on a thread of its own per local thread, all released together; with
 * `pin`, local thread t of n runs only on allowed CPU t * cpus / n (neighbours share a CPU, as
 * the contributors of one sum do). PS_OK, or PS_ENOMEM when not every thread could start (then
 * none runs the kernel; ps_kernel_run_join still ends them). `data` is what ps_kernel_ctx_data
 * gives the kernel (a kernel written in Python finds its function there). */
int ps_kernel_run_start(ps_kernel_run *run, paths_kernel_fn kernel, void *data, int pin);
void *ps_kernel_ctx_data(const paths_kernel_ctx *c);
/* paths_release and paths_report for a caller that can raise (a Python kernel): a refused call
 * returns PATHS_EINVAL (paths_last_error says why) and, done nothing, leaves the thread's
 * outcome alone. paths_release and paths_report, which return nothing, fail the thread instead. */
int ps_kernel_ctx_release(paths_kernel_ctx *c, paths_handle *h);
int ps_kernel_ctx_report(paths_kernel_ctx *c, const char *name, double value);
/* The columns `paths run` writes itself, before the kernel's (NULL ends them): no kernel reports
 * one of these names. */
extern const char *const ps_run_columns[];
/* Bytes of an error line (a thread's last error): a stage's (PS_STAGE_ERROR_MAX) and its context. */
enum { PS_ERROR_LINE = 2048 };
/* `text` as a context's error line of at most size - 1 bytes (the acquire hook's, a context's):
 * each of `values` (NULL-ended: what paths_acquire was given) in it shortened when longer than any
 * element's name, and its middle cut out should it still not fit: never its end, which says why. */
void ps_error_line(char *line, size_t size, const char *text, const char *const *values);

/* Waits until every thread has ended (PS_OK), or, with until_failure, until one has failed
 * (PATHS_EFAILED: its outcome is final, the others may run on), or the timeout (PS_ETIMEDOUT). */
int ps_kernel_run_wait(ps_kernel_run *run, int64_t timeout_ns, int until_failure);
/* Joins every thread; after that the run may be freed. Blocks until they all end. */
void ps_kernel_run_join(ps_kernel_run *run);
/* ps_kernel_run_start, then ps_kernel_run_join: the whole run. */
int ps_kernel_run_execute(ps_kernel_run *run, paths_kernel_fn kernel, void *data, int pin);

/* What a local thread left once it ended (ps_kernel_run_ended): the status its kernel returned
 * (or its misuse of the API), one line explaining a failure (its last error, else what a stage
 * on one of its handles said), and its reports. And, once joined, the seconds from the start
 * gate until the last thread ended. */
int ps_kernel_run_ended(const ps_kernel_run *run, int local);
/* The local thread that failed first (the others may have failed waiting for it), or -1. */
int ps_kernel_run_first_failed(const ps_kernel_run *run);
double ps_kernel_run_seconds(const ps_kernel_run *run);
int ps_kernel_run_status(const ps_kernel_run *run, int local);
const char *ps_kernel_run_error(const ps_kernel_run *run, int local);
int ps_kernel_run_report_count(const ps_kernel_run *run, int local);
const char *ps_kernel_run_report(const ps_kernel_run *run, int local, int index, double *value);

/* The run's one context serves a program of its own: paths_* calls with a NULL context use it.
 * NULL clears it. The run must outlive its use. */
void ps_kernel_run_serve_process(ps_kernel_run *run);
/* Why the program of its own fails, once it said so with paths_fail(NULL, ...); else NULL. */
const char *ps_kernel_program_failure(void);

/* Gives back (through the release hook) every handle the kernels still hold, and frees the run. */
void ps_kernel_run_free(ps_kernel_run *run);

#ifdef __cplusplus
}
#endif

#endif
