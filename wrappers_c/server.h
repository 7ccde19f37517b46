/* server.h — the PastSet server: serves remote callers' operations on server-side links.
 *
 * The main socket (a ROUTER at the server's endpoint) only takes BUILD requests, which the
 * owner (Python, in paths/runtime/server.py) answers by building the path remainder into the server's
 * stage table and handing over the new link. Each link then gets its own thread and its own
 * way in, the one the client asked for: a ZeroMQ socket on an endpoint of its own, or a direct
 * TCP or Unix-socket listener that admits one connection, the one that presents the link's
 * secret (handed over in the BUILD answer). A caller blocked in an observe holds only its own
 * thread, never the server, and a round trip crosses no extra hop; on a direct link the link's
 * thread itself reads each request and writes its answer. Frames are checked (wire.h) before
 * anything is done with them; a malformed one is answered with PS_EINVAL. A link whose client is
 * gone without releasing it (its connections closed, or silent past the heartbeat timeout) ends
 * as if released, so a crashed client's hold on the server's stages does not outlive it.
 */
#ifndef WRAPPERS_SERVER_H
#define WRAPPERS_SERVER_H

#include <stddef.h>
#include <stdint.h>

#include "stage.h"
#include "zap_handler.h"

#ifdef __cplusplus
extern "C" {
#endif

enum { PS_ROUTING_ID_MAX = 256, PS_SPEC_MAX = 65536 };

typedef struct ps_server ps_server;

/* One BUILD request waiting for its answer. */
typedef struct ps_build_request {
    unsigned char routing_id[PS_ROUTING_ID_MAX];
    size_t routing_id_length;
    uint64_t request_id;
    int transport;              /* ps_wire_transport: how the client's operations will travel */
    char client[PS_CLIENT_NAME_MAX + 8]; /* who sent it: "key NAME" (an authenticated client),
                                            else its address, else "local" */
    char user[PS_CLIENT_NAME_MAX];      /* an authenticated client's key NAME, else "": the one
                                            client its ZeroMQ link then serves */
    char spec[PS_SPEC_MAX + 1]; /* the path remainder as sent (NUL-terminated) */
    int connection_fd;          /* the connection it came on: its descriptor, and its number at the */
    uint64_t connection;        /* main endpoint (endpoint_connections.h; 0: not followed) */
} ps_build_request;

typedef struct ps_server_counters {
    int64_t frames;      /* frames received, all sockets */
    int64_t bad_frames;  /* frames refused as malformed or misaddressed */
    int64_t builds;      /* links handed over */
    int64_t direct;      /* of which on a direct transport (tcp, ipc) */
    int64_t live;        /* links being served */
    int64_t abandoned;   /* links ended because every connection of their client closed */
    int64_t refused;     /* direct connections turned away: no or a wrong secret, garbage, too slow */
    int64_t crowded_out; /* connections to the main endpoint closed to make room for newcomers */
} ps_server_counters;

/* Binds the main socket. curve_secret_z85 (40 characters) makes every socket a CURVE server;
 * NULL or "" serves in the clear. With authenticate_clients (CURVE only), every socket admits
 * only the clients whose keys ps_server_allow_clients lists (none until then). */
int ps_server_start(const char *endpoint, const char *curve_secret_z85, int authenticate_clients, ps_server **out,
                    char *error, size_t error_size);
/* The client keys the server admits from now on (replacing the earlier ones). */
int ps_server_allow_clients(ps_server *server, const ps_client_key *keys, size_t count, char *error,
                            size_t error_size);
/* The endpoint actually bound (a '*' port resolved). */
const char *ps_server_endpoint(const ps_server *server);

/* Waits up to timeout_ns for the next BUILD request (answering PINGs and refusing anything
 * else meanwhile). PS_OK with *out filled, or PS_ETIMEDOUT. */
int ps_server_next_build(ps_server *server, int64_t timeout_ns, ps_build_request *out);

/* Answers a BUILD: with a link to serve (the caller keeps it alive until ps_server_reap returns
 * its id, or until ps_server_stop) and *handle_id set, or with link NULL and an error text. */
int ps_server_answer_build(ps_server *server, const ps_build_request *request, ps_link *link,
                           const char *error_text, uint64_t *handle_id);

/* Ids of links whose clients released them, or whose threads have ended, each once; up to max.
 * A released link is not used again, though its thread may still be ending. */
size_t ps_server_reap(ps_server *server, uint64_t *ids, size_t max);

void ps_server_read_counters(ps_server *server, ps_server_counters *out);

/* Ends every link's thread and closes every socket; then frees the server. A link's thread
 * still running a stage's code wait_ns after the call (< 0: no limit) is left running, with what
 * it uses (the server too): returns how many were, 0 when the server is freed. */
int ps_server_stop(ps_server *server, int64_t wait_ns);

#ifdef __cplusplus
}
#endif

#endif
