/* direct_channel.c — wire frames over a stream socket: listening, connecting, sending whole
 * frames, and receiving them with the core's wait policy. */
#include "direct_channel.h"

#include <arpa/inet.h>
#include <errno.h>
#include <limits.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "control_plane.h"
#include "pastset.h"
#include "waitpoint.h"

enum { BACKLOG = 16 };
static const int64_t CONNECT_RETRY_NS = 1000000; /* a full Unix listener's queue: look again this soon */

typedef struct address {
    struct sockaddr_storage storage;
    socklen_t length;
} address;

/* Frames go out as soon as written, and a silent peer's host is probed (TCP only). */
static void tune(int fd, int family) {
    if (family == AF_UNIX) return;
    int one = 1, idle = PS_KEEPALIVE_IDLE_S, interval = PS_KEEPALIVE_INTERVAL_S, probes = PS_KEEPALIVE_PROBES;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof one);
    setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof idle);
    setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &interval, sizeof interval);
    setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &probes, sizeof probes);
}

/* ipc://PATH or ipc://@NAME (abstract: the name has no file and no terminating NUL). */
static int unix_address(const char *path, address *out) {
    struct sockaddr_un *un = (struct sockaddr_un *)&out->storage;
    size_t n = strlen(path);
    if (n == 0 || n >= sizeof un->sun_path) return -1;
    memset(un, 0, sizeof *un);
    un->sun_family = AF_UNIX;
    memcpy(un->sun_path, path, n);
    int abstract = path[0] == '@';
    if (abstract) un->sun_path[0] = 0;
    out->length = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + n + !abstract);
    return 0;
}

/* tcp://HOST:PORT, HOST a name, an IPv4 address or a bracketed IPv6 one. */
static int tcp_address(const char *host_port, int passive, address *out) {
    const char *colon = strrchr(host_port, ':');
    if (!colon || colon == host_port) return -1;
    char host[PS_CHANNEL_ENDPOINT_MAX];
    const char *first = host_port, *end = colon;
    if (*first == '[' && end[-1] == ']') first++, end--;
    snprintf(host, sizeof host, "%.*s", (int)(end - first), first);
    struct addrinfo hints = {0}, *found = NULL;
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = passive ? AI_PASSIVE : 0;
    if (getaddrinfo(host, colon + 1, &hints, &found) != 0 || !found) return -1;
    memcpy(&out->storage, found->ai_addr, found->ai_addrlen);
    out->length = found->ai_addrlen;
    freeaddrinfo(found);
    return 0;
}

/* A client's endpoint (a TCP host name is looked up here, before the connection's deadline). */
static int parse_endpoint(const char *endpoint, address *out) {
    if (strncmp(endpoint, "tcp://", 6) == 0) return tcp_address(endpoint + 6, 0, out);
    if (strncmp(endpoint, "ipc://", 6) == 0) return unix_address(endpoint + 6, out);
    return -1;
}

static int family_of(const address *a) { return a->storage.ss_family; }

/* The endpoint a listening socket is reachable at. */
static void describe(int fd, char *endpoint, size_t size) {
    address a;
    a.length = sizeof a.storage;
    getsockname(fd, (struct sockaddr *)&a.storage, &a.length);
    char host[INET6_ADDRSTRLEN] = "";
    if (family_of(&a) == AF_INET) {
        struct sockaddr_in *in = (struct sockaddr_in *)&a.storage;
        inet_ntop(AF_INET, &in->sin_addr, host, sizeof host);
        snprintf(endpoint, size, "tcp://%s:%u", host, ntohs(in->sin_port));
    } else if (family_of(&a) == AF_INET6) {
        struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)&a.storage;
        inet_ntop(AF_INET6, &in6->sin6_addr, host, sizeof host);
        snprintf(endpoint, size, "tcp://[%s]:%u", host, ntohs(in6->sin6_port));
    } else {
        struct sockaddr_un *un = (struct sockaddr_un *)&a.storage;
        size_t n = a.length - offsetof(struct sockaddr_un, sun_path);
        if (n > 0 && un->sun_path[0] == 0) snprintf(endpoint, size, "ipc://@%.*s", (int)(n - 1), un->sun_path + 1);
        else snprintf(endpoint, size, "ipc://%s", un->sun_path);
    }
}

