/* remote.c — the `remote` stage: the rest of the path lives on a server, reached over ZeroMQ.
 *
 * Each caller of the stage gets its own connection: when it attaches, it sends the path
 * remainder (a BUILD) to the server's main endpoint, the server builds it into its own stage
 * table and answers with the endpoint of a socket that serves only this caller's link; every
 * operation is then one request and one answer on that socket. A blocking operation is sent
 * in slices of at most timeout_ms / 2, so a live server always answers well within timeout_ms
 * and one silent for timeout_ms is taken as gone; a slice that ends at the server (status:
 * timed out, nothing done) is simply sent again.
 * With window > 1, moves are pipelined: up to `window` go out before their answers are read.
 */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zmq.h>

#include "server.h"
#include "stage_base.h"
#include "wire.h"
#include "zmq_context.h"

enum { MAX_ENDPOINT = 256, RELEASE_WAIT_MS = 500 };

typedef struct connection {
    void *socket;           /* DEALER to the caller's own link socket on the server */
    uint64_t handle_id;
    uint64_t next_request;  /* the id of the last request sent */
    uint32_t outstanding;   /* pipelined moves whose answers are not read yet */
    uint64_t oldest_pending;/* the request id of the oldest of them */
    int failed;             /* a status that broke the connection, 0 while it works */
    unsigned char *request; /* the encoded request: header + one tuple */
} connection;

typedef struct remote_stage {
    ps_stage base;
    char endpoint[MAX_ENDPOINT];     /* the server's main endpoint */
    char *path_spec;                 /* the remainder, sent at BUILD */
    int64_t timeout_ns;
    uint32_t window;
    char server_key[41];             /* CURVE: the server's public key, "" for none */
    connection *connections;         /* one per caller slot */
    _Atomic int64_t requests, answers, failures;
} remote_stage;

static remote_stage *remote_of(ps_link *link) { return (remote_stage *)link->stage; }

static void explain(remote_stage *r, const char *what, const char *detail) {
    snprintf(r->base.error, sizeof r->base.error, "remote %s: %s%s%s", r->endpoint, what, detail ? ": " : "",
             detail ? detail : "");
}

static void *open_socket(remote_stage *r, const char *endpoint) {
    void *socket = zmq_socket(ps_zmq_context(), ZMQ_DEALER);
    if (!socket) return NULL;
    int zero = 0;
    zmq_setsockopt(socket, ZMQ_LINGER, &zero, sizeof zero);
    if (r->server_key[0]) {
        char public_key[41], secret_key[41];
        if (zmq_curve_keypair(public_key, secret_key) != 0 ||
            zmq_setsockopt(socket, ZMQ_CURVE_SERVERKEY, r->server_key, 41) != 0 ||
            zmq_setsockopt(socket, ZMQ_CURVE_PUBLICKEY, public_key, 41) != 0 ||
            zmq_setsockopt(socket, ZMQ_CURVE_SECRETKEY, secret_key, 41) != 0) {
            zmq_close(socket);
            return NULL;
        }
    }
    if (zmq_connect(socket, endpoint) != 0) {
        zmq_close(socket);
        return NULL;
    }
    return socket;
}

/* Sends one request; returns its id, or 0 when it could not be sent. */
static uint64_t send_request(remote_stage *r, connection *c, void *socket, uint8_t op, int64_t argument,
                             int64_t server_timeout, const void *payload, size_t payload_length, size_t capacity) {
    ps_frame request = {op, 0, ++c->next_request, c->handle_id, argument, server_timeout, payload,
                        (uint32_t)payload_length};
    size_t length = ps_wire_encode(&request, c->request, capacity);
    if (!length || zmq_send(socket, c->request, length, 0) != (int)length) return 0;
    atomic_fetch_add_explicit(&r->requests, 1, memory_order_relaxed);
    return request.request_id;
}

