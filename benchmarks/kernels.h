/* kernels.h — the C benchmark kernels the module exposes: each runs with no Python on its path. */
#ifndef PATHS_KERNELS_H
#define PATHS_KERNELS_H

#include <stdint.h>

#include "stage.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Nanoseconds per move+observe pair on a fresh "q" element, single thread, `pairs` pairs. */
double ps_kernel_core_pairs_ns(int64_t pairs);

/* Nanoseconds per move+observe pair through one caller's link (any path over a "q" element),
 * single thread; -1 on a failed operation or a wrong tuple. */
double ps_kernel_link_pairs_ns(ps_link *link, int64_t pairs, int64_t timeout_ns);

/* Nanoseconds per move through one caller's link (any path over a "q" element), single thread,
 * timed until a last() after the loop has answered, i.e. until every move is acknowledged
 * (a remote stage's pipelined moves included); -1 on a failed operation, or when last() grew
 * by fewer than `moves`. */
double ps_kernel_link_moves_ns(ps_link *link, int64_t moves, int64_t timeout_ns);

/* What a kernel run reports. The first failure stops its thread and is kept here. */
typedef struct ps_kernel_report {
    int status;          /* PS_OK, or the first failing operation's status */
    int failed_thread;   /* which thread failed, -1 if none */
    int64_t bad_totals;  /* rounds whose total differed from the expected one */
    double seconds;      /* from the start barrier until the last thread ended */
} ps_kernel_report;

/* GSum: one thread per link; every thread runs `move(i); observe()` for i < rounds and checks each
 * total against i * contributors (the threads of every process feeding the sum). Thread 0 writes
 * each round's latency in microseconds into latencies_us[rounds]. With `pin`, thread t of n runs
 * only on allowed CPU t * cpus / n, so neighbouring threads (one group of a tree) share a CPU. */
void ps_kernel_gsum(ps_link **links, int threads, int pin, int64_t rounds, int64_t contributors,
                    int64_t timeout_ns, double *latencies_us, ps_kernel_report *report);

/* MCPi: the darts are split evenly over the threads; each counts its hits inside the quarter
 * circle with its own generator, then one global sum of the hits goes through the path.
 * *hits receives the observed total. */
void ps_kernel_mcpi(ps_link **links, int threads, int pin, int64_t darts, uint64_t seed, int64_t timeout_ns,
                    int64_t *hits, ps_kernel_report *report);

/* The OpenMP anchor: microseconds per global sum of `threads` contributions (reduction clause),
 * median over the rounds; -1 on a wrong total. */
double ps_kernel_openmp_sum_us(int threads, int64_t rounds);

#ifdef __cplusplus
}
#endif

#endif
