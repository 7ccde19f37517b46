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

typedef struct ps_bridge {
    /* Whether the implementation answers operations of `kind` itself (asked once per kind, when
     * the stage is created). The others it does not answer pass down unchanged, except a kind
     * made of simpler ones (PS_OP_COMPOSED: exchange, move_many) of which it answers one, which
     * comes as those. */
    int (*answers)(void *impl, ps_op_kind kind);
    /* Answers one operation of a caller in `slot`, whose own link to the next stage is `below`:
     * fills op's results and returns a status; PS_ETIMEDOUT when the op's timeout passed with
     * nothing done. A failure may say why in `why` (one line; left "" when there is nothing to
     * add): the stage keeps it as its explanation, which a server sends back with the status. */
    int (*call)(void *impl, ps_link *below, uint32_t slot, ps_op *op, char *why, size_t why_size);
    void (*release)(void *impl); /* when the stage is destroyed */
} ps_bridge;

/* Creates the stage above `below`, of the kind named `name` (what ps_stage_kind_name and messages
 * say; cut to 63 bytes); the stage owns impl from now on (even on failure). */
int ps_bridge_stage_create(const ps_bridge *bridge, void *impl, const char *name, ps_stage *below, ps_stage **out);

#ifdef __cplusplus
}
#endif

#endif
