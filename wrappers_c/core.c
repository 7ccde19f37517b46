/* core.c — the `core` stage: the PastSet element itself, at the bottom of every path. The stage
 * holds the element (ps_enter) as long as it lives, so the element cannot be removed under it. */
#include <stdio.h>
#include <stdlib.h>

#include "stage_base.h"

typedef struct core_stage {
    ps_stage base;
    ps_element *element;
} core_stage;

static ps_element *element_of(ps_link *link) { return ((core_stage *)link->stage)->element; }

static int core_move(ps_link *link, const void *tuple, int64_t timeout_ns) {
    return ps_move(element_of(link), tuple, timeout_ns);
}

static int core_observe(ps_link *link, void *out, int64_t timeout_ns) {
    return ps_observe(element_of(link), out, NULL, timeout_ns);
}

static int core_exchange(ps_link *link, const void *tuple, void *out, int64_t timeout_ns, int *moved) {
    return ps_exchange(element_of(link), tuple, out, timeout_ns, moved);
}

static int core_observe_at(ps_link *link, int64_t index, void *out, int64_t timeout_ns) {
    return ps_observe_at(element_of(link), index, out, timeout_ns);
}

static int core_first(ps_link *link, int64_t *out) {
    *out = ps_first(element_of(link));
    return PS_OK;
}

static int core_last(ps_link *link, int64_t *out) {
    *out = ps_last(element_of(link));
    return PS_OK;
}

static int core_delta(ps_link *link, int64_t bound, int64_t *out) {
    if (bound >= 0) {
        int rc = ps_set_delta(element_of(link), bound);
        if (rc != PS_OK) return rc;
    }
    *out = ps_delta(element_of(link));
    return PS_OK;
}

static int core_axe(ps_link *link, int64_t index) { return ps_axe(element_of(link), index); }

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

static const ps_stage_ops CORE_OPS = {
    core_move, core_observe, core_observe_at, core_first, core_last, core_delta, core_axe, core_counters,
    core_destroy, core_exchange,
};

static int core_create(const ps_params *params, const ps_build_context *context, ps_stage *below,
                       ps_stage **out, char *error, size_t error_size) {
    const char *name = ps_params_str(params, "name");
    const char *format = ps_params_str(params, "format");
    if (below) {
        snprintf(error, error_size, "stage 'core': must be the last stage of a path");
        return PS_EINVAL;
    }
    ps_tuple_format parsed;
    if (ps_tuple_format_parse(format, &parsed, error, error_size) != 0) return PS_EFORMAT;
    ps_element *element = NULL;
    int rc = ps_enter(context->space, name, format, &element);
    if (rc == PS_EMISMATCH) {
        snprintf(error, error_size, "stage 'core': element '%s' exists with another format than '%s'", name, format);
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
    ps_stage_init(&stage->base, &CORE_OPS, &parsed, 0, NULL, PS_JOINING);
    *out = &stage->base;
    return PS_OK;
}

static const ps_param_spec CORE_PARAMS[] = {
    {"name", PS_PARAM_STR, 1, NULL, 0, -1, NULL, "the element's name"},
    {"format", PS_PARAM_STR, 1, NULL, 0, -1, NULL, "the element's Python struct format, e.g. 'q' or 'qd'"},
};

const ps_stage_kind ps_kind_core = {
    "core", "The PastSet element (name, format) itself: the last stage of every path.",
    CORE_PARAMS, sizeof CORE_PARAMS / sizeof CORE_PARAMS[0], core_create, PS_JOINING,
};
