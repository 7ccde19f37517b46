/* stage.h — the stage interface every wrapper implements, and the registry of stage kinds.
 *
 * A stage offers the operations of an element (operation.h: move, observe, ... move_many) and
 * holds a link to the next stage toward the element. Callers reach a stage through a link: a
 * thread's handle is a link, and so is a stage's connection to the stage below it. The link
 * carries the caller's slot (its contributor number at that stage) and its own move and observe
 * counts, which is all the per-caller state a stage such as reduce-sum needs. Every operation is
 * one call, ps_link_call(link, op), which hands the operation value to the kind's one entry point.
 *
 * Stages are reference counted: every link holds one reference, and the owner that built the
 * stage holds one. The last release destroys the stage, which flushes what it must (a trace
 * writes its file) and releases its own link downward.
 *
 * A stage kind is one record (ps_stage_kind), filled by field name: its name, its roles (how it
 * reaches the stage below, whether it needs one, whether the rest of the path is built elsewhere),
 * a table of typed parameters with defaults, what it holds in memory, and its functions. Adding a
 * kind is one C file plus one line in registry.c.
 */
#ifndef WRAPPERS_STAGE_H
#define WRAPPERS_STAGE_H

#include <stddef.h>
#include <stdint.h>

#include "operation.h"
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
    int moved_last;     /* its last operation was a move or move_many: a stage below may hold it
                           back (a batch); any other operation sends down what was held first */
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

/* What a parameter is for, besides its value (ps_param_spec.role). */
typedef enum ps_param_role {
    PS_PARAM_GIVEN = 0,        /* given by the path's author */
    PS_PARAM_BUILT,            /* filled in by the builder: "format" (the element's format), "path"
                                  (the rest of the path, as JSON); a path's author does not give it */
    PS_PARAM_WRITTEN_FILE,     /* a file the stage writes: a server keeps it in a folder of its own */
    PS_PARAM_WAIT_MS,          /* a wait, in ms, given by the path's author: a server caps it in the
                                  paths its clients send (a client may not make it wait for long) */
    PS_PARAM_NODES,            /* nodes a stage reaches, comma-separated: the builder of a run turns
                                  each into its server's endpoint, as it does a remote stage's host */
} ps_param_role;

typedef struct ps_param_spec {
    const char *name;
    ps_param_type type;
    int required;
    const char *default_value; /* as text, for documentation and for filling in: NULL if required */
    int64_t min, max;          /* for ints (and floats, as whole numbers); min > max: no range */
    const char *choices;       /* for strings: "a|b|c", or NULL for any string */
    const char *doc;
    ps_param_role role;
} ps_param_spec;