int ps_channel_listen(int transport, const char *host, int *listener, char *endpoint, size_t endpoint_size) {
    address a;
    char host_port[PS_CHANNEL_ENDPOINT_MAX];
    snprintf(host_port, sizeof host_port, "%s:0", host);
    if (transport == PS_TRANSPORT_IPC) {
        memset(&a.storage, 0, sizeof a.storage);
        a.storage.ss_family = AF_UNIX;
        a.length = sizeof(sa_family_t); /* autobind: the kernel picks a fresh abstract name */
    } else if (transport != PS_TRANSPORT_TCP || tcp_address(host_port, 1, &a) != 0) {
        errno = EINVAL;
        return PS_EREMOTE;
    }
    int fd = socket(family_of(&a), SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) return PS_EREMOTE;
    if (bind(fd, (struct sockaddr *)&a.storage, a.length) != 0 || listen(fd, BACKLOG) != 0) {
        int saved = errno;
        close(fd);
        errno = saved;
        return PS_EREMOTE;
    }
    describe(fd, endpoint, endpoint_size);
    *listener = fd;
    return PS_OK;
}

static int wait_for(int fd, short events, int64_t left_ns) {
    struct pollfd item = {fd, events, 0};
    struct timespec wait = {left_ns / 1000000000LL, left_ns % 1000000000LL};
    int n = ppoll(&item, 1, &wait, NULL);
    return n < 0 && errno == EINTR ? 0 : n;
}

size_t ps_channel_buffer_bytes(size_t frame_max) {
    return frame_max > PS_CHANNEL_BUFFER_BYTES ? frame_max : PS_CHANNEL_BUFFER_BYTES;
}

int ps_channel_widen(ps_channel *c, size_t bytes) {
    if (bytes <= c->in_capacity) return PS_OK;
    unsigned char *grown = realloc(c->in, bytes);
    if (!grown) return PS_ENOMEM;
    c->in = grown;
    c->in_capacity = bytes;
    return PS_OK;
}

static int open_channel(int fd, int family, size_t frame_max, int64_t send_wait_ns, ps_channel *out) {
    size_t capacity = ps_channel_buffer_bytes(frame_max);
    *out = (ps_channel){.fd = -1};
    out->in = malloc(capacity);
    out->out = malloc(capacity);
    if (!out->in || !out->out) {
        free(out->in);
        free(out->out);
        *out = (ps_channel){.fd = -1};
        close(fd);
        return PS_ENOMEM;
    }
    out->fd = fd;
    out->tcp = family != AF_UNIX;
    out->send_wait_ns = send_wait_ns;
    out->in_capacity = out->out_capacity = capacity;
    return PS_OK;
}

