/* space.c — a PastSet: the table of elements addressed by (name, format).
 *
 * Elements are found by name in a hash table (chains through the elements themselves; the table
 * doubles as it fills), so entering one of 10^5 names costs what entering one of ten does. They
 * are also kept in creation order, for listing. An element counts its holds (ps_enter takes one,
 * ps_leave drops it); ps_remove frees only an element nobody holds.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "element.h"

enum { FIRST_BUCKETS = 16 };

struct ps_space {
    pthread_mutex_t lock;      /* guards everything below and every element's `in_space` fields */
    ps_element **buckets;      /* bucket_count chains, through in_space.next_in_bucket */
    size_t bucket_count;       /* a power of two */
    size_t count;
    ps_element *oldest, *newest; /* creation order, through in_space.older / newer */
    uint64_t seed;             /* per space: names that collide in one space need not in another */
};

static const char *const STATUS_NAMES[PS_STATUS_COUNT] = {
    "ok", "timed out", "axed", "bad index", "bad format", "format mismatch", "out of memory",
    "invalid argument", "closed", "wrong state", "not supported", "remote failure", "interrupted",
};

const char *ps_status_name(int status) {
    if (status < 0 || status >= PS_STATUS_COUNT) return "unknown status";
    return STATUS_NAMES[status];
}

ps_space *ps_space_new(void) {
    ps_space *space = calloc(1, sizeof *space);
    if (!space) return NULL;
    space->buckets = calloc(FIRST_BUCKETS, sizeof *space->buckets);
    if (!space->buckets) {
        free(space);
        return NULL;
    }
    space->bucket_count = FIRST_BUCKETS;
    space->seed = (uint64_t)ps_now_ns() ^ (uint64_t)(uintptr_t)space;
    pthread_mutex_init(&space->lock, NULL);
    return space;
}

void ps_space_free(ps_space *space) {
    if (!space) return;
    for (ps_element *e = space->oldest, *newer; e; e = newer) {
        newer = e->in_space.newer;
        ps_element_free(e);
    }
    free(space->buckets);
    pthread_mutex_destroy(&space->lock);
    free(space);
}

/* FNV-1a over the name from a per-space start, then a final mix so that every bit counts in the
 * bucket chosen by the low bits. */
static uint64_t name_hash(const ps_space *space, const char *name) {
    uint64_t h = 0xcbf29ce484222325ULL ^ space->seed;
    for (const unsigned char *p = (const unsigned char *)name; *p; p++) h = (h ^ *p) * 0x100000001b3ULL;
    h ^= h >> 33;
    h *= 0xff51afd7ed558ccdULL;
    h ^= h >> 33;
    return h;
}

static ps_element **bucket_of(ps_space *space, uint64_t hash) {
    return &space->buckets[hash & (space->bucket_count - 1)];
}

/* With the lock held: the element named `name`, or NULL. */
static ps_element *find(ps_space *space, const char *name, uint64_t hash) {
    for (ps_element *e = *bucket_of(space, hash); e; e = e->in_space.next_in_bucket)
        if (e->in_space.hash == hash && strcmp(e->name, name) == 0) return e;
    return NULL;
}

/* With the lock held: twice the buckets once there are more elements than buckets. Without the
 * memory to grow, the chains just grow longer. */
static void grow_if_full(ps_space *space) {
    if (space->count < space->bucket_count) return;
    size_t count = space->bucket_count * 2;
    ps_element **buckets = calloc(count, sizeof *buckets);
    if (!buckets) return;
    free(space->buckets);
    space->buckets = buckets;
    space->bucket_count = count;
    for (ps_element *e = space->oldest; e; e = e->in_space.newer) {
        ps_element **bucket = bucket_of(space, e->in_space.hash);
        e->in_space.next_in_bucket = *bucket;
        *bucket = e;
    }
}

static void link_element(ps_space *space, ps_element *e) {
    ps_element **bucket = bucket_of(space, e->in_space.hash);
    e->in_space.next_in_bucket = *bucket;
    *bucket = e;
    e->in_space.older = space->newest;
    if (space->newest) space->newest->in_space.newer = e;
    else space->oldest = e;
    space->newest = e;
    space->count++;
}