typedef struct ps_param_value {
    const char *name;
    ps_param_type type;
    int64_t i;
    double f;
    const char *s;
    int defaulted;             /* 1: not given, its default filled in */
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
/* Whether the path gave the parameter (0: it has its default). */
int ps_params_given(const ps_params *p, const char *name);

/* What a constructor may need besides its parameters. Fields not set (zero) ask for nothing. */
typedef struct ps_build_context {
    ps_space *space;   /* where the core stage finds or creates its element */
    /* A build a server does for a client may reach only endpoints it trusts: shell patterns
     * (fnmatch) an endpoint must match whole. NULL: any endpoint (a process's own builds). */
    const char *const *trusted_endpoints;
    size_t trusted_endpoint_count;
    /* The CURVE key pair (Z85) this process presents to servers that authenticate their
     * clients; NULL or "": a fresh pair per connection. */
    const char *curve_client_public;
    const char *curve_client_secret;
} ps_build_context;

/* How a stage reaches the stage below it.
 * PS_JOINING: the stage is one caller of the stage below (reduce-sum: its callers' rounds become
 *   one contribution). It attaches one link when created.
 * PS_PASS_THROUGH: each caller of the stage stays a distinct caller below (trace, cache, delay), so
 *   a trace above a reduce-sum of four threads still gives the sum four contributors. The stage
 *   attaches one link below per caller, when the caller attaches. */
typedef enum ps_stage_role { PS_JOINING, PS_PASS_THROUGH } ps_stage_role;

/* The layout of ps_stage_kind this header describes; a record of another version is refused. */
enum { PS_STAGE_KIND_VERSION = 2 };

struct ps_stage_kind {
    int version;               /* PS_STAGE_KIND_VERSION */
    const char *name;
    const char *doc;
    const ps_param_spec *params;
    size_t param_count;

    /* Roles: what a builder needs to know to place the stage in a path. */
    ps_stage_role role;
    int needs_below;           /* 1: it is built above a stage; 0: it ends what is built here */
    const char *rest_at;       /* the parameter naming where the rest of the path is built (the
                                  remote stage's "host"): built there, not below; NULL: here */

    /* Creates the stage above `below` (NULL when it needs none). On failure returns a status and
     * writes a reason into error. */
    int (*create)(const ps_params *params, const ps_build_context *context, ps_stage *below,
                  ps_stage **out, char *error, size_t error_size);
    /* Does one operation that arrived on `link` (a link to this stage). It handles the kinds it
     * cares about and hands the others on: ps_stage_pass (down, unchanged) or ps_op_fallback
     * (stage_base.h). It returns the status; on failure it sets op->done to the tuples of `in`
     * that took effect all the same. */
    int (*call)(ps_link *link, ps_op *op);
    /* The bytes the stage allocates for itself, given its parameters (defaults filled in) and the
     * tuple size: what a budget holds it to. What a caller adds when it attaches (a remote
     * stage's connection buffers) comes with that caller's link, which a server counts apart. */
    size_t (*footprint)(const ps_params *params, size_t tuple_size);
    /* Optional: fills up to max kind-specific counters; returns how many. */
    int (*counters)(ps_stage *stage, ps_counter *out, int max);
    /* Optional: flushes and frees the kind's own state (not the stage struct, not the link below). */
    void (*destroy)(ps_stage *stage);
    /* Optional: a new caller got `slot` (a remote stage connects it to its server here). */
    int (*attach)(ps_stage *stage, uint32_t slot);
    /* Optional: the caller in `slot` is gone (a remote stage releases its server link here; a
     * batch sends what it holds, through the caller's link below, which is still attached). Also
     * called for a slot whose attach failed. */
    void (*detach)(ps_stage *stage, uint32_t slot);
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

/* The bytes a stage of the kind with these parameters would hold over tuples of tuple_size
 * bytes, the generic part included, or 0 with a reason in error when the parameters are wrong. */
size_t ps_stage_footprint(const ps_stage_kind *kind, const ps_params *params, size_t tuple_size, char *error,
                          size_t error_size);

/* ---- using a stage ------------------------------------------------------------------------ */

void ps_stage_retain(ps_stage *stage);
void ps_stage_release(ps_stage *stage);
const char *ps_stage_kind_name(const ps_stage *stage);
/* Fan-in (0 = any) and callers attached so far. */
uint32_t ps_stage_max_links(const ps_stage *stage);
uint32_t ps_stage_link_count(const ps_stage *stage);
const ps_tuple_format *ps_stage_format(const ps_stage *stage);
/* The stage below it (NULL for the core), which it holds as long as it lives. */
ps_stage *ps_stage_below(const ps_stage *stage);
/* A stage's explanation of its last failure holds this much: a server's refusal is up to 1,024
 * bytes (wire.md), and the stage names itself before it. */
enum { PS_STAGE_ERROR_MAX = 1280 };
/* The last failure explained by the stage or by a stage below it ("" if none): what a status
 * code alone cannot say, such as which server did not answer. Of the lines these stages keep, the
 * one written last: an older one (a refusal the caller has heard of) is not the failure of now.
 * Copied into out (size bytes, cut to fit; PS_STAGE_ERROR_MAX holds any), each stage's line read
 * under its lock: another thread may be explaining a failure of its own meanwhile. */
void ps_stage_error(ps_stage *stage, char *out, size_t size);
/* Where a call began, for ps_stage_error_since: the stage errors written so far in the process. */
typedef struct ps_error_mark {
    uint64_t written;
} ps_error_mark;
ps_error_mark ps_stage_error_mark(void);
/* The explanation of a failed call the calling thread began at `since`: the last stage error the
 * thread wrote since, else the newest a stage of the path from `stage` down got since (another
 * thread's, on a stage they share: a sum's round that the caller completing it drove down); ""
 * if none. An older line (a refusal its caller has heard of, another caller's failure before)
 * is never this call's; nor is another thread's while this one wrote its own. */
void ps_stage_error_since(ps_stage *stage, ps_error_mark since, char *out, size_t size);
/* Only the first of those: the last stage error the calling thread wrote since `since` (""). What
 * a server tells a client, and what a stage keeps of a failure to tell its callers again: never
 * another thread's, which may be another client's on a stage they share. */
void ps_stage_said_since(ps_error_mark since, char *out, size_t size);
/* Prints `paths: <what>: <that explanation>` on stderr: a failure a caller that leaves can no
 * longer be told of. */
void ps_stage_print_error(ps_stage *stage, const char *what);

/* Attaches a new caller: fills link with a fresh slot and a reference. PS_ESTATE when the
 * stage's fan-in is already used up. */
int ps_stage_attach(ps_stage *stage, ps_link *link);
/* Drops the link's reference; the link may not be used afterwards. */
void ps_link_detach(ps_link *link);

/* Does one operation through the link: the kind's call, then the link's generic counters (one
 * operation, the bytes of the tuples that went in and came out). Sets op->status and op->done
 * (all of `in` on PS_OK) and returns the status. */
int ps_link_call(ps_link *link, ps_op *op);

/* A fence over n links (paths_fence): what each holds back goes down, the first's with its own
 * fence (a fence through a sum may wait for another link's move of the round), then each is
 * fenced. Returns the first failure, with the index of the link it came from in *failed. */
int ps_links_fence(ps_link *const *links, size_t n, int64_t timeout_ns, size_t *failed);

/* Reads the generic and the kind's counters: returns how many were written (at most max). */
int ps_stage_counters(ps_stage *stage, ps_counter *out, int max);

#ifdef __cplusplus
}
#endif

#endif
