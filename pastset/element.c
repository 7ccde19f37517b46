/* element.c — one PastSet element: an append-only log of fixed-size tuples in chunks.
 *
 * The log is a directory of chunks, each holding a power-of-two number of tuples. Tuple i lives
 * in chunk i >> shift; the directory starts at chunk `chunk_base`, so axe() frees whole chunks
 * from the front and keeps one spare for reuse. An axe never frees a tuple the shared cursor has
 * not passed: past the cursor, the cursor frees the axed chunks as it leaves them. One mutex
 * guards the log and the cursor; waiting happens outside it, on the `arrived` (observers) and
 * `departed` (movers at the delta bound) waitpoints.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* strdup: POSIX, not C11 */
#endif
#include "element.h"

#include <stdlib.h>
#include <string.h>

enum { CHUNK_TARGET_BYTES = 64 * 1024, CHUNK_MIN_TUPLES = 16, DIRECTORY_START = 16 };

static uint32_t chunk_shift_for(size_t tuple_size) {
    uint32_t shift = 0;
    while (((size_t)2 << shift) * tuple_size <= CHUNK_TARGET_BYTES) shift++;
    while (((size_t)1 << shift) < CHUNK_MIN_TUPLES) shift++;
    return shift;
}

ps_element *ps_element_new(const char *name, const ps_tuple_format *format) {
    ps_element *e = aligned_alloc(PS_CACHE_LINE, sizeof *e); /* a multiple of its alignment */
    if (!e) return NULL;
    memset(e, 0, sizeof *e);
    e->name = strdup(name);
    e->directory = calloc(DIRECTORY_START, sizeof *e->directory);
    if (!e->name || !e->directory) {
        free(e->name);
        free(e->directory);
        free(e);
        return NULL;
    }
    e->directory_capacity = DIRECTORY_START;
    e->format = *format;
    e->tuple_size = format->size;
    e->chunk_shift = chunk_shift_for(format->size);
    e->chunk_bytes = ((size_t)1 << e->chunk_shift) * format->size;
    pthread_mutex_init(&e->lock, NULL);
    ps_waitpoint_init(&e->arrived);
    ps_waitpoint_init(&e->departed);
    return e;
}

void ps_element_free(ps_element *e) {
    if (!e) return;
    for (size_t i = 0; i < e->chunk_count; i++) free(e->directory[i]);
    free(e->spare);
    free(e->directory);
    free(e->name);
    pthread_mutex_destroy(&e->lock);
    free(e);
}

const char *ps_element_name(const ps_element *e) { return e->name; }
const ps_tuple_format *ps_element_format(const ps_element *e) { return &e->format; }
size_t ps_element_tuple_size(const ps_element *e) { return e->tuple_size; }

static char *tuple_address(ps_element *e, int64_t index) {
    int64_t chunk = index >> e->chunk_shift;
    size_t slot = (size_t)(index & (((int64_t)1 << e->chunk_shift) - 1));
    return e->directory[chunk - e->chunk_base] + slot * e->tuple_size;
}

/* Makes room for tuple e->last; called with the lock held. */
static int ensure_chunk_for_last(ps_element *e) {
    int64_t chunk = e->last >> e->chunk_shift;
    if (chunk - e->chunk_base < (int64_t)e->chunk_count) return PS_OK;
    if (e->chunk_count == e->directory_capacity) {
        size_t capacity = e->directory_capacity * 2;
        char **grown = realloc(e->directory, capacity * sizeof *grown);
        if (!grown) return PS_ENOMEM;
        e->directory = grown;
        e->directory_capacity = capacity;
    }
    char *fresh = e->spare;
    e->spare = NULL;
    if (!fresh) {
        fresh = malloc(e->chunk_bytes);
        if (!fresh) return PS_ENOMEM;
        e->bytes_held += (int64_t)e->chunk_bytes;
    }
    e->directory[e->chunk_count++] = fresh;
    return PS_OK;
}

