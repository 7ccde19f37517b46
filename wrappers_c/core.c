/* core.c — the `core` stage: the PastSet element itself, at the bottom of every path. The stage
 * holds the element (ps_enter) as long as it lives, so the element cannot be removed under it. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "stage_base.h"
#include "stage_kinds.h"

typedef struct core_stage {
    ps_stage base;
    ps_element *element;
} core_stage;

static ps_element *element_of(ps_link *link) { return ((core_stage *)link->stage)->element; }

int ps_element_call(ps_element *e, ps_op *op) {
    switch (op->kind) {
    case PS_OP_MOVE: return ps_move(e, op->in, op->timeout_ns);
    case PS_OP_OBSERVE: return ps_observe(e, op->out, NULL, op->timeout_ns);
    case PS_OP_OBSERVE_AT: {
        int rc = ps_observe_at(e, op->argument, op->out, op->timeout_ns);
        if (rc == PS_EAXED) op->value = ps_axed(e); /* what the message names: the first live index */
        return rc;
    }
    case PS_OP_EXCHANGE: {
        int moved = 0;
        int rc = ps_exchange(e, op->in, op->out, op->timeout_ns, &moved);
        op->done = (uint32_t)moved;
        return rc;
    }
    case PS_OP_MOVE_MANY: return ps_move_many(e, op->in, op->count, &op->done, op->timeout_ns);
    case PS_OP_OBSERVE_RANGE:
        if (op->count == 0 || op->count > ps_op_range_max(ps_element_tuple_size(e))) return PS_EINVAL;
        return ps_observe_range(e, op->argument, op->count, op->out, &op->value, op->timeout_ns);
    case PS_OP_FLUSH: /* an element holds nothing back, and a move is applied when it returns */
    case PS_OP_FENCE: return PS_OK;
    case PS_OP_FIRST: op->value = ps_first(e); return PS_OK;
    case PS_OP_LAST: op->value = ps_last(e); return PS_OK;
    case PS_OP_DELTA: {
        int rc = op->argument >= 0 ? ps_set_delta(e, op->argument) : PS_OK;
        op->value = ps_delta(e);
        return rc;
    }
    case PS_OP_AXE: return ps_axe(e, op->argument);
    default: return PS_ENOTSUP;
    }
}

/* Every kind but a move or an observe; one the element does not know is refused by the
 * fallback, which says so. Out of line, so that core_call needs no frame of its own. */
static __attribute__((noinline)) int core_other(ps_link *link, ps_op *op) {
    int rc = ps_element_call(element_of(link), op);
    return rc == PS_ENOTSUP ? ps_op_fallback(link, op) : rc;
}

/* Moves and observes, the element's hot path, go straight to it as tail calls. */
static int core_call(ps_link *link, ps_op *op) {
    ps_element *e = element_of(link);
    if (op->kind == PS_OP_MOVE) return ps_move(e, op->in, op->timeout_ns);
    if (op->kind == PS_OP_OBSERVE) return ps_observe(e, op->out, NULL, op->timeout_ns);
    return core_other(link, op);
}

static int core_counters(ps_stage *stage, ps_counter *out, int max) {
    ps_element_stats s;
    ps_element_stats_read(((core_stage *)stage)->element, &s);
    const ps_counter mine[] = {
        {"live_tuples", s.live_tuples}, {"bytes_held", s.bytes_held}, {"element_moves", s.moves},
        {"element_observes", s.observes}, {"element_waits", s.waits},
    };
    int n = 0;
    for (size_t i = 0; i < sizeof mine / sizeof mine[0] && n < max; i++) out[n++] = mine[i];
    return n;
}

static void core_destroy(ps_stage *stage) { ps_leave(((core_stage *)stage)->element); }

/* The element's tuples are the element's: the stage itself holds only its struct. */
static size_t core_footprint(const ps_params *params, size_t tuple_size) {
    (void)params;
    (void)tuple_size;
    return sizeof(core_stage);
}

static int core_create(const ps_params *params, const ps_build_context *context, ps_stage *below,
                       ps_stage **out, char *error, size_t error_size) {
    const char *name = ps_params_str(params, "name");
    const char *format = ps_params_str(params, "format");
    if (below) {
        snprintf(error, error_size, "stage 'core': must be the last stage of a path");
        return PS_EINVAL;
    }
    ps_tuple_format parsed;
    char why[256];
    if (ps_tuple_format_parse(format, &parsed, why, sizeof why) != 0) {
        snprintf(error, error_size, "stage 'core': parameter 'format': %s", why);
        return PS_EFORMAT;
    }
    ps_element *element = NULL;
    char existing[PS_FORMAT_MAX_TEXT + 1];
    int rc;
    do { /* an element of another format removed before its format was read: enter again */
        rc = ps_enter(context->space, name, format, &element);
    } while (rc == PS_EMISMATCH && ps_format_of(context->space, name, existing, sizeof existing) != PS_OK);
    if (rc == PS_EMISMATCH) {
        snprintf(error, error_size, "stage 'core': element '%s' exists with format '%s', not '%s'", name, existing,
                 format);
        return rc;
    }
    if (rc == PS_EINVAL) {
        char got[32] = "an empty name";
        if (*name) snprintf(got, sizeof got, "%zu bytes", strlen(name));
        snprintf(error, error_size, "stage 'core': an element's name is 1 to %d bytes, got %s", PS_NAME_MAX, got);
        return rc;
    }
    if (rc != PS_OK) {
        snprintf(error, error_size, "stage 'core': cannot enter element '%s': %s", name, ps_status_name(rc));
        return rc;
    }
    core_stage *stage = calloc(1, sizeof *stage);
    if (!stage) {
        ps_leave(element);
        return PS_ENOMEM;
    }
    stage->element = element;
    ps_stage_init(&stage->base, &ps_kind_core, &parsed, 0, NULL);
    stage->base.axe_point = ps_axe_point(element);
    *out = &stage->base;
    return PS_OK;
}

static const ps_param_spec CORE_PARAMS[] = {
    {"name", PS_PARAM_STR, 1, NULL, 0, -1, NULL, "the element's name", PS_PARAM_GIVEN},
    {"format", PS_PARAM_STR, 1, NULL, 0, -1, NULL, "the element's Python struct format, e.g. 'q' or 'qd'",
     PS_PARAM_GIVEN},
};

const ps_stage_kind ps_kind_core = {
    .version = PS_STAGE_KIND_VERSION,
    .name = "core",
    .doc = "The PastSet element (name, format) itself: the last stage of every path.",
    .params = CORE_PARAMS,
    .param_count = sizeof CORE_PARAMS / sizeof CORE_PARAMS[0],
    .role = PS_JOINING,
    .needs_below = 0,
    .create = core_create,
    .call = core_call,
    .footprint = core_footprint,
    .counters = core_counters,
    .destroy = core_destroy,
};
