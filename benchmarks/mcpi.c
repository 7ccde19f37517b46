/* mcpi.c — the Monte Carlo Pi kernel (the paper's MCPi): darts per thread, one global sum. */
#include <stdatomic.h>

#include "kernel_threads.h"
#include "pastset.h"

typedef struct mcpi_job {
    int64_t darts, timeout_ns;
    uint64_t seed;
    int threads;
    _Atomic int64_t total;
} mcpi_job;

/* splitmix64: a small, fast generator with good statistics, one state word per thread. */
static inline uint64_t next_random(uint64_t *state) {
    uint64_t z = (*state += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

static inline double unit_interval(uint64_t bits) { return (double)(bits >> 11) * 0x1.0p-53; }

static void *mcpi_thread(void *arg) {
    kernel_thread *me = arg;
    mcpi_job *job = me->job;
    int64_t mine = job->darts / job->threads + (me->index < job->darts % job->threads ? 1 : 0);
    uint64_t state = job->seed ^ ((uint64_t)(me->index + 1) * 0xD1B54A32D192ED03ULL);
    if (ps_kernel_thread_start(me) != 0) return NULL;
    int64_t hits = 0;
    for (int64_t d = 0; d < mine; d++) {
        double x = unit_interval(next_random(&state)), y = unit_interval(next_random(&state));
        hits += x * x + y * y <= 1.0;
    }
    int64_t total = 0;
    int rc = ps_link_move(me->link, &hits, job->timeout_ns);
    if (rc == PS_OK) rc = ps_link_observe(me->link, &total, job->timeout_ns);
    me->status = rc;
    if (rc == PS_OK && me->index == 0) atomic_store(&job->total, total);
    return NULL;
}

void ps_kernel_mcpi(ps_link **links, int threads, int pin, int64_t darts, uint64_t seed, int64_t timeout_ns,
                    int64_t *hits, ps_kernel_report *report) {
    mcpi_job job = {darts, timeout_ns, seed, threads, 0};
    ps_run_kernel_threads(links, threads, pin, &job, mcpi_thread, report);
    *hits = atomic_load(&job.total);
}
