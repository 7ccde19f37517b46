/* kernel_threads.h — starting one pthread per link behind a start gate, shared by the kernels. */
#ifndef PATHS_KERNEL_THREADS_H
#define PATHS_KERNEL_THREADS_H

#include <pthread.h>
#include <stdatomic.h>

#include "kernels.h"
#include "waitpoint.h"

typedef struct start_gate {
    ps_waitpoint opened;
    _Atomic int state; /* 0: closed, 1: run, -1: abandoned (not every thread could start) */
} start_gate;

typedef struct kernel_thread {
    int index;
    ps_link *link;
    start_gate *gate;
    void *job;          /* the kernel's own shared arguments */
    int status;         /* the first failure, PS_OK if none */
    int64_t bad_totals;
} kernel_thread;

/* Waits until the gate opens; returns 0 to run, -1 if the run was abandoned. */
int ps_kernel_thread_start(kernel_thread *me);

/* Runs body(thread) on `threads` pthreads, all released together; fills report. With `pin`,
 * each thread is bound to one CPU of those this process may use (see ps_kernel_gsum). */
void ps_run_kernel_threads(ps_link **links, int threads, int pin, void *job, void *(*body)(void *),
                           ps_kernel_report *report);

#endif
