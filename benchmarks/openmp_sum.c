/* openmp_sum.c — the OpenMP anchor for GSum: a global sum by a reduction clause, per round. */
#include <stdlib.h>

#include "kernels.h"
#include "pastset.h"

static int compare_doubles(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

double ps_kernel_openmp_sum_us(int threads, int64_t rounds) {
    double *latencies = malloc((size_t)rounds * sizeof *latencies);
    if (!latencies || rounds <= 0 || threads <= 0) {
        free(latencies);
        return -1.0;
    }
    int64_t running = 0; /* never reset: after the last round it holds threads * (0 + 1 + ... ) */
#pragma omp parallel num_threads(threads) shared(running, latencies)
    {
        for (int64_t i = 0; i < rounds; i++) {
            int64_t begin = ps_now_ns();
            /* Each thread contributes i; the loop's implicit barrier makes the total visible to all. */
#pragma omp for reduction(+ : running) schedule(static, 1)
            for (int t = 0; t < threads; t++) running += i;
#pragma omp master
            latencies[i] = (double)(ps_now_ns() - begin) / 1e3;
        }
    }
    qsort(latencies, (size_t)rounds, sizeof *latencies, compare_doubles);
    double median = latencies[rounds / 2];
    free(latencies);
    return running == threads * (rounds * (rounds - 1) / 2) ? median : -1.0;
}
