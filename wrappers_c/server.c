/* server.c — the PastSet server: a main socket for BUILD requests, one thread per served link,
 * which reaches its client on a ZeroMQ socket or a direct connection of its own. */
#include "server.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>
#include <zmq.h>

#include "direct_channel.h"
#include "endpoint_connections.h"
#include "failure_cause.h"
#include "pastset.h"
#include "peer_directory.h"
#include "stage_base.h" /* ps_stage_axe_point, read inline with each answer */
#include "wire.h"
#include "zap_handler.h"
#include "zmq_context.h"

enum {
    POLL_SLICE_MS = 100,          /* how often a link's thread looks at the stop flag */
    ANSWER_TEXT_MAX = 1024,       /* error texts in answers are cut to this */
    PEER_SILENCE_MS = 10000,      /* a link with no connection this long after BUILD is abandoned */
    MAIN_REQUESTS = 16,           /* requests of one connection that wait at the main endpoint, at most */
    MAIN_ANSWERS = 1000,          /* its answers (of at most main_answer's size) not sent yet, at most */
    HANDSHAKE_MS = 3000,          /* a connection that has not greeted (CURVE too) by then is closed */
    CONNECT_WAIT_MS = 1000,       /* a direct connection presents the link's secret this soon */
    PENDING_MAX = 8,              /* direct connections that may be presenting it at once */
    LINK_QUEUE_BYTES = 8 << 20,   /* zmq: what waits in a link's queue, each way, at most */
};
static const int64_t MS = 1000000;
static const int64_t OP_SLICE_NS = 1000000000LL; /* the longest one operation waits here */
static const int64_t SEND_WAIT_NS = 1000000000LL; /* a direct client that reads (nearly) nothing this long is gone */
static const int64_t LATE_NS = 1000000;           /* an answer that took this long is sent at once */

/* The file a ZeroMQ socket bound to ipc://PATH made. ZeroMQ removes it only once its I/O thread
 * gets to the closed socket, which a process that exits right after never lets it do, so the
 * server removes it as it closes the socket: that file only (another server may since have bound
 * the path anew), and not one ZeroMQ made for a wildcard (it goes with its directory). */
typedef struct socket_file {
    char path[PS_CHANNEL_ENDPOINT_MAX];
    dev_t device;
    ino_t inode;
    int made;
} socket_file;

static void note_socket_file(socket_file *f, const char *asked, const char *bound) {
    struct stat st;
    f->made = strncmp(bound, "ipc://", 6) == 0 && bound[6] != '@' && strcmp(asked, bound) == 0 &&
              snprintf(f->path, sizeof f->path, "%s", bound + 6) < (int)sizeof f->path && stat(f->path, &st) == 0 &&
              S_ISSOCK(st.st_mode);
    if (f->made) f->device = st.st_dev, f->inode = st.st_ino;
}

/* What is at a Unix socket's path: a server listening (or too busy to accept: a full backlog),
 * nobody (a dead server's file: only then may it go), or what this process cannot tell (no
 * permission to connect, a name too long to connect to). */
enum { SOCKET_LISTENED, SOCKET_DEAD, SOCKET_UNKNOWN };

static int socket_state(const char *path, int *error) {
    struct sockaddr_un address = {.sun_family = AF_UNIX};
    *error = ENAMETOOLONG;
    if (strlen(path) >= sizeof address.sun_path) return SOCKET_UNKNOWN;
    memcpy(address.sun_path, path, strlen(path));
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0) return *error = errno, SOCKET_UNKNOWN;
    *error = connect(fd, (struct sockaddr *)&address, sizeof address) == 0 ? 0 : errno;
    close(fd);
    return *error == 0 || *error == EAGAIN ? SOCKET_LISTENED : *error == ECONNREFUSED ? SOCKET_DEAD : SOCKET_UNKNOWN;
}

/* Whether ipc://PATH is another's (why, when it is): ZeroMQ removes whatever is at PATH before
 * it binds, a user's file or a live server's socket alike. Only nothing there, or a socket that
 * nobody listens on any more (a dead server's), may go; a name too long for a socket ZeroMQ
 * refuses itself. */
static int ipc_path_taken(const char *endpoint, char *why, size_t size) {
    const char *path = endpoint + 6;
    struct stat st;
    if (strncmp(endpoint, "ipc://", 6) != 0 || *path == '@' || strchr(path, '*') || lstat(path, &st) != 0) return 0;
    if (!S_ISSOCK(st.st_mode)) {
        snprintf(why, size, "%s exists and is not a socket (it would be removed)", path);
        return 1;
    }
    int error, state = socket_state(path, &error);
    if (state == SOCKET_DEAD || error == ENAMETOOLONG) return 0;
    if (state == SOCKET_LISTENED) snprintf(why, size, "a server listens on %s already", path);
    else snprintf(why, size, "%s is a socket whose server cannot be told dead (%s): it would be removed", path,
                  strerror(error));
    return 1;
}

/* Whether `name` is `base` followed by a link's suffix, .<16 hex digits> (open_link). */
static int link_file_of(const char *name, const char *base, size_t base_length) {
    if (strncmp(name, base, base_length) != 0 || name[base_length] != '.' || strlen(name) != base_length + 17) return 0;
    return strspn(name + base_length + 1, "0123456789abcdef") == 16;
}

/* A server on ipc://PATH that was killed (SIGKILL) left its ZeroMQ links' files, PATH.<16 hex
 * digits>; the next server bound on PATH removes those of its own user that are sockets nobody
 * listens on (a live server's, or one it cannot test, stay). */
