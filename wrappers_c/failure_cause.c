/* failure_cause.c — see failure_cause.h. */
#include "failure_cause.h"

#include <stddef.h>

static _Thread_local void *current;
static _Thread_local ps_cause_drop current_drop;

void ps_failure_cause_set(void *cause, ps_cause_drop drop) {
    ps_failure_cause_clear();
    current = cause;
    current_drop = drop;
}

void *ps_failure_cause_take(ps_cause_drop *drop) {
    void *cause = current;
    *drop = current_drop;
    current = NULL;
    return cause;
}

void ps_failure_cause_clear(void) {
    ps_cause_drop drop;
    void *cause = ps_failure_cause_take(&drop);
    if (cause) drop(cause);
}
