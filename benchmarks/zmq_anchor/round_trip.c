/* round_trip.c — the raw ZeroMQ anchor for remote stages with client and server in two
 * processes, as a remote stage on proto zmq and `paths serve` are: a DEALER and a ROUTER echo,
 * frames of a remote stage's size.
 *
 *   round_trip echo                       binds a ROUTER on tcp://127.0.0.1:*, prints
 *                                         "READY <endpoint>", echoes every [id, message] until
 *                                         an empty message arrives
 *   round_trip client ENDPOINT ROUNDS BYTES
 *                                         one DEALER: ROUNDS round trips of BYTES each (after 100
 *                                         of warm-up), prints "median_us <median>", stops the echo
 *
 * Built by benchmarks/anchors.py: cc -O2 -I benchmarks round_trip.c $(pkg-config --cflags --libs libzmq).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zmq.h>

#include "latencies.h"

static int echo(void *context) {
    void *socket = zmq_socket(context, ZMQ_ROUTER);
    char endpoint[256];
    size_t length = sizeof endpoint;
    if (!socket || zmq_bind(socket, "tcp://127.0.0.1:*") != 0 ||
        zmq_getsockopt(socket, ZMQ_LAST_ENDPOINT, endpoint, &length) != 0) {
        fprintf(stderr, "round_trip echo: cannot bind: %s\n", zmq_strerror(zmq_errno()));
        return 1;
    }
    printf("READY %s\n", endpoint);
    fflush(stdout);
    for (;;) {
        zmq_msg_t id, message;
        zmq_msg_init(&id);
        zmq_msg_init(&message);
        if (zmq_msg_recv(&id, socket, 0) < 0 || zmq_msg_recv(&message, socket, 0) < 0) break;
        int stop = zmq_msg_size(&message) == 0;
        zmq_msg_send(&id, socket, ZMQ_SNDMORE);
        zmq_msg_send(&message, socket, 0);
        zmq_msg_close(&id);
        zmq_msg_close(&message);
        if (stop) break;
    }
    zmq_close(socket);
    return 0;
}

static int client(void *context, const char *endpoint, long rounds, long bytes) {
    if (rounds <= 0 || bytes <= 0 || bytes > 65536) {
        fprintf(stderr, "round_trip client: expected ROUNDS > 0 and 0 < BYTES <= 65536\n");
        return 2;
    }
    void *socket = zmq_socket(context, ZMQ_DEALER);
    int zero = 0;
    zmq_setsockopt(socket, ZMQ_LINGER, &zero, sizeof zero);
    double *latencies = malloc((size_t)rounds * sizeof *latencies);
    char *buffer = calloc(1, (size_t)bytes);
    if (!latencies || !buffer || zmq_connect(socket, endpoint) != 0) {
        fprintf(stderr, "round_trip client: cannot connect to %s\n", endpoint);
        return 1;
    }
    for (long i = -100; i < rounds; i++) {
        double begin = now_us();
        if (zmq_send(socket, buffer, (size_t)bytes, 0) != bytes || zmq_recv(socket, buffer, (size_t)bytes, 0) != bytes) {
            fprintf(stderr, "round_trip client: a round trip failed: %s\n", zmq_strerror(zmq_errno()));
            return 1;
        }
        if (i >= 0) latencies[i] = now_us() - begin;
    }
    zmq_send(socket, "", 0, 0);
    zmq_recv(socket, buffer, (size_t)bytes, 0); /* the echo's goodbye: it has seen the stop */
    printf("median_us %.3f\n", median_of(latencies, rounds));
    zmq_close(socket);
    free(latencies);
    free(buffer);
    return 0;
}

int main(int argc, char **argv) {
    void *context = zmq_ctx_new();
    int rc = 2;
    if (argc == 2 && strcmp(argv[1], "echo") == 0) rc = echo(context);
    else if (argc == 5 && strcmp(argv[1], "client") == 0) rc = client(context, argv[2], atol(argv[3]), atol(argv[4]));
    else fprintf(stderr, "usage: round_trip echo | round_trip client ENDPOINT ROUNDS BYTES\n");
    zmq_ctx_term(context);
    return rc;
}
