/* bridge_stage.c — the bridge stage: each operation becomes one call of the bridge. */
#include <stdlib.h>

#include "bridge_stage.h"
#include "stage_base.h"

typedef struct bridge_stage {
    ps_stage base;
    const ps_bridge *bridge;
    void *impl;
} bridge_stage;

static int forward(ps_link *link, ps_bridge_call *call) {
    bridge_stage *s = (bridge_stage *)link->stage;
    call->below = ps_stage_down(link);
    call->slot = link->slot;
    return s->bridge->call(s->impl, call);
}

static int bridge_move(ps_link *link, const void *tuple, int64_t timeout_ns) {
    ps_bridge_call call = {.op = PS_BRIDGE_MOVE, .tuple_in = tuple, .timeout_ns = timeout_ns};
    return forward(link, &call);
}

static int bridge_observe(ps_link *link, void *out, int64_t timeout_ns) {
    ps_bridge_call call = {.op = PS_BRIDGE_OBSERVE, .tuple_out = out, .timeout_ns = timeout_ns};
    return forward(link, &call);
}

static int bridge_observe_at(ps_link *link, int64_t index, void *out, int64_t timeout_ns) {
    ps_bridge_call call = {.op = PS_BRIDGE_OBSERVE_AT, .tuple_out = out, .argument = index, .timeout_ns = timeout_ns};
    return forward(link, &call);
}

static int bridge_number(ps_link *link, ps_bridge_op op, int64_t argument, int64_t *out) {
    ps_bridge_call call = {.op = op, .argument = argument, .timeout_ns = PS_FOREVER};
    int rc = forward(link, &call);
    if (out) *out = call.result;
    return rc;
}

static int bridge_first(ps_link *link, int64_t *out) { return bridge_number(link, PS_BRIDGE_FIRST, 0, out); }
static int bridge_last(ps_link *link, int64_t *out) { return bridge_number(link, PS_BRIDGE_LAST, 0, out); }
static int bridge_delta(ps_link *link, int64_t bound, int64_t *out) {
    return bridge_number(link, PS_BRIDGE_DELTA, bound, out);
}
static int bridge_axe(ps_link *link, int64_t index) { return bridge_number(link, PS_BRIDGE_AXE, index, NULL); }

static void bridge_destroy(ps_stage *stage) {
    bridge_stage *s = (bridge_stage *)stage;
    s->bridge->release(s->impl);
}

static const ps_stage_ops BRIDGE_OPS = {
    bridge_move, bridge_observe, bridge_observe_at, bridge_first, bridge_last,
    bridge_delta, bridge_axe, NULL, bridge_destroy,
};

int ps_bridge_stage_create(const ps_bridge *bridge, void *impl, ps_stage *below, ps_stage **out) {
    *out = NULL;
    bridge_stage *s = below ? calloc(1, sizeof *s) : NULL;
    if (!s) {
        bridge->release(impl);
        return below ? PS_ENOMEM : PS_EINVAL;
    }
    s->bridge = bridge;
    s->impl = impl;
    int rc = ps_stage_init(&s->base, &BRIDGE_OPS, ps_stage_format(below), 0, below, PS_PASS_THROUGH);
    if (rc != PS_OK) {
        bridge->release(impl);
        ps_stage_abandon(&s->base);
        return rc;
    }
    *out = &s->base;
    return PS_OK;
}
