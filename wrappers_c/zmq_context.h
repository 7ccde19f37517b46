/* zmq_context.h — the process's one ZeroMQ context, shared by servers and remote stages (so
 * that inproc endpoints reach across them). Created on first use, kept for the process; creating
 * it raises the process's soft limit on open files to the hard one, and lets the context have as
 * many sockets as that allows (libzmq's own limit permitting). A child made by fork() makes a
 * context of its own on first use (the parent's sockets are not the child's to use). */
#ifndef WRAPPERS_ZMQ_CONTEXT_H
#define WRAPPERS_ZMQ_CONTEXT_H

#ifdef __cplusplus
extern "C" {
#endif

void *ps_zmq_context(void);
/* The most sockets the context may have open at once. */
int ps_zmq_max_sockets(void);
/* Lets a socket bind or connect to the endpoint if its host is an IPv6 address ("tcp://[::1]:7000").
 * Only then: a socket that takes IPv6 binds an IPv4 address as an IPv4-mapped IPv6 one. */
void ps_zmq_allow_ipv6(void *socket, const char *endpoint);

#ifdef __cplusplus
}
#endif

#endif
