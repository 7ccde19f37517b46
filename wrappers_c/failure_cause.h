/* failure_cause.h — what a failure's status cannot say (a Python stage's exception), kept for the
 * thread that met it: the binding that raises the failure to its caller takes it from there. The
 * C core only carries it, with a deferred failure, from a stage's own thread (a batch's sender, a
 * pipelined delay's courier) to the caller that hears of the failure; `drop` frees it.
 */
#ifndef WRAPPERS_FAILURE_CAUSE_H
#define WRAPPERS_FAILURE_CAUSE_H

#ifdef __cplusplus
extern "C" {
#endif

typedef void (*ps_cause_drop)(void *cause);

/* Makes `cause` this thread's (dropping the one it had). */
void ps_failure_cause_set(void *cause, ps_cause_drop drop);
/* Takes this thread's cause (NULL: none), with how to drop it into *drop. */
void *ps_failure_cause_take(ps_cause_drop *drop);
/* Drops this thread's cause, if any: it has no caller to reach. */
void ps_failure_cause_clear(void);

#ifdef __cplusplus
}
#endif

#endif
