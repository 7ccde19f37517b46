/* stage.c — the generic part of every stage: references, links, counters, forwarding. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "stage_base.h"

int ps_stage_init(ps_stage *stage, const ps_stage_ops *ops, const ps_tuple_format *format,
                  uint32_t max_links, ps_stage *below, ps_stage_joining joining) {
    stage->ops = ops;
    atomic_init(&stage->references, 1);
    atomic_init(&stage->links, 0);
    stage->max_links = max_links;
    stage->format = *format;
    stage->tuple_size = format->size;
    atomic_init(&stage->operations, 0);
    atomic_init(&stage->waits, 0);
    atomic_init(&stage->bytes, 0);
    memset(&stage->next, 0, sizeof stage->next);
    stage->caller_links = NULL;
    stage->below = below;
    if (!below) return PS_OK;
    ps_stage_retain(below);
    if (joining == PS_JOINING) return ps_stage_attach(below, &stage->next);
    stage->caller_links = calloc(PS_PASS_THROUGH_CALLERS, sizeof *stage->caller_links);
    if (!stage->caller_links) return PS_ENOMEM;
    if (!stage->max_links || stage->max_links > PS_PASS_THROUGH_CALLERS) stage->max_links = PS_PASS_THROUGH_CALLERS;
    return PS_OK;
}

/* Drops what ps_stage_init took: the links below and the reference to the stage below. */
static void release_below(ps_stage *stage) {
    if (stage->caller_links) {
        for (uint32_t i = 0; i < PS_PASS_THROUGH_CALLERS; i++) ps_link_detach(&stage->caller_links[i]);
        free(stage->caller_links);
    }
    ps_link_detach(&stage->next);
    if (stage->below) ps_stage_release(stage->below);
}

void ps_stage_abandon(ps_stage *stage) {
    release_below(stage);
    free(stage);
}

void ps_stage_retain(ps_stage *stage) { atomic_fetch_add_explicit(&stage->references, 1, memory_order_relaxed); }

void ps_stage_release(ps_stage *stage) {
    if (atomic_fetch_sub_explicit(&stage->references, 1, memory_order_acq_rel) != 1) return;
    if (stage->ops->destroy) stage->ops->destroy(stage);
    ps_stage_abandon(stage);
}

const char *ps_stage_kind_name(const ps_stage *stage) { return stage->kind ? stage->kind->name : "?"; }
uint32_t ps_stage_max_links(const ps_stage *stage) { return stage->max_links; }
uint32_t ps_stage_link_count(const ps_stage *stage) {
    return atomic_load_explicit(&((ps_stage *)stage)->links, memory_order_relaxed);
}
const ps_tuple_format *ps_stage_format(const ps_stage *stage) { return &stage->format; }
const char *ps_stage_error(const ps_stage *stage) { return stage->error; }

int ps_stage_attach(ps_stage *stage, ps_link *link) {
    uint32_t slot = atomic_load_explicit(&stage->links, memory_order_relaxed);
    do {
        if (stage->max_links && slot >= stage->max_links) return PS_ESTATE;
    } while (!atomic_compare_exchange_weak_explicit(&stage->links, &slot, slot + 1, memory_order_acq_rel,
                                                    memory_order_relaxed));
    if (stage->caller_links) {
        /* A pass-through stage: the new caller is a new caller below too. */
        int rc = ps_stage_attach(stage->below, &stage->caller_links[slot]);
        if (rc != PS_OK) return rc;  /* the slot stays used: fan-in below is exhausted anyway */
    }
    if (stage->ops->attach) {
        int rc = stage->ops->attach(stage, slot);
        if (rc != PS_OK) return rc;
    }
    ps_stage_retain(stage);
    link->stage = stage;
    link->slot = slot;
    link->moves = 0;
    link->observes = 0;
    return PS_OK;
}

void ps_link_detach(ps_link *link) {
    ps_stage *stage = link->stage;
    link->stage = NULL;
    if (stage) ps_stage_release(stage);
}

