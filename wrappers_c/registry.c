/* registry.c — every built-in stage kind, by name. A new kind is one C file and one line here. */
#include <string.h>

#include "stage_kinds.h"

static const ps_stage_kind *const KINDS[] = {
    &ps_kind_core,
    &ps_kind_reduce_sum,
    &ps_kind_trace,
    &ps_kind_cache,
    &ps_kind_remote,
    &ps_kind_delay,
    &ps_kind_batch,
    &ps_kind_allreduce,
};

size_t ps_stage_kind_count(void) { return sizeof KINDS / sizeof KINDS[0]; }

const ps_stage_kind *ps_stage_kind_at(size_t i) { return i < ps_stage_kind_count() ? KINDS[i] : NULL; }

const ps_stage_kind *ps_stage_kind_find(const char *name) {
    for (size_t i = 0; i < ps_stage_kind_count(); i++)
        if (strcmp(KINDS[i]->name, name) == 0) return KINDS[i];
    return NULL;
}