/* Called with the lock held when an operation must wait: counts the wait and the waiter (once
 * per operation), releases the lock and waits for the waitpoint to move past `seen`. Counted
 * under the lock, a waiter is seen by every change made after its look: a waker bumps the
 * waitpoint only when someone waits. A timed-out waiter is no longer counted. */
static int wait_unlocked(ps_element *e, ps_waitpoint *w, int64_t *waiting, uint32_t seen, int64_t timeout_ns,
                         int64_t *deadline, uint32_t *spins) {
    if (*spins == 0) {
        e->waits++;
        (*waiting)++;
        *deadline = ps_deadline(timeout_ns);
    }
    pthread_mutex_unlock(&e->lock);
    int rc = ps_waitpoint_wait(w, seen, *deadline, spins);
    if (rc == PS_ETIMEDOUT) {
        pthread_mutex_lock(&e->lock);
        (*waiting)--;
        pthread_mutex_unlock(&e->lock);
    }
    return rc;
}

/* Called with the lock held by an operation that is done: it waits no more. */
static void done_waiting(int64_t *waiting, uint32_t spins) {
    if (spins) (*waiting)--;
}

/* After a change that may let waiters go on; `observers` and `movers` were read under the lock. */
static void wake_waiting(ps_element *e, int64_t observers, int64_t movers) {
    if (observers) ps_waitpoint_wake(&e->arrived);
    if (movers) ps_waitpoint_wake(&e->departed);
}

/* With the lock held: whether the delta bound lets a move in now. */
static int has_room(const ps_element *e) { return e->delta == 0 || e->last - e->first < e->delta; }

/* With the lock held and room: appends the tuple. */
static int append(ps_element *e, const void *tuple) {
    int rc = ensure_chunk_for_last(e);
    if (rc != PS_OK) return rc;
    memcpy(tuple_address(e, e->last), tuple, e->tuple_size);
    e->last++;
    return PS_OK;
}

/* With the lock held: frees the chunks that lie wholly before `index`, keeping one spare. */
static void free_chunks_before(ps_element *e, int64_t index) {
    size_t dead = 0;
    while (dead < e->chunk_count && ((e->chunk_base + (int64_t)dead + 1) << e->chunk_shift) <= index) dead++;
    for (size_t i = 0; i < dead; i++) {
        if (!e->spare) {
            e->spare = e->directory[i];
        } else {
            free(e->directory[i]);
            e->bytes_held -= (int64_t)e->chunk_bytes;
        }
    }
    if (dead) {
        memmove(e->directory, e->directory + dead, (e->chunk_count - dead) * sizeof *e->directory);
        e->chunk_count -= dead;
        e->chunk_base += (int64_t)dead;
    }
}

/* With the lock held: the tuples before this index are freed (axed, and passed by the cursor). */
static int64_t freed_below(const ps_element *e) { return e->axed < e->first ? e->axed : e->first; }

/* With the lock held and an unread tuple: reads it and advances the cursor; returns its index.
 * Leaving a chunk that lies before the axe point frees it. */
static int64_t take_next(ps_element *e, void *out) {
    int64_t index = e->first++;
    memcpy(out, tuple_address(e, index), e->tuple_size);
    e->observes++;
    if (e->first <= e->axed && (e->first & (((int64_t)1 << e->chunk_shift) - 1)) == 0)
        free_chunks_before(e, e->first);
    return index;
}

int ps_move(ps_element *e, const void *tuple, int64_t timeout_ns) {
    int64_t deadline = 0;
    uint32_t spins = 0;
    for (;;) {
        uint32_t seen = ps_waitpoint_sequence(&e->departed);
        pthread_mutex_lock(&e->lock);
        if (has_room(e)) {
            int rc = append(e, tuple);
            done_waiting(&e->movers_waiting, spins);
            int64_t observers = rc == PS_OK ? e->observers_waiting : 0;
            pthread_mutex_unlock(&e->lock);
            wake_waiting(e, observers, 0);
            return rc;
        }
        if (wait_unlocked(e, &e->departed, &e->movers_waiting, seen, timeout_ns, &deadline, &spins) == PS_ETIMEDOUT)
            return PS_ETIMEDOUT;
    }
}

