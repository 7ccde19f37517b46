/* kernel_threads.c — one pthread per link, a start gate, CPU binding, and the report of the run. */
#include "kernel_threads.h"

#include <sched.h>
#include <stdlib.h>

#include "pastset.h"

int ps_kernel_thread_start(kernel_thread *me) {
    uint32_t spins = 0;
    for (;;) {
        uint32_t seen = ps_waitpoint_sequence(&me->gate->opened);
        int state = atomic_load(&me->gate->state);
        if (state != 0) return state > 0 ? 0 : -1;
        ps_waitpoint_wait(&me->gate->opened, seen, PS_FOREVER, &spins);
    }
}

static void open_gate(start_gate *gate, int state) {
    atomic_store(&gate->state, state);
    ps_waitpoint_wake(&gate->opened);
}

/* Thread t of n goes on allowed CPU t * cpus / n: neighbouring threads share a CPU, as the
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

void ps_run_kernel_threads(ps_link **links, int threads, int pin, void *job, void *(*body)(void *),
                           ps_kernel_report *report) {
    *report = (ps_kernel_report){PS_OK, -1, 0, 0.0};
    kernel_thread *state = calloc((size_t)threads, sizeof *state);
    pthread_t *ids = calloc((size_t)threads, sizeof *ids);
    start_gate gate;
    ps_waitpoint_init(&gate.opened);
    atomic_init(&gate.state, 0);
    cpu_set_t allowed;
    if (pin && sched_getaffinity(0, sizeof allowed, &allowed) != 0) pin = 0;
    int started = 0;
    while (state && ids && started < threads) {
        state[started] = (kernel_thread){started, links[started], &gate, job, PS_OK, 0};
        pthread_attr_t attr;
        pthread_attr_init(&attr);
        if (pin) bind_to_cpu(&attr, &allowed, started, threads);
        int rc = pthread_create(&ids[started], &attr, body, &state[started]);
        pthread_attr_destroy(&attr);
        if (rc != 0) break;
        started++;
    }
    int complete = started == threads;
    open_gate(&gate, complete ? 1 : -1);
    int64_t begin = ps_now_ns();
    for (int t = 0; t < started; t++) {
        pthread_join(ids[t], NULL);
        report->bad_totals += state[t].bad_totals;
        if (state[t].status != PS_OK && report->status == PS_OK) {
            report->status = state[t].status;
            report->failed_thread = t;
        }
    }
    report->seconds = (double)(ps_now_ns() - begin) / 1e9;
    if (!complete) report->status = PS_ENOMEM;
    free(state);
    free(ids);
}
