/* cache.c — the `cache` stage: serves indexed observes from a local copy, and may fetch a range
 * of the history in one request (Aurora's read cache, loaded in one bulk transfer).
 *
 * Tuples are immutable once moved, so a copy of tuple i is correct forever: the cache needs no
 * invalidation. It is direct-mapped (tuple i lives in entry i % capacity) and preallocated. A hit
 * writes no shared memory: an entry is read as a seqlock's readers do (a copy, then a check that
 * no filler wrote the entry meanwhile; fillers take the lock), and each caller counts its own
 * hits. Only
 * observe(i) is served here; next-observes (the shared cursor) and every other operation pass
 * straight through. It never serves a tuple before the axe point it knows: that of an axe made
 * through it, the element's own where the stages below pass indexed reads and axes to an element
 * in this process unchanged (an axe made anywhere, looked at on every hit), or, past a remote
 * stage, what that stage's answers to any of its callers showed of it (each says the axe point;
 * looked at on every hit too), and that of a read through it refused as axed.
 *
 * prefetch: "none": a miss reads its one tuple. "window": a miss at i reads the tuples i .. i +
 * window - 1 that exist (waiting for i only) with observe_range, one request per range bound
 * (PS_OP_RANGE_MAX_BYTES); the observes inside it are then local. "all": as "window", and when its
 * first caller attaches it reads the history there is, up to capacity tuples from the start. One
 * caller fetches a range at a time; another that misses meanwhile reads its one tuple. A window
 * not given is 64 tuples, or the capacity when that is less.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "stage_base.h"
#include "stage_kinds.h"

typedef enum prefetch { PREFETCH_NONE, PREFETCH_WINDOW, PREFETCH_ALL } prefetch;
enum { CACHE_LINE = 64 };
static const int64_t ATTACH_FETCH_NS = 10000000000LL; /* prefetch "all" reads the history within this */

typedef struct cache_stage {
    ps_stage base;
    pthread_mutex_t lock;      /* held by whoever fills entries */
    int64_t capacity;
    size_t entry_size;         /* an entry: a cache_entry, then its tuple, padded to 8 bytes */
    unsigned char *entries;    /* capacity of them */
    struct caller_hits {
        _Alignas(CACHE_LINE) int64_t hits; /* written by the slot's one caller */
    } *hits;                   /* PS_PASS_THROUGH_CALLERS of them */
    prefetch mode;
    uint32_t window;
    uint32_t staging_tuples;   /* what one range request asks for at most */
    unsigned char *staging;    /* a range fetched, before it goes into the entries: used by the
                                  caller holding `fetching` */
    _Atomic int fetching;
    _Atomic int fetched_all;   /* "all": the first caller has read the history */
    _Atomic int64_t misses, ranges, fetched;
    int64_t axed;              /* the highest axe point known: older copies are not served */
} cache_stage;

/* An indexed read below refused as axed says the axe point is past the index refused: its value,
 * where a stage below says it, else the next index. */
static void learn_from(cache_stage *c, const ps_op *op, int rc) {
    if (rc == PS_EAXED) ps_axe_point_raise(&c->axed, op->value > op->argument ? op->value : op->argument + 1);
}

/* The highest axe point known: learned, or the element's own where the path below shows it. */
static int64_t axe_point(cache_stage *c) {
    int64_t known = __atomic_load_n(&c->axed, __ATOMIC_ACQUIRE), now = ps_stage_axe_point(&c->base);
    return now > known ? now : known;
}

/* An entry is its stamp, then the tuple. The stamp holds the index of the tuple held plus one
 * (0: none) above STAMP_COUNT_BITS bits that count the entry's fills, odd while a filler writes
 * it: a reader that finds the same stamp after its copy read a whole tuple (a fill that ended on
 * the same stamp would have to be the 2^23-th since). Tuples from STAMP_INDEX_LIMIT on are not
 * kept: their reads go down. */
enum { STAMP_COUNT_BITS = 24 };
static const uint64_t STAMP_COUNT_MASK = (1ULL << STAMP_COUNT_BITS) - 1;
static const int64_t STAMP_INDEX_LIMIT = (1LL << (64 - STAMP_COUNT_BITS)) - 1;

typedef struct cache_entry {
    uint64_t stamp;
} cache_entry; /* the tuple follows */

static uint64_t stamp_of(int64_t index) { return (uint64_t)(index + 1) << STAMP_COUNT_BITS; }

static cache_entry *entry_of(cache_stage *c, int64_t index) {
    return (cache_entry *)(c->entries + (size_t)(index % c->capacity) * c->entry_size);
}

