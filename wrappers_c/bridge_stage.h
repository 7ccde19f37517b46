/* bridge_stage.h — a pass-through stage whose operations are answered by a bridge (the Python
 * module supplies one that calls a Python object with the GIL held). The slow path, for quick
 * experiments: C sees only the bridge, never Python. Usable from C++.
 */
#ifndef WRAPPERS_BRIDGE_STAGE_H
#define WRAPPERS_BRIDGE_STAGE_H

#include "stage.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum ps_bridge_op {
    PS_BRIDGE_MOVE, PS_BRIDGE_OBSERVE, PS_BRIDGE_OBSERVE_AT, PS_BRIDGE_FIRST, PS_BRIDGE_LAST,
    PS_BRIDGE_DELTA, PS_BRIDGE_AXE
} ps_bridge_op;

/* One operation handed to the bridge. */
typedef struct ps_bridge_call {
    ps_bridge_op op;
    ps_link *below;        /* the caller's own link to the next stage */
    uint32_t slot;         /* the caller's slot at this stage */
    const void *tuple_in;  /* move */
    void *tuple_out;       /* observe, observe_at */
    int64_t argument;      /* observe_at and axe: the index; delta: the bound (< 0: read only) */
    int64_t timeout_ns;    /* move, observe, observe_at: the caller's timeout (PS_FOREVER otherwise) */
    int64_t result;        /* first, last, delta */
} ps_bridge_call;

typedef struct ps_bridge {
    /* Returns a status; PS_ETIMEDOUT when the call's timeout passed with nothing done. */
    int (*call)(void *impl, ps_bridge_call *call);
    void (*release)(void *impl);                    /* when the stage is destroyed */
} ps_bridge;

/* Creates the stage above `below`; the stage owns impl from now on (even on failure). */
int ps_bridge_stage_create(const ps_bridge *bridge, void *impl, ps_stage *below, ps_stage **out);

#ifdef __cplusplus
}
#endif

#endif