/* Waits up to wait_ns for the answer to request `id` (answers to older requests are skipped).
 * On PS_OK, *answer points into *message, which the caller closes. */
static int wait_answer(remote_stage *r, void *socket, uint64_t id, int64_t wait_ns, zmq_msg_t *message,
                       ps_frame *answer) {
    int64_t deadline = ps_now_ns() + wait_ns;
    for (;;) {
        int64_t left_ms = (deadline - ps_now_ns() + 999999) / 1000000;
        if (left_ms <= 0) return PS_EREMOTE;
        /* A receive that waits by itself: one call, where a poll then a receive would be two. */
        int wait_ms = left_ms > INT_MAX ? INT_MAX : (int)left_ms;
        zmq_setsockopt(socket, ZMQ_RCVTIMEO, &wait_ms, sizeof wait_ms);
        if (zmq_msg_recv(message, socket, 0) < 0) {
            if (zmq_errno() == EAGAIN || zmq_errno() == EINTR) continue;
            return PS_EREMOTE;
        }
        if (ps_wire_decode(zmq_msg_data(message), zmq_msg_size(message), answer) != 0) return PS_EREMOTE;
        atomic_fetch_add_explicit(&r->answers, 1, memory_order_relaxed);
        if (answer->request_id == id) return PS_OK;
    }
}

static int broken(remote_stage *r, connection *c, int status, const char *what) {
    c->failed = status;
    atomic_fetch_add_explicit(&r->failures, 1, memory_order_relaxed);
    char detail[64];
    snprintf(detail, sizeof detail, "within %lld ms", (long long)(r->timeout_ns / 1000000));
    explain(r, what, detail);
    return status;
}

/* The longest the server may wait inside one request: half of timeout_ms, so that its answer
 * is due well within timeout_ms and silence for timeout_ms means the server is gone. */
static int64_t server_slice(const remote_stage *r) { return r->timeout_ns / 2; }

/* Reads the answers of pipelined moves; the first failure among them breaks the connection. */
static int drain(remote_stage *r, connection *c, uint32_t keep) {
    while (c->outstanding > keep) {
        zmq_msg_t message;
        zmq_msg_init(&message);
        ps_frame answer;
        int rc = wait_answer(r, c->socket, c->oldest_pending++, r->timeout_ns, &message, &answer);
        int status = rc == PS_OK ? answer.status : rc;
        zmq_msg_close(&message);
        c->outstanding--;
        if (rc != PS_OK) return broken(r, c, PS_EREMOTE, "no answer to a pipelined move");
        if (status != PS_OK) /* later moves are on their way: order is lost, the connection with it */
            return broken(r, c, PS_EREMOTE, "a pipelined move failed; later moves were not kept in order");
    }
    return PS_OK;
}

/* One operation: sent in slices of at most timeout_ms, each answered, until it is done or the
 * caller's timeout ends. out (may be NULL) receives an answered tuple, *value the answer's value. */
static int call(ps_link *link, uint8_t op, int64_t argument, const void *payload, size_t payload_length,
                void *out, int64_t *value, int64_t timeout_ns) {
    remote_stage *r = remote_of(link);
    connection *c = &r->connections[link->slot];
    if (c->failed) return c->failed;
    size_t capacity = PS_WIRE_HEADER + r->base.tuple_size;
    int64_t deadline = ps_deadline(timeout_ns);
    int rc;
    for (int first = 1;; first = 0) {
        int64_t slice = server_slice(r);
        int64_t left = ps_remaining(deadline);
        if (left != PS_FOREVER && left < slice) slice = left;
        uint64_t id = send_request(r, c, c->socket, op, argument, slice, payload, payload_length, capacity);
        if (!id) return broken(r, c, PS_EREMOTE, "cannot send");
        /* Pipelined moves went first: their answers come first. Sending before reading them
         * lets a move and the observe after it share one round trip. */
        if (first && (rc = drain(r, c, 0)) != PS_OK) return rc;
        zmq_msg_t message;
        zmq_msg_init(&message);
        ps_frame answer;
        rc = wait_answer(r, c->socket, id, r->timeout_ns, &message, &answer);
        if (rc != PS_OK) {
            zmq_msg_close(&message);
            return broken(r, c, PS_EREMOTE, "no answer");
        }
        int status = answer.status;
        if (status == PS_OK && out && answer.payload_length == r->base.tuple_size)
            memcpy(out, answer.payload, r->base.tuple_size);
        else if (status == PS_OK && out)
            status = PS_EREMOTE;
        if (value) *value = answer.value;
        zmq_msg_close(&message);
        int time_left = deadline == PS_FOREVER || ps_now_ns() < deadline;
        if (status == PS_ETIMEDOUT && time_left && !(op == PS_OP_EXCHANGE && value && *value)) continue;
        return status;
    }
}