/* Copies the tuple out of an entry a filler may be writing meanwhile: the copy is then thrown
 * away (lookup checks the stamp after it), as a seqlock's readers do. ThreadSanitizer is told
 * so (tests/c/tsan.supp). */
static void cache_copy_checked_after(void *out, const cache_entry *entry, size_t size) {
    memcpy(out, entry + 1, size);
}

/* Copies tuple `index` out if an entry holds it (never one before the axe point, never one < 0).
 * An entry being filled meanwhile is a miss. */
static int lookup(cache_stage *c, int64_t index, void *out) {
    if (index < axe_point(c) || index >= STAMP_INDEX_LIMIT) return 0;
    cache_entry *entry = entry_of(c, index);
    uint64_t stamp = __atomic_load_n(&entry->stamp, __ATOMIC_ACQUIRE);
    if (stamp & 1 || (stamp & ~STAMP_COUNT_MASK) != stamp_of(index)) return 0;
    cache_copy_checked_after(out, entry, c->base.tuple_size);
    __atomic_thread_fence(__ATOMIC_ACQUIRE);
    return __atomic_load_n(&entry->stamp, __ATOMIC_RELAXED) == stamp;
}

/* Keeps tuples first .. first + n - 1, which are at `tuples`. */
static void keep(cache_stage *c, int64_t first, int64_t n, const unsigned char *tuples) {
    size_t size = c->base.tuple_size;
    pthread_mutex_lock(&c->lock);
    for (int64_t i = 0; i < n && first + i < STAMP_INDEX_LIMIT; i++) {
        cache_entry *entry = entry_of(c, first + i);
        uint64_t stamp = entry->stamp, count = (stamp + 1) & STAMP_COUNT_MASK; /* fillers hold the lock */
        __atomic_store_n(&entry->stamp, (stamp & ~STAMP_COUNT_MASK) | count, __ATOMIC_RELAXED);
        __atomic_thread_fence(__ATOMIC_RELEASE);
        memcpy(entry + 1, tuples + (size_t)i * size, size);
        __atomic_store_n(&entry->stamp, stamp_of(first + i) | ((count + 1) & STAMP_COUNT_MASK), __ATOMIC_RELEASE);
    }
    pthread_mutex_unlock(&c->lock);
}

/* One range request for tuples first, ... (at most n), kept as they come. Its status; in *got the
 * tuples it gave, or on PS_EAXED the axe point (which the cache learns). */
static int fetch_once(cache_stage *c, ps_link *down, int64_t first, uint32_t n, int64_t deadline, int64_t *got) {
    ps_op op = {.kind = PS_OP_OBSERVE_RANGE, .argument = first, .count = n, .out = c->staging,
                .timeout_ns = ps_remaining(deadline)};
    int rc = ps_link_call(down, &op);
    atomic_fetch_add_explicit(&c->ranges, 1, memory_order_relaxed);
    *got = rc == PS_OK || rc == PS_EAXED ? op.value : 0;
    learn_from(c, &op, rc);
    if (rc != PS_OK) return rc;
    keep(c, first, op.value, c->staging);
    atomic_fetch_add_explicit(&c->fetched, op.value, memory_order_relaxed);
    return PS_OK;
}

/* Fetches tuples first .. first + want - 1 that exist, waiting by the deadline for `first` only,
 * with the `fetching` flag held, and answers `asked` (the observe of `first`, if not NULL): the
 * tuple into its out, or, refused as axed, the axe point into its value. A range beyond one
 * request asks how far the history goes, then fetches the rest. Returns the status of the first
 * request. */
static int fetch_range(cache_stage *c, ps_link *down, int64_t first, int64_t want, ps_op *asked, int64_t deadline) {
    uint32_t n = want < c->staging_tuples ? (uint32_t)want : c->staging_tuples;
    int64_t got;
    int rc = fetch_once(c, down, first, n, deadline, &got);
    if (rc == PS_EAXED && asked) asked->value = got;
    if (rc != PS_OK) return rc;
    if (asked) memcpy(asked->out, c->staging, c->base.tuple_size);
    ps_op last = {.kind = PS_OP_LAST};
    if (got < n || got == want || ps_link_call(down, &last) != PS_OK) return PS_OK;
    if (last.value - first < want) want = last.value - first;
    for (int64_t done = got; done < want && rc == PS_OK; done += got) {
        uint32_t more = want - done < c->staging_tuples ? (uint32_t)(want - done) : c->staging_tuples;
        rc = fetch_once(c, down, first + done, more, deadline, &got);
    }
    return PS_OK;
}

