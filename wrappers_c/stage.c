/* stage.c — the generic part of every stage: references, links, counters, the one call of every
 * operation and its fallback. */
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "stage_base.h"

int ps_stage_init(ps_stage *stage, const ps_stage_kind *kind, const ps_tuple_format *format, uint32_t max_links,
                  ps_stage *below) {
    stage->kind = kind;
    atomic_init(&stage->references, 1);
    atomic_init(&stage->links, 0);
    stage->max_links = max_links;
    stage->format = *format;
    stage->tuple_size = format->size;
    pthread_mutex_init(&stage->links_lock, NULL);
    stage->attached = NULL;
    stage->attached_count = stage->attached_capacity = 0;
    stage->retired_operations = stage->retired_bytes = stage->retired_waits = 0;
    memset(&stage->next, 0, sizeof stage->next);
    stage->caller_links = NULL;
    stage->free_slots = NULL;
    stage->free_count = 0;
    stage->below = below;
    stage->error[0] = 0;
    stage->error_serial = 0;
    stage->moves_queued = 0; /* a kind whose moves are queued says so after this */
    stage->axe_point = below && kind->role == PS_PASS_THROUGH ? below->axe_point : NULL; /* the core sets its own */
    if (kind->role == PS_PASS_THROUGH) {
        if (!stage->max_links || stage->max_links > PS_PASS_THROUGH_CALLERS) stage->max_links = PS_PASS_THROUGH_CALLERS;
        stage->free_slots = malloc(PS_PASS_THROUGH_CALLERS * sizeof *stage->free_slots);
        if (!stage->free_slots) return PS_ENOMEM;
    }
    if (!below) return PS_OK;
    ps_stage_retain(below);
    if (kind->role == PS_JOINING) return ps_stage_attach(below, &stage->next);
    stage->caller_links = calloc(PS_PASS_THROUGH_CALLERS, sizeof *stage->caller_links);
    return stage->caller_links ? PS_OK : PS_ENOMEM;
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
    free(stage->free_slots);
    free(stage->attached);
    pthread_mutex_destroy(&stage->links_lock);
    free(stage);
}

/* Keeps the link in the stage's list, so its counters can be read. */
static int remember_link(ps_stage *stage, ps_link *link) {
    int rc = PS_OK;
    pthread_mutex_lock(&stage->links_lock);
    if (stage->attached_count == stage->attached_capacity) {
        uint32_t capacity = stage->attached_capacity ? stage->attached_capacity * 2 : 8;
        ps_link **grown = realloc(stage->attached, capacity * sizeof *grown);
        if (grown) {
            stage->attached = grown;
            stage->attached_capacity = capacity;
        } else {
            rc = PS_ENOMEM;
        }
    }
    if (rc == PS_OK) stage->attached[stage->attached_count++] = link;
    pthread_mutex_unlock(&stage->links_lock);
    return rc;
}

static void forget_link(ps_stage *stage, ps_link *link) {
    pthread_mutex_lock(&stage->links_lock);
    for (uint32_t i = 0; i < stage->attached_count; i++) {
        if (stage->attached[i] == link) {
            stage->attached[i] = stage->attached[--stage->attached_count];
            stage->retired_operations += __atomic_load_n(&link->operations, __ATOMIC_RELAXED);
            stage->retired_bytes += __atomic_load_n(&link->bytes, __ATOMIC_RELAXED);
            stage->retired_waits += __atomic_load_n(&link->waits, __ATOMIC_RELAXED);
            break;
        }
    }
    pthread_mutex_unlock(&stage->links_lock);
}

void ps_stage_retain(ps_stage *stage) { atomic_fetch_add_explicit(&stage->references, 1, memory_order_relaxed); }

void ps_stage_release(ps_stage *stage) {
    if (atomic_fetch_sub_explicit(&stage->references, 1, memory_order_acq_rel) != 1) return;
    if (stage->kind->destroy) stage->kind->destroy(stage);
    ps_stage_abandon(stage);
}