int ps_channel_accept(int listener, size_t frame_max, int64_t send_wait_ns, ps_channel *out) {
    int fd = accept4(listener, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR ? PS_ETIMEDOUT : PS_EREMOTE;
    address a;
    a.length = sizeof a.storage;
    getsockname(fd, (struct sockaddr *)&a.storage, &a.length);
    tune(fd, family_of(&a));
    return open_channel(fd, family_of(&a), frame_max, send_wait_ns, out);
}

int ps_channel_connect_resumable(const char *endpoint, size_t frame_max, int64_t send_wait_ns, int64_t deadline_ns,
                                 ps_channel *attempt, char *error, size_t error_size) {
    address a;
    if (parse_endpoint(endpoint, &a) != 0) {
        snprintf(error, error_size, "cannot resolve '%s'", endpoint);
        ps_channel_close(attempt);
        return PS_EREMOTE;
    }
    int resumed = attempt->fd >= 0, rc = -1;
    int fd = resumed ? attempt->fd : socket(family_of(&a), SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    attempt->fd = -1;
    if (resumed && family_of(&a) != AF_UNIX) errno = EINPROGRESS; /* its handshake goes on */
    else if (fd >= 0) rc = connect(fd, (struct sockaddr *)&a.storage, a.length);
    /* A Unix listener whose queue is full says EAGAIN at once: try again until the deadline. */
    while (rc != 0 && fd >= 0 && errno == EAGAIN && ps_now_ns() < deadline_ns) {
        struct timespec pause = {0, CONNECT_RETRY_NS};
        nanosleep(&pause, NULL);
        rc = connect(fd, (struct sockaddr *)&a.storage, a.length);
    }
    int waiting = rc != 0 && fd >= 0 && errno == EAGAIN;
    if (rc != 0 && fd >= 0 && (errno == EINPROGRESS || errno == EINTR)) {
        int ready;
        do { /* a deadline passed still looks once; a signal ends a wait early (wait_for gives 0, as at
                the deadline): then wait on until the deadline, in slices that ask whether the caller
                gave up (Ctrl-C) or the process is exiting */
            int64_t end = ps_interruptible_slice_end(deadline_ns), left = end - ps_now_ns();
            if (!end) {
                ready = -1;
                errno = EINTR;
                break;
            }
            ready = wait_for(fd, POLLOUT, left > 0 ? left : 0);
        } while (ready == 0 && ps_now_ns() < deadline_ns);
        int failure = ready < 0 ? errno : 0;
        socklen_t length = sizeof failure;
        if (ready > 0) getsockopt(fd, SOL_SOCKET, SO_ERROR, &failure, &length);
        waiting = ready == 0;
        rc = ready > 0 && failure == 0 ? 0 : -1;
        errno = waiting ? ETIMEDOUT : failure;
    }
    if (waiting) {
        attempt->fd = fd;
        return PS_ETIMEDOUT;
    }
    if (rc != 0) {
        snprintf(error, error_size, "cannot connect to '%s': %s", endpoint, strerror(errno));
        if (fd >= 0) close(fd);
        return PS_EREMOTE;
    }
    tune(fd, family_of(&a));
    return open_channel(fd, family_of(&a), frame_max, send_wait_ns, attempt);
}

int ps_channel_connect(const char *endpoint, size_t frame_max, int64_t send_wait_ns, int64_t deadline_ns,
                       ps_channel *out, char *error, size_t error_size) {
    *out = (ps_channel){.fd = -1};
    int rc = ps_channel_connect_resumable(endpoint, frame_max, send_wait_ns, deadline_ns, out, error, error_size);
    if (rc != PS_ETIMEDOUT) return rc;
    snprintf(error, error_size, "cannot connect to '%s': %s", endpoint, strerror(errno));
    ps_channel_close(out);
    return PS_EREMOTE;
}

/* Sends the parts, all of them, in order (advancing them as they go), while the peer reads: each
 * wait for room lasts until the peer has taken PS_CHANNEL_BUFFER_BYTES more, at most send_wait_ns,
 * so that a slow peer is waited for and one that barely reads is not; the waits go in slices that
 * ask whether the caller gave up (Ctrl-C) or the process is exiting. With `more`, TCP may hold
 * them back for what follows (MSG_MORE: at most 200 ms, the kernel's cork limit); a Unix socket
 * sends them at once. */
static int send_parts(ps_channel *c, struct iovec *parts, int count, int more) {
    int64_t deadline = 0;
    size_t taken = 0; /* bytes the peer made room for since the wait began */
    c->corked = more && c->tcp;
    while (count > 0 && parts->iov_len == 0) parts++, count--;
    while (count > 0) {
        struct msghdr message = {.msg_iov = parts, .msg_iovlen = (size_t)(count < IOV_MAX ? count : IOV_MAX)};
        ssize_t n = sendmsg(c->fd, &message, MSG_NOSIGNAL | MSG_DONTWAIT | (more ? MSG_MORE : 0));
        if (n > 0) {
            taken += (size_t)n;
            if (taken >= PS_CHANNEL_BUFFER_BYTES) deadline = 0; /* the peer reads: the next wait starts anew */
            size_t sent = (size_t)n;
            for (; count > 0 && sent >= parts->iov_len; parts++, count--) sent -= parts->iov_len;
            if (count > 0) { /* the next part went in part */
                parts->iov_base = (char *)parts->iov_base + sent;
                parts->iov_len -= sent;
            }
            continue;
        }
        if (n < 0 && errno == EINTR) continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            if (!deadline) {
                deadline = ps_now_ns() + c->send_wait_ns;
                taken = 0;
            }
            int64_t end = ps_interruptible_slice_end(deadline), left = end - ps_now_ns();
            if (end && left > 0 && wait_for(c->fd, POLLOUT, left) >= 0) continue;
        }
        c->send_failed = 1;
        return PS_EREMOTE;
    }
    return PS_OK;
}

static int send_all(ps_channel *c, const unsigned char *bytes, size_t length, int more) {
    struct iovec part = {(void *)bytes, length};
    return send_parts(c, &part, 1, more);
}

int ps_channel_flush(ps_channel *c, int more) {
    if (c->send_failed || c->fd < 0) return PS_EREMOTE;
    int rc = send_all(c, c->out, c->out_length, more);
    c->out_length = 0;
    return rc;
}

int ps_channel_write(ps_channel *c, const unsigned char *frame, size_t length) {
    if (c->out_length + length > c->out_capacity && ps_channel_flush(c, 1) != PS_OK) return PS_EREMOTE;
    if (length > c->out_capacity) return send_all(c, frame, length, 1);
    memcpy(c->out + c->out_length, frame, length);
    c->out_length += length;
    return PS_OK;
}

int ps_channel_send(ps_channel *c, const unsigned char *frame, size_t length, int more) {
    int rc = ps_channel_write(c, frame, length);
    return rc == PS_OK ? ps_channel_flush(c, more) : rc;
}

int ps_channel_send_parts(ps_channel *c, struct iovec *parts, int count) {
    int rc = ps_channel_flush(c, 1);
    return rc == PS_OK ? send_parts(c, parts, count, 0) : rc;
}

/* Everything written goes out now: the buffer, and what TCP holds back (setting TCP_NODELAY
 * pushes it). */
static int push(ps_channel *c) {
    if (c->out_length) return ps_channel_flush(c, 0);
    if (c->corked) {
        int one = 1;
        setsockopt(c->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        c->corked = 0;
    }
    return PS_OK;
}

/* The next frame from the bytes received so far: PS_OK with *out, PS_EINVAL for a frame refused
 * (malformed: out->op 0; or too large and now dropped whole: *out its header), PS_ETIMEDOUT when
 * more must come first. */
static int take(ps_channel *c, ps_frame *out) {
    size_t have = c->in_end - c->in_start;
    if (c->skip) {
        size_t dropped = have < c->skip ? have : c->skip;
        c->in_start += dropped;
        c->skip -= dropped;
        if (c->skip) return PS_ETIMEDOUT;
        *out = c->skipped;
        return PS_EINVAL;
    }
    if (have < PS_WIRE_HEADER) return PS_ETIMEDOUT;
    const unsigned char *frame = c->in + c->in_start;
    int64_t payload = ps_wire_payload_length(frame);
    if (payload < 0) {
        c->out_of_step = 1; /* where this frame ends is unknown, and so is where the next begins */
        out->op = 0;
        return PS_EINVAL;
    }
    size_t length = PS_WIRE_HEADER + (size_t)payload;
    if (length > c->in_capacity) {
        ps_wire_decode_header(frame, &c->skipped);
        c->skip = length;
        return take(c, out);
    }
    if (have < length) return PS_ETIMEDOUT;
    ps_wire_decode(frame, length, out); /* the header is checked and the length is the announced one */
    c->in_start += length;
    return PS_OK;
}

/* Reads what has come, without waiting: >0 bytes, 0 for none yet, -1 when the connection ended. */
static ssize_t read_more(ps_channel *c) {
    if (c->in_start == c->in_end) {
        c->in_start = c->in_end = 0;
    } else if (c->in_start > 0) { /* the start of a frame: moved to the front, where it has room */
        memmove(c->in, c->in + c->in_start, c->in_end - c->in_start);
        c->in_end -= c->in_start;
        c->in_start = 0;
    }
    for (;;) {
        ssize_t n = recv(c->fd, c->in + c->in_end, c->in_capacity - c->in_end, MSG_DONTWAIT);
        if (n > 0) c->in_end += (size_t)n;
        if (n > 0) return n;
        if (n == 0) return -1; /* the peer closed the connection */
        if (errno == EINTR) continue;
        return errno == EAGAIN || errno == EWOULDBLOCK ? 0 : -1;
    }
}

int ps_channel_receive(ps_channel *c, int64_t deadline_ns, ps_frame *out) {
    if (c->out_of_step) push(c); /* the answer to the frame that lost the step goes out */
    if (c->fd < 0 || c->send_failed || c->out_of_step) return PS_EREMOTE;
    uint32_t spins = 0;
    int spun = 0; /* the last wait was a spin: what the next look finds is its verdict */
    for (;;) {
        int rc = take(c, out);
        if (rc != PS_ETIMEDOUT) return rc;
        if (push(c) != PS_OK) return PS_EREMOTE; /* what was written goes out before waiting */
        ssize_t n = read_more(c);
        if (spun) ps_wait_spun(spins, n != 0);
        spun = 0;
        if (n < 0) return PS_EREMOTE;
        if (n > 0) continue;
        int64_t left = deadline_ns - ps_now_ns();
        if (left <= 0) return PS_ETIMEDOUT;
        switch (ps_wait_next(&spins)) {
        case PS_WAIT_SPIN: ps_wait_pause(); spun = 1; break;
        case PS_WAIT_YIELD: ps_wait_yield(); break;
        case PS_WAIT_SLEEP: wait_for(c->fd, POLLIN, left); break;
        }
    }
}

void ps_channel_close(ps_channel *c) {
    if (c->fd >= 0) close(c->fd);
    free(c->in);
    free(c->out);
    *c = (ps_channel){.fd = -1};
}

int ps_presenting_oldest(const ps_presenting *waiting, int count) {
    int at = 0;
    for (int i = 1; i < count; i++)
        if (waiting[i].due < waiting[at].due) at = i;
    return at;
}
