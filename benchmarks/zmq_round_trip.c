/* zmq_round_trip.c — the raw ZeroMQ anchor for remote stages: a DEALER client and a ROUTER echo
 * thread over TCP on loopback, the same socket pattern and frame size a remote stage uses. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <zmq.h>

#include "kernels.h"
#include "pastset.h"
#include "zmq_context.h"

typedef struct echo {
    void *socket;
} echo;

/* Sends every [id, message] back until an empty message arrives. */
static void *echo_thread(void *arg) {
    echo *e = arg;
    for (;;) {
        zmq_msg_t id, message;
        zmq_msg_init(&id);
        zmq_msg_init(&message);
        if (zmq_msg_recv(&id, e->socket, 0) < 0 || zmq_msg_recv(&message, e->socket, 0) < 0) break;
        int stop = zmq_msg_size(&message) == 0;
        zmq_msg_send(&id, e->socket, ZMQ_SNDMORE);
        zmq_msg_send(&message, e->socket, 0);
        zmq_msg_close(&id);
        zmq_msg_close(&message);
        if (stop) break;
    }
    return NULL;
}

static int compare_doubles(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

double ps_kernel_zmq_round_trip_us(int64_t rounds, int64_t bytes) {
    if (rounds <= 0 || bytes <= 0 || bytes > 65536) return -1.0;
    echo e = {zmq_socket(ps_zmq_context(), ZMQ_ROUTER)};
    void *client = zmq_socket(ps_zmq_context(), ZMQ_DEALER);
    char endpoint[256];
    size_t length = sizeof endpoint;
    int zero = 0;
    zmq_setsockopt(e.socket, ZMQ_LINGER, &zero, sizeof zero);
    zmq_setsockopt(client, ZMQ_LINGER, &zero, sizeof zero);
    double *latencies = malloc((size_t)rounds * sizeof *latencies);
    char *buffer = calloc(1, (size_t)bytes);
    pthread_t thread;
    double median = -1.0;
    if (latencies && buffer && zmq_bind(e.socket, "tcp://127.0.0.1:*") == 0 &&
        zmq_getsockopt(e.socket, ZMQ_LAST_ENDPOINT, endpoint, &length) == 0 && zmq_connect(client, endpoint) == 0 &&
        pthread_create(&thread, NULL, echo_thread, &e) == 0) {
        int ok = 1;
        for (int64_t i = -100; i < rounds && ok; i++) { /* 100 rounds of warm-up */
            int64_t begin = ps_now_ns();
            ok = zmq_send(client, buffer, (size_t)bytes, 0) == bytes && zmq_recv(client, buffer, (size_t)bytes, 0) == bytes;
            if (i >= 0) latencies[i] = (double)(ps_now_ns() - begin) / 1e3;
        }
        zmq_send(client, "", 0, 0);
        pthread_join(thread, NULL);
        if (ok) {
            qsort(latencies, (size_t)rounds, sizeof *latencies, compare_doubles);
            median = latencies[rounds / 2];
        }
    }
    zmq_close(client);
    zmq_close(e.socket);
    free(latencies);
    free(buffer);
    return median;
}
