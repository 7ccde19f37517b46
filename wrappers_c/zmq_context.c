/* zmq_context.c — the process's one ZeroMQ context, with as many sockets as the machine allows. */
#include "zmq_context.h"

#include <pthread.h>
#include <string.h>
#include <sys/resource.h>
#include <zmq.h>

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static void *context;
static int forgets_in_children; /* forget_in_child is registered */

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

/* A child made by fork() has the parent's context but not its I/O thread: it makes its own. The
 * parent's sockets it inherited stay unusable (ZeroMQ is not fork-safe); new ones work. */
static void forget_in_child(void) {
    pthread_mutex_init(&lock, NULL);
    context = NULL;
}

static void create(void) {
    if (!forgets_in_children) forgets_in_children = pthread_atfork(NULL, NULL, forget_in_child) == 0;
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
    pthread_mutex_lock(&lock);
    if (!context) create();
    void *made = context;
    pthread_mutex_unlock(&lock);
    return made;
}

int ps_zmq_max_sockets(void) { return zmq_ctx_get(ps_zmq_context(), ZMQ_MAX_SOCKETS); }

void ps_zmq_allow_ipv6(void *socket, const char *endpoint) {
    int one = 1;
    if (strstr(endpoint, "://[")) zmq_setsockopt(socket, ZMQ_IPV6, &one, sizeof one);
}