static int cache_observe_at(ps_link *link, ps_op *op) {
    cache_stage *c = (cache_stage *)link->stage;
    int64_t index = op->argument;
    if (lookup(c, index, op->out)) {
        int64_t *hits = &c->hits[link->slot].hits;
        __atomic_store_n(hits, *hits + 1, __ATOMIC_RELAXED);
        return PS_OK;
    }
    atomic_fetch_add_explicit(&c->misses, 1, memory_order_relaxed);
    if (c->mode != PREFETCH_NONE && index >= 0 && !atomic_exchange(&c->fetching, 1)) {
        int rc = fetch_range(c, ps_stage_down(link), index, c->window, op, ps_deadline(op->timeout_ns));
        atomic_store(&c->fetching, 0);
        return rc;
    }
    int rc = ps_stage_pass(link, op);
    if (rc == PS_OK && index >= 0) keep(c, index, 1, op->out); /* a stage below may take index -1 */
    learn_from(c, op, rc);
    return rc;
}

static int cache_observe_range(ps_link *link, ps_op *op) {
    int rc = ps_stage_pass(link, op);
    learn_from((cache_stage *)link->stage, op, rc);
    return rc;
}

/* Axing through the cache also stops it serving the freed tuples (an observe of one raises, as
 * it would without the cache), and so does an axe through it that failed but may have freed them. */
static int cache_axe(ps_link *link, ps_op *op) {
    int rc = ps_stage_pass(link, op);
    if (ps_axe_may_have_taken_effect(rc)) ps_axe_point_raise(&((cache_stage *)link->stage)->axed, op->argument);
    return rc;
}

static int cache_call(ps_link *link, ps_op *op) {
    switch (op->kind) {
    case PS_OP_OBSERVE_AT: return cache_observe_at(link, op);
    case PS_OP_OBSERVE_RANGE: return cache_observe_range(link, op);
    case PS_OP_AXE: return cache_axe(link, op);
    default: return ps_stage_pass(link, op);
    }
}

/* prefetch "all": the first caller reads the history there is (from the axe point, if the
 * element was axed), up to capacity tuples. A failure only leaves the misses to fetch it. */
static int cache_attach(ps_stage *stage, uint32_t slot) {
    cache_stage *c = (cache_stage *)stage;
    if (c->mode != PREFETCH_ALL || atomic_exchange(&c->fetched_all, 1) || atomic_exchange(&c->fetching, 1))
        return PS_OK;
    ps_link *down = &c->base.caller_links[slot];
    int64_t deadline = ps_deadline(ATTACH_FETCH_NS);
    ps_op last = {.kind = PS_OP_LAST};
    for (int64_t first = 0; ps_link_call(down, &last) == PS_OK && first < last.value;) {
        int64_t want = last.value - first < c->capacity ? last.value - first : c->capacity;
        if (fetch_range(c, down, first, want, NULL, deadline) != PS_EAXED) break;
        int64_t axed = axe_point(c);
        if (axed <= first) break;
        first = axed;
    }
    atomic_store(&c->fetching, 0);
    return PS_OK;
}

static int cache_counters(ps_stage *stage, ps_counter *out, int max) {
    cache_stage *c = (cache_stage *)stage;
    int64_t hits = 0;
    for (uint32_t slot = 0; slot < PS_PASS_THROUGH_CALLERS; slot++) hits += __atomic_load_n(&c->hits[slot].hits, __ATOMIC_RELAXED);
    const ps_counter mine[] = {
        {"hits", hits},                      {"misses", atomic_load(&c->misses)},
        {"ranges", atomic_load(&c->ranges)}, {"fetched", atomic_load(&c->fetched)},
        {"capacity", c->capacity},
    };
    int n = 0;
    for (size_t i = 0; i < sizeof mine / sizeof mine[0] && n < max; i++) out[n++] = mine[i];
    return n;
}

static void cache_destroy(ps_stage *stage) {
    cache_stage *c = (cache_stage *)stage;
    free(c->entries);
    free(c->hits);
    free(c->staging);
    pthread_mutex_destroy(&c->lock);
}

static prefetch mode_of(const ps_params *params) {
    const char *mode = ps_params_str(params, "prefetch");
    return strcmp(mode, "all") == 0 ? PREFETCH_ALL : strcmp(mode, "window") == 0 ? PREFETCH_WINDOW : PREFETCH_NONE;
}

/* The window: as given, else its default, at most the capacity. */
static int64_t window_of(const ps_params *params) {
    int64_t window = ps_params_int(params, "window"), capacity = ps_params_int(params, "capacity");
    return ps_params_given(params, "window") || window <= capacity ? window : capacity;
}

/* The tuples one range request fetches: a window ("all": the capacity), within the range bound. */
static uint32_t staging_tuples(const ps_params *params, size_t tuple_size) {
    prefetch mode = mode_of(params);
    if (mode == PREFETCH_NONE) return 0;
    int64_t want = mode == PREFETCH_ALL ? ps_params_int(params, "capacity") : window_of(params);
    return want < ps_op_range_max(tuple_size) ? (uint32_t)want : ps_op_range_max(tuple_size);
}

