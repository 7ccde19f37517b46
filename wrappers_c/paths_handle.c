/* paths_handle.c — the handle half of paths.h: a paths_handle is a caller's ps_link, so every
 * operation is the link's own call, with nothing in between. */
#include "paths.h"

#include "stage.h"

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

int paths_move(paths_handle *h, const void *tuple, int64_t timeout_ns) {
    return ps_link_move(link_of(h), tuple, timeout_ns);
}

int paths_observe(paths_handle *h, void *out, int64_t timeout_ns) {
    return ps_link_observe(link_of(h), out, timeout_ns);
}

int paths_observe_at(paths_handle *h, int64_t index, void *out, int64_t timeout_ns) {
    return ps_link_observe_at(link_of(h), index, out, timeout_ns);
}

int paths_first(paths_handle *h, int64_t *out) { return ps_link_first(link_of(h), out); }
int paths_last(paths_handle *h, int64_t *out) { return ps_link_last(link_of(h), out); }
int paths_axe(paths_handle *h, int64_t index) { return ps_link_axe(link_of(h), index); }

size_t paths_tuple_size(const paths_handle *h) { return ps_stage_format(const_link_of(h)->stage)->size; }
const char *paths_format(const paths_handle *h) { return ps_stage_format(const_link_of(h)->stage)->text; }

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
