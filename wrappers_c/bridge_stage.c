/* bridge_stage.c — the bridge stage: each operation the implementation answers becomes one call
 * of the bridge; the others pass down, or come as the simpler operations they are made of. */
#include <stdio.h>
#include <stdlib.h>

#include "bridge_stage.h"
#include "stage_base.h"

_Static_assert(PS_OP_KIND_COUNT <= 32, "a bridge stage keeps the kinds it answers as bits of a uint32_t");

typedef struct bridge_stage {
    ps_stage base;
    const ps_bridge *bridge;
    void *impl;
    uint32_t answered; /* the kinds the implementation answers, a bit each */
    ps_stage_kind kind; /* BRIDGE_KIND under the name of the kind written elsewhere */
    char name[64];
} bridge_stage;

/* The implementation's answer; why it failed, when it says, becomes "NAME: WHY", the stage's
 * explanation. */
static int bridge_answer(bridge_stage *s, ps_link *link, ps_op *op) {
    char why[PS_STAGE_ERROR_MAX - sizeof s->name - 2];
    why[0] = 0;
    int rc = s->bridge->call(s->impl, ps_stage_down(link), link->slot, op, why, sizeof why);
    if (rc != PS_OK && why[0]) ps_stage_explain(&s->base, "%s: %s", s->name, why);
    return rc;
}

static int bridge_call(ps_link *link, ps_op *op) {
    bridge_stage *s = (bridge_stage *)link->stage;
    if (s->answered & (1u << op->kind)) return bridge_answer(s, link, op);
    /* A kind made of simpler ones the implementation answers comes as those (a move_many as its
     * moves); else it passes down whole, as a sum below must take it. */
    if (ps_op_kinds[op->kind].made_of & s->answered) return ps_op_fallback(link, op);
    return ps_stage_pass(link, op);
}

static void bridge_destroy(ps_stage *stage) {
    bridge_stage *s = (bridge_stage *)stage;
    s->bridge->release(s->impl);
}

static size_t bridge_footprint(const ps_params *params, size_t tuple_size) {
    (void)params;
    (void)tuple_size;
    return sizeof(bridge_stage);
}

/* Not in the registry: what ps_bridge_stage_create makes for a kind written elsewhere (Python),
 * each stage under that kind's name. */
static const ps_stage_kind BRIDGE_KIND = {
    .version = PS_STAGE_KIND_VERSION,
    .name = "bridge",
    .doc = "Answers the operations its implementation takes with a bridge (a stage written in Python).",
    .role = PS_PASS_THROUGH,
    .needs_below = 1,
    .call = bridge_call,
    .footprint = bridge_footprint,
    .destroy = bridge_destroy,
};

int ps_bridge_stage_create(const ps_bridge *bridge, void *impl, const char *name, ps_stage *below, ps_stage **out) {
    *out = NULL;
    bridge_stage *s = below ? calloc(1, sizeof *s) : NULL;
    if (!s) {
        bridge->release(impl);
        return below ? PS_ENOMEM : PS_EINVAL;
    }
    s->bridge = bridge;
    s->impl = impl;
    snprintf(s->name, sizeof s->name, "%s", name);
    s->kind = BRIDGE_KIND;
    s->kind.name = s->name;
    for (int kind = 0; kind < PS_OP_KIND_COUNT; kind++)
        if (bridge->answers(impl, (ps_op_kind)kind)) s->answered |= 1u << kind;
    int rc = ps_stage_init(&s->base, &s->kind, ps_stage_format(below), 0, below);
    if (rc != PS_OK) {
        bridge->release(impl);
        ps_stage_abandon(&s->base);
        return rc;
    }
    if (s->answered & (1u << PS_OP_OBSERVE_AT | 1u << PS_OP_OBSERVE_RANGE | 1u << PS_OP_AXE))
        s->base.axe_point = NULL; /* its own indexed reads or axes: the element's axe point may not be its */
    *out = &s->base;
    return PS_OK;
}
