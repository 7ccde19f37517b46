/* control_plane.c — requests at a server's main endpoint, and the end of set-up waits at exit. */
#include "control_plane.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fnmatch.h>
#include <limits.h>
#include <stdio.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include "pastset.h"
#include "stage_kinds.h"
#include "zmq_context.h"

/* Set once the process is exiting: a wait for a server gives up. */
static _Atomic int abandoning;
static const int64_t SETUP_SLICE_NS = 100000000;
enum { ENDPOINT_TEXT_MAX = 1024 }; /* a longer endpoint or pattern is trusted by no pattern */

static _Thread_local ps_interrupt_check interrupt_check;

void ps_remote_abandon_waits(void) { atomic_store(&abandoning, 1); }
int ps_remote_waits_abandoned(void) { return atomic_load(&abandoning); }

ps_interrupt_check ps_interrupt_check_set(ps_interrupt_check check) {
    ps_interrupt_check before = interrupt_check;
    interrupt_check = check;
    return before;
}

int64_t ps_interruptible_slice_end(int64_t deadline) {
    if (atomic_load(&abandoning) || (interrupt_check && interrupt_check())) return 0;
    int64_t end = ps_now_ns() + SETUP_SLICE_NS;
    return end < deadline ? end : deadline > 0 ? deadline : 1; /* 0 says only "exiting" */
}

static int given(const char *key) { return key && *key; }