static void unlink_element(ps_space *space, ps_element *e) {
    ps_element **at = bucket_of(space, e->in_space.hash);
    while (*at != e) at = &(*at)->in_space.next_in_bucket;
    *at = e->in_space.next_in_bucket;
    if (e->in_space.older) e->in_space.older->in_space.newer = e->in_space.newer;
    else space->oldest = e->in_space.newer;
    if (e->in_space.newer) e->in_space.newer->in_space.older = e->in_space.older;
    else space->newest = e->in_space.older;
    space->count--;
}

/* An address (name, format) as the table takes it: PS_OK with the format parsed and the name's hash. */
static int parse_address(const ps_space *space, const char *name, const char *format, ps_tuple_format *parsed,
                         uint64_t *hash) {
    if (!name || !*name || strlen(name) > PS_NAME_MAX) return PS_EINVAL;
    if (ps_tuple_format_parse(format, parsed, NULL, 0) != 0) return PS_EFORMAT;
    *hash = name_hash(space, name);
    return PS_OK;
}

int ps_enter(ps_space *space, const char *name, const char *format, ps_element **out) {
    *out = NULL;
    ps_tuple_format parsed;
    uint64_t hash;
    int rc = parse_address(space, name, format, &parsed, &hash);
    if (rc != PS_OK) return rc;
    pthread_mutex_lock(&space->lock);
    ps_element *e = find(space, name, hash);
    if (!e) {
        e = ps_element_new(name, &parsed);
        if (e) {
            e->in_space.hash = hash;
            grow_if_full(space);
            link_element(space, e);
        } else {
            rc = PS_ENOMEM;
        }
    } else if (strcmp(e->format.text, parsed.text) != 0) {
        rc = PS_EMISMATCH;
    }
    if (rc == PS_OK) {
        atomic_fetch_add_explicit(&e->in_space.holds, 1, memory_order_relaxed);
        *out = e;
    }
    pthread_mutex_unlock(&space->lock);
    return rc;
}

void ps_leave(ps_element *e) {
    if (e) atomic_fetch_sub_explicit(&e->in_space.holds, 1, memory_order_release);
}

/* ps_remove, or with `unused` ps_remove_unused: an element nobody holds cannot be moved into
 * meanwhile (a move needs a hold, a hold needs the space's lock). */
static int remove_element(ps_space *space, const char *name, const char *format, int unused, int64_t *holds_out) {
    ps_tuple_format parsed;
    uint64_t hash;
    int rc = parse_address(space, name, format, &parsed, &hash);
    if (rc != PS_OK) return rc;
    pthread_mutex_lock(&space->lock);
    ps_element *e = find(space, name, hash);
    int64_t holds = e ? atomic_load_explicit(&e->in_space.holds, memory_order_acquire) : 0;
    if (!e) rc = PS_EINVAL;
    else if (strcmp(e->format.text, parsed.text) != 0) rc = PS_EMISMATCH;
    else if (holds > 0 || (unused && ps_last(e) > 0)) rc = PS_ESTATE;
    else unlink_element(space, e);
    pthread_mutex_unlock(&space->lock);
    if (holds_out) *holds_out = holds;
    if (rc == PS_OK) ps_element_free(e);
    return rc;
}

int ps_remove(ps_space *space, const char *name, const char *format, int64_t *holds_out) {
    return remove_element(space, name, format, 0, holds_out);
}

int ps_remove_unused(ps_space *space, const char *name, const char *format) {
    return remove_element(space, name, format, 1, NULL);
}

int ps_format_of(ps_space *space, const char *name, char *out, size_t size) {
    if (!name || !*name || strlen(name) > PS_NAME_MAX || !size) return PS_EINVAL;
    uint64_t hash = name_hash(space, name);
    pthread_mutex_lock(&space->lock);
    const ps_element *e = find(space, name, hash);
    if (e) snprintf(out, size, "%s", e->format.text);
    pthread_mutex_unlock(&space->lock);
    return e ? PS_OK : PS_EINVAL;
}

void ps_space_each(ps_space *space, void (*visit)(void *context, const ps_element *e), void *context) {
    pthread_mutex_lock(&space->lock);
    for (const ps_element *e = space->oldest; e; e = e->in_space.newer) visit(context, e);
    pthread_mutex_unlock(&space->lock);
}
