/* zmq_context.c — the process's one ZeroMQ context, with as many sockets as the machine allows. */
#include "zmq_context.h"

#include <pthread.h>
#include <string.h>
#include <sys/resource.h>
#include <zmq.h>

static pthread_once_t once = PTHREAD_ONCE_INIT;
static void *context;

/* Raises the process's soft limit on open files to the hard one, and returns the hard one. */
static rlim_t raise_open_files(void) {
    struct rlimit files;
    if (getrlimit(RLIMIT_NOFILE, &files) != 0) return 1024;
    if (files.rlim_cur < files.rlim_max) {
        files.rlim_cur = files.rlim_max;
        setrlimit(RLIMIT_NOFILE, &files);
    }
    getrlimit(RLIMIT_NOFILE, &files);
    return files.rlim_cur;
}

static void create(void) {
    context = zmq_ctx_new();
    if (!context) return;
    /* Every socket holds a descriptor (its mailbox), so there can be no more of them than of those;
     * libzmq's default (1023) would let one client's links starve everyone else's far sooner. */
    rlim_t files = raise_open_files();
    int sockets = zmq_ctx_get(context, ZMQ_SOCKET_LIMIT); /* what this libzmq can have at all */
    if (sockets > 0 && files < (rlim_t)sockets) sockets = (int)files;
    if (sockets > 0) zmq_ctx_set(context, ZMQ_MAX_SOCKETS, sockets);
}

void *ps_zmq_context(void) {
    pthread_once(&once, create);
    return context;
}

int ps_zmq_max_sockets(void) { return zmq_ctx_get(ps_zmq_context(), ZMQ_MAX_SOCKETS); }

void ps_zmq_allow_ipv6(void *socket, const char *endpoint) {
    int one = 1;
    if (strstr(endpoint, "://[")) zmq_setsockopt(socket, ZMQ_IPV6, &one, sizeof one);
}
