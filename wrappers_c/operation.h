/* operation.h — an operation on a stage as a value, and the one table of operation kinds.
 *
 * Every operation a stage offers is a ps_op: its kind, its arguments and, once it returns, its
 * results. A stage kind has one entry point that receives it (stage.h), so a stage that treats
 * every operation alike (trace, delay, remote, the server) has one code path, and passes the very
 * same value on down. The kinds are listed once, in ps_op_kinds (operation.c): their names (trace
 * files, `paths trace` and Python stages read them from there), their op codes in wire frames,
 * and the shape of their arguments and results, from which every generic code path works (the
 * wire, the trace, the Python bridge, a link's counters). A new kind is one enum value here and
 * one row there. Usable from C++.
 *
 * Ownership: an operation belongs to the thread that made it until it returns; its results are
 * all in the value (status, done, value, the tuple at `out`), so another thread that completes it
 * writes only into it.
 */
#ifndef WRAPPERS_OPERATION_H
#define WRAPPERS_OPERATION_H

#include <stddef.h>
#include <stdint.h>

#include "pastset.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum ps_op_kind {
    PS_OP_MOVE,        /* appends the tuple at `in` */
    PS_OP_OBSERVE,     /* the next unread tuple, into `out` */
    PS_OP_OBSERVE_AT,  /* tuple `argument` of the history, into `out` */
    PS_OP_FIRST,       /* value: the index of the next unread tuple */
    PS_OP_LAST,        /* value: the number of tuples moved */
    PS_OP_DELTA,       /* argument: the bound on unread tuples (< 0: only read it); value: the bound */
    PS_OP_AXE,         /* argument: the index before which tuples may be freed */
    PS_OP_EXCHANGE,    /* a move of `in`, then an observe into `out`, as one operation */
    PS_OP_MOVE_MANY,   /* the `count` tuples at `in`, moved in order, as one operation */
    PS_OP_OBSERVE_RANGE, /* tuples `argument`, ... of the history, at most `count` of them, into `out`: it
                            waits for tuple `argument` only, and gives those that exist then; value: how
                            many it gave (on PS_EAXED: the axe point). At most PS_OP_RANGE_MAX_BYTES */
    PS_OP_FLUSH,       /* sends on down what a stage holds back for the caller (a batch's buffer) */
    PS_OP_FENCE,       /* a flush that returns once every earlier move of the caller has been applied at
                          the element (docs/semantics.md, "fence") */
    PS_OP_KIND_COUNT
} ps_op_kind;

/* The shape of a kind: what generic code needs to carry it. */
enum {
    PS_OP_TUPLE_IN = 1 << 0,  /* `in` holds one tuple */
    PS_OP_TUPLES_IN = 1 << 1, /* `in` holds `count` tuples */
    PS_OP_TUPLE_OUT = 1 << 2, /* `out` receives one tuple (on PS_OK) */
    PS_OP_INDEX = 1 << 3,     /* `argument` is an index of the history */
    PS_OP_BOUND = 1 << 4,     /* `argument` is a bound, < 0 for none given */
    PS_OP_VALUE_OUT = 1 << 5, /* the result is `value` */
    PS_OP_WAITS = 1 << 6,     /* it may wait: it takes `timeout_ns` */
    PS_OP_COMPOSED = 1 << 7,  /* made of simpler kinds: a stage that does not take it whole gets
                                 those (ps_op_fallback, stage_base.h) */
    PS_OP_TUPLES_OUT = 1 << 8,/* `out` has room for `count` tuples; `value` says how many it received */
};

/* The most bytes of tuples one observe_range gives (a remote stage carries them as one answer in
 * frames): a larger range is refused with PS_EINVAL. In tuples of a size: ps_op_range_max. */
enum { PS_OP_RANGE_MAX_BYTES = 1 << 22 };

static inline uint32_t ps_op_range_max(size_t tuple_size) {
    size_t n = tuple_size ? PS_OP_RANGE_MAX_BYTES / tuple_size : 1;
    return n ? (uint32_t)n : 1;
}

typedef struct ps_op_info {
    const char *name; /* as Python and trace files name it: "move", "observe_at", ... */
    uint8_t wire;     /* its op code in a frame (wire.md) */
    uint32_t shape;   /* PS_OP_* above */
    uint32_t made_of; /* PS_OP_COMPOSED: the kinds it is made of, a bit (1 << kind) each */
} ps_op_info;

