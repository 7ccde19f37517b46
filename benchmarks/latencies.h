/* latencies.h — what the anchor programs (benchmarks/*_anchor/, mpi/, openmp/) share, and the
 * loops compared with them (core_ops_loop.c): a monotonic clock in microseconds and the median of
 * a run's latencies. Header only: each anchor is one C file, compiled on its own by
 * benchmarks/anchors.py with -I benchmarks. */
#ifndef BENCHMARKS_LATENCIES_H
#define BENCHMARKS_LATENCIES_H

#include <stdlib.h>
#include <time.h>

static inline double now_us(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e6 + (double)t.tv_nsec / 1e3;
}

static inline int compare_latencies(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* The median of n latencies (sorted in place). */
static inline double median_of(double *latencies, long n) {
    qsort(latencies, (size_t)n, sizeof *latencies, compare_latencies);
    return latencies[n / 2];
}

#endif
