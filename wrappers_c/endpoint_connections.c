/* endpoint_connections.c — the connections to a server's main endpoint, the oldest closed when
 * too many are open (endpoint_connections.h). */
#include "endpoint_connections.h"

#include <stdio.h>
#include <string.h>
#include <sys/resource.h>
#include <zmq.h>

#include "pastset.h"
#include "zmq_context.h"

int ps_endpoint_connections_watch(ps_endpoint_connections *c, void *socket, const char *name) {
    memset(c, 0, sizeof *c);
    struct rlimit descriptors;
    c->most = PS_ENDPOINT_CONNECTIONS_MAX;
    if (getrlimit(RLIMIT_NOFILE, &descriptors) == 0 && descriptors.rlim_cur / 4 < (rlim_t)c->most)
        c->most = descriptors.rlim_cur / 4 > 8 ? (int)(descriptors.rlim_cur / 4) : 8;
    char endpoint[128];
    snprintf(endpoint, sizeof endpoint, "inproc://paths-endpoint-connections-%s", name);
    if (zmq_socket_monitor(socket, endpoint, ZMQ_EVENT_ACCEPTED | ZMQ_EVENT_DISCONNECTED) != 0) return -1;
    void *monitor = zmq_socket(ps_zmq_context(), ZMQ_PAIR);
    if (monitor && zmq_connect(monitor, endpoint) == 0) {
        c->monitor = monitor;
        return 0;
    }
    if (monitor) zmq_close(monitor);
    zmq_socket_monitor(socket, NULL, 0);
    return -1;
}

void ps_endpoint_connections_stop(ps_endpoint_connections *c, void *socket) {
    if (!c->monitor) return;
    zmq_socket_monitor(socket, NULL, 0);
    zmq_close(c->monitor);
    c->monitor = NULL;
}

static void forget(ps_endpoint_connections *c, int i) { c->open[i] = c->open[--c->count]; }

static int find(const ps_endpoint_connections *c, int fd) {
    for (int i = 0; i < c->count; i++)
        if (c->open[i].fd == fd) return i;
    return -1;
}

/* Whether descriptor `fd` is still the connection accepted on it: the same two addresses. */
static int still(const ps_endpoint_connection *e) {
    struct sockaddr_storage local, peer;
    socklen_t local_length = sizeof local, peer_length = sizeof peer;
    return getsockname(e->fd, (struct sockaddr *)&local, &local_length) == 0 &&
           getpeername(e->fd, (struct sockaddr *)&peer, &peer_length) == 0 && local_length == e->local_length &&
           peer_length == e->peer_length && memcmp(&local, &e->local, local_length) == 0 &&
           memcmp(&peer, &e->peer, peer_length) == 0;
}

/* Closes the oldest connection with no BUILD waiting, but the one at *kept (which it follows as
 * entries move): 1 when one was. A descriptor that is no longer its connection is forgotten on
 * the way. */
static int close_oldest(ps_endpoint_connections *c, int *kept) {
    for (;;) {
        int oldest = -1;
        for (int i = 0; i < c->count; i++) {
            const ps_endpoint_connection *e = &c->open[i];
            if (i != *kept && !e->closing && e->builds == 0 && (oldest < 0 || e->opened_ns < c->open[oldest].opened_ns))
                oldest = i;
        }
        if (oldest < 0) return 0;
        if (still(&c->open[oldest])) {
            shutdown(c->open[oldest].fd, SHUT_RDWR);
            c->open[oldest].closing = 1;
            atomic_fetch_add(&c->closed, 1);
            return 1;
        }
        forget(c, oldest); /* gone, its event still on the way */
        if (*kept == c->count) *kept = oldest; /* it moved into the place forgotten */
    }
}

static int open_count(const ps_endpoint_connections *c) {
    int open = 0;
    for (int i = 0; i < c->count; i++) open += !c->open[i].closing;
    return open;
}

/* A place in a full table: those closed here are forgotten first, then the oldest is closed and
 * forgotten. -1 when every one followed waits for a BUILD's answer. */
static void forget_closing(ps_endpoint_connections *c) {
    for (int i = c->count - 1; i >= 0; i--)
        if (c->open[i].closing) forget(c, i);
}

static int make_place(ps_endpoint_connections *c) {
    forget_closing(c);
    int none = -1;
    if (c->count == PS_ENDPOINT_CONNECTIONS_TRACKED && close_oldest(c, &none)) forget_closing(c);
    return c->count < PS_ENDPOINT_CONNECTIONS_TRACKED ? c->count++ : -1;
}

static void accepted(ps_endpoint_connections *c, int fd) {
    ps_endpoint_connection e = {.fd = fd, .number = ++c->numbers, .opened_ns = ps_now_ns()};
    e.local_length = sizeof e.local;
    e.peer_length = sizeof e.peer;
    if (getsockname(fd, (struct sockaddr *)&e.local, &e.local_length) != 0 ||
        getpeername(fd, (struct sockaddr *)&e.peer, &e.peer_length) != 0)
        return; /* gone already */
    int i = find(c, fd); /* a connection gone whose event is still on the way had the descriptor */
    if (i < 0 && (i = make_place(c)) < 0) {
        shutdown(fd, SHUT_RDWR);
        atomic_fetch_add(&c->closed, 1);
        return;
    }
    c->open[i] = e;
    while (open_count(c) > c->most && close_oldest(c, &i)) {
    }
}

void ps_endpoint_connections_update(ps_endpoint_connections *c) {
    if (!c->monitor) return;
    for (;;) {
        zmq_msg_t event, address;
        zmq_msg_init(&event);
        if (zmq_msg_recv(&event, c->monitor, ZMQ_DONTWAIT) < 0) {
            zmq_msg_close(&event);
            return;
        }
        if (zmq_msg_size(&event) >= 6) {
            const unsigned char *data = zmq_msg_data(&event);
            uint16_t code;
            uint32_t fd;
            memcpy(&code, data, sizeof code);
            memcpy(&fd, data + 2, sizeof fd);
            if (code == ZMQ_EVENT_ACCEPTED) {
                accepted(c, (int)fd);
            } else if (code == ZMQ_EVENT_DISCONNECTED) {
                int i = find(c, (int)fd);
                if (i >= 0) forget(c, i);
            }
        }
        if (zmq_msg_more(&event)) {
            zmq_msg_init(&address);
            zmq_msg_recv(&address, c->monitor, 0);
            zmq_msg_close(&address);
        }
        zmq_msg_close(&event);
    }
}

uint64_t ps_endpoint_connections_heard(ps_endpoint_connections *c, int fd, int build) {
    int i = fd < 0 ? -1 : find(c, fd);
    if (i < 0) return 0;
    c->open[i].builds += build != 0;
    return c->open[i].number;
}

void ps_endpoint_connections_answered(ps_endpoint_connections *c, int fd, uint64_t number) {
    int i = number ? find(c, fd) : -1;
    if (i >= 0 && c->open[i].number == number && c->open[i].builds > 0) c->open[i].builds--;
}