void *ps_control_socket(const char *endpoint, const ps_curve_client *keys) {
    void *socket = zmq_socket(ps_zmq_context(), ZMQ_DEALER);
    if (!socket) return NULL;
    int zero = 0;
    zmq_setsockopt(socket, ZMQ_LINGER, &zero, sizeof zero);
    ps_zmq_allow_ipv6(socket, endpoint);
    if (keys && given(keys->server_key)) {
        char public_key[41], secret_key[41];
        int fresh = !given(keys->public_key);
        if ((fresh && zmq_curve_keypair(public_key, secret_key) != 0) ||
            zmq_setsockopt(socket, ZMQ_CURVE_SERVERKEY, keys->server_key, 41) != 0 ||
            zmq_setsockopt(socket, ZMQ_CURVE_PUBLICKEY, fresh ? public_key : keys->public_key, 41) != 0 ||
            zmq_setsockopt(socket, ZMQ_CURVE_SECRETKEY, fresh ? secret_key : keys->secret_key, 41) != 0) {
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

int ps_zmq_receive_frame(void *socket, int64_t deadline, zmq_msg_t *message, ps_frame *out) {
    for (;;) {
        int64_t left_ms = (deadline - ps_now_ns() + 999999) / 1000000;
        /* A receive that waits by itself: one call, where a poll then a receive would be two. A
         * deadline passed still looks once, without waiting. */
        int wait_ms = left_ms <= 0 ? 0 : left_ms > INT_MAX ? INT_MAX : (int)left_ms;
        zmq_setsockopt(socket, ZMQ_RCVTIMEO, &wait_ms, sizeof wait_ms);
        zmq_msg_close(message);
        zmq_msg_init(message);
        if (zmq_msg_recv(message, socket, 0) < 0) {
            if (zmq_errno() == EAGAIN && wait_ms == 0) return PS_ETIMEDOUT;
            if (zmq_errno() == EAGAIN || zmq_errno() == EINTR) continue;
            return PS_EREMOTE;
        }
        return ps_wire_decode(zmq_msg_data(message), zmq_msg_size(message), out) == 0 ? PS_OK : PS_EINVAL;
    }
}

int ps_control_send(ps_control_call *call, const char *endpoint, const ps_curve_client *keys, const ps_frame *request) {
    size_t size = PS_WIRE_HEADER + request->payload_length;
    unsigned char *encoded = malloc(size);
    if (!encoded) return PS_ENOMEM;
    size_t length = ps_wire_encode(request, encoded, size);
    call->socket = length ? ps_control_socket(endpoint, keys) : NULL;
    call->id = request->request_id;
    zmq_msg_init(&call->message);
    int sent = call->socket && zmq_send(call->socket, encoded, length, 0) == (int)length;
    free(encoded);
    if (!sent) ps_control_close(call);
    return sent ? PS_OK : PS_EREMOTE;
}

int ps_control_answer(ps_control_call *call, int64_t deadline, ps_frame *answer) {
    for (;;) {
        int64_t end = ps_interruptible_slice_end(deadline);
        if (!end) return PS_EINTR;
        int rc = ps_zmq_receive_frame(call->socket, end, &call->message, answer);
        if (rc == PS_OK && answer->request_id != call->id) continue; /* not its answer */
        if (rc != PS_ETIMEDOUT || end >= deadline) return rc;
    }
}

void ps_control_close(ps_control_call *call) {
    if (!call->socket) return;
    zmq_msg_close(&call->message);
    zmq_close(call->socket);
    call->socket = NULL;
}

int ps_control_request(const char *endpoint, const ps_curve_client *keys, const ps_frame *request, int64_t deadline,
                       ps_frame *answer, unsigned char *payload, size_t capacity) {
    ps_control_call call;
    int rc = ps_control_send(&call, endpoint, keys, request);
    if (rc == PS_OK) rc = ps_control_answer(&call, deadline, answer);
    if (rc == PS_OK && answer->payload_length > capacity) rc = PS_EINVAL;
    if (rc == PS_OK) {
        if (answer->payload_length) memcpy(payload, answer->payload, answer->payload_length);
        answer->payload = payload;
    }
    ps_control_close(&call);
    return rc;
}

/* An endpoint or a pattern with the separators of its parts as '/': so that, matched with
 * FNM_PATHNAME, a '*' or '?' stays within one label of a host, its port, or one part of a path
 * (tcp://10.1.2.* takes no host name 10.1.2.example.org, nor a second port), and, with FNM_PERIOD,
 * matches no part's leading dot (ipc:///run/paths/STAR/sock takes no /run/paths/../sock). 0 when
 * too long. */
static int as_parts(const char *text, int tcp, char *out, size_t size) {
    size_t length = strlen(text);
    if (length >= size) return 0;
    for (size_t i = 0; i <= length; i++) out[i] = tcp && (text[i] == '.' || text[i] == ':') ? '/' : text[i];
    return 1;
}

/* The host of a tcp endpoint or pattern (past "tcp://", up to its last ':') into `host`; 0 when
 * it has no port or does not fit. */
static int host_of(const char *text, char *host, size_t size) {
    const char *start = text + 6, *end = strrchr(start, ':');
    if (!end || (size_t)(end - start) >= size) return 0;
    memcpy(host, start, (size_t)(end - start));
    host[end - start] = 0;
    return 1;
}

/* Whether a pattern's host is one of IPv4 addresses, which must then take an address only, no
 * host name: dotted, of digits and wildcards alone, and either with a digit (10.1.2.*, 10.1.*,
 * which takes no 10.1.evil) or of four labels (*.*.*.*). Without a dot (*[0-9]) it is one of names. */
static int address_pattern(const char *pattern) {
    char host[ENDPOINT_TEXT_MAX];
    if (strncmp(pattern, "tcp://", 6) != 0 || !host_of(pattern, host, sizeof host)) return 0;
    int labels = 1, digits = 0;
    for (const char *c = host; *c; c++) {
        labels += *c == '.';
        digits |= *c >= '0' && *c <= '9';
        if (*c != '.' && !(*c >= '0' && *c <= '9') && !strchr("*?[]!^-", *c)) return 0;
    }
    return labels > 1 && (digits || labels == 4);
}

/* Whether a tcp endpoint's host is an IPv4 address, dotted decimal (1), or one written as only
 * the resolver reads it (2130706433, 0x7f000001, 127.1: -1), which no pattern takes; 0 otherwise. */
static int address_host(const char *endpoint) {
    char host[ENDPOINT_TEXT_MAX];
    struct in_addr address;
    if (!host_of(endpoint, host, sizeof host)) return 0;
    return inet_pton(AF_INET, host, &address) == 1 ? 1 : inet_aton(host, &address) ? -1 : 0;
}

int ps_endpoint_whole(const char *endpoint) {
    const char *scheme_end = strstr(endpoint, "://");
    if (!scheme_end) return 0;
    const char *rest = scheme_end + 3;
    if (strncmp(endpoint, "ipc://", 6) == 0 || strncmp(endpoint, "inproc://", 9) == 0) return *rest != 0;
    if (strncmp(endpoint, "tcp://", 6) != 0) return 0;
    const char *colon = strrchr(rest, ':');
    if (!colon || colon == rest || !colon[1] || strlen(colon + 1) > 5) return 0;
    long port = 0;
    for (const char *c = colon + 1; *c; c++) {
        if (*c < '0' || *c > '9') return 0;
        port = port * 10 + (*c - '0');
    }
    return port >= 1 && port <= 65535;
}

int ps_endpoint_trusted(const ps_build_context *context, const char *endpoint) {
    if (!context->trusted_endpoints) return 1;
    if (strchr(endpoint, ';')) return 0; /* a pattern's '*' would let a source address through */
    int tcp = strncmp(endpoint, "tcp://", 6) == 0, address = tcp ? address_host(endpoint) : 0;
    if (address < 0) return 0; /* a name pattern (*[0-9]) would take it, as an address anywhere */
    char parts[ENDPOINT_TEXT_MAX], pattern[ENDPOINT_TEXT_MAX];
    if (!as_parts(endpoint, tcp, parts, sizeof parts)) return 0;
    for (size_t i = 0; i < context->trusted_endpoint_count; i++) {
        const char *trusted = context->trusted_endpoints[i];
        if (tcp && !address && address_pattern(trusted))
            continue; /* a pattern of addresses takes no host name (10.1.2.* no 10.1.2.localhost) */
        if (as_parts(trusted, tcp, pattern, sizeof pattern) && fnmatch(pattern, parts, FNM_PATHNAME | FNM_PERIOD) == 0)
            return 1;
    }
    return 0;
}

void ps_reachable_endpoint(const char *server, char *endpoint, size_t size) {
    if (strncmp(endpoint, "tcp://", 6) != 0 || strncmp(server, "tcp://", 6) != 0) return;
    const char *port = strrchr(endpoint, ':');
    const char *host = strchr(server, ';') ? strchr(server, ';') + 1 : server + 6; /* past a source address */
    const char *host_end = strrchr(host, ':');
    if (!host_end || port < endpoint + 6) return;
    char rebuilt[512];
    snprintf(rebuilt, sizeof rebuilt, "tcp://%.*s%s", (int)(host_end - host), host, port);
    snprintf(endpoint, size, "%s", rebuilt);
}