/* With the lock held and room: appends up to n tuples, as many as the delta bound lets in, a
 * chunk's run at a time; returns how many, with the status in *rc. */
static uint32_t append_runs(ps_element *e, const unsigned char *tuples, uint32_t n, int *rc) {
    int64_t room = e->delta == 0 ? n : e->delta - (e->last - e->first);
    if (room < n) n = (uint32_t)room;
    int64_t per_chunk = (int64_t)1 << e->chunk_shift;
    uint32_t done = 0;
    *rc = PS_OK;
    while (done < n && (*rc = ensure_chunk_for_last(e)) == PS_OK) {
        int64_t run = per_chunk - (e->last & (per_chunk - 1));
        if (run > n - done) run = n - done;
        memcpy(tuple_address(e, e->last), tuples + (size_t)done * e->tuple_size, (size_t)run * e->tuple_size);
        e->last += run;
        done += (uint32_t)run;
    }
    return done;
}

int ps_move_many(ps_element *e, const void *tuples, uint32_t count, uint32_t *done, int64_t timeout_ns) {
    const unsigned char *in = tuples;
    int64_t deadline = 0, waited_until = 0; /* deadline: set at the first wait, for all of them */
    *done = 0;
    while (*done < count) {
        uint32_t seen = ps_waitpoint_sequence(&e->departed), spins = 0;
        for (;;) { /* one wait for room, like ps_move's */
            pthread_mutex_lock(&e->lock);
            if (has_room(e)) break;
            if (!deadline) deadline = ps_deadline(timeout_ns);
            if (wait_unlocked(e, &e->departed, &e->movers_waiting, seen, ps_remaining(deadline), &waited_until,
                              &spins) == PS_ETIMEDOUT)
                return PS_ETIMEDOUT;
            seen = ps_waitpoint_sequence(&e->departed);
        }
        int rc;
        *done += append_runs(e, in + (size_t)*done * e->tuple_size, count - *done, &rc);
        done_waiting(&e->movers_waiting, spins);
        int64_t observers = e->observers_waiting;
        pthread_mutex_unlock(&e->lock);
        wake_waiting(e, observers, 0);
        if (rc != PS_OK) return rc;
    }
    return PS_OK;
}

int ps_observe(ps_element *e, void *out, int64_t *index_out, int64_t timeout_ns) {
    int64_t deadline = 0;
    uint32_t spins = 0;
    for (;;) {
        uint32_t seen = ps_waitpoint_sequence(&e->arrived);
        pthread_mutex_lock(&e->lock);
        if (e->first < e->last) {
            int64_t index = take_next(e, out);
            done_waiting(&e->observers_waiting, spins);
            int64_t movers = e->movers_waiting;
            pthread_mutex_unlock(&e->lock);
            wake_waiting(e, 0, movers);
            if (index_out) *index_out = index;
            return PS_OK;
        }
        if (wait_unlocked(e, &e->arrived, &e->observers_waiting, seen, timeout_ns, &deadline, &spins) == PS_ETIMEDOUT)
            return PS_ETIMEDOUT;
    }
}

int ps_exchange(ps_element *e, const void *tuple, void *out, int64_t timeout_ns, int *moved) {
    *moved = 0;
    pthread_mutex_lock(&e->lock);
    if (has_room(e)) {
        int rc = append(e, tuple);
        if (rc == PS_OK) {
            take_next(e, out); /* there is one now */
            *moved = 1;
        }
        /* One in, one out: observe(i) of the new tuple may go on, and movers at the bound too. */
        int64_t observers = rc == PS_OK ? e->observers_waiting : 0, movers = rc == PS_OK ? e->movers_waiting : 0;
        pthread_mutex_unlock(&e->lock);
        wake_waiting(e, observers, movers);
        return rc;
    }
    pthread_mutex_unlock(&e->lock);
    int64_t deadline = ps_deadline(timeout_ns);
    int rc = ps_move(e, tuple, timeout_ns);
    if (rc != PS_OK) return rc;
    *moved = 1;
    return ps_observe(e, out, NULL, ps_remaining(deadline));
}