const char *ps_stage_kind_name(const ps_stage *stage) { return stage->kind->name; }
uint32_t ps_stage_max_links(const ps_stage *stage) { return stage->max_links; }
uint32_t ps_stage_link_count(const ps_stage *stage) {
    ps_stage *s = (ps_stage *)stage;
    pthread_mutex_lock(&s->links_lock);
    uint32_t live = atomic_load_explicit(&s->links, memory_order_relaxed) - s->free_count;
    pthread_mutex_unlock(&s->links_lock);
    return live;
}
const ps_tuple_format *ps_stage_format(const ps_stage *stage) { return &stage->format; }
ps_stage *ps_stage_below(const ps_stage *stage) { return stage->below; }
static _Atomic uint64_t errors_written;                     /* stage errors written in the process: their order */
static _Thread_local uint64_t said_serial;                  /* the last one this thread wrote (0: none) */
static _Thread_local char said_here[PS_STAGE_ERROR_MAX];    /* ... and its text */

/* The newest line the stages of the path from `stage` down keep, of those written after `after`. */
static void newest_error(ps_stage *stage, uint64_t after, char *out, size_t size) {
    if (size) *out = 0;
    for (uint64_t newest = after; stage; stage = stage->below) {
        pthread_mutex_lock(&stage->links_lock);
        if (stage->error[0] && stage->error_serial > newest) {
            newest = stage->error_serial;
            if (size) snprintf(out, size, "%s", stage->error);
        }
        pthread_mutex_unlock(&stage->links_lock);
    }
}

void ps_stage_error(ps_stage *stage, char *out, size_t size) { newest_error(stage, 0, out, size); }

/* One load, no thread-local: a sum's driver takes a mark each round. A line this thread writes
 * after it is numbered above it (one counter, read and then added to by the same thread). */
ps_error_mark ps_stage_error_mark(void) {
    return (ps_error_mark){atomic_load_explicit(&errors_written, memory_order_relaxed)};
}

void ps_stage_said_since(ps_error_mark since, char *out, size_t size) {
    if (size) snprintf(out, size, "%s", said_serial > since.written ? said_here : "");
}

void ps_stage_error_since(ps_stage *stage, ps_error_mark since, char *out, size_t size) {
    if (said_serial > since.written) ps_stage_said_since(since, out, size);
    else newest_error(stage, since.written, out, size);
}

void ps_stage_print_error(ps_stage *stage, const char *what) {
    char why[PS_STAGE_ERROR_MAX];
    ps_stage_error(stage, why, sizeof why);
    fprintf(stderr, "paths: %s: %s\n", what, why);
}

void ps_stage_explain(ps_stage *stage, const char *fmt, ...) {
    va_list args;
    va_start(args, fmt);
    vsnprintf(said_here, sizeof said_here, fmt, args);
    va_end(args);
    pthread_mutex_lock(&stage->links_lock);
    snprintf(stage->error, sizeof stage->error, "%s", said_here);
    stage->error_serial = said_serial = atomic_fetch_add_explicit(&errors_written, 1, memory_order_relaxed) + 1;
    pthread_mutex_unlock(&stage->links_lock);
}

int ps_stage_refuse_inherited(ps_stage *stage, const char *held) {
    ps_stage_explain(stage, "%s: this process did not make the handle: a forked child inherits its parent's %s, "
                     "which stay the parent's: the child builds paths of its own", stage->kind->name, held);
    return PS_ESTATE;
}

void ps_stage_explain_moves(ps_stage *stage, int status, uint32_t done, uint32_t of, uint32_t unsure,
                            const char *sent, const char *failed, const char *after) {
    char below[PS_STAGE_ERROR_MAX], unknown[96] = "";
    ps_stage_error(stage->below, below, sizeof below);
    if (unsure)
        snprintf(unknown, sizeof unknown, " (%s %u may have too: the answer was lost)",
                 unsure == of - done ? "the other" : "of the others,", unsure);
    ps_stage_explain(stage, "%s: %s%u of %u moves %s took effect%s, then %s (%s)%s%s%s", stage->kind->name,
                     *unknown ? "at least " : "", done, of, sent, unknown, failed, ps_status_name(status), after,
                     *below ? ": " : "", below);
}

