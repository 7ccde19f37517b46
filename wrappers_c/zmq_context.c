/* zmq_context.c — the process's one ZeroMQ context. */
#include "zmq_context.h"

#include <pthread.h>
#include <zmq.h>

static pthread_once_t once = PTHREAD_ONCE_INIT;
static void *context;

static void create(void) { context = zmq_ctx_new(); }

void *ps_zmq_context(void) {
    pthread_once(&once, create);
    return context;
}
