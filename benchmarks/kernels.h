/* kernels.h — the single-thread C loops the module's `bench` exposes to the benchmarks, each with
 * no Python on its path. (GSum and MCPi are kernels on paths.h: gsum.c, mcpi.c.) */
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
/* The same, with an axe of the log every 4096 pairs, as ps_kernel_core_pairs_ns does. */
double ps_kernel_link_axed_pairs_ns(ps_link *link, int64_t pairs, int64_t timeout_ns);

/* The same pairs, each timed on its own (as the anchors time each round trip): the median pair's
 * nanoseconds. */
double ps_kernel_link_pair_median_ns(ps_link *link, int64_t pairs, int64_t timeout_ns);

/* Nanoseconds per move through one caller's link (any path over a "q" element), single thread,
 * timed until a last() after the loop has answered, i.e. until every move is acknowledged
 * (a remote stage's pipelined moves included); -1 on a failed operation, or when last() grew
 * by fewer than `moves`. */
double ps_kernel_link_moves_ns(ps_link *link, int64_t moves, int64_t timeout_ns);

/* The same, moving the tuples `batch` at a time, each batch one move_many. */
double ps_kernel_link_batches_ns(ps_link *link, int64_t moves, uint32_t batch, int64_t timeout_ns);

/* ARMI's ping sweep: nanoseconds per round of k moves then one observe of the round's last move
 * by its index (it answers once every move of the round is in: a batch stage sends them before
 * it), over `rounds` rounds, single thread; -1 on a failed operation or a wrong tuple. */
double ps_kernel_link_moves_then_observe_ns(ps_link *link, int64_t k, int64_t rounds, int64_t timeout_ns);

/* Nanoseconds per observe(i) through one caller's link (any path over a "q" element whose tuple i
 * holds i), reading tuples 0 .. tuples - 1 over and over, `reads` reads, single thread; -1 on a
 * failed read or a wrong tuple. Several threads running it at once on links of one cache stage
 * measure its hits side by side. */
double ps_kernel_link_indexed_reads_ns(ps_link *link, int64_t reads, int64_t tuples, int64_t timeout_ns);

#ifdef __cplusplus
}
#endif

#endif