/* Indexed by ps_op_kind. A trace event records the kind's index. */
extern const ps_op_info ps_op_kinds[PS_OP_KIND_COUNT];

typedef struct ps_op {
    ps_op_kind kind;
    int status;          /* result: the operation's status once it has returned */
    int64_t argument;    /* PS_OP_INDEX, PS_OP_BOUND */
    int64_t timeout_ns;  /* PS_OP_WAITS: the longest it may wait (PS_FOREVER: no limit); any other
                            kind, when > 0: the longest it may wait for the caller's moves a stage
                            holds back (ps_held_moves_due) */
    const void *in;      /* PS_OP_TUPLE_IN, PS_OP_TUPLES_IN */
    void *out;           /* PS_OP_TUPLE_OUT, PS_OP_TUPLES_OUT */
    uint32_t count;      /* PS_OP_TUPLES_IN: tuples at `in`; PS_OP_TUPLES_OUT: room at `out` */
    uint32_t done;       /* result: tuples of `in` that took effect, all of them on PS_OK; a
                            failed operation may have done a first part (an exchange its move) */
    int64_t value;       /* result, PS_OP_VALUE_OUT; PS_OP_TUPLES_OUT: the tuples written to `out`; an
                            operation refused PS_EAXED: the first index not freed (-1: not known) */
    int64_t dropped;     /* result of a failed operation: how many moves the caller made before it,
                            taken by a stage that sends them later (a batch, a pipelined remote), were
                            then dropped (a suffix of the caller's moves before it), else 0 */
    int sent_nothing;    /* result of a failed operation: 1 when none of it left for a peer (a connection
                            broken before refused it), so that its `done` is exact (ps_op_unsure) */
} ps_op;

/* The tuples an operation takes in: 0, 1, or its count. */
static inline uint32_t ps_op_tuples_in(const ps_op *op) {
    uint32_t shape = ps_op_kinds[op->kind].shape;
    return shape & PS_OP_TUPLES_IN ? op->count : (shape & PS_OP_TUPLE_IN) != 0;
}

/* The tuples an operation gave back once it returned `status`: 0, 1, or its value. */
static inline uint32_t ps_op_tuples_out(const ps_op *op, int status) {
    uint32_t shape = ps_op_kinds[op->kind].shape;
    if (status != 0) return 0;
    return shape & PS_OP_TUPLES_OUT ? (uint32_t)op->value : (shape & PS_OP_TUPLE_OUT) != 0;
}

/* An operation that does not wait (first, last, delta, axe) waits this long at most for the
 * caller's moves a stage holds back or sent ahead (a batch, a pipelined delay or remote) to take
 * effect before it runs: the caller always sees its own moves. */
static const int64_t PS_UNTIMED_WAIT_NS = 10000000000LL;

/* Until when `op` may wait for the caller's moves a stage holds back: one that waits, its
 * timeout; one that does not, the timeout its caller gave (> 0: a slice, between which a caller
 * hears Ctrl-C), else PS_UNTIMED_WAIT_NS. */
static inline int64_t ps_held_moves_due(const ps_op *op) {
    int waits = (ps_op_kinds[op->kind].shape & PS_OP_WAITS) != 0;
    return ps_deadline(waits || op->timeout_ns > 0 ? op->timeout_ns : PS_UNTIMED_WAIT_NS);
}

/* Whether tuples that an operation which returned `status` did not count as done may have taken
 * effect all the same: a remote peer failed before its answer came back (PS_EREMOTE), so `done`
 * is only what is known. On any other status `done` is exact. */
static inline int ps_op_done_is_at_least(int status) { return status == PS_EREMOTE; }

/* How many of the tuples of `in` that an operation which returned `status` did not count as done
 * may have taken effect all the same: all of them when it failed so (ps_op_done_is_at_least) after
 * it was sent, none when it was not (sent_nothing) or on any other status. */
static inline uint32_t ps_op_unsure(const ps_op *op, int status) {
    return ps_op_done_is_at_least(status) && !op->sent_nothing ? ps_op_tuples_in(op) - op->done : 0;
}

/* Whether a stage may say more about a failure than its status (its error line, for messages):
 * not a timeout, an axed tuple or an index past the end, whose status says all there is. */
static inline int ps_status_is_explained(int status) {
    return status != 0 && status != PS_ETIMEDOUT && status != PS_EAXED && status != PS_EINDEX;
}

/* The kind whose wire op code is `code`, or -1 for none. */
int ps_op_kind_of_wire(unsigned code);

#ifdef __cplusplus
}
#endif

#endif
