/* stage.h — the stage interface every wrapper implements, and the registry of stage kinds.
 *
 * A stage offers the operations of an element (move, observe, observe_at, first, last, delta,
 * axe) and holds a link to the next stage toward the element. Callers reach a stage through a
 * link: a thread's handle is a link, and so is a stage's connection to the stage below it. The
 * link carries the caller's slot (its contributor number at that stage) and its own move and
 * observe counts, which is all the per-caller state a stage such as reduce-sum needs.
 *
 * Stages are reference counted: every link holds one reference, and the owner that built the
 * stage holds one. The last release destroys the stage, which flushes what it must (a trace
 * writes its file) and releases its own link downward.
 *
 * A stage kind is a name, a table of typed parameters with defaults, and a constructor. Adding
 * a kind is one C file plus one line in registry.c.
 */
#ifndef WRAPPERS_STAGE_H
#define WRAPPERS_STAGE_H

#include <stddef.h>
#include <stdint.h>

#include "pastset.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ps_stage ps_stage;
typedef struct ps_stage_kind ps_stage_kind;

/* One caller's connection to a stage. Used by one thread at a time. */
typedef struct ps_link {
    ps_stage *stage;
    uint32_t slot;      /* this caller's contributor number at the stage: 0, 1, ... */
    uint64_t moves;     /* moves this caller made through the link */
    uint64_t observes;  /* next-observes this caller made through the link */
    /* Counted by the link's one user at a time (a joining stage's link below is handed from
     * thread to thread under the stage's own guard), read by anyone (relaxed atomics): no
     * shared cache line is written per operation. The stage adds them up when asked. */
    int64_t operations;
    int64_t bytes;
    int64_t waits;      /* calls that had to wait */
} ps_link;

/* A named counter a stage reports (operations, hits, events, ...). */
typedef struct ps_counter {
    const char *name;
    int64_t value;
} ps_counter;

/* ---- parameters ---------------------------------------------------------------------------- */

typedef enum ps_param_type { PS_PARAM_INT, PS_PARAM_FLOAT, PS_PARAM_STR } ps_param_type;

typedef struct ps_param_spec {
    const char *name;
    ps_param_type type;
    int required;
    const char *default_value; /* as text, for documentation and for filling in: NULL if required */
    int64_t min, max;          /* for ints (and floats, as whole numbers); min > max: no range */
    const char *choices;       /* for strings: "a|b|c", or NULL for any string */
    const char *doc;
} ps_param_spec;

typedef struct ps_param_value {
    const char *name;
    ps_param_type type;
    int64_t i;
    double f;
    const char *s;
} ps_param_value;

typedef struct ps_params {
    const ps_param_value *values;
    size_t count;
} ps_params;

/* Typed look-ups; the constructor's parameters are already checked against the kind's table
 * (ps_params_check), with defaults filled in by the caller. */
int64_t ps_params_int(const ps_params *p, const char *name);
double ps_params_float(const ps_params *p, const char *name);
const char *ps_params_str(const ps_params *p, const char *name);

/* What a constructor may need besides its parameters. */
typedef struct ps_build_context {
    ps_space *space;   /* where the core stage finds or creates its element */
} ps_build_context;

/* How a stage reaches the stage below it.
 * PS_JOINING: the stage is one caller of the stage below (reduce-sum: its callers' rounds become
 *   one contribution). It attaches one link when created.
 * PS_PASS_THROUGH: each caller of the stage stays a distinct caller below (trace, cache, delay), so
 *   a trace above a reduce-sum of four threads still gives the sum four contributors. The stage
 *   attaches one link below per caller, when the caller attaches. */
typedef enum ps_stage_joining { PS_JOINING, PS_PASS_THROUGH } ps_stage_joining;

struct ps_stage_kind {
    const char *name;
    const char *doc;
    const ps_param_spec *params;
    size_t param_count;
    /* Creates the stage above `next` (NULL for a stage that is itself the bottom). On failure
     * returns a status and writes a reason into error. */
    int (*create)(const ps_params *params, const ps_build_context *context, ps_stage *next,
                  ps_stage **out, char *error, size_t error_size);
    ps_stage_joining joining;
};

/* ---- the registry ------------------------------------------------------------------------- */

size_t ps_stage_kind_count(void);
const ps_stage_kind *ps_stage_kind_at(size_t i);
const ps_stage_kind *ps_stage_kind_find(const char *name);

/* Checks values against the kind's table: unknown, missing, wrong type, out of range, not a
 * choice. Returns 0 or PS_EINVAL with a reason naming the stage and the parameter. */
int ps_params_check(const ps_stage_kind *kind, const ps_params *params, char *error, size_t error_size);

/* Checks the parameters and creates the stage. The caller owns one reference. */
int ps_stage_create(const ps_stage_kind *kind, const ps_params *params, const ps_build_context *context,
                    ps_stage *next, ps_stage **out, char *error, size_t error_size);

/* ---- using a stage ------------------------------------------------------------------------ */

void ps_stage_retain(ps_stage *stage);
void ps_stage_release(ps_stage *stage);
const char *ps_stage_kind_name(const ps_stage *stage);
/* Fan-in (0 = any) and callers attached so far. */
uint32_t ps_stage_max_links(const ps_stage *stage);
uint32_t ps_stage_link_count(const ps_stage *stage);
const ps_tuple_format *ps_stage_format(const ps_stage *stage);
/* The last failure explained by the stage or by a stage below it ("" if none): what a status
 * code alone cannot say, such as which server did not answer. */
const char *ps_stage_error(const ps_stage *stage);

/* Attaches a new caller: fills link with a fresh slot and a reference. PS_ESTATE when the
 * stage's fan-in is already used up. */
int ps_stage_attach(ps_stage *stage, ps_link *link);
/* Drops the link's reference; the link may not be used afterwards. */
void ps_link_detach(ps_link *link);

/* Calls through a link: the generic counters are kept here, the work is the kind's. */
int ps_link_move(ps_link *link, const void *tuple, int64_t timeout_ns);
int ps_link_observe(ps_link *link, void *out, int64_t timeout_ns);
int ps_link_observe_at(ps_link *link, int64_t index, void *out, int64_t timeout_ns);
int ps_link_first(ps_link *link, int64_t *out);
int ps_link_last(ps_link *link, int64_t *out);
int ps_link_delta(ps_link *link, int64_t bound, int64_t *out);
int ps_link_axe(ps_link *link, int64_t index);
/* Move then observe (one round trip through a remote stage). *moved tells whether the move
 * took effect: after a timeout with *moved set, only the observe remains to be done. */
int ps_link_exchange(ps_link *link, const void *tuple, void *out, int64_t timeout_ns, int *moved);

/* Reads the generic and the kind's counters: returns how many were written (at most max). */
int ps_stage_counters(ps_stage *stage, ps_counter *out, int max);

#ifdef __cplusplus
}
#endif

#endif
