/* stage_kinds.h — the built-in stage kinds, each defined in the C file of its name. Usable from C++. */
#ifndef WRAPPERS_STAGE_KINDS_H
#define WRAPPERS_STAGE_KINDS_H

#include "stage.h"

#ifdef __cplusplus
extern "C" {
#endif

extern const ps_stage_kind ps_kind_core;        /* core.c */
extern const ps_stage_kind ps_kind_reduce_sum;  /* reduce_sum.c */
extern const ps_stage_kind ps_kind_trace;       /* trace.c */
extern const ps_stage_kind ps_kind_cache;       /* cache.c */
extern const ps_stage_kind ps_kind_remote;      /* remote.c */
extern const ps_stage_kind ps_kind_delay;       /* delay.c */
extern const ps_stage_kind ps_kind_batch;       /* batch.c */
extern const ps_stage_kind ps_kind_allreduce;   /* allreduce.c */

/* Does one operation on an element, as the core stage does: what a bare Element from Python
 * does too. PS_ENOTSUP only for a kind an element does not know (core.c). */
int ps_element_call(ps_element *e, ps_op *op);

/* The process is exiting: every wait to set up a link (a remote stage's for the answer to its
 * BUILD or CONNECT, an allreduce member's for its peers) ends at once, and so does one for an
 * answer a server owes once it is overdue, so that no thread is still in one when the process
 * goes (control_plane.c). ps_remote_waits_abandoned says whether it was called. */
void ps_remote_abandon_waits(void);
int ps_remote_waits_abandoned(void);

/* The path spec that links the calling thread attaches to `remote` from now on send at BUILD,
 * instead of the one the stage was made with (NULL: that one again). A build that reuses a
 * remote stage made by an earlier build says so, so that its BUILD names the servers its own
 * path crossed, not the first build's (remote.c). The spec is not copied: keep it until reset. */
void ps_remote_attach_spec(const ps_stage *remote, const char *spec);

#ifdef __cplusplus
}
#endif

#endif
