/* kernel_threads.c — one pthread per link, a start gate, and the report of the run. */
#include "kernel_threads.h"

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

void ps_run_kernel_threads(ps_link **links, int threads, void *job, void *(*body)(void *),
                           ps_kernel_report *report) {
    *report = (ps_kernel_report){PS_OK, -1, 0, 0.0};
    kernel_thread *state = calloc((size_t)threads, sizeof *state);
    pthread_t *ids = calloc((size_t)threads, sizeof *ids);
    start_gate gate;
    ps_waitpoint_init(&gate.opened);
    atomic_init(&gate.state, 0);
    int started = 0;
    while (state && ids && started < threads) {
        state[started] = (kernel_thread){started, links[started], &gate, job, PS_OK, 0};
        if (pthread_create(&ids[started], NULL, body, &state[started]) != 0) break;
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