static int remote_move(ps_link *link, const void *tuple, int64_t timeout_ns) {
    remote_stage *r = remote_of(link);
    if (r->window <= 1) return call(link, PS_OP_MOVE, 0, tuple, r->base.tuple_size, NULL, NULL, timeout_ns);
    connection *c = &r->connections[link->slot];
    if (c->failed) return c->failed;
    int rc = drain(r, c, r->window - 1);
    if (rc != PS_OK) return rc;
    size_t capacity = PS_WIRE_HEADER + r->base.tuple_size;
    uint64_t id = send_request(r, c, c->socket, PS_OP_MOVE, 0, server_slice(r), tuple, r->base.tuple_size, capacity);
    if (!id) return broken(r, c, PS_EREMOTE, "cannot send");
    if (c->outstanding++ == 0) c->oldest_pending = id;
    return PS_OK;
}

static int remote_observe(ps_link *link, void *out, int64_t timeout_ns) {
    return call(link, PS_OP_OBSERVE, 0, NULL, 0, out, NULL, timeout_ns);
}

static int remote_observe_at(ps_link *link, int64_t index, void *out, int64_t timeout_ns) {
    return call(link, PS_OP_OBSERVE_AT, index, NULL, 0, out, NULL, timeout_ns);
}

static int remote_first(ps_link *link, int64_t *out) { return call(link, PS_OP_FIRST, 0, NULL, 0, NULL, out, 0); }
static int remote_last(ps_link *link, int64_t *out) { return call(link, PS_OP_LAST, 0, NULL, 0, NULL, out, 0); }
static int remote_delta(ps_link *link, int64_t bound, int64_t *out) {
    return call(link, PS_OP_DELTA, bound, NULL, 0, NULL, out, 0);
}
static int remote_axe(ps_link *link, int64_t index) { return call(link, PS_OP_AXE, index, NULL, 0, NULL, NULL, 0); }

static int remote_exchange(ps_link *link, const void *tuple, void *out, int64_t timeout_ns, int *moved) {
    int64_t done = 0;
    int64_t deadline = ps_deadline(timeout_ns);
    int rc = call(link, PS_OP_EXCHANGE, 0, tuple, remote_of(link)->base.tuple_size, out, &done, timeout_ns);
    *moved = done != 0 || rc == PS_OK;
    if (rc == PS_ETIMEDOUT && *moved) {
        int64_t left = ps_remaining(deadline);
        if (left != 0) rc = remote_observe(link, out, left);
    }
    return rc;
}

