/* kernel_context.h — what a kernel run and each of its threads' contexts hold, shared by
 * kernel_run.c (threads, gate, results) and kernel_context.c (the context half of paths.h).
 * C only; everyone else sees kernel_run.h. Which thread owns each field is said beside it.
 */
#ifndef WRAPPERS_KERNEL_CONTEXT_H
#define WRAPPERS_KERNEL_CONTEXT_H

#include <pthread.h>
#include <stdatomic.h>

#include "kernel_run.h"
#include "waitpoint.h"

enum {
    PS_REPORT_NAME_MAX = 63,  /* longest column name */
    PS_REPORTS_MAX = 32,      /* columns one thread may report */
    PS_CONTEXT_ERROR = PS_ERROR_LINE, /* bytes of one thread's last error line */
};

typedef struct ps_report {
    char name[PS_REPORT_NAME_MAX + 1];
    double value;
} ps_report;

/* One kernel thread's context: written by that thread only while the kernel runs, read by the
 * runner after joining it. Each on cache lines of its own. */
struct paths_kernel_ctx {
    _Alignas(64) ps_kernel_run *run;
    int thread;                 /* global index in the run */
    int local;                  /* index among this process's threads */
    int status;                 /* what the kernel returned (settled: see kernel_run.c) */
    _Atomic int ended;          /* set by the thread last: its status and error are final */
    int misuse;                 /* PS_EINVAL after a wrong call (an overlong report name, ...) */
    char misuse_error[PS_CONTEXT_ERROR]; /* why the first one was refused (later calls reset `error`) */
    int failed;                 /* the thread said why it fails (paths_fail): `failure` says it */
    ps_link **held;             /* links acquired and not released */
    int held_count, held_capacity;
    ps_link *barrier;           /* the link to PS_BARRIER_ELEMENT, once a barrier needed it */
    int barrier_moved;          /* a barrier's move went, its observe has not answered yet */
    int report_count;
    ps_report reports[PS_REPORTS_MAX];
    char error[PS_CONTEXT_ERROR];
    char failure[PS_CONTEXT_ERROR]; /* what paths_fail said last (later calls reset `error`) */
};

typedef struct ps_kernel_arg {
    char *key, *value;
} ps_kernel_arg;

/* The in-memory barrier of the threads of one process: a thread arriving last bumps the
 * generation, which the others wait for. Generation and arrivals are one word, so an arrival,
 * the opening and a timed-out thread's takeback each change both at once. */
typedef struct ps_local_barrier {
    _Alignas(64) _Atomic uint64_t state;   /* generation << 32 | threads arrived */
    ps_waitpoint changed;
} ps_local_barrier;

/* Set up before the threads start and read-only while they run, except the barrier and the
 * gate (atomics). */
struct ps_kernel_run {
    int threads;                /* in the whole run */
    int local;                  /* run here: contexts[0 .. local-1] */
    int spans_processes;
    char *node;
    ps_kernel_hooks hooks;
    ps_kernel_arg *args;
    int arg_count;
    paths_kernel_ctx *contexts;
    paths_kernel_fn kernel;
    void *data;
    pthread_t *ids;             /* the threads started, owned by the thread that started them */
    int started;
    int64_t begin_ns;
    double seconds;             /* from the gate's opening to the last thread's end, once joined */
    ps_local_barrier barrier;
    ps_waitpoint gate;
    _Atomic int gate_state;     /* 0: closed, 1: run, -1: abandoned (not every thread started) */
    _Alignas(64) _Atomic int ended;   /* threads that have ended */
    _Atomic int failed;         /* threads that ended with a status other than PATHS_OK */
    _Atomic int first_failed;   /* the local index of the first of them, -1 before */
    ps_waitpoint ending;        /* bumped by every thread that ends */
};

/* Sends down what the handles the context still holds hold back (a batch's buffer), as its
 * kernel returns: a failure fails a thread that returned PATHS_OK. */
void ps_context_flush_held(paths_kernel_ctx *c);
/* Gives back every handle the context still holds, through the release hook. */
void ps_context_release_all(paths_kernel_ctx *c);
/* The calling thread runs the kernel of `c` from now on (NULL: no more): a call it makes with a
 * NULL context, which is a program's own, fails its thread. */
void ps_context_runs_kernel(paths_kernel_ctx *c);

#endif
