/* direct_channel.h — the direct transport: wire frames (wire.md) over a TCP or Unix stream socket
 * that each end's own thread writes and reads, with no I/O thread in between.
 *
 * A channel is one connected socket with a buffer each way. Receiving takes the next frame from
 * what one read brought in (frames that came together cost one system call); when none is
 * whole, it first sends everything written, then waits as the core's waits do
 * (pastset/waitpoint.h): it looks, spins briefly, yields, and only then blocks in the kernel
 * (ppoll), never past its deadline. Writing queues a frame, so answers to frames that came
 * together go out together; sending writes and sends at once, or, marked `more`, lets TCP hold
 * it back for what follows (MSG_MORE: until the next send not so marked or the next receive, at
 * most 200 ms), so that a pipelined move and the request after it leave together. A stream has no message
 * boundaries, so a frame whose header is malformed leaves the channel out of step: that frame is
 * reported once, and the channel takes no further frame. Sockets are non-blocking and close on
 * exec, and writes never raise SIGPIPE. Endpoints: tcp://HOST:PORT, ipc://PATH, or ipc://@NAME
 * (Linux's abstract namespace: no file).
 */
#ifndef WRAPPERS_DIRECT_CHANNEL_H
#define WRAPPERS_DIRECT_CHANNEL_H

#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>

#include "wire.h"

#ifdef __cplusplus
extern "C" {
#endif

enum {
    PS_CHANNEL_ENDPOINT_MAX = 256,
    PS_CHANNEL_BUFFER_BYTES = 16384, /* frames that come or go together share a buffer this large */
};

/* A peer whose host vanished (no reset ever comes) is noticed after about 10 s of silence: TCP
 * keepalive probes its host, on the direct transport's connections and on ZeroMQ's alike. */
enum { PS_KEEPALIVE_IDLE_S = 2, PS_KEEPALIVE_INTERVAL_S = 2, PS_KEEPALIVE_PROBES = 4 };

typedef struct ps_channel {
    int fd;                 /* -1: not connected */
    int tcp;                /* a TCP socket (else a Unix one) */
    int64_t send_wait_ns;   /* the longest a send waits for the peer to read */
    unsigned char *in;      /* received bytes; [in_start, in_end) are not taken yet */
    size_t in_capacity, in_start, in_end;
    size_t skip;            /* bytes of a frame too large for `in`, still to be read and dropped */
    ps_frame skipped;       /* that frame's header (no payload): what its refusal answers */
    int out_of_step;        /* a malformed header was read: no frame boundary can be trusted */
    int send_failed;        /* a frame went out in part at most: the peer cannot read on */
    unsigned char *out;     /* frames written and not sent yet: out_length bytes */
    size_t out_capacity, out_length;
    int corked;             /* the last send was marked `more`: TCP may hold it back */
} ps_channel;

/* The bytes of each of a channel's two buffers, for frames of up to frame_max bytes. */
size_t ps_channel_buffer_bytes(size_t frame_max);
/* Lets the receive buffer hold at least `bytes`, so that frames that come together (a range's
 * answer) cost fewer reads; it never shrinks. PS_OK, or PS_ENOMEM with the buffer as it was. */
int ps_channel_widen(ps_channel *c, size_t bytes);

/* Binds a listening socket for `transport` (PS_TRANSPORT_TCP on `host`, a free port;
 * PS_TRANSPORT_IPC: a fresh abstract name) and writes its endpoint. PS_OK, or PS_EREMOTE with
 * errno set. */
int ps_channel_listen(int transport, const char *host, int *listener, char *endpoint, size_t endpoint_size);

/* Takes the next connection from a listener, for frames of up to `frame_max` bytes each way;
 * PS_OK, PS_ETIMEDOUT when none is waiting, PS_ENOMEM, PS_EREMOTE. */
int ps_channel_accept(int listener, size_t frame_max, int64_t send_wait_ns, ps_channel *out);

/* Connects to a listener's endpoint by the deadline. On failure, error says why. */
int ps_channel_connect(const char *endpoint, size_t frame_max, int64_t send_wait_ns, int64_t deadline_ns,
                       ps_channel *out, char *error, size_t error_size);
/* The same in several calls, for a caller whose own calls time out: *attempt is a closed
 * channel at first. PS_ETIMEDOUT: not connected by the deadline (the listener's queue is full,
 * or the handshake goes on), the attempt kept in *attempt for the next call with the same
 * endpoint (ps_channel_close drops it); else as ps_channel_connect. */
int ps_channel_connect_resumable(const char *endpoint, size_t frame_max, int64_t send_wait_ns, int64_t deadline_ns,
                                 ps_channel *attempt, char *error, size_t error_size);

/* Queues one encoded frame (sending what is queued first if it does not fit). PS_OK, or
 * PS_EREMOTE: the peer is gone, or it read less than PS_CHANNEL_BUFFER_BYTES in send_wait_ns (a
 * frame may have gone out in part, and the channel sends nothing more). */
int ps_channel_write(ps_channel *c, const unsigned char *frame, size_t length);
/* Sends what is queued (with `more`: TCP may hold it back, see above); the same statuses. */
int ps_channel_flush(ps_channel *c, int more);
/* Queues one frame and sends it with everything queued before it. */
int ps_channel_send(ps_channel *c, const unsigned char *frame, size_t length, int more);
/* Sends what is queued, then the parts (frames as header and payload, from where they lie: a
 * range's answer, with no copy) in as few system calls as the socket takes; the same statuses.
 * The parts are advanced as they go. */
int ps_channel_send_parts(ps_channel *c, struct iovec *parts, int count);

/* Receives the next frame by the deadline. PS_OK: *out decoded, its payload valid until the next
 * receive. PS_ETIMEDOUT: no whole frame yet (what came so far is kept). PS_EINVAL: a malformed
 * frame was read (out->op 0), or a frame too large was read and dropped (*out its header, without
 * its payload). PS_EREMOTE: the peer closed the connection, it failed, or the
 * channel is out of step. */
int ps_channel_receive(ps_channel *c, int64_t deadline_ns, ps_frame *out);

/* Closes the socket and frees the buffers; the channel can be connected again. */
void ps_channel_close(ps_channel *c);

/* A connection taken from a listener that must present a secret by `due` (ps_now_ns). */
typedef struct ps_presenting {
    ps_channel channel;
    int64_t due;
} ps_presenting;

/* Of `count` (> 0) such connections, the one that has waited longest: when no more may wait, it
 * makes room for a new one, so that connections that stall cannot keep a rightful one out. */
int ps_presenting_oldest(const ps_presenting *waiting, int count);

#ifdef __cplusplus
}
#endif

#endif