/* Connects a new caller: BUILD at the main endpoint, then a socket to its own link. */
static int remote_attach(ps_stage *stage, uint32_t slot) {
    remote_stage *r = (remote_stage *)stage;
    connection *c = &r->connections[slot];
    size_t capacity = PS_WIRE_HEADER + (r->base.tuple_size > PS_SPEC_MAX ? r->base.tuple_size : PS_SPEC_MAX);
    c->request = malloc(capacity);
    void *main_socket = c->request ? open_socket(r, r->endpoint) : NULL;
    if (!main_socket) {
        explain(r, "cannot open a socket", zmq_strerror(zmq_errno()));
        return PS_EREMOTE;
    }
    uint64_t id = send_request(r, c, main_socket, PS_OP_BUILD, 0, 0, r->path_spec, strlen(r->path_spec), capacity);
    zmq_msg_t message;
    zmq_msg_init(&message);
    ps_frame answer;
    int rc = id ? wait_answer(r, main_socket, id, r->timeout_ns, &message, &answer) : PS_EREMOTE;
    char link_endpoint[MAX_ENDPOINT] = "";
    if (rc != PS_OK) {
        char detail[96];
        snprintf(detail, sizeof detail, "within %lld ms (is the server up, and are the CURVE keys right?)",
                 (long long)(r->timeout_ns / 1000000));
        explain(r, "no answer to BUILD", detail);
    } else if (answer.status != PS_OK) {
        char text[200];
        snprintf(text, sizeof text, "%.*s", (int)answer.payload_length, (const char *)answer.payload);
        explain(r, "the server refused the path", text);
        rc = answer.status == PS_EINVAL ? PS_EINVAL : answer.status;
    } else {
        snprintf(link_endpoint, sizeof link_endpoint, "%.*s", (int)answer.payload_length, (const char *)answer.payload);
        c->handle_id = answer.handle_id;
    }
    zmq_msg_close(&message);
    zmq_close(main_socket);
    if (rc != PS_OK) return rc;
    /* A server bound to every interface names its link by 0.0.0.0: reach it by the host we used. */
    const char *any = strstr(link_endpoint, "://0.0.0.0:");
    if (any) {
        const char *port = strrchr(link_endpoint, ':');
        const char *host_end = strrchr(r->endpoint, ':');
        char rebuilt[MAX_ENDPOINT];
        snprintf(rebuilt, sizeof rebuilt, "%.*s%s", (int)(host_end - r->endpoint), r->endpoint, port);
        memcpy(link_endpoint, rebuilt, sizeof rebuilt);
    }
    c->socket = open_socket(r, link_endpoint);
    if (!c->socket) {
        explain(r, "cannot connect to the link endpoint", link_endpoint);
        return PS_EREMOTE;
    }
    return PS_OK;
}

static int remote_counters(ps_stage *stage, ps_counter *out, int max) {
    remote_stage *r = (remote_stage *)stage;
    if (max < 3) return 0;
    out[0] = (ps_counter){"requests", atomic_load(&r->requests)};
    out[1] = (ps_counter){"answers", atomic_load(&r->answers)};
    out[2] = (ps_counter){"failures", atomic_load(&r->failures)};
    return 3;
}

/* Tells the server the caller's link is done (best effort), then closes the connection; the
 * slot is then ready for a new caller. */
static void remote_detach(ps_stage *stage, uint32_t slot) {
    remote_stage *r = (remote_stage *)stage;
    connection *c = &r->connections[slot];
    if (c->socket && !c->failed && drain(r, c, 0) == PS_OK) {
        uint64_t id = send_request(r, c, c->socket, PS_OP_RELEASE, 0, 0, NULL, 0, PS_WIRE_HEADER);
        zmq_msg_t message;
        zmq_msg_init(&message);
        ps_frame answer;
        if (id) wait_answer(r, c->socket, id, (int64_t)RELEASE_WAIT_MS * 1000000, &message, &answer);
        zmq_msg_close(&message);
    }
    if (c->socket) zmq_close(c->socket);
    free(c->request);
    memset(c, 0, sizeof *c);
}

static void remote_destroy(ps_stage *stage) {
    remote_stage *r = (remote_stage *)stage;
    uint32_t slots = atomic_load(&r->base.links);
    for (uint32_t i = 0; r->connections && i < slots && i < PS_PASS_THROUGH_CALLERS; i++) remote_detach(stage, i);
    free(r->connections);
    free(r->path_spec);
}

