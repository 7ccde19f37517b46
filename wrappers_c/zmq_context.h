/* zmq_context.h — the process's one ZeroMQ context, shared by servers and remote stages (so
 * that inproc endpoints reach across them). Created on first use, kept for the process. */
#ifndef WRAPPERS_ZMQ_CONTEXT_H
#define WRAPPERS_ZMQ_CONTEXT_H

#ifdef __cplusplus
extern "C" {
#endif

void *ps_zmq_context(void);

#ifdef __cplusplus
}
#endif

#endif
