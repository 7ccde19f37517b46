/* kernels.h — the C benchmark kernels the module exposes: each runs with no Python on its path. */
#ifndef PATHS_KERNELS_H
#define PATHS_KERNELS_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Nanoseconds per move+observe pair on a fresh "q" element, single thread, `pairs` pairs. */
double ps_kernel_core_pairs_ns(int64_t pairs);

#ifdef __cplusplus
}
#endif

#endif
