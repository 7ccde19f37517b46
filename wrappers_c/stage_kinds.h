/* stage_kinds.h — the built-in stage kinds, each defined in the C file of its name. */
#ifndef WRAPPERS_STAGE_KINDS_H
#define WRAPPERS_STAGE_KINDS_H

#include "stage.h"

extern const ps_stage_kind ps_kind_core;        /* core.c */
extern const ps_stage_kind ps_kind_reduce_sum;  /* reduce_sum.c */
extern const ps_stage_kind ps_kind_trace;       /* trace.c */
extern const ps_stage_kind ps_kind_cache;       /* cache.c */
extern const ps_stage_kind ps_kind_remote;      /* remote.c */
extern const ps_stage_kind ps_kind_delay;       /* delay.c */

#endif
