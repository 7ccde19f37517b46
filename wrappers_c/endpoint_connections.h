/* endpoint_connections.h — the connections to a server's main endpoint (a ZeroMQ socket), kept
 * few enough that a newcomer always finds a descriptor.
 *
 * A client connects there for a request or two (BUILD, PEER, PING) and leaves, so a connection
 * that stays open long is no client's, and any peer can open many. The table follows the
 * socket's connections from its monitor's events; when more are open than the table allows (at
 * most PS_ENDPOINT_CONNECTIONS_MAX, and a quarter of the process's descriptors), the oldest that
 * has no BUILD waiting for its answer is closed (its descriptor shut down: ZeroMQ then drops it;
 * a ZeroMQ client connects again when it next sends). The oldest, not the one silent longest: a
 * peer that keeps its connections busy cannot make a newcomer's, which has not sent its BUILD
 * yet, the one to go. A descriptor is shut down only while it is still the connection that was
 * accepted on it (the same two addresses), never another that took its number. The table is its
 * serving thread's own.
 */
#ifndef WRAPPERS_ENDPOINT_CONNECTIONS_H
#define WRAPPERS_ENDPOINT_CONNECTIONS_H

#include <stdatomic.h>
#include <stdint.h>
#include <sys/socket.h>

#ifdef __cplusplus
extern "C" {
#endif

enum {
    PS_ENDPOINT_CONNECTIONS_MAX = 128,     /* open at once before the oldest is closed, at most */
    PS_ENDPOINT_CONNECTIONS_TRACKED = 256, /* those with BUILDs waiting may go past it, up to this */
};

typedef struct ps_endpoint_connection {
    int fd;
    uint64_t number;   /* which connection on the descriptor: numbers are never reused */
    int64_t opened_ns; /* when it came */
    int builds;        /* its BUILDs not answered yet */
    int closing;       /* shut down here; it leaves the table once ZeroMQ says it is gone */
    struct sockaddr_storage local, peer;
    socklen_t local_length, peer_length;
} ps_endpoint_connection;

typedef struct ps_endpoint_connections {
    void *monitor; /* the ZeroMQ socket's connections accepted and gone (NULL: not followed) */
    int most;      /* open at once before the oldest is closed */
    ps_endpoint_connection open[PS_ENDPOINT_CONNECTIONS_TRACKED];
    int count;
    uint64_t numbers;
    _Atomic int64_t closed; /* connections closed to make room (read by any thread) */
} ps_endpoint_connections;

/* Follows the connections of `socket` (bound to tcp or ipc: inproc has none) from now on;
 * `name` makes the monitor's inproc endpoint unique in the process. Returns 0, or -1 when they
 * cannot be followed (then nothing is closed). */
int ps_endpoint_connections_watch(ps_endpoint_connections *c, void *socket, const char *name);

/* Stops following them (before the socket closes). */
void ps_endpoint_connections_stop(ps_endpoint_connections *c, void *socket);

/* Reads the monitor's events so far: a connection that came is counted (over the most, the
 * oldest is closed), one gone is forgotten. */
void ps_endpoint_connections_update(ps_endpoint_connections *c);

/* A request came on descriptor `fd` (ZMQ_SRCFD; -1: unknown); `build`: a BUILD, counted until
 * ps_endpoint_connections_answered. Returns the connection's number (0: not followed). */
uint64_t ps_endpoint_connections_heard(ps_endpoint_connections *c, int fd, int build);

/* The BUILD heard on connection `number` of `fd` was answered. */
void ps_endpoint_connections_answered(ps_endpoint_connections *c, int fd, uint64_t number);

#ifdef __cplusplus
}
#endif

#endif
