/* cache.c — the `cache` stage: serves repeated indexed observes from a local copy.
 *
 * Tuples are immutable once moved, so a copy of tuple i is correct forever: the cache needs no
 * invalidation. It is direct-mapped (tuple i lives in entry i % capacity) and preallocated; only
 * observe(i) is cached, and an axe stops it serving what it freed; every other operation passes
 * straight through.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "stage_base.h"
#include "stage_kinds.h"

typedef struct cache_stage {
    ps_stage base;
    pthread_mutex_t lock;      /* guards tags and data */
    int64_t capacity;
    int64_t *tags;             /* the tuple index each entry holds, -1 when empty */
    unsigned char *data;
    _Atomic int64_t hits, misses;
    _Atomic int64_t axed;      /* the highest axe point passed through: older copies are not served */
} cache_stage;

static int cache_observe_at(ps_link *link, ps_op *op) {
    cache_stage *c = (cache_stage *)link->stage;
    int64_t index = op->argument;
    void *out = op->out;
    size_t size = c->base.tuple_size;
    if (index >= atomic_load_explicit(&c->axed, memory_order_acquire)) {
        int64_t entry = index % c->capacity;
        pthread_mutex_lock(&c->lock);
        int hit = c->tags[entry] == index;
        if (hit) memcpy(out, c->data + entry * size, size);
        pthread_mutex_unlock(&c->lock);
        if (hit) {
            atomic_fetch_add_explicit(&c->hits, 1, memory_order_relaxed);
            return PS_OK;
        }
    }
    atomic_fetch_add_explicit(&c->misses, 1, memory_order_relaxed);
    int rc = ps_stage_pass(link, op);
    if (rc == PS_OK && index >= 0) {
        int64_t entry = index % c->capacity;
        pthread_mutex_lock(&c->lock);
        c->tags[entry] = index;
        memcpy(c->data + entry * size, out, size);
        pthread_mutex_unlock(&c->lock);
    }
    return rc;
}

/* Axing through the cache also stops it serving the freed tuples (an observe of one raises, as
 * it would without the cache). */
static int cache_axe(ps_link *link, ps_op *op) {
    cache_stage *c = (cache_stage *)link->stage;
    int64_t index = op->argument;
    int rc = ps_stage_pass(link, op);
    if (rc != PS_OK) return rc;
    int64_t seen = atomic_load(&c->axed);
    while (seen < index && !atomic_compare_exchange_weak(&c->axed, &seen, index)) {
    }
    return PS_OK;
}

static int cache_call(ps_link *link, ps_op *op) {
    switch (op->kind) {
    case PS_OP_OBSERVE_AT: return cache_observe_at(link, op);
    case PS_OP_AXE: return cache_axe(link, op);
    default: return ps_stage_pass(link, op);
    }
}

static int cache_counters(ps_stage *stage, ps_counter *out, int max) {
    cache_stage *c = (cache_stage *)stage;
    if (max < 3) return 0;
    out[0] = (ps_counter){"hits", atomic_load(&c->hits)};
    out[1] = (ps_counter){"misses", atomic_load(&c->misses)};
    out[2] = (ps_counter){"capacity", c->capacity};
    return 3;
}

static void cache_destroy(ps_stage *stage) {
    cache_stage *c = (cache_stage *)stage;
    free(c->tags);
    free(c->data);
    pthread_mutex_destroy(&c->lock);
}

static size_t cache_footprint(const ps_params *params, size_t tuple_size) {
    return sizeof(cache_stage) + (size_t)ps_params_int(params, "capacity") * (sizeof(int64_t) + tuple_size);
}

static int cache_create(const ps_params *params, const ps_build_context *context, ps_stage *below,
                        ps_stage **out, char *error, size_t error_size) {
    (void)context;
    if (!below) {
        snprintf(error, error_size, "stage 'cache': needs a stage below it (a path ends with 'core')");
        return PS_EINVAL;
    }
    cache_stage *c = calloc(1, sizeof *c);
    if (!c) return PS_ENOMEM;
    pthread_mutex_init(&c->lock, NULL);
    c->capacity = ps_params_int(params, "capacity");
    int rc = ps_stage_init(&c->base, &ps_kind_cache, ps_stage_format(below), 0, below);
    c->tags = malloc((size_t)c->capacity * sizeof *c->tags);
    c->data = malloc((size_t)c->capacity * c->base.tuple_size);
    if (rc == PS_OK && (!c->tags || !c->data)) rc = PS_ENOMEM;
    if (rc != PS_OK) {
        cache_destroy(&c->base);
        ps_stage_abandon(&c->base);
        return rc;
    }
    for (int64_t i = 0; i < c->capacity; i++) c->tags[i] = -1;
    *out = &c->base;
    return PS_OK;
}

static const ps_param_spec CACHE_PARAMS[] = {
    {"capacity", PS_PARAM_INT, 0, "1024", 1, 1 << 20, NULL, "tuples kept (direct-mapped by index)", PS_PARAM_GIVEN},
};

const ps_stage_kind ps_kind_cache = {
    .version = PS_STAGE_KIND_VERSION,
    .name = "cache",
    .doc = "Serves repeated indexed observes locally; tuples are immutable, so it is always correct.",
    .params = CACHE_PARAMS,
    .param_count = sizeof CACHE_PARAMS / sizeof CACHE_PARAMS[0],
    .role = PS_PASS_THROUGH,
    .needs_below = 1,
    .create = cache_create,
    .call = cache_call,
    .footprint = cache_footprint,
    .counters = cache_counters,
    .destroy = cache_destroy,
};