static size_t entry_size(size_t tuple_size) { return sizeof(cache_entry) + (tuple_size + 7) / 8 * 8; }

static size_t cache_footprint(const ps_params *params, size_t tuple_size) {
    return sizeof(cache_stage) + (size_t)ps_params_int(params, "capacity") * entry_size(tuple_size) +
           PS_PASS_THROUGH_CALLERS * sizeof(struct caller_hits) + (size_t)staging_tuples(params, tuple_size) * tuple_size;
}

static int cache_create(const ps_params *params, const ps_build_context *context, ps_stage *below,
                        ps_stage **out, char *error, size_t error_size) {
    (void)context;
    if (!below) {
        snprintf(error, error_size, "stage 'cache': needs a stage below it (a path ends with 'core')");
        return PS_EINVAL;
    }
    int64_t capacity = ps_params_int(params, "capacity"), window = window_of(params);
    if (mode_of(params) == PREFETCH_NONE && ps_params_given(params, "window")) {
        snprintf(error, error_size, "stage 'cache': window (%lld) needs prefetch 'window' or 'all' (with prefetch "
                 "'none' a miss reads its one tuple)", (long long)window);
        return PS_EINVAL;
    }
    if (mode_of(params) != PREFETCH_NONE && window > capacity) {
        snprintf(error, error_size, "stage 'cache': window (%lld) must not exceed capacity (%lld): a range fetched "
                 "would push itself out", (long long)window, (long long)capacity);
        return PS_EINVAL;
    }
    cache_stage *c = calloc(1, sizeof *c);
    if (!c) return PS_ENOMEM;
    pthread_mutex_init(&c->lock, NULL);
    c->capacity = capacity;
    c->mode = mode_of(params);
    c->window = (uint32_t)window;
    int rc = ps_stage_init(&c->base, &ps_kind_cache, ps_stage_format(below), 0, below);
    size_t size = c->base.tuple_size;
    c->staging_tuples = staging_tuples(params, size);
    c->entry_size = entry_size(size);
    c->entries = malloc((size_t)c->capacity * c->entry_size);
    c->hits = aligned_alloc(CACHE_LINE, PS_PASS_THROUGH_CALLERS * sizeof *c->hits);
    c->staging = c->staging_tuples ? malloc((size_t)c->staging_tuples * size) : NULL;
    if (rc == PS_OK && (!c->entries || !c->hits || (c->staging_tuples && !c->staging))) rc = PS_ENOMEM;
    if (rc != PS_OK) {
        cache_destroy(&c->base);
        ps_stage_abandon(&c->base);
        return rc;
    }
    /* Touched now, at build, so that no fetch pays the first touch of its pages. */
    memset(c->entries, 0, (size_t)c->capacity * c->entry_size); /* stamp 0: no tuple held */
    memset(c->hits, 0, PS_PASS_THROUGH_CALLERS * sizeof *c->hits);
    if (c->staging) memset(c->staging, 0, (size_t)c->staging_tuples * size);
    *out = &c->base;
    return PS_OK;
}

static const ps_param_spec CACHE_PARAMS[] = {
    {"capacity", PS_PARAM_INT, 0, "1024", 1, 1 << 20, NULL, "tuples kept (direct-mapped by index)", PS_PARAM_GIVEN},
    {"prefetch", PS_PARAM_STR, 0, "none", 0, -1, "none|all|window",
     "none: a miss reads one tuple; window: a miss at i reads i .. i+window-1 in one request; all: as window, "
     "and the history there is when the first caller attaches", PS_PARAM_GIVEN},
    {"window", PS_PARAM_INT, 0, "64", 1, 1 << 20, NULL,
     "tuples a miss fetches with prefetch (at most capacity; not given: 64, or capacity if less)", PS_PARAM_GIVEN},
};

const ps_stage_kind ps_kind_cache = {
    .version = PS_STAGE_KIND_VERSION,
    .name = "cache",
    .doc = "Serves repeated indexed observes locally, and may fetch ranges of the history in one request; tuples "
           "are immutable, so it is always correct.",
    .params = CACHE_PARAMS,
    .param_count = sizeof CACHE_PARAMS / sizeof CACHE_PARAMS[0],
    .role = PS_PASS_THROUGH,
    .needs_below = 1,
    .create = cache_create,
    .call = cache_call,
    .footprint = cache_footprint,
    .counters = cache_counters,
    .destroy = cache_destroy,
    .attach = cache_attach,
};