static const ps_stage_ops REMOTE_OPS = {
    remote_move, remote_observe, remote_observe_at, remote_first, remote_last, remote_delta, remote_axe,
    remote_counters, remote_destroy, remote_exchange, remote_attach, remote_detach,
};

static int remote_create(const ps_params *params, const ps_build_context *context, ps_stage *below,
                         ps_stage **out, char *error, size_t error_size) {
    (void)context;
    if (below) {
        snprintf(error, error_size, "stage 'remote': the rest of the path is built on the server, not below it");
        return PS_EINVAL;
    }
    ps_tuple_format format;
    if (ps_tuple_format_parse(ps_params_str(params, "format"), &format, error, error_size) != 0) return PS_EFORMAT;
    const char *host = ps_params_str(params, "host");
    const char *key = ps_params_str(params, "curve_server_key");
    if (*key && strlen(key) != 40) {
        snprintf(error, error_size, "stage 'remote': curve_server_key must be 40 Z85 characters");
        return PS_EINVAL;
    }
    remote_stage *r = calloc(1, sizeof *r);
    if (!r) return PS_ENOMEM;
    if (strstr(host, "://")) snprintf(r->endpoint, sizeof r->endpoint, "%s", host);
    else snprintf(r->endpoint, sizeof r->endpoint, "%s://%s", ps_params_str(params, "proto"), host);
    r->timeout_ns = ps_params_int(params, "timeout_ms") * 1000000;
    r->window = (uint32_t)ps_params_int(params, "window");
    snprintf(r->server_key, sizeof r->server_key, "%s", key);
    r->path_spec = strdup(ps_params_str(params, "path"));
    r->connections = calloc(PS_PASS_THROUGH_CALLERS, sizeof *r->connections);
    int rc = ps_stage_init(&r->base, &REMOTE_OPS, &format, PS_PASS_THROUGH_CALLERS, NULL, PS_PASS_THROUGH);
    if (rc == PS_OK && (!r->path_spec || !r->connections)) rc = PS_ENOMEM;
    if (rc == PS_OK && strlen(r->path_spec) > PS_SPEC_MAX) {
        snprintf(error, error_size, "stage 'remote': the path remainder is longer than %d bytes", PS_SPEC_MAX);
        rc = PS_EINVAL;
    }
    if (rc != PS_OK) {
        remote_destroy(&r->base);
        ps_stage_abandon(&r->base);
        return rc;
    }
    *out = &r->base;
    return PS_OK;
}

static const ps_param_spec REMOTE_PARAMS[] = {
    {"host", PS_PARAM_STR, 1, NULL, 0, -1, NULL, "the server: an endpoint (tcp://127.0.0.1:7000) or host:port"},
    {"proto", PS_PARAM_STR, 0, "tcp", 0, -1, "tcp|ipc|inproc", "transport when host has no scheme"},
    {"timeout_ms", PS_PARAM_INT, 0, "10000", 1, 3600000, NULL, "a server silent this long is taken as gone"},
    {"window", PS_PARAM_INT, 0, "1", 1, 1024, NULL, "moves sent before their answers are read (pipelining)"},
    {"curve_server_key", PS_PARAM_STR, 0, "", 0, -1, NULL, "the server's CURVE public key (Z85), '' for none"},
    {"format", PS_PARAM_STR, 1, NULL, 0, -1, NULL, "the element's format (filled in by build_path)"},
    {"path", PS_PARAM_STR, 1, NULL, 0, -1, NULL, "the path remainder sent to the server (filled in by build_path)"},
};

const ps_stage_kind ps_kind_remote = {
    "remote", "Forwards operations over ZeroMQ to a server that hosts the rest of the path.",
    REMOTE_PARAMS, sizeof REMOTE_PARAMS / sizeof REMOTE_PARAMS[0], remote_create, PS_PASS_THROUGH,
};
