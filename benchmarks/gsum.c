/* gsum.c — the Global Sum latency kernel (the paper's GSum): move(i); observe() per round. */
#include "kernel_threads.h"
#include "pastset.h"

typedef struct gsum_job {
    int64_t rounds, contributors, timeout_ns;
    double *latencies_us;
} gsum_job;

static void *gsum_thread(void *arg) {
    kernel_thread *me = arg;
    gsum_job *job = me->job;
    if (ps_kernel_thread_start(me) != 0) return NULL;
    for (int64_t i = 0; i < job->rounds; i++) {
        int64_t value = i, total = 0;
        int64_t begin = me->index == 0 ? ps_now_ns() : 0;
        int rc = ps_link_move(me->link, &value, job->timeout_ns);
        if (rc == PS_OK) rc = ps_link_observe(me->link, &total, job->timeout_ns);
        if (rc != PS_OK) {
            me->status = rc;
            break;
        }
        if (me->index == 0) job->latencies_us[i] = (double)(ps_now_ns() - begin) / 1e3;
        if (total != i * job->contributors) me->bad_totals++;
    }
    return NULL;
}

void ps_kernel_gsum(ps_link **links, int threads, int pin, int64_t rounds, int64_t contributors,
                    int64_t timeout_ns, double *latencies_us, ps_kernel_report *report) {
    gsum_job job = {rounds, contributors, timeout_ns, latencies_us};
    ps_run_kernel_threads(links, threads, pin, &job, gsum_thread, report);
}
