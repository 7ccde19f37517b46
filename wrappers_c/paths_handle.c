/* paths_handle.c — the handle half of paths.h: a paths_handle is a caller's ps_link, so every
 * operation is one operation value through the link's call, with nothing in between. */
#include "paths.h"

#include "failure_cause.h"
#include "stage_base.h"

/* paths.h's numbers are the core's: a status passes through unchanged. */
_Static_assert(PATHS_FOREVER == PS_FOREVER, "PATHS_FOREVER is the core's PS_FOREVER");
_Static_assert(PATHS_ETIMEDOUT == PS_ETIMEDOUT && PATHS_EAXED == PS_EAXED && PATHS_EINDEX == PS_EINDEX &&
                   PATHS_EFORMAT == PS_EFORMAT && PATHS_EMISMATCH == PS_EMISMATCH && PATHS_ENOMEM == PS_ENOMEM &&
                   PATHS_EINVAL == PS_EINVAL && PATHS_ECLOSED == PS_ECLOSED && PATHS_ESTATE == PS_ESTATE &&
                   PATHS_ENOTSUP == PS_ENOTSUP && PATHS_EREMOTE == PS_EREMOTE && PATHS_EINTR == PS_EINTR,
               "paths.h statuses are the core's ps_status values");
_Static_assert(PATHS_EFAILED >= PS_STATUS_COUNT, "PATHS_EFAILED is none of the core's statuses");

static ps_link *link_of(paths_handle *h) { return (ps_link *)h; }
static const ps_link *const_link_of(const paths_handle *h) { return (const ps_link *)h; }

/* The thread's last operation (a failed fence: the handle it failed at), and where it began; for
 * paths_handle_error. */
static _Thread_local const paths_handle *last_handle;
static _Thread_local ps_error_mark last_began;

/* One operation through the handle's link. A C caller hears of a failure by its status: a cause
 * it left this thread (a Python stage's exception, failure_cause.h) has nobody to reach. */
static int call(paths_handle *h, ps_op *op) {
    last_handle = h;
    last_began = ps_stage_error_mark();
    int rc = ps_link_call(link_of(h), op);
    if (rc != PS_OK) ps_failure_cause_clear();
    return rc;
}

/* A timeout is a number of nanoseconds or PATHS_FOREVER; any other negative value is a mistake
 * (a deadline already passed, say), refused rather than taken as no limit. A NULL handle, a NULL
 * buffer where tuples go in or come out, or more tuples than memory holds, are refused too: each
 * with PS_EINVAL and nothing done, where a stage would only crash on them. */
static int bad_timeout(int64_t timeout_ns) { return timeout_ns < 0 && timeout_ns != PATHS_FOREVER; }

int paths_move(paths_handle *h, const void *tuple, int64_t timeout_ns) {
    if (bad_timeout(timeout_ns) || !h || !tuple) return PS_EINVAL;
    ps_op op = {.kind = PS_OP_MOVE, .in = tuple, .timeout_ns = timeout_ns};
    return call(h, &op);
}

int paths_move_many(paths_handle *h, const void *tuples, size_t n, int64_t timeout_ns) {
    if (bad_timeout(timeout_ns) || !h) return PS_EINVAL;
    int64_t deadline = ps_deadline(timeout_ns);
    const unsigned char *next = tuples;
    size_t tuple_size = paths_tuple_size(h);
    if (n && (!tuples || (tuple_size && n > SIZE_MAX / tuple_size))) return PS_EINVAL; /* no buffer that big */
    while (n) { /* one operation per UINT32_MAX tuples at most: the count an operation carries */
        uint32_t count = n > UINT32_MAX ? UINT32_MAX : (uint32_t)n;
        ps_op op = {.kind = PS_OP_MOVE_MANY, .in = next, .count = count, .timeout_ns = ps_remaining(deadline)};
        int rc = call(h, &op);
        if (rc != PS_OK) return rc;
        next += (size_t)count * tuple_size;
        n -= count;
    }
    return PS_OK;
}

int paths_observe(paths_handle *h, void *out, int64_t timeout_ns) {
    if (bad_timeout(timeout_ns) || !h || !out) return PS_EINVAL;
    ps_op op = {.kind = PS_OP_OBSERVE, .out = out, .timeout_ns = timeout_ns};
    return call(h, &op);
}