/* A slot for a new caller: a pass-through stage's freed one first, else the next one. A
 * joining stage's slots are contributor numbers and are never given twice. */
static int claim_slot(ps_stage *stage, uint32_t *out) {
    if (stage->free_slots) {
        pthread_mutex_lock(&stage->links_lock);
        int found = stage->free_count > 0;
        if (found) *out = stage->free_slots[--stage->free_count];
        pthread_mutex_unlock(&stage->links_lock);
        if (found) return PS_OK;
    }
    uint32_t slot = atomic_load_explicit(&stage->links, memory_order_relaxed);
    do {
        if (stage->max_links && slot >= stage->max_links) return PS_ESTATE;
    } while (!atomic_compare_exchange_weak_explicit(&stage->links, &slot, slot + 1, memory_order_acq_rel,
                                                    memory_order_relaxed));
    *out = slot;
    return PS_OK;
}

/* A pass-through stage's caller is gone: the kind lets it go (still through its link below: a
 * batch sends what it holds), then what it held below goes, and its slot is free again. */
static void free_slot(ps_stage *stage, uint32_t slot) {
    if (!stage->free_slots) return;
    if (stage->kind->detach) stage->kind->detach(stage, slot);
    if (stage->caller_links) ps_link_detach(&stage->caller_links[slot]);
    pthread_mutex_lock(&stage->links_lock);
    stage->free_slots[stage->free_count++] = slot;
    pthread_mutex_unlock(&stage->links_lock);
}

int ps_stage_attach(ps_stage *stage, ps_link *link) {
    uint32_t slot;
    int rc = claim_slot(stage, &slot);
    if (rc != PS_OK) return rc;
    if (stage->caller_links) /* a pass-through stage: the new caller is a new caller below too */
        rc = ps_stage_attach(stage->below, &stage->caller_links[slot]);
    if (rc == PS_OK && stage->kind->attach) rc = stage->kind->attach(stage, slot);
    if (rc == PS_OK) {
        *link = (ps_link){stage, slot, 0, 0, 0, 0, 0};
        rc = remember_link(stage, link);
    }
    if (rc != PS_OK) {
        link->stage = NULL;
        free_slot(stage, slot);
        return rc;
    }
    ps_stage_retain(stage);
    return PS_OK;
}

void ps_link_detach(ps_link *link) {
    ps_stage *stage = link->stage;
    link->stage = NULL;
    if (!stage) return;
    forget_link(stage, link);
    free_slot(stage, link->slot);
    ps_stage_release(stage);
}

/* One operation through the link: only the link's own user writes these. */
static inline void count(ps_link *link, int64_t bytes) {
    __atomic_store_n(&link->operations, link->operations + 1, __ATOMIC_RELAXED);
    if (bytes) __atomic_store_n(&link->bytes, link->bytes + bytes, __ATOMIC_RELAXED);
}

int ps_link_call(ps_link *link, ps_op *op) {
    ps_stage *s = link->stage;
    op->done = 0;
    link->moved_last = op->kind == PS_OP_MOVE || op->kind == PS_OP_MOVE_MANY;
    int rc = s->kind->call(link, op);
    if (rc == PS_OK) op->done = ps_op_tuples_in(op);
    uint32_t tuples = op->done + ps_op_tuples_out(op, rc);
    count(link, (int64_t)tuples * (int64_t)s->tuple_size);
    op->status = rc;
    return rc;
}

/* Links[i] does an operation that takes nothing in, by the deadline; on failure *failed is i. */
static int call_at(ps_link *const *links, size_t i, ps_op_kind kind, int64_t deadline, size_t *failed) {
    ps_op op = {.kind = kind, .timeout_ns = ps_remaining(deadline)};
    int rc = ps_link_call(links[i], &op);
    if (rc != PS_OK) *failed = i;
    return rc;
}

