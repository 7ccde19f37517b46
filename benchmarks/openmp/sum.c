/* sum.c — the OpenMP anchor for GSum: median microseconds per global sum by a reduction clause.
 * Built and run by benchmarks/anchors.py with `cc -O2 -fopenmp -I benchmarks`, apart from the package:
 *   ./sum THREADS ROUNDS   prints "median_us <value> wrong <count>" (exit 0; 1 on a wrong total,
 *                          2 with one line on stderr for arguments out of range). */
#include <stdio.h>
#include <stdlib.h>

#include "latencies.h"

/* One OpenMP thread each, and a team this large already costs gigabytes of stacks; 100,000 made
 * libgomp crash. */
#define MAX_THREADS 1024

/* A whole number in [low, high], or -1. */
static long bounded(const char *text, long low, long high) {
    char *end = NULL;
    long value = strtol(text, &end, 10);
    return *text && !*end && value >= low && value <= high ? value : -1;
}

int main(int argc, char **argv) {
    long threads = argc == 3 ? bounded(argv[1], 1, MAX_THREADS) : -1;
    long rounds = argc == 3 ? bounded(argv[2], 1, 100000000) : -1;
    if (threads < 0 || rounds < 0) {
        fprintf(stderr, "usage: %s THREADS ROUNDS (1 <= THREADS <= %d, 1 <= ROUNDS <= 100000000)\n", argv[0],
                MAX_THREADS);
        return 2;
    }
    double *latencies = malloc((size_t)rounds * sizeof *latencies);
    if (!latencies) {
        fprintf(stderr, "%s: no memory for %ld latencies\n", argv[0], rounds);
        return 2;
    }
    long long running = 0; /* never reset: after the last round it holds threads * (0 + 1 + ...) */
#pragma omp parallel num_threads(threads) shared(running, latencies)
    {
        for (long i = 0; i < rounds; i++) {
            double begin = now_us();
            /* Each thread contributes i; the loop's implicit barrier makes the total visible to all. */
#pragma omp for reduction(+ : running) schedule(static, 1)
            for (long t = 0; t < threads; t++) running += i;
#pragma omp master
            latencies[i] = now_us() - begin;
        }
    }
    long long wrong = running != threads * (rounds * (rounds - 1) / 2);
    printf("median_us %.3f wrong %lld\n", median_of(latencies, rounds), wrong);
    free(latencies);
    return wrong ? 1 : 0;
}
