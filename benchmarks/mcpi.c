/* mcpi.c — the Monte Carlo Pi kernel (the paper's MCPi), on paths.h alone: the darts are split
 * evenly over the run's threads, each counts its hits inside the quarter circle with its own
 * generator, then one global sum of the hits through the sum element MCPI. Thread 0 reports
 * `seconds` (from the barrier that starts every thread to the total) and `pi`.
 *
 * Arguments (--arg): darts (10000000, over all threads), total_darts (darts: more when other
 * processes feed the same sum), seed (12345), repeat (0: each repeat of a run throws other darts,
 * from seed + 7919 * repeat), timeout (seconds, 60).
 */
#include <paths.h>

/* splitmix64: a small, fast generator with good statistics, one state word per thread. */
static inline uint64_t next_random(uint64_t *state) {
    uint64_t z = (*state += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

static inline double unit_interval(uint64_t bits) { return (double)(bits >> 11) * 0x1.0p-53; }

PATHS_SUMS(mcpi, "MCPI");

int mcpi(paths_kernel_ctx *c) {
    int64_t darts = 10000000, seed = 12345, repeat = 0, total_darts;
    double timeout_s = 60.0;
    int rc = paths_arg_int(c, "darts", &darts);
    total_darts = darts;
    if (rc == PATHS_OK) rc = paths_arg_int(c, "total_darts", &total_darts);
    if (rc == PATHS_OK) rc = paths_arg_int(c, "seed", &seed);
    if (rc == PATHS_OK) rc = paths_arg_int(c, "repeat", &repeat);
    if (rc == PATHS_OK) rc = paths_arg_double(c, "timeout", &timeout_s);
    if (rc != PATHS_OK) return rc;
    if (darts <= 0 || total_darts < darts)
        return paths_fail(c, PATHS_EINVAL, "mcpi: expected 0 < darts <= total_darts, got %lld and %lld",
                          (long long)darts, (long long)total_darts);
    int64_t timeout_ns = timeout_s < 0 ? PATHS_FOREVER : (int64_t)(timeout_s * 1e9);
    int64_t threads = paths_threads(c), thread = paths_thread(c);
    int64_t mine = darts / threads + (thread < darts % threads ? 1 : 0);
    uint64_t state = (uint64_t)(seed + 7919 * repeat) ^ ((uint64_t)(thread + 1) * 0xD1B54A32D192ED03ULL);
    paths_handle *sum = paths_acquire(c, "MCPI", "q");
    if (!sum) return PATHS_EFAILED;
    rc = paths_barrier(c, timeout_ns);
    if (rc != PATHS_OK) return rc;
    int64_t begin = paths_now_ns(), hits = 0, total = 0;
    for (int64_t d = 0; d < mine; d++) {
        double x = unit_interval(next_random(&state)), y = unit_interval(next_random(&state));
        hits += x * x + y * y <= 1.0;
    }
    rc = paths_move(sum, &hits, timeout_ns);
    if (rc == PATHS_OK) rc = paths_observe(sum, &total, timeout_ns);
    if (rc == PATHS_OK && thread == 0) {
        paths_report(c, "seconds", (double)(paths_now_ns() - begin) / 1e9);
        paths_report(c, "pi", 4.0 * (double)total / (double)total_darts);
    }
    return rc;
}