static inline void count(ps_stage *stage, int64_t bytes) {
    atomic_fetch_add_explicit(&stage->operations, 1, memory_order_relaxed);
    if (bytes) atomic_fetch_add_explicit(&stage->bytes, bytes, memory_order_relaxed);
}

int ps_link_move(ps_link *link, const void *tuple, int64_t timeout_ns) {
    ps_stage *s = link->stage;
    int rc = s->ops->move(link, tuple, timeout_ns);
    count(s, rc == PS_OK ? (int64_t)s->tuple_size : 0);
    return rc;
}

int ps_link_observe(ps_link *link, void *out, int64_t timeout_ns) {
    ps_stage *s = link->stage;
    int rc = s->ops->observe(link, out, timeout_ns);
    count(s, rc == PS_OK ? (int64_t)s->tuple_size : 0);
    return rc;
}

int ps_link_observe_at(ps_link *link, int64_t index, void *out, int64_t timeout_ns) {
    ps_stage *s = link->stage;
    int rc = s->ops->observe_at(link, index, out, timeout_ns);
    count(s, rc == PS_OK ? (int64_t)s->tuple_size : 0);
    return rc;
}

int ps_link_first(ps_link *link, int64_t *out) {
    count(link->stage, 0);
    return link->stage->ops->first(link, out);
}

int ps_link_last(ps_link *link, int64_t *out) {
    count(link->stage, 0);
    return link->stage->ops->last(link, out);
}

int ps_link_delta(ps_link *link, int64_t bound, int64_t *out) {
    count(link->stage, 0);
    return link->stage->ops->delta(link, bound, out);
}

int ps_link_axe(ps_link *link, int64_t index) {
    count(link->stage, 0);
    return link->stage->ops->axe(link, index);
}

int ps_link_exchange(ps_link *link, const void *tuple, void *out, int64_t timeout_ns, int *moved) {
    ps_stage *s = link->stage;
    *moved = 0;
    if (s->ops->exchange) {
        int rc = s->ops->exchange(link, tuple, out, timeout_ns, moved);
        count(s, *moved ? (int64_t)s->tuple_size * (rc == PS_OK ? 2 : 1) : 0);
        return rc;
    }
    int rc = ps_link_move(link, tuple, timeout_ns);
    if (rc != PS_OK) return rc;
    *moved = 1;
    return ps_link_observe(link, out, timeout_ns);
}

int ps_stage_counters(ps_stage *stage, ps_counter *out, int max) {
    const ps_counter generic[] = {
        {"operations", atomic_load_explicit(&stage->operations, memory_order_relaxed)},
        {"waits", atomic_load_explicit(&stage->waits, memory_order_relaxed)},
        {"bytes", atomic_load_explicit(&stage->bytes, memory_order_relaxed)},
        {"links", (int64_t)atomic_load_explicit(&stage->links, memory_order_relaxed)},
    };
    int n = 0;
    for (size_t i = 0; i < sizeof generic / sizeof generic[0] && n < max; i++) out[n++] = generic[i];
    if (stage->ops->counters && n < max) n += stage->ops->counters(stage, out + n, max - n);
    return n;
}

int ps_forward_move(ps_link *link, const void *tuple, int64_t timeout_ns) {
    return ps_link_move(ps_stage_down(link), tuple, timeout_ns);
}
int ps_forward_observe(ps_link *link, void *out, int64_t timeout_ns) {
    return ps_link_observe(ps_stage_down(link), out, timeout_ns);
}
int ps_forward_observe_at(ps_link *link, int64_t index, void *out, int64_t timeout_ns) {
    return ps_link_observe_at(ps_stage_down(link), index, out, timeout_ns);
}
int ps_forward_first(ps_link *link, int64_t *out) { return ps_link_first(ps_stage_down(link), out); }
int ps_forward_last(ps_link *link, int64_t *out) { return ps_link_last(ps_stage_down(link), out); }
int ps_forward_delta(ps_link *link, int64_t bound, int64_t *out) { return ps_link_delta(ps_stage_down(link), bound, out); }
int ps_forward_axe(ps_link *link, int64_t index) { return ps_link_axe(ps_stage_down(link), index); }