int ps_links_fence(ps_link *const *links, size_t n, int64_t timeout_ns, size_t *failed) {
    int64_t deadline = ps_deadline(timeout_ns);
    int rc = PS_OK;
    for (size_t i = 1; i < n && rc == PS_OK; i++) rc = call_at(links, i, PS_OP_FLUSH, deadline, failed);
    for (size_t i = 0; i < n && rc == PS_OK; i++) rc = call_at(links, i, PS_OP_FENCE, deadline, failed);
    return rc;
}

int ps_op_fallback(ps_link *link, ps_op *op) {
    ps_stage *s = link->stage;
    int64_t deadline = ps_deadline(op->timeout_ns);
    int rc = PS_OK;
    if (op->kind == PS_OP_EXCHANGE) {
        ps_op move = {.kind = PS_OP_MOVE, .in = op->in, .timeout_ns = op->timeout_ns};
        if ((rc = s->kind->call(link, &move)) != PS_OK) return rc;
        op->done = 1;
        ps_op observe = {.kind = PS_OP_OBSERVE, .out = op->out, .timeout_ns = ps_remaining(deadline)};
        return s->kind->call(link, &observe);
    }
    if (op->kind == PS_OP_MOVE_MANY) {
        const unsigned char *tuples = op->in;
        for (; op->done < op->count; op->done++) {
            ps_op move = {.kind = PS_OP_MOVE, .in = tuples + (size_t)op->done * s->tuple_size,
                          .timeout_ns = ps_remaining(deadline)};
            if ((rc = s->kind->call(link, &move)) != PS_OK) return rc;
        }
        return PS_OK;
    }
    ps_stage_explain(s, "stage '%s' does not support %s", s->kind->name, ps_op_kinds[op->kind].name);
    return PS_ENOTSUP;
}

int ps_stage_counters(ps_stage *stage, ps_counter *out, int max) {
    int64_t operations, bytes, waits;
    pthread_mutex_lock(&stage->links_lock);
    operations = stage->retired_operations;
    bytes = stage->retired_bytes;
    waits = stage->retired_waits;
    for (uint32_t i = 0; i < stage->attached_count; i++) {
        operations += __atomic_load_n(&stage->attached[i]->operations, __ATOMIC_RELAXED);
        bytes += __atomic_load_n(&stage->attached[i]->bytes, __ATOMIC_RELAXED);
        waits += __atomic_load_n(&stage->attached[i]->waits, __ATOMIC_RELAXED);
    }
    pthread_mutex_unlock(&stage->links_lock);
    const ps_counter generic[] = {
        {"operations", operations},
        {"waits", waits},
        {"bytes", bytes},
        {"links", (int64_t)atomic_load_explicit(&stage->links, memory_order_relaxed)},
    };
    int n = 0;
    for (size_t i = 0; i < sizeof generic / sizeof generic[0] && n < max; i++) out[n++] = generic[i];
    if (stage->kind->counters && n < max) n += stage->kind->counters(stage, out + n, max - n);
    return n;
}

int ps_summed_format(const char *kind, ps_stage *below, const ps_tuple_format **out, char *error, size_t error_size) {
    if (!below) {
        snprintf(error, error_size, "stage '%s': needs a stage below it (a path ends with 'core')", kind);
        return PS_EINVAL;
    }
    *out = ps_stage_format(below);
    if (ps_tuple_format_summable(*out)) return PS_OK;
    snprintf(error, error_size, "stage '%s': format '%s' has fields that cannot be added (expected native-order "
             "integers and floats, e.g. 'q' or 'qd')", kind, (*out)->text);
    return PS_EFORMAT;
}

size_t ps_stage_base_footprint(const ps_stage_kind *kind) {
    if (kind->role == PS_JOINING) return 0;
    return PS_PASS_THROUGH_CALLERS * (sizeof(uint32_t) + (kind->needs_below ? sizeof(ps_link) : 0));
}
