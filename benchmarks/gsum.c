/* gsum.c — the Global Sum latency kernel (the paper's GSum), on paths.h alone.
 *
 * Every thread acquires the sum element GSUM and runs `move(i); observe()` for i < rounds,
 * checking each total against i * contributors. Thread 0 times every round and reports the
 * median in microseconds as `us_per_global_sum`; with latencies=NAME it also moves each round's
 * latency (format "d", in round order) into element NAME. A wrong total fails the thread after
 * its last round, naming the first wrong one.
 *
 * Arguments (--arg): rounds (1000), contributors (the run's threads: more when other processes
 * feed the same sum), latencies, timeout (seconds, 60).
 */
#include <paths.h>
#include <stdlib.h>

static int compare_doubles(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Thread 0's latencies: into the element named by --arg latencies (if given), then the median. */
static int report_latencies(paths_kernel_ctx *c, double *latencies, int64_t rounds, int64_t timeout_ns) {
    const char *element = paths_arg(c, "latencies");
    if (element) {
        paths_handle *out = paths_acquire(c, element, "d");
        if (!out) return PATHS_EFAILED;
        for (int64_t i = 0; i < rounds; i++) {
            int rc = paths_move(out, &latencies[i], timeout_ns);
            if (rc != PATHS_OK)
                return paths_fail(c, rc, "moving latencies into '%s': %s", element, paths_strerror(rc));
        }
    }
    qsort(latencies, (size_t)rounds, sizeof *latencies, compare_doubles);
    paths_report(c, "us_per_global_sum", latencies[rounds / 2]);
    return PATHS_OK;
}

PATHS_SUMS(gsum, "GSUM");

int gsum(paths_kernel_ctx *c) {
    int64_t rounds = 1000, contributors = paths_threads(c);
    double timeout_s = 60.0;
    int rc = paths_arg_int(c, "rounds", &rounds);
    if (rc == PATHS_OK) rc = paths_arg_int(c, "contributors", &contributors);
    if (rc == PATHS_OK) rc = paths_arg_double(c, "timeout", &timeout_s);
    if (rc != PATHS_OK) return rc;
    if (rounds <= 0) return paths_fail(c, PATHS_EINVAL, "gsum: expected rounds > 0, got %lld", (long long)rounds);
    int64_t timeout_ns = timeout_s < 0 ? PATHS_FOREVER : (int64_t)(timeout_s * 1e9);
    int timer = paths_thread(c) == 0;
    double *latencies = timer ? malloc((size_t)rounds * sizeof *latencies) : NULL;
    if (timer && !latencies)
        return paths_fail(c, PATHS_ENOMEM, "gsum: no memory for %lld latencies", (long long)rounds);
    paths_handle *sum = paths_acquire(c, "GSUM", "q");
    rc = sum ? paths_barrier(c, timeout_ns) : PATHS_EFAILED;
    int64_t wrong = 0, first_wrong = -1, first_total = 0;
    for (int64_t i = 0; i < rounds && rc == PATHS_OK; i++) {
        int64_t value = i, total = 0;
        int64_t begin = timer ? paths_now_ns() : 0;
        rc = paths_move(sum, &value, timeout_ns);
        if (rc == PATHS_OK) rc = paths_observe(sum, &total, timeout_ns);
        if (timer) latencies[i] = (double)(paths_now_ns() - begin) / 1e3;
        if (rc == PATHS_OK && total != i * contributors && wrong++ == 0) {
            first_wrong = i;
            first_total = total;
        }
    }
    if (rc == PATHS_OK && wrong)
        rc = paths_fail(c, PATHS_EFAILED, "gsum: %lld rounds had a wrong total; the first, round %lld, gave %lld, "
                        "expected %lld", (long long)wrong, (long long)first_wrong, (long long)first_total,
                        (long long)(first_wrong * contributors));
    if (rc == PATHS_OK && timer) rc = report_latencies(c, latencies, rounds, timeout_ns);
    free(latencies);
    return rc;
}