static void remove_dead_link_files(const char *endpoint) {
    if (strncmp(endpoint, "ipc://", 6) != 0 || endpoint[6] == '@' || strchr(endpoint, '*')) return;
    char path[PS_CHANNEL_ENDPOINT_MAX + 32];
    const char *slash = strrchr(endpoint + 6, '/');
    const char *base = slash ? slash + 1 : endpoint + 6;
    int directory_length = slash ? (int)(slash - (endpoint + 6)) + 1 : 0; /* with its slash ("/" for the root) */
    size_t base_length = strlen(base);
    if (!base_length) return;
    snprintf(path, sizeof path, "%.*s", directory_length, endpoint + 6);
    DIR *directory = opendir(directory_length ? path : ".");
    if (!directory) return;
    for (struct dirent *entry; (entry = readdir(directory)) != NULL;) {
        struct stat st;
        int error;
        if (!link_file_of(entry->d_name, base, base_length) ||
            fstatat(dirfd(directory), entry->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISSOCK(st.st_mode) ||
            st.st_uid != geteuid() ||
            snprintf(path, sizeof path, "%.*s%s", directory_length, endpoint + 6, entry->d_name) >= (int)sizeof path)
            continue;
        if (socket_state(path, &error) == SOCKET_DEAD) unlinkat(dirfd(directory), entry->d_name, 0);
    }
    closedir(directory);
}

static void close_bound_socket(void *socket, socket_file *f) {
    zmq_close(socket);
    struct stat st;
    if (f->made && stat(f->path, &st) == 0 && st.st_dev == f->device && st.st_ino == f->inode) unlink(f->path);
    f->made = 0;
}

typedef struct link_worker {
    ps_server *server;
    uint64_t id;
    ps_link *link;
    int transport;          /* ps_wire_transport: how the client reaches the link */
    void *socket;           /* zmq: the link's own socket */
    socket_file file;       /* zmq over ipc: the file its bind made */
    void *peers_monitor;    /* zmq: connections to the socket come and go here (NULL: not watched) */
    int listener;           /* direct: where the client connects; -1 once it is in */
    unsigned char secret[PS_WIRE_SECRET]; /* direct: what the client's connection presents */
    char user[PS_CLIENT_NAME_MAX]; /* zmq: the key name of the client that built it, where the server
                                      authenticates its clients ("" where it does not) */
    pthread_t thread;
    _Atomic int released;   /* its client released it: the link is not used again (set before the answer) */
    int reported;           /* ps_server_reap returned its id already */
    _Atomic int finished;
    size_t tuple_size;
    int stream_whole;       /* the last frame of tuples in (a move, an exchange's move, a move_many's)
                               took effect whole: only then is a frame that continues its stream, or
                               a request sent behind others, run (wire.md); 0 before any */
    int64_t stream_ends;    /* when the stream's slice ends: its frames wait until then at most */
    unsigned char *tuple;   /* observe results */
    unsigned char *slices[2]; /* a range's answer: the slice going out and the next one (send_range);
                                 made at the link's first range */
    unsigned char *answer;  /* the encoded answer (one frame of a range at most) */
    struct link_worker *next;
} link_worker;

struct ps_server {
    void *main_socket;
    socket_file main_file; /* over ipc: the file the main socket's bind made */
    ps_endpoint_connections connections; /* the main socket's: the serving thread's own */
    char endpoint[256];
    char curve_secret[41];
    char zap_domain[PS_ZAP_DOMAIN_MAX]; /* "" unless the server authenticates its clients */
    pthread_mutex_t lock; /* guards workers */
    link_worker *workers;
    _Atomic int stopping;
    _Atomic int64_t frames, bad_frames, builds, direct, live, abandoned, refused;
    unsigned char main_answer[PS_WIRE_HEADER + ANSWER_TEXT_MAX + 256];
};

/* A server's ROUTER socket; `largest` request (a larger one drops its peer unread), at most
 * `requests` of them waiting per connection, and `answers` of its answers (ZeroMQ's default,
 * 1000 whatever their size, would let one client's unread answers or unread requests hold a
 * gigabyte). */
static int make_server_socket(ps_server *s, const char *endpoint, int64_t largest, int requests, int answers,
                              void **out) {
    void *socket = zmq_socket(ps_zmq_context(), ZMQ_ROUTER);
    if (!socket) return -1;
    int zero = 0, one = 1, handshake_ms = HANDSHAKE_MS;
    int idle = PS_KEEPALIVE_IDLE_S, interval = PS_KEEPALIVE_INTERVAL_S, probes = PS_KEEPALIVE_PROBES;
    zmq_setsockopt(socket, ZMQ_LINGER, &zero, sizeof zero);
    ps_zmq_allow_ipv6(socket, endpoint);
    zmq_setsockopt(socket, ZMQ_MAXMSGSIZE, &largest, sizeof largest);
    zmq_setsockopt(socket, ZMQ_RCVHWM, &requests, sizeof requests);
    zmq_setsockopt(socket, ZMQ_SNDHWM, &answers, sizeof answers);
    /* A peer whose host vanished (no connection reset ever comes) is dropped after about 10 s.
     * TCP keepalive, not ZeroMQ's heartbeats: libzmq 4.3 aborts the process when a heartbeat
     * falls due on a connection whose peer closed while its queue here was full. */
    zmq_setsockopt(socket, ZMQ_TCP_KEEPALIVE, &one, sizeof one);
    zmq_setsockopt(socket, ZMQ_TCP_KEEPALIVE_IDLE, &idle, sizeof idle);
    zmq_setsockopt(socket, ZMQ_TCP_KEEPALIVE_INTVL, &interval, sizeof interval);
    zmq_setsockopt(socket, ZMQ_TCP_KEEPALIVE_CNT, &probes, sizeof probes);
    /* Connections that never greet (ZeroMQ waits 30 s by default) cannot hold the descriptors
     * that newcomers need for long. */
    zmq_setsockopt(socket, ZMQ_HANDSHAKE_IVL, &handshake_ms, sizeof handshake_ms);
    if (s->curve_secret[0]) {
        if (zmq_setsockopt(socket, ZMQ_CURVE_SERVER, &one, sizeof one) != 0 ||
            zmq_setsockopt(socket, ZMQ_CURVE_SECRETKEY, s->curve_secret, 41) != 0 ||
            (s->zap_domain[0] && zmq_setsockopt(socket, ZMQ_ZAP_DOMAIN, s->zap_domain, strlen(s->zap_domain)) != 0)) {
            zmq_close(socket);
            return -1;
        }
    }
    *out = socket;
    return 0;
}

/* Sends [routing id, answer]. */
static void send_answer(void *socket, const void *routing_id, size_t routing_length, const unsigned char *buf,
                        size_t length) {
    if (zmq_send(socket, routing_id, routing_length, ZMQ_SNDMORE | ZMQ_DONTWAIT) < 0) return;
    zmq_send(socket, buf, length, ZMQ_DONTWAIT);
}

/* Receives [routing id, frame] into the two messages: 0; -1 if it is not exactly two parts;
 * 1 if nothing came within the socket's receive timeout. */
static int receive_request(void *socket, zmq_msg_t *routing_id, zmq_msg_t *frame) {
    if (zmq_msg_recv(routing_id, socket, 0) < 0) return zmq_errno() == EAGAIN || zmq_errno() == EINTR ? 1 : -1;
    if (!zmq_msg_more(routing_id) || zmq_msg_recv(frame, socket, 0) < 0) return -1;
    if (!zmq_msg_more(frame)) return 0;
    for (int more = 1; more;) { /* drain the parts beyond two, then refuse the request */
        zmq_msg_t rest;
        zmq_msg_init(&rest);
        more = zmq_msg_recv(&rest, socket, 0) >= 0 && zmq_msg_more(&rest);
        zmq_msg_close(&rest);
    }
    return -1;
}

static size_t encode_answer(unsigned char *buf, size_t capacity, uint8_t op, int status, uint64_t request_id,
                            uint64_t handle_id, int64_t value, const void *payload, size_t payload_length) {
    ps_frame answer = {op, (uint16_t)status, request_id, handle_id, 0, value, payload, (uint32_t)payload_length};
    return ps_wire_encode(&answer, buf, capacity);
}

/* A link's answer frame, into w->answer: each says the element's axe point as the link's path
 * shows it, so that a client's caches stop serving copies of tuples an axe made elsewhere freed. */
static size_t encode_link_answer(link_worker *w, uint8_t op, int status, uint64_t request_id, uint64_t handle_id,
                                 int64_t value, const void *payload, size_t payload_length) {
    ps_frame answer = {op, (uint16_t)status, request_id, handle_id, ps_stage_axe_point(w->link->stage), value, payload,
                       (uint32_t)payload_length};
    return ps_wire_encode(&answer, w->answer, ps_wire_link_frame_max(w->tuple_size));
}

static int64_t bounded_timeout(int64_t requested) {
    return requested < 0 || requested > OP_SLICE_NS ? OP_SLICE_NS : requested;
}

/* A range's answer is read and sent a slice at a time: this many frames' tuples. */
enum { RANGE_SLICE_FRAMES = 4 };

static uint32_t slice_tuples(const link_worker *w) {
    return RANGE_SLICE_FRAMES * (uint32_t)ps_wire_batch_tuples(w->tuple_size);
}

/* The two slices of a range's answer, made once per link. */
static int slices_room(link_worker *w) {
    for (int i = 0; i < 2; i++)
        if (!w->slices[i] && !(w->slices[i] = malloc((size_t)slice_tuples(w) * w->tuple_size))) return PS_ENOMEM;
    return PS_OK;
}

/* A request's operation, checked against the table: the kind its op code names, with exactly the
 * tuples that kind takes (a move_many: 1 to ps_wire_batch_tuples of them), a count of tuples for a
 * kind that gives several (1 to ps_op_range_max of them), and no payload for a kind that takes
 * none. Returns PS_OK and fills *op (its results into the worker's buffers), PS_EINVAL for a
 * malformed request, PS_ENOMEM. */
static int operation_of(link_worker *w, const ps_frame *request, ps_op *op) {
    int kind = ps_op_kind_of_wire(request->op);
    if (kind < 0) return PS_EINVAL;
    uint32_t shape = ps_op_kinds[kind].shape;
    *op = (ps_op){.kind = (ps_op_kind)kind, .argument = request->argument,
                  .timeout_ns = bounded_timeout(request->value), .in = request->payload, .out = w->tuple,
                  .value = -1};
    if (shape & PS_OP_TUPLES_OUT) {
        if (request->payload_length != PS_WIRE_COUNT) return PS_EINVAL;
        op->count = ps_wire_get_u32(request->payload);
        if (op->count == 0 || op->count > ps_op_range_max(w->tuple_size)) return PS_EINVAL;
        if (op->count > slice_tuples(w)) op->count = slice_tuples(w); /* the first slice (send_range) */
        op->in = NULL;
        int rc = slices_room(w);
        op->out = w->slices[0];
        return rc;
    }
    size_t tuples = request->payload_length / w->tuple_size;
    if (request->payload_length % w->tuple_size != 0) return PS_EINVAL;
    if (shape & PS_OP_TUPLES_IN ? tuples == 0 || tuples > ps_wire_batch_tuples(w->tuple_size) ||
                                      (request->argument != PS_WIRE_STREAM_STARTS &&
                                       request->argument != PS_WIRE_STREAM_CONTINUES)
                                : tuples != ((shape & PS_OP_TUPLE_IN) != 0))
        return PS_EINVAL;
    op->count = (uint32_t)tuples;
    return PS_OK;
}

/* Runs an operation that takes tuples in, as a frame of a stream: the first frame's slice bounds
 * the whole stream's waits. */
static int run_stream_frame(link_worker *w, const ps_frame *request, ps_op *op) {
    int64_t now = ps_now_ns();
    if (request->argument == PS_WIRE_STREAM_STARTS) w->stream_ends = now + op->timeout_ns;
    else if (op->timeout_ns > w->stream_ends - now) op->timeout_ns = now < w->stream_ends ? w->stream_ends - now : 0;
    op->argument = 0;
    return ps_link_call(w->link, op);
}

/* Runs one request on the worker's link and returns its status; *op is the operation it ran, if
 * any (*ran set): its results are in it. A frame that continues a stream, or a request sent
 * behind others, after a frame of tuples that did not take effect whole is not run (PS_ESTATE):
 * so a stream's tuples, and a caller's pipelined requests, take effect in order, each once,
 * whatever happens to one of them. */
static int run_request(link_worker *w, const ps_frame *request, ps_op *op, int *ran) {
    *ran = 0;
    if (request->handle_id != w->id || (request->status != 0 && request->status != PS_WIRE_BEHIND)) return PS_EINVAL;
    if (request->op == PS_WIRE_PING || request->op == PS_WIRE_RELEASE)
        return request->payload_length ? PS_EINVAL : PS_OK;
    int rc = operation_of(w, request, op);
    if (rc != PS_OK) return rc;
    uint32_t shape = ps_op_kinds[op->kind].shape;
    int continues = shape & PS_OP_TUPLES_IN && request->argument == PS_WIRE_STREAM_CONTINUES;
    if ((continues || request->status == PS_WIRE_BEHIND) && !w->stream_whole) return PS_ESTATE;
    *ran = 1;
    rc = shape & PS_OP_TUPLES_IN ? run_stream_frame(w, request, op) : ps_link_call(w->link, op);
    if (rc != PS_OK) ps_failure_cause_clear(); /* the client hears of it by its text */
    if (shape & PS_OP_TUPLES_IN) w->stream_whole = rc == PS_OK && op->done == op->count;
    else if (shape & PS_OP_TUPLE_IN) w->stream_whole = rc == PS_OK || op->done == 1; /* an exchange's move */
    return rc;
}

/* Watches the connections to a link's socket, from before its client can connect. */
static void *watch_peers(link_worker *w) {
    char endpoint[96];
    /* Unique for the process's life: a reaped link's name may not be free again yet. */
    snprintf(endpoint, sizeof endpoint, "inproc://paths-link-peers-%p-%llu", (void *)w->server,
             (unsigned long long)w->id);
    if (zmq_socket_monitor(w->socket, endpoint, ZMQ_EVENT_ACCEPTED | ZMQ_EVENT_DISCONNECTED) != 0) return NULL;
    void *monitor = zmq_socket(ps_zmq_context(), ZMQ_PAIR);
    if (monitor && zmq_connect(monitor, endpoint) == 0) return monitor;
    if (monitor) zmq_close(monitor);
    zmq_socket_monitor(w->socket, NULL, 0);
    return NULL;
}

/* What a ZeroMQ link knows of the connections to its socket; its serving thread's own. */
typedef struct link_peers {
    int open;        /* connections accepted and not closed yet */
    int client_fd;   /* the connection the client's last request came on (-1: none known) */
    int client_left; /* that connection closed */
    int adopting;    /* the events read are those before client_fd's first request (client_came_on) */
} link_peers;

/* Reads one monitor event into the peers: a connection accepted or closed. */
static void peer_change(void *monitor, link_peers *peers) {
    zmq_msg_t event, address;
    zmq_msg_init(&event);
    zmq_msg_init(&address);
    if (zmq_msg_recv(&event, monitor, 0) >= 0 && zmq_msg_size(&event) >= 6) {
        const unsigned char *data = zmq_msg_data(&event);
        uint16_t code;
        uint32_t fd;
        memcpy(&code, data, sizeof code);
        memcpy(&fd, data + 2, sizeof fd);
        peers->open += code == ZMQ_EVENT_ACCEPTED ? 1 : code == ZMQ_EVENT_DISCONNECTED ? -1 : 0;
        if ((int)fd == peers->client_fd && code == ZMQ_EVENT_DISCONNECTED) peers->client_left = 1;
        if ((int)fd == peers->client_fd && code == ZMQ_EVENT_ACCEPTED && peers->adopting) peers->client_left = 0;
    }
    if (zmq_msg_more(&event)) zmq_msg_recv(&address, monitor, 0);
    zmq_msg_close(&event);
    zmq_msg_close(&address);
}

/* Reads the connection events so far. */
static void read_peer_changes(link_worker *w, link_peers *peers) {
    for (;;) {
        zmq_pollitem_t item = {w->peers_monitor, 0, ZMQ_POLLIN, 0};
        if (zmq_poll(&item, 1, 0) <= 0) return;
        peer_change(w->peers_monitor, peers);
    }
}

/* The client's request came on connection `fd`, new to the link. The events so far end with its
 * accepting, after those of any connection before it with the same descriptor (a stray's, freed
 * just before the client came), and may go on with its closing (a client gone since): so, of the
 * events for that descriptor read now, the last one says whether the client's connection is
 * open. Later ones are the client's. */
static void client_came_on(link_worker *w, link_peers *peers, int fd) {
    if (fd == peers->client_fd) return;
    peers->client_fd = fd;
    peers->client_left = 0;
    peers->adopting = 1;
    if (w->peers_monitor) read_peer_changes(w, peers);
    peers->adopting = 0;
}

/* Whether the link's client is gone for good, after reading the connection events so far: the
 * connection its requests came on closed (its process ended: nobody will release the link), or,
 * with no such connection known, every connection closed after the client was served, or no
 * client ever came (it gave up on BUILD, or died before connecting). A stray connection is no
 * client: one that comes and goes before the client does not end the link, nor does one that
 * stays keep it once the client's connection closed. */
static int client_gone(link_worker *w, link_peers *peers, int served, int64_t first_peer_due) {
    if (!w->peers_monitor) return 0;
    read_peer_changes(w, peers);
    if (peers->client_left) return 1;
    if (peers->open > 0) return 0;
    return served || ps_now_ns() > first_peer_due;
}

/* Where a link's answers go: its ZeroMQ socket, to the peer the request came from, or its direct
 * connection; `frames` sends a range's answer, frames given as header and payload parts.
 * Each returns PS_OK, or PS_EREMOTE when the client is gone. */
typedef struct answer_sink {
    int (*frame)(void *to, const unsigned char *frame, size_t length);
    int (*frames)(void *to, struct iovec *parts, int count);
    void *to;
} answer_sink;

/* A slice's tuples as frames of at most ps_wire_batch_tuples each, sent from where they lie; each
 * frame's value counts the tuples known to follow it (`then` of them after the slice's). */
static int send_slice(link_worker *w, const ps_frame *request, const unsigned char *tuples, uint32_t n, uint32_t then,
                      const answer_sink *sink) {
    unsigned char headers[RANGE_SLICE_FRAMES][PS_WIRE_HEADER];
    struct iovec parts[2 * RANGE_SLICE_FRAMES];
    uint32_t per_frame = (uint32_t)ps_wire_batch_tuples(w->tuple_size);
    int count = 0;
    for (uint32_t sent = 0; sent < n; count += 2) {
        uint32_t k = n - sent < per_frame ? n - sent : per_frame;
        ps_frame answer = {request->op, PS_OK, request->request_id, w->id, ps_stage_axe_point(w->link->stage),
                           n - sent - k + then, NULL, k * (uint32_t)w->tuple_size};
        ps_wire_encode_header(&answer, headers[count / 2]);
        parts[count] = (struct iovec){headers[count / 2], PS_WIRE_HEADER};
        parts[count + 1] = (struct iovec){(void *)(tuples + (size_t)sent * w->tuple_size), answer.payload_length};
        sent += k;
    }
    return sink->frames(sink->to, parts, count);
}

/* How far a range that filled its first slice may go: up to the history's end when its first
 * slice was read (the link's `last`), so that the next slices wait for no tuple to come, only for
 * the stages on the way; without a `last`, they wait for nothing. */
static void range_end(link_worker *w, const ps_op *first, uint32_t *asked, int64_t *timeout_ns) {
    ps_op last = {.kind = PS_OP_LAST};
    *timeout_ns = 0;
    if (ps_link_call(w->link, &last) != PS_OK || last.value < first->argument + first->value) return;
    if (last.value - first->argument < *asked) *asked = (uint32_t)(last.value - first->argument);
    *timeout_ns = first->timeout_ns;
}

/* A range's answer, a slice at a time: the request's operation read the first slice (waiting for
 * its first tuple), and the next ones go as far as range_end says. Each is read before the last
 * frame of the one before goes out, so that a frame's value is never more than what follows, and
 * 0 only in the last. A next slice that finds nothing (axed meanwhile) ends the answer there. */
static int send_range(link_worker *w, const ps_frame *request, const ps_op *first, const answer_sink *sink) {
    uint32_t asked = ps_wire_get_u32(request->payload), wanted = first->count, got = (uint32_t)first->value;
    int64_t timeout_ns = 0;
    if (got == wanted && got < asked) range_end(w, first, &asked, &timeout_ns);
    for (uint32_t done = 0, current = 0;; current = !current) {
        ps_op next = {.kind = first->kind, .argument = first->argument + done + got, .out = w->slices[!current],
                      .timeout_ns = timeout_ns};
        uint32_t more = 0;
        if (got == wanted && done + got < asked) {
            next.count = asked - done - got < wanted ? asked - done - got : wanted;
            if (ps_link_call(w->link, &next) == PS_OK && next.value > 0 && next.value <= next.count)
                more = (uint32_t)next.value;
        }
        int rc = send_slice(w, request, w->slices[current], got, more, sink);
        if (rc != PS_OK || more == 0) return rc;
        done += got;
        got = more;
        wanted = next.count;
    }
}

/* Counts a received frame, runs it when well formed (request NULL: it was not) and `runnable`
 * (else it is misaddressed, or its payload was dropped, too large) and sends its answer. A
 * RELEASE that took effect sets *released; *from_client says whether the request was addressed
 * to the link. Returns what sending returned. */
static int answer_request(link_worker *w, const ps_frame *request, int runnable, int *released, int *from_client,
                          const answer_sink *sink) {
    ps_server *s = w->server;
    atomic_fetch_add(&s->frames, 1);
    int rc = PS_EINVAL;
    ps_op op;
    int ran = 0;
    uint8_t code = 0;
    uint64_t request_id = 0;
    ps_error_mark began = {0};
    *from_client = 0;
    if (request) {
        code = request->op;
        request_id = request->request_id;
        if (runnable) {
            began = ps_stage_error_mark();
            rc = run_request(w, request, &op, &ran);
        }
        *released = request->op == PS_WIRE_RELEASE && rc == PS_OK;
        *from_client = runnable && request->handle_id == w->id;
    }
    if (rc == PS_EINVAL) atomic_fetch_add(&s->bad_frames, 1);
    /* A frame of the client's refused unrun (or, on its own direct connection, unreadable) may have
     * been one of a stream: a frame that continues its stream is not run. Another peer's frame on
     * a ZeroMQ link's socket changes nothing of the client's. */
    if (!ran && rc != PS_OK && (*from_client || w->transport != PS_TRANSPORT_ZMQ)) w->stream_whole = 0;
    uint32_t shape = ran ? ps_op_kinds[op.kind].shape : 0;
    if (shape & PS_OP_TUPLES_OUT && rc == PS_OK) return send_range(w, request, &op, sink);
    /* The answer's value: the kind's value (a tuple freed by axe: the first live index), or else
     * the tuples of the request that took effect. Its payload: the tuple out, or the explanation of
     * the failure its thread wrote while it ran (ps_stage_said_since), as text: never an older
     * one, nor another client's. (A stage tells a failure met in an earlier call again, in the
     * caller's thread: a sum's failed round, a batch's failed send.) */
    int64_t value = 0;
    const void *payload = w->tuple;
    size_t payload_length = 0;
    char why[PS_STAGE_ERROR_MAX];
    if (ran) {
        value = shape & (PS_OP_VALUE_OUT | PS_OP_TUPLES_OUT) || rc == PS_EAXED ? op.value : (int64_t)op.done;
        payload_length = shape & PS_OP_TUPLE_OUT && rc == PS_OK ? w->tuple_size : 0;
        if (ps_status_is_explained(rc)) {
            ps_stage_said_since(began, why, sizeof why);
            payload = why;
            payload_length = strnlen(why, ANSWER_TEXT_MAX); /* within a frame: it holds 8 KiB of tuples at least */
        }
    }
    /* The answer names the link its request named: one to another link's id, or an unreadable
     * frame, tells a stranger on this socket nothing of this link's id. */
    size_t length = encode_link_answer(w, code, rc, request_id, request ? request->handle_id : 0, value, payload,
                                       payload_length);
    /* The link's last use; then, before the answer, it may go: the client, told, may build again
     * at once, within its limits. */
    if (*released) atomic_store(&w->released, 1);
    return sink->frame(sink->to, w->answer, length);
}

/* A ZeroMQ link's answers go to the peer whose routing id came with the request. */
typedef struct zmq_peer {
    void *socket;
    zmq_msg_t *routing_id;
    unsigned char *frame; /* room for one frame of a range */
} zmq_peer;

static int answer_zmq(void *to, const unsigned char *frame, size_t length) {
    zmq_peer *peer = to;
    send_answer(peer->socket, zmq_msg_data(peer->routing_id), zmq_msg_size(peer->routing_id), frame, length);
    return PS_OK;
}

/* Each frame of a range is one message. */
static int answers_zmq(void *to, struct iovec *parts, int count) {
    zmq_peer *peer = to;
    for (int i = 0; i < count; i += 2) {
        memcpy(peer->frame, parts[i].iov_base, parts[i].iov_len);
        memcpy(peer->frame + parts[i].iov_len, parts[i + 1].iov_base, parts[i + 1].iov_len);
        answer_zmq(to, peer->frame, parts[i].iov_len + parts[i + 1].iov_len);
    }
    return PS_OK;
}

static int answer_direct(void *to, const unsigned char *frame, size_t length) {
    return ps_channel_write(to, frame, length);
}

static int answers_direct(void *to, struct iovec *parts, int count) { return ps_channel_send_parts(to, parts, count); }

/* Serves the link on its ZeroMQ socket until it is released, its client is gone or the server
 * stops; returns 1 when the client was gone. */
static int serve_zmq(link_worker *w) {
    ps_server *s = w->server;
    int released = 0, abandoned = 0, served = 0;
    link_peers peers = {0, -1, 0};
    int64_t first_peer_due = ps_now_ns() + PEER_SILENCE_MS * MS;
    /* A receive that waits a slice by itself: no poll before each request. */
    int slice_ms = POLL_SLICE_MS;
    zmq_setsockopt(w->socket, ZMQ_RCVTIMEO, &slice_ms, sizeof slice_ms);
    while (!released && !abandoned && !atomic_load(&s->stopping)) {
        zmq_msg_t routing_id, frame;
        zmq_msg_init(&routing_id);
        zmq_msg_init(&frame);
        int received = receive_request(w->socket, &routing_id, &frame);
        if (received == 1) { /* idle for a slice: see who came and went */
            zmq_msg_close(&routing_id);
            zmq_msg_close(&frame);
            abandoned = client_gone(w, &peers, served, first_peer_due);
            continue;
        }
        ps_frame request;
        int whole = received == 0 && ps_wire_decode(zmq_msg_data(&frame), zmq_msg_size(&frame), &request) == 0;
        /* Another client than the link's (each a key of its own) is not served here. */
        const char *user = w->user[0] ? zmq_msg_gets(&frame, "User-Id") : NULL;
        int owner = !w->user[0] || (user && strcmp(user, w->user) == 0);
        zmq_peer peer = {w->socket, &routing_id, w->answer};
        answer_sink sink = {answer_zmq, answers_zmq, &peer};
        int from_client;
        answer_request(w, whole ? &request : NULL, owner, &released, &from_client, &sink);
        if (from_client) { /* the connection it came on is the client's (-1 where ZeroMQ names none) */
            served = 1;
            client_came_on(w, &peers, zmq_msg_get(&frame, ZMQ_SRCFD));
        }
        zmq_msg_close(&routing_id);
        zmq_msg_close(&frame);
    }
    if (w->peers_monitor) {
        zmq_socket_monitor(w->socket, NULL, 0);
        zmq_close(w->peers_monitor);
    }
    close_bound_socket(w->socket, &w->file);
    w->socket = NULL;
    return abandoned;
}

/* Whether a frame is the link's CONNECT with the link's secret (compared in constant time). */
static int presents_secret(const link_worker *w, const ps_frame *frame) {
    return frame->op == PS_WIRE_CONNECT && frame->handle_id == w->id && ps_wire_presents(frame, w->secret);
}

/* Answers a frame of a connection not admitted yet (a short wait: it may not be reading). */
static void answer_connect(ps_channel *c, const ps_frame *frame, int status, const char *text) {
    unsigned char buf[PS_WIRE_HEADER + 128];
    size_t length = encode_answer(buf, sizeof buf, frame ? frame->op : 0, status, frame ? frame->request_id : 0,
                                  frame ? frame->handle_id : 0, 0, text, text ? strlen(text) : 0);
    ps_channel_send(c, buf, length, 0);
}

/* Turns a connection away, counted; one that sent a frame is told why. */
static void refuse(link_worker *w, ps_channel *c, int received, const ps_frame *frame) {
    ps_server *s = w->server;
    atomic_fetch_add(&s->refused, 1);
    if (received == PS_OK || received == PS_EINVAL) {
        atomic_fetch_add(&s->frames, 1);
        atomic_fetch_add(&s->bad_frames, 1);
        answer_connect(c, received == PS_OK ? frame : NULL, PS_EINVAL,
                       "refused: a direct connection first presents its link's id and secret (CONNECT)");
    }
    ps_channel_close(c);
}

/* Admits the link's client on a direct link: of the connections to the link's listener, the
 * first to present the secret, within CONNECT_WAIT_MS of connecting and PEER_SILENCE_MS of the
 * link's BUILD (of PENDING_MAX waiting at once, a new one takes the oldest's place). Every other
 * one is refused, and the listener is closed once the client is in (the system refuses later
 * ones). Returns 1 with *client connected; 0 when no client came in
 * time or the server stops. */
static int admit(link_worker *w, ps_channel *client) {
    ps_server *s = w->server;
    ps_presenting waiting[PENDING_MAX];
    int count = 0, admitted = 0;
    int64_t nobody_due = ps_now_ns() + PEER_SILENCE_MS * MS;
    size_t link_frame = ps_wire_link_frame_max(w->tuple_size);
    size_t frame_max = link_frame > PS_WIRE_HEADER + PS_WIRE_SECRET ? link_frame : PS_WIRE_HEADER + PS_WIRE_SECRET;
    while (!admitted && !atomic_load(&s->stopping) && ps_now_ns() < nobody_due) {
        struct pollfd items[1 + PENDING_MAX];
        items[0] = (struct pollfd){w->listener, POLLIN, 0};
        for (int i = 0; i < count; i++) items[1 + i] = (struct pollfd){waiting[i].channel.fd, POLLIN, 0};
        int polled = count;
        poll(items, (nfds_t)(1 + polled), POLL_SLICE_MS);
        for (int i = polled - 1; i >= 0 && !admitted; i--) {
            if (!items[1 + i].revents && ps_now_ns() < waiting[i].due) continue;
            ps_frame frame;
            int received = ps_channel_receive(&waiting[i].channel, 0, &frame); /* no wait: it is there or not */
            if (received == PS_ETIMEDOUT && ps_now_ns() < waiting[i].due) continue;
            if (received == PS_OK && presents_secret(w, &frame)) {
                atomic_fetch_add(&s->frames, 1);
                answer_connect(&waiting[i].channel, &frame, PS_OK, NULL);
                *client = waiting[i].channel;
                admitted = 1;
            } else {
                refuse(w, &waiting[i].channel, received, &frame);
            }
            waiting[i] = waiting[--count];
        }
        ps_channel fresh;
        if (!admitted && (items[0].revents & POLLIN) &&
            ps_channel_accept(w->listener, frame_max, SEND_WAIT_NS, &fresh) == PS_OK) {
            if (count == PENDING_MAX) { /* the longest waiting gives its place up */
                int old = ps_presenting_oldest(waiting, count);
                refuse(w, &waiting[old].channel, PS_EREMOTE, NULL);
                waiting[old] = waiting[--count];
            }
            waiting[count++] = (ps_presenting){fresh, ps_now_ns() + CONNECT_WAIT_MS * MS};
        }
    }
    while (count) refuse(w, &waiting[--count].channel, PS_EREMOTE, NULL);
    close(w->listener);
    w->listener = -1;
    return admitted;
}

/* Serves the link on its direct connection: this thread reads each request and writes its
 * answer itself; the answers to requests that came together go out together, before it waits.
 * Returns 1 when the client was gone (never came, or closed without RELEASE). */
static int serve_direct(link_worker *w) {
    ps_server *s = w->server;
    ps_channel client;
    if (!admit(w, &client)) return !atomic_load(&s->stopping);
    int released = 0, from_client, gone = 0;
    answer_sink sink = {answer_direct, answers_direct, &client};
    while (!released && !gone && !atomic_load(&s->stopping)) {
        ps_frame request;
        int received = ps_channel_receive(&client, ps_now_ns() + POLL_SLICE_MS * MS, &request);
        if (received == PS_ETIMEDOUT) continue;
        if (received == PS_EREMOTE) {
            gone = 1;
            break;
        }
        int64_t begun = ps_now_ns();
        /* A frame too large was dropped, its header kept: the refusal answers it (op 0: unreadable). */
        int heard = received == PS_OK || request.op != 0;
        gone = answer_request(w, heard ? &request : NULL, received == PS_OK, &released, &from_client, &sink) != PS_OK;
        /* An answer that waited goes out now: the requests behind it may wait too, and the client
         * waits for each answer at most timeout_ms, no more than twice a request's slice. */
        if (!gone && ps_now_ns() - begun > LATE_NS) gone = ps_channel_flush(&client, 0) != PS_OK;
    }
    if (released) ps_channel_flush(&client, 0);
    ps_channel_close(&client);
    return gone;
}

static void *serve_link(void *arg) {
    link_worker *w = arg;
    int abandoned = w->transport == PS_TRANSPORT_ZMQ ? serve_zmq(w) : serve_direct(w);
    if (abandoned) atomic_fetch_add(&w->server->abandoned, 1);
    atomic_store(&w->finished, 1);
    return NULL;
}

/* Frees a server whose main socket is closed (or was never opened). */
static void free_server(ps_server *s) {
    if (s->zap_domain[0]) ps_zap_forget(s->zap_domain);
    pthread_mutex_destroy(&s->lock);
    free(s);
}

int ps_server_start(const char *endpoint, const char *curve_secret_z85, int authenticate_clients, ps_server **out,
                    char *error, size_t error_size) {
    *out = NULL;
    ps_server *s = calloc(1, sizeof *s);
    if (!s) return PS_ENOMEM;
    pthread_mutex_init(&s->lock, NULL);
    if (curve_secret_z85 && *curve_secret_z85) {
        if (strlen(curve_secret_z85) != 40 || !zmq_has("curve")) {
            snprintf(error, error_size, "CURVE secret key: expected 40 Z85 characters (and libzmq with CURVE)");
            free_server(s);
            return PS_EINVAL;
        }
        memcpy(s->curve_secret, curve_secret_z85, 41);
    }
    if (authenticate_clients) { /* no client is admitted until ps_server_allow_clients lists it */
        snprintf(s->zap_domain, sizeof s->zap_domain, "paths-server-%p", (void *)s);
        int rc = s->curve_secret[0] ? ps_zap_allow(s->zap_domain, NULL, 0, error, error_size) : PS_EINVAL;
        if (!s->curve_secret[0]) snprintf(error, error_size, "authenticating clients needs a CURVE secret key");
        if (rc != PS_OK) {
            s->zap_domain[0] = 0;
            free_server(s);
            return rc;
        }
    }
    size_t length = sizeof s->endpoint;
    char taken[PS_CHANNEL_ENDPOINT_MAX + 64];
    if (ipc_path_taken(endpoint, taken, sizeof taken)) {
        snprintf(error, error_size, "cannot bind '%s': %s", endpoint, taken);
        free_server(s);
        return PS_EINVAL;
    }
    if (make_server_socket(s, endpoint, PS_WIRE_HEADER + PS_SPEC_MAX, MAIN_REQUESTS, MAIN_ANSWERS, &s->main_socket) != 0 ||
        zmq_bind(s->main_socket, endpoint) != 0 ||
        zmq_getsockopt(s->main_socket, ZMQ_LAST_ENDPOINT, s->endpoint, &length) != 0) {
        snprintf(error, error_size, "cannot bind '%s': %s", endpoint, zmq_strerror(zmq_errno()));
        if (s->main_socket) zmq_close(s->main_socket);
        free_server(s);
        return PS_EINVAL;
    }
    note_socket_file(&s->main_file, endpoint, s->endpoint);
    remove_dead_link_files(endpoint);
    char name[32];
    snprintf(name, sizeof name, "%p", (void *)s);
    if (strncmp(s->endpoint, "inproc://", 9) != 0) /* inproc has no connections to count */
        ps_endpoint_connections_watch(&s->connections, s->main_socket, name);
    *out = s;
    return PS_OK;
}

int ps_server_allow_clients(ps_server *s, const ps_client_key *keys, size_t count, char *error, size_t error_size) {
    if (!s->zap_domain[0]) {
        snprintf(error, error_size, "this server was started without client authentication");
        return PS_ESTATE;
    }
    return ps_zap_allow(s->zap_domain, keys, count, error, error_size);
}

const char *ps_server_endpoint(const ps_server *server) { return server->endpoint; }

static void answer_main(ps_server *s, const zmq_msg_t *routing_id, uint8_t op, int status, uint64_t request_id,
                        uint64_t handle_id, const char *text) {
    size_t text_length = text ? strnlen(text, ANSWER_TEXT_MAX) : 0;
    size_t length = encode_answer(s->main_answer, sizeof s->main_answer, op, status, request_id, handle_id, 0,
                                  text, text_length);
    send_answer(s->main_socket, zmq_msg_data((zmq_msg_t *)routing_id), zmq_msg_size((zmq_msg_t *)routing_id),
                s->main_answer, length);
}

/* Where a listed allreduce member of this process listens, its secret and its group's shape
 * (peer_directory.h): what its group's other members ask for before they connect to it. The
 * server answers from the list and creates nothing; a member not listed (not made yet, or with
 * its peers already in) is answered PS_ESTATE, one that broke its group PS_EREMOTE with its news. */
static void answer_peer(ps_server *s, const zmq_msg_t *routing_id, const ps_frame *request) {
    char group[PS_GROUP_MAX + 1], endpoint[PS_PEER_ENDPOINT_MAX];
    unsigned char found[PS_WIRE_SECRET + PS_PEER_ENDPOINT_MAX], news[PS_PEER_NEWS];
    snprintf(group, sizeof group, "%.*s", (int)request->payload_length, (const char *)request->payload);
    uint32_t rank = (uint32_t)request->argument;
    uint64_t shape;
    int listed = ps_peer_find(group, rank, endpoint, found, news, &shape);
    if (listed == PS_ESTATE) {
        char text[PS_GROUP_MAX + 96];
        snprintf(text, sizeof text, "no member %u of allreduce group '%s' is waiting for its peers here", rank, group);
        answer_main(s, routing_id, PS_WIRE_PEER, PS_ESTATE, request->request_id, 0, text);
        return;
    }
    size_t length = strnlen(endpoint, sizeof endpoint);
    memcpy(found + PS_WIRE_SECRET, endpoint, length);
    int broke = listed == PS_EREMOTE;
    size_t size = encode_answer(s->main_answer, sizeof s->main_answer, PS_WIRE_PEER, listed, request->request_id, 0,
                                (int64_t)shape, broke ? news : found, broke ? PS_PEER_NEWS : PS_WIRE_SECRET + length);
    send_answer(s->main_socket, zmq_msg_data((zmq_msg_t *)routing_id), zmq_msg_size((zmq_msg_t *)routing_id),
                s->main_answer, size);
}

/* Who sent a BUILD, for per-client limits: the name of its CURVE key where the server
 * authenticates its clients ("key NAME"; the name alone in request->user), else its address
 * (TCP), else "local". */
static void name_client(zmq_msg_t *frame, ps_build_request *request) {
    const char *user = zmq_msg_gets(frame, "User-Id");
    const char *address = zmq_msg_gets(frame, "Peer-Address");
    snprintf(request->user, sizeof request->user, "%s", user ? user : "");
    if (user && *user) snprintf(request->client, sizeof request->client, "key %s", user);
    else snprintf(request->client, sizeof request->client, "%s", address && *address ? address : "local");
}

int ps_server_next_build(ps_server *s, int64_t timeout_ns, ps_build_request *out) {
    int64_t deadline = ps_deadline(timeout_ns);
    for (;;) {
        int64_t left_ns = deadline == PS_FOREVER ? POLL_SLICE_MS * 1000000LL : deadline - ps_now_ns();
        if (left_ns < 0) return PS_ETIMEDOUT;
        int64_t left_ms = (left_ns + 999999) / 1000000; /* rounded up: less than 1 ms left is no poll of 0 */
        zmq_pollitem_t items[2] = {{s->main_socket, 0, ZMQ_POLLIN, 0}, {s->connections.monitor, 0, ZMQ_POLLIN, 0}};
        int polled = zmq_poll(items, s->connections.monitor ? 2 : 1, (long)left_ms);
        if (polled > 0 && (items[1].revents & ZMQ_POLLIN)) ps_endpoint_connections_update(&s->connections);
        if (polled <= 0 || !(items[0].revents & ZMQ_POLLIN)) {
            if (deadline != PS_FOREVER && ps_now_ns() >= deadline) return PS_ETIMEDOUT;
            continue;
        }
        zmq_msg_t routing_id, frame;
        zmq_msg_init(&routing_id);
        zmq_msg_init(&frame);
        atomic_fetch_add(&s->frames, 1);
        ps_frame request;
        int whole = receive_request(s->main_socket, &routing_id, &frame) == 0;
        int valid = whole && ps_wire_decode(zmq_msg_data(&frame), zmq_msg_size(&frame), &request) == 0;
        /* Requests here are never sent behind others, and name no link: else refused, echoed. */
        int here = valid && request.status == 0 && request.handle_id == 0;
        int found = 0;
        if (here && request.op == PS_WIRE_BUILD && request.payload_length > 0 &&
            request.payload_length <= PS_SPEC_MAX && request.argument >= 0 && request.argument < PS_TRANSPORT_LIMIT &&
            zmq_msg_size(&routing_id) <= PS_ROUTING_ID_MAX) {
            name_client(&frame, out);
            out->routing_id_length = zmq_msg_size(&routing_id);
            memcpy(out->routing_id, zmq_msg_data(&routing_id), out->routing_id_length);
            out->request_id = request.request_id;
            out->transport = (int)request.argument;
            memcpy(out->spec, request.payload, request.payload_length);
            out->spec[request.payload_length] = 0;
            found = 1;
        }
        int fd = whole ? zmq_msg_get(&frame, ZMQ_SRCFD) : -1;
        uint64_t connection = ps_endpoint_connections_heard(&s->connections, fd, found);
        if (found) {
            out->connection_fd = fd;
            out->connection = connection;
        } else if (here && request.op == PS_WIRE_PING && request.payload_length == 0) {
            answer_main(s, &routing_id, PS_WIRE_PING, PS_OK, request.request_id, 0, NULL);
        } else if (here && request.op == PS_WIRE_PEER && request.payload_length > 0 &&
                   request.payload_length <= PS_GROUP_MAX && !memchr(request.payload, 0, request.payload_length) &&
                   request.argument >= 0 && request.argument <= UINT32_MAX) {
            answer_peer(s, &routing_id, &request);
        } else if (whole) {
            atomic_fetch_add(&s->bad_frames, 1);
            answer_main(s, &routing_id, valid ? request.op : 0, PS_EINVAL, valid ? request.request_id : 0, 0,
                        "malformed or misaddressed frame: the main endpoint takes BUILD, PING and PEER, with handle_id 0");
        } else {
            atomic_fetch_add(&s->bad_frames, 1);
        }
        zmq_msg_close(&routing_id);
        zmq_msg_close(&frame);
        if (found) return PS_OK;
    }
}

/* Where a new link's way in binds: on the main endpoint's host (loopback for a server bound to
 * ipc or inproc) for TCP, a free port; the main ipc/inproc name with the link's id appended for
 * ZeroMQ; a fresh abstract name for a direct Unix socket. */
static void link_host(const ps_server *s, char *out, size_t size) {
    if (strncmp(s->endpoint, "tcp://", 6) == 0) {
        const char *colon = strrchr(s->endpoint, ':');
        snprintf(out, size, "%.*s", (int)(colon - s->endpoint - 6), s->endpoint + 6);
    } else {
        snprintf(out, size, "127.0.0.1");
    }
}

/* Opens the link's way in for its transport and writes the endpoint the client is to use. */
static int open_link(ps_server *s, link_worker *w, char *bound, size_t bound_size) {
    char host[PS_CHANNEL_ENDPOINT_MAX];
    link_host(s, host, sizeof host);
    if (w->transport != PS_TRANSPORT_ZMQ) {
        if (getrandom(w->secret, sizeof w->secret, 0) != (ssize_t)sizeof w->secret) return PS_EREMOTE;
        return ps_channel_listen(w->transport, host, &w->listener, bound, bound_size);
    }
    char bind_to[PS_CHANNEL_ENDPOINT_MAX + 32];
    if (strncmp(s->endpoint, "tcp://", 6) == 0) snprintf(bind_to, sizeof bind_to, "tcp://%s:*", host);
    else { /* a name of its own: the link's id, which only its client may know, would show in a file name */
        uint64_t name;
        if (getrandom(&name, sizeof name, 0) != (ssize_t)sizeof name) return PS_EREMOTE;
        snprintf(bind_to, sizeof bind_to, "%s.%016llx", s->endpoint, (unsigned long long)name);
    }
    size_t bound_length = bound_size;
    /* A link's messages are never longer than its largest frame (a longer one drops its peer
     * unread), and each way its queue holds LINK_QUEUE_BYTES of them: answers its client leaves
     * unread (more are dropped), requests that come while an operation waits. ZeroMQ counts them
     * in messages, 1000 by default: 40-byte requests for a 1 MiB tuple would hold a gigabyte. */
    int64_t largest = (int64_t)ps_wire_link_frame_max(w->tuple_size);
    int queued = (int)(LINK_QUEUE_BYTES / largest);
    if (make_server_socket(s, bind_to, largest, queued, queued, &w->socket) != 0 || zmq_bind(w->socket, bind_to) != 0 ||
        zmq_getsockopt(w->socket, ZMQ_LAST_ENDPOINT, bound, &bound_length) != 0)
        return PS_EREMOTE;
    note_socket_file(&w->file, bind_to, bound);
    /* inproc reports no connections coming or going: its client, in this process, lets go itself */
    w->peers_monitor = strncmp(bind_to, "inproc://", 9) == 0 ? NULL : watch_peers(w);
    return PS_OK;
}

static void reply_build(ps_server *s, const ps_build_request *request, int status, uint64_t id, const void *payload,
                        size_t payload_length) {
    size_t length = encode_answer(s->main_answer, sizeof s->main_answer, PS_WIRE_BUILD, status, request->request_id, id,
                                  0, payload, payload_length);
    send_answer(s->main_socket, request->routing_id, request->routing_id_length, s->main_answer, length);
    ps_endpoint_connections_answered(&s->connections, request->connection_fd, request->connection);
}

static void refuse_build(ps_server *s, const ps_build_request *request, int status, const char *text) {
    reply_build(s, request, status, 0, text, strnlen(text, ANSWER_TEXT_MAX));
}

int ps_server_answer_build(ps_server *s, const ps_build_request *request, ps_link *link, const char *error_text,
                           uint64_t *handle_id) {
    if (!link) {
        refuse_build(s, request, PS_EINVAL, error_text && *error_text ? error_text : "build failed");
        return PS_OK;
    }
    link_worker *w = calloc(1, sizeof *w);
    if (!w) return PS_ENOMEM;
    w->server = s;
    w->link = link;
    w->transport = request->transport;
    w->listener = -1;
    memcpy(w->user, request->user, sizeof w->user);
    w->tuple_size = ps_stage_format(link->stage)->size;
    w->tuple = malloc(w->tuple_size);
    w->answer = malloc(ps_wire_link_frame_max(w->tuple_size));
    /* A link's id is random, so that only its client, told it by the BUILD's answer, can name
     * it in a frame: a ZeroMQ link's socket takes frames from anyone who reaches its port. */
    int rc = getrandom(&w->id, sizeof w->id, 0) == (ssize_t)sizeof w->id ? PS_OK : PS_EREMOTE;
    w->id = (w->id & INT64_MAX) | 1; /* never 0, and a positive int64 wherever it is read as one */
    /* The answer: for a direct link, its secret and then its endpoint; else the endpoint. */
    unsigned char answer[PS_WIRE_SECRET + PS_CHANNEL_ENDPOINT_MAX];
    size_t secret_length = w->transport == PS_TRANSPORT_ZMQ ? 0 : PS_WIRE_SECRET;
    char *bound = (char *)answer + secret_length;
    if (rc == PS_OK && !(w->tuple && w->answer)) rc = PS_ENOMEM;
    if (rc == PS_OK) rc = open_link(s, w, bound, PS_CHANNEL_ENDPOINT_MAX);
    if (rc == PS_OK && pthread_create(&w->thread, NULL, serve_link, w) != 0) rc = PS_ENOMEM;
    if (rc != PS_OK) {
        if (w->peers_monitor) zmq_close(w->peers_monitor);
        if (w->socket) close_bound_socket(w->socket, &w->file);
        if (w->listener >= 0) close(w->listener);
        free(w->tuple);
        free(w->answer);
        free(w);
        refuse_build(s, request, rc, "the server could not open a socket for the link");
        return rc;
    }
    memcpy(answer, w->secret, secret_length);
    pthread_mutex_lock(&s->lock);
    w->next = s->workers;
    s->workers = w;
    pthread_mutex_unlock(&s->lock);
    atomic_fetch_add(&s->builds, 1);
    if (w->transport != PS_TRANSPORT_ZMQ) atomic_fetch_add(&s->direct, 1);
    atomic_fetch_add(&s->live, 1);
    *handle_id = w->id;
    reply_build(s, request, PS_OK, w->id, answer, secret_length + strlen(bound));
    return PS_OK;
}

/* Frees a worker whose thread has been joined. */
static void free_joined_worker(link_worker *w) {
    free(w->slices[0]);
    free(w->slices[1]);
    free(w->tuple);
    free(w->answer);
    free(w);
}

size_t ps_server_reap(ps_server *s, uint64_t *ids, size_t max) {
    size_t n = 0;
    pthread_mutex_lock(&s->lock);
    for (link_worker **at = &s->workers; *at && n < max;) {
        link_worker *w = *at;
        int finished = atomic_load(&w->finished);
        if (!w->reported && (finished || atomic_load(&w->released))) {
            ids[n++] = w->id;
            w->reported = 1;
        }
        if (finished) {
            *at = w->next;
            pthread_join(w->thread, NULL);
            free_joined_worker(w);
            atomic_fetch_sub(&s->live, 1);
        } else {
            at = &w->next;
        }
    }
    pthread_mutex_unlock(&s->lock);
    return n;
}

void ps_server_read_counters(ps_server *s, ps_server_counters *out) {
    out->frames = atomic_load(&s->frames);
    out->bad_frames = atomic_load(&s->bad_frames);
    out->builds = atomic_load(&s->builds);
    out->direct = atomic_load(&s->direct);
    out->live = atomic_load(&s->live);
    out->abandoned = atomic_load(&s->abandoned);
    out->refused = atomic_load(&s->refused);
    out->crowded_out = atomic_load(&s->connections.closed);
}

int ps_server_stop(ps_server *s, int64_t wait_ns) {
    if (!s) return 0;
    atomic_store(&s->stopping, 1);
    pthread_mutex_lock(&s->lock);
    link_worker *w = s->workers;
    s->workers = NULL;
    pthread_mutex_unlock(&s->lock);
    struct timespec due;
    clock_gettime(CLOCK_REALTIME, &due); /* pthread_timedjoin_np's clock */
    int64_t until = (int64_t)due.tv_nsec + (wait_ns > 0 ? wait_ns : 0);
    due.tv_sec += (time_t)(until / 1000000000);
    due.tv_nsec = (long)(until % 1000000000);
    int left = 0;
    while (w) {
        link_worker *next = w->next;
        if ((wait_ns < 0 ? pthread_join(w->thread, NULL) : pthread_timedjoin_np(w->thread, NULL, &due)) == 0) {
            free_joined_worker(w);
        } else { /* its stage's code does not return: it keeps the worker (and the server) it uses */
            pthread_detach(w->thread);
            left++;
        }
        w = next;
    }
    ps_endpoint_connections_stop(&s->connections, s->main_socket);
    close_bound_socket(s->main_socket, &s->main_file);
    if (!left) free_server(s);
    return left;
}
