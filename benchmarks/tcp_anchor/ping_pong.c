/* ping_pong.c — the physical limit for a remote stage's round trip here: a C ping-pong of small
 * frames between two processes over a loopback TCP socket, nothing else on the path.
 *
 *   ping_pong echo [poll]                  binds tcp://127.0.0.1 (a free port), prints
 *                                          "READY <endpoint>", takes one connection and sends
 *                                          back every byte it reads until the client closes
 *   ping_pong client ENDPOINT ROUNDS BYTES [poll]
 *                                          ROUNDS round trips of BYTES each (after 100 of
 *                                          warm-up), prints "median_us <median>"
 *
 * Reads block in the kernel (a round trip wakes each side once), or with `poll` spin on
 * non-blocking reads (no wake-up: what a waiting remote stage does first); TCP_NODELAY on both
 * ends. Built by benchmarks/anchors.py: cc -O2 -I benchmarks ping_pong.c.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "latencies.h"

enum { BUFFER_BYTES = 65536, WARM_UP = 100 };

static int write_all(int fd, const char *buffer, size_t length) {
    for (size_t sent = 0; sent < length;) {
        ssize_t n = send(fd, buffer + sent, length - sent, MSG_NOSIGNAL);
        if (n <= 0) return -1;
        sent += (size_t)n;
    }
    return 0;
}

static int read_flags; /* 0: reads block; MSG_DONTWAIT: they spin until data comes */

/* recv, spinning while a non-blocking read finds nothing yet. */
static ssize_t receive(int fd, char *buffer, size_t length) {
    ssize_t n;
    while ((n = recv(fd, buffer, length, read_flags)) < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {}
    return n;
}

static void no_delay(int fd) {
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

static int echo(void) {
    int listener = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in address = {0};
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t length = sizeof address;
    if (listener < 0 || bind(listener, (struct sockaddr *)&address, sizeof address) != 0 || listen(listener, 1) != 0 ||
        getsockname(listener, (struct sockaddr *)&address, &length) != 0) {
        perror("ping_pong echo: cannot listen");
        return 1;
    }
    printf("READY tcp://127.0.0.1:%u\n", ntohs(address.sin_port));
    fflush(stdout);
    int fd = accept(listener, NULL, NULL);
    close(listener);
    if (fd < 0) {
        perror("ping_pong echo: accept");
        return 1;
    }
    no_delay(fd);
    static char buffer[BUFFER_BYTES];
    ssize_t n;
    while ((n = receive(fd, buffer, sizeof buffer)) > 0)
        if (write_all(fd, buffer, (size_t)n) != 0) break;
    close(fd);
    return 0;
}

static int client(const char *endpoint, long rounds, long bytes) {
    unsigned port = 0;
    if (rounds <= 0 || bytes <= 0 || bytes > BUFFER_BYTES || sscanf(endpoint, "tcp://127.0.0.1:%u", &port) != 1) {
        fprintf(stderr, "ping_pong client: expected tcp://127.0.0.1:PORT, ROUNDS > 0, 0 < BYTES <= %d\n",
                BUFFER_BYTES);
        return 2;
    }
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in address = {0};
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    address.sin_port = htons((unsigned short)port);
    double *latencies = malloc((size_t)rounds * sizeof *latencies);
    static char buffer[BUFFER_BYTES];
    if (fd < 0 || !latencies || connect(fd, (struct sockaddr *)&address, sizeof address) != 0) {
        perror("ping_pong client: cannot connect");
        return 1;
    }
    no_delay(fd);
    for (long i = -WARM_UP; i < rounds; i++) {
        double begin = now_us();
        if (write_all(fd, buffer, (size_t)bytes) != 0) return 1;
        for (long got = 0; got < bytes;) {
            ssize_t n = receive(fd, buffer + got, (size_t)(bytes - got));
            if (n <= 0) {
                fprintf(stderr, "ping_pong client: the echo closed the connection\n");
                return 1;
            }
            got += n;
        }
        if (i >= 0) latencies[i] = now_us() - begin;
    }
    close(fd);
    printf("median_us %.3f\n", median_of(latencies, rounds));
    free(latencies);
    return 0;
}

int main(int argc, char **argv) {
    int polls = argc > 2 && strcmp(argv[argc - 1], "poll") == 0;
    read_flags = polls ? MSG_DONTWAIT : 0;
    if (argc == 2 + polls && strcmp(argv[1], "echo") == 0) return echo();
    if (argc == 5 + polls && strcmp(argv[1], "client") == 0) return client(argv[2], atol(argv[3]), atol(argv[4]));
    fprintf(stderr, "usage: ping_pong echo [poll] | ping_pong client ENDPOINT ROUNDS BYTES [poll]\n");
    return 2;
}