/* With the lock held and tuples [index, index + n) in the log: copies them out, a chunk's run at
 * a time. */
static void copy_out(ps_element *e, int64_t index, int64_t n, unsigned char *out) {
    int64_t per_chunk = (int64_t)1 << e->chunk_shift;
    while (n > 0) {
        int64_t run = per_chunk - (index & (per_chunk - 1));
        if (run > n) run = n;
        memcpy(out, tuple_address(e, index), (size_t)run * e->tuple_size);
        out += (size_t)run * e->tuple_size;
        index += run;
        n -= run;
    }
}

int ps_observe_range(ps_element *e, int64_t index, uint32_t max, void *out, int64_t *count, int64_t timeout_ns) {
    *count = 0;
    if (index < 0) return PS_EINDEX;
    int64_t deadline = 0;
    uint32_t spins = 0;
    for (;;) {
        uint32_t seen = ps_waitpoint_sequence(&e->arrived);
        pthread_mutex_lock(&e->lock);
        if (index < e->axed) {
            *count = e->axed;
            done_waiting(&e->observers_waiting, spins);
            pthread_mutex_unlock(&e->lock);
            return PS_EAXED;
        }
        if (index < e->last) {
            int64_t n = e->last - index < (int64_t)max ? e->last - index : (int64_t)max;
            copy_out(e, index, n, out);
            e->observes += n;
            *count = n;
            done_waiting(&e->observers_waiting, spins);
            pthread_mutex_unlock(&e->lock);
            return PS_OK;
        }
        if (wait_unlocked(e, &e->arrived, &e->observers_waiting, seen, timeout_ns, &deadline, &spins) == PS_ETIMEDOUT)
            return PS_ETIMEDOUT;
    }
}

int ps_observe_at(ps_element *e, int64_t index, void *out, int64_t timeout_ns) {
    int64_t count;
    return ps_observe_range(e, index, 1, out, &count, timeout_ns);
}

static int64_t read_locked(ps_element *e, const int64_t *field) {
    pthread_mutex_lock(&e->lock);
    int64_t value = *field;
    pthread_mutex_unlock(&e->lock);
    return value;
}

int64_t ps_first(ps_element *e) { return read_locked(e, &e->first); }
int64_t ps_last(ps_element *e) { return read_locked(e, &e->last); }
int64_t ps_axed(ps_element *e) { return read_locked(e, &e->axed); }
const int64_t *ps_axe_point(ps_element *e) { return &e->axed; }
int64_t ps_delta(ps_element *e) { return read_locked(e, &e->delta); }

int ps_set_delta(ps_element *e, int64_t bound) {
    if (bound < 0) return PS_EINVAL;
    pthread_mutex_lock(&e->lock);
    e->delta = bound;
    pthread_mutex_unlock(&e->lock);
    ps_waitpoint_wake(&e->departed);
    return PS_OK;
}

int ps_axe(ps_element *e, int64_t index) {
    if (index < 0) return PS_EINDEX;
    pthread_mutex_lock(&e->lock);
    if (index > e->last) {
        pthread_mutex_unlock(&e->lock);
        return PS_EINDEX;
    }
    if (index > e->axed) __atomic_store_n(&e->axed, index, __ATOMIC_RELEASE); /* read unlocked: ps_axe_point */
    free_chunks_before(e, freed_below(e));
    pthread_mutex_unlock(&e->lock);
    return PS_OK;
}

void ps_element_stats_read(ps_element *e, ps_element_stats *out) {
    pthread_mutex_lock(&e->lock);
    out->live_tuples = e->last - freed_below(e);
    out->bytes_held = e->bytes_held;
    out->moves = e->last;
    out->observes = e->observes;
    out->waits = e->waits;
    pthread_mutex_unlock(&e->lock);
}