int paths_observe_at(paths_handle *h, int64_t index, void *out, int64_t timeout_ns) {
    if (bad_timeout(timeout_ns) || !h || !out) return PS_EINVAL;
    ps_op op = {.kind = PS_OP_OBSERVE_AT, .argument = index, .out = out, .timeout_ns = timeout_ns};
    return call(h, &op);
}

int paths_observe_range(paths_handle *h, int64_t index, size_t n, void *out, size_t *got, int64_t timeout_ns) {
    if (got) *got = 0;
    if (bad_timeout(timeout_ns) || !h || !out || !got || n == 0 || n > paths_range_max(h)) return PS_EINVAL;
    ps_op op = {.kind = PS_OP_OBSERVE_RANGE, .argument = index, .out = out, .count = (uint32_t)n,
                .timeout_ns = timeout_ns};
    int rc = call(h, &op);
    if (rc == PS_OK) *got = (size_t)op.value;
    return rc;
}

size_t paths_range_max(const paths_handle *h) { return h ? ps_op_range_max(paths_tuple_size(h)) : 0; }

int paths_fence(paths_handle *const *handles, size_t n, int64_t timeout_ns) {
    if (bad_timeout(timeout_ns) || (n && !handles)) return PS_EINVAL;
    for (size_t i = 0; i < n; i++)
        if (!handles[i]) return PS_EINVAL; /* before any handle's moves go down */
    size_t failed;
    ps_error_mark began = ps_stage_error_mark();
    int rc = ps_links_fence((ps_link *const *)handles, n, timeout_ns, &failed);
    if (rc == PS_OK) return rc;
    ps_failure_cause_clear();
    last_handle = handles[failed]; /* the handle it failed at: paths_handle_error's */
    last_began = began;
    return rc;
}

/* first, last: the value of an operation that takes nothing in. */
static int value_of(paths_handle *h, ps_op_kind kind, int64_t *out) {
    if (!h || !out) return PS_EINVAL;
    ps_op op = {.kind = kind};
    int rc = call(h, &op);
    *out = op.value;
    return rc;
}

int paths_first(paths_handle *h, int64_t *out) { return value_of(h, PS_OP_FIRST, out); }
int paths_last(paths_handle *h, int64_t *out) { return value_of(h, PS_OP_LAST, out); }

int paths_axe(paths_handle *h, int64_t index) {
    if (!h) return PS_EINVAL;
    ps_op op = {.kind = PS_OP_AXE, .argument = index};
    return call(h, &op);
}

size_t paths_tuple_size(const paths_handle *h) { return h ? ps_stage_format(const_link_of(h)->stage)->size : 0; }
const char *paths_format(const paths_handle *h) { return h ? ps_stage_format(const_link_of(h)->stage)->text : ""; }

const char *paths_handle_error(const paths_handle *h) {
    static _Thread_local char line[PS_STAGE_ERROR_MAX];
    line[0] = 0;
    if (h && h == last_handle) ps_stage_error_since(const_link_of(h)->stage, last_began, line, sizeof line);
    else if (h) ps_stage_error(const_link_of(h)->stage, line, sizeof line); /* not its last operation's */
    return line;
}

int64_t paths_now_ns(void) { return ps_now_ns(); }

const char *paths_strerror(int status) {
    static const char *const NAMES[PS_STATUS_COUNT] = {
        "PATHS_OK: success",
        "PATHS_ETIMEDOUT: a timeout passed",
        "PATHS_EAXED: the tuple was freed by axe",
        "PATHS_EINDEX: a bad index",
        "PATHS_EFORMAT: a bad format string",
        "PATHS_EMISMATCH: the element exists with another format",
        "PATHS_ENOMEM: out of memory",
        "PATHS_EINVAL: a bad argument",
        "PATHS_ECLOSED: the element or a stage is shutting down",
        "PATHS_ESTATE: the call does not fit the stage's state",
        "PATHS_ENOTSUP: a stage on the path does not support the call",
        "PATHS_EREMOTE: a server on the path failed or is gone",
        "PATHS_EINTR: interrupted",
    };
    if (status == PATHS_EFAILED) return "PATHS_EFAILED: the kernel's own failure";
    if (status < 0 || status >= PS_STATUS_COUNT) return "a status PATHS does not know (the kernel's own)";
    return NAMES[status];
}
