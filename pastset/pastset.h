/* pastset.h — the PastSet tuple space: public C API.
 *
 * A PastSet (ps_space) holds elements. An element is an ordered, append-only log of tuples of
 * one fixed-size type, addressed by (name, format), where format is a Python `struct` format
 * string. Operations: move (append), observe (next unread, shared cursor), observe_at (any index
 * of the history), first/last, delta (flow-control bound on unread tuples), axe (free history).
 *
 * All calls are thread safe. Blocking calls take a timeout in nanoseconds (PS_FOREVER to wait
 * without limit) and return PS_ETIMEDOUT when it expires. No call allocates in steady state: the
 * log grows in chunks, and freed chunks are recycled.
 */
#ifndef PASTSET_H
#define PASTSET_H

#include <stddef.h>
#include <stdint.h>

#include "tuple_format.h"

#ifdef __cplusplus
extern "C" {
#endif

#define PS_FOREVER ((int64_t)-1)
#define PS_NAME_MAX 255 /* longest element name, in bytes */

/* Status codes returned by every operation (0 = success). */
typedef enum ps_status {
    PS_OK = 0,
    PS_ETIMEDOUT,   /* a blocking call's timeout expired */
    PS_EAXED,       /* the index was freed by axe() */
    PS_EINDEX,      /* the index is negative or otherwise invalid */
    PS_EFORMAT,     /* a bad format string */
    PS_EMISMATCH,   /* the name exists with another format */
    PS_ENOMEM,      /* out of memory */
    PS_EINVAL,      /* an invalid argument */
    PS_ECLOSED,     /* the element or stage is shutting down */
    PS_ESTATE,      /* the operation does not fit the stage's state (e.g. fan-in exceeded) */
    PS_ENOTSUP,     /* the stage does not support the operation */
    PS_EREMOTE,     /* a remote peer failed or answered with an error */
    PS_EINTR,       /* interrupted by the caller (e.g. a pending signal) */
    PS_STATUS_COUNT
} ps_status;

const char *ps_status_name(int status);

/* Monotonic clock in nanoseconds, and the deadline for a timeout (PS_FOREVER, and a timeout that
 * reaches past the clock's end, give PS_FOREVER). */
int64_t ps_now_ns(void);
int64_t ps_deadline(int64_t timeout_ns);
/* The timeout left until a deadline: PS_FOREVER stays forever, a deadline passed gives 0. */
int64_t ps_remaining(int64_t deadline_ns);
/* A call made in slices (Python's, which looks for Ctrl-C between them) sets the deadline of the
 * whole call for its thread (0: none, as when the slice is the call); returns the one before.
 * What must not end with a slice (an answer on its way, a crossing back over a slow link) waits
 * by ps_call_deadline(the slice's deadline): the later of the two. */
int64_t ps_call_deadline_set(int64_t deadline_ns);
int64_t ps_call_deadline(int64_t deadline_ns);

typedef struct ps_space ps_space;
typedef struct ps_element ps_element;

/* Counters of one element, read without stopping it. */
typedef struct ps_element_stats {
    int64_t live_tuples;   /* tuples held: last - min(axe point, first) */
    int64_t bytes_held;    /* bytes of log chunks allocated (held or spare) */
    int64_t moves;
    int64_t observes;      /* next-observes and indexed observes */
    int64_t waits;         /* operations that had to wait (spin, yield or sleep) */
} ps_element_stats;

ps_space *ps_space_new(void);
/* Frees the space and all its elements. No thread may still use them. */
void ps_space_free(ps_space *space);

/* Finds or creates the element (name, format), in constant time, and takes one hold on it: give
 * it back with ps_leave when done (ps_space_free frees every element, held or not). Returns
 * PS_EINVAL for a name that is empty or longer than 255 bytes, PS_EFORMAT for a bad format
 * string, PS_EMISMATCH when the name exists with another format. */
int ps_enter(ps_space *space, const char *name, const char *format, ps_element **out);
/* Gives back one hold taken by ps_enter; the element may not be used through it afterwards. */
void ps_leave(ps_element *e);
/* Frees the element (name, format) and its tuples, so that a later ps_enter starts a new one
 * (PastSet's delelement). Refused while anyone holds it: PS_ESTATE, with the holds in *holds_out
 * (may be NULL). PS_EINVAL when there is no element of that name, PS_EMISMATCH when it has
 * another format, PS_EFORMAT for a bad format string. */
int ps_remove(ps_space *space, const char *name, const char *format, int64_t *holds_out);
/* ps_remove of an element nothing was ever moved into (what a refused build made): PS_ESTATE
 * while anyone holds it or once a tuple went in. */
int ps_remove_unused(ps_space *space, const char *name, const char *format);
/* Copies the format text of the element named `name` into out (PS_FORMAT_MAX_TEXT + 1 bytes hold
 * any): what a PS_EMISMATCH is about. PS_EINVAL when there is no such element. */
int ps_format_of(ps_space *space, const char *name, char *out, size_t size);

/* Calls visit(context, e) for every element, in creation order, with the space locked: visit
 * may read the element's name and format, and must not call into the space. */
void ps_space_each(ps_space *space, void (*visit)(void *context, const ps_element *e), void *context);

const char *ps_element_name(const ps_element *e);
const ps_tuple_format *ps_element_format(const ps_element *e);
size_t ps_element_tuple_size(const ps_element *e);

/* Appends one tuple (tuple_size bytes). Blocks while the unread tuples reach the delta bound. */
int ps_move(ps_element *e, const void *tuple, int64_t timeout_ns);
/* Appends `count` tuples in order, as many at a time as the delta bound lets in (under one hold
 * of the lock, copied a chunk's run at a time), blocking for room as ps_move does; *done tells how
 * many took effect, also when it fails or times out. */
int ps_move_many(ps_element *e, const void *tuples, uint32_t count, uint32_t *done, int64_t timeout_ns);
/* Reads the next unread tuple into out and advances the shared cursor; blocks until one exists.
 * index_out (may be NULL) receives the tuple's index. */
int ps_observe(ps_element *e, void *out, int64_t *index_out, int64_t timeout_ns);
/* ps_move then ps_observe as one operation: under one hold of the lock when the move need not
 * wait. *moved tells whether the move took effect (a timed-out observe can then be retried). */
int ps_exchange(ps_element *e, const void *tuple, void *out, int64_t timeout_ns, int *moved);
/* Reads tuple `index` of the history into out; blocks until it exists. */
int ps_observe_at(ps_element *e, int64_t index, void *out, int64_t timeout_ns);
/* Reads tuples index, index + 1, ... of the history into out, at most max of them: it blocks until
 * tuple `index` exists, then gives every tuple up to max that exists at that moment, and their
 * number in *count. PS_EAXED (with the axe point in *count) for an index before the axe point. */
int ps_observe_range(ps_element *e, int64_t index, uint32_t max, void *out, int64_t *count, int64_t timeout_ns);
int64_t ps_first(ps_element *e);   /* index of the next unread tuple */
int64_t ps_last(ps_element *e);    /* number of tuples moved */
int64_t ps_axed(ps_element *e);    /* the axe point: observe_at refuses the tuples before it */
/* The word that holds the axe point, for a reader that may not take the element's lock on each
 * look (a cache's hit): read it with __atomic_load_n(word, __ATOMIC_ACQUIRE). It lives as long
 * as the element. */
const int64_t *ps_axe_point(ps_element *e);
/* Sets the bound on unread tuples (0 = unbounded); wakes movers the new bound admits. */
int ps_set_delta(ps_element *e, int64_t bound);
int64_t ps_delta(ps_element *e);
/* Frees the tuples before index (index <= last) that the shared cursor has passed; those it has
 * not passed stay for next-observes, and are freed as the cursor passes them. The axe point
 * only grows: observe_at(i) of an i before it is PS_EAXED, read or not. The cursor never moves. */
int ps_axe(ps_element *e, int64_t index);
void ps_element_stats_read(ps_element *e, ps_element_stats *out);

#ifdef __cplusplus
}
#endif

#endif
