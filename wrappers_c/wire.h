/* wire.h — the PATHS wire protocol: small binary frames between a remote stage and a server.
 *
 * Every frame is a fixed 40-byte little-endian header, then a payload of payload_length bytes
 * (a tuple, a path spec, an endpoint, a secret or an error text): one ZeroMQ message, or the
 * next bytes of a direct stream. No code travels: the payload of a request is data of a checked
 * length, never executed. wire.md beside it tells the layout in full.
 */
#ifndef WRAPPERS_WIRE_H
#define WRAPPERS_WIRE_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

enum {
    PS_WIRE_VERSION = 1,
    PS_WIRE_HEADER = 40,
    PS_WIRE_MAX_PAYLOAD = (1 << 20) + 4096, /* a tuple of the largest format, or a path spec */
    PS_WIRE_SECRET = 32,                    /* bytes of a direct link's secret */
    PS_WIRE_BATCH_PAYLOAD = 16384,          /* a frame of several tuples carries at most this many
                                               bytes of them (or one tuple, when larger) */
};

/* The op codes of the control plane and of a link's life. A stage operation's op code is its
 * kind's (ps_op_kinds in operation.h: move 2, observe 3, ... exchange 11, move_many 13,
 * observe_range 14, flush 15, fence 16). */
typedef enum ps_wire_op {
    PS_WIRE_BUILD = 1,   /* payload: a path spec (JSON); answer: handle id, payload: endpoint */
    PS_WIRE_RELEASE = 9, /* the client is done with the handle */
    PS_WIRE_PING = 10,   /* liveness; answer is empty */
    PS_WIRE_CONNECT = 12,/* first frame of a direct connection; payload: the link's secret */
    PS_WIRE_PEER = 17,   /* where an allreduce member listens: payload its group, argument its rank;
                            answer payload: its secret, then its endpoint */
    PS_WIRE_PART = 18,   /* a partial or total between allreduce members (wire.md, "Allreduce") */
    PS_WIRE_BREAK = 19,  /* an allreduce member broke its group: payload the news of why */
} ps_wire_op;

/* Op codes a well-formed frame may carry: PS_WIRE_OP_FIRST <= op < PS_WIRE_OP_LIMIT. */
enum { PS_WIRE_OP_FIRST = 1, PS_WIRE_OP_LIMIT = 20 };

/* A request for tuples out (observe_range) carries how many it asks for: PS_WIRE_COUNT bytes,
 * u32 little-endian. Its answer comes in frames of at most ps_wire_batch_tuples each, whose
 * `value` is 0 in the last and else at most the tuples still to come (wire.md, "Ranges"). */
enum { PS_WIRE_COUNT = 4 };

/* A payload's little-endian fields: that count (u32), a BREAK's news (wire.md, "Allreduce"). */
void ps_wire_put_u32(uint32_t value, unsigned char *out);
uint32_t ps_wire_get_u32(const unsigned char *in);
void ps_wire_put_u64(uint64_t value, unsigned char *out);
uint64_t ps_wire_get_u64(const unsigned char *in);

/* The argument of a frame of tuples in (MOVE_MANY): the first frame of a stream, or one that
 * continues it, run only when the stream's frame before it took effect whole (wire.md). */
enum { PS_WIRE_STREAM_STARTS = 0, PS_WIRE_STREAM_CONTINUES = 1 };

/* A request's `status`: 0, or PS_WIRE_BEHIND for one sent while requests before it on its link
 * are not answered yet (pipelining): run only when the link's last frame of tuples took effect
 * whole, else answered PS_ESTATE, value 0, not run (wire.md, "Pipelining"). */
enum { PS_WIRE_BEHIND = 1 };

/* Tuples of `tuple_size` bytes one frame carries at most: PS_WIRE_BATCH_PAYLOAD bytes of them, or
 * one; and the longest frame of a link over such tuples (what its buffers must hold). */
static inline size_t ps_wire_batch_tuples(size_t tuple_size) {
    size_t n = tuple_size ? PS_WIRE_BATCH_PAYLOAD / tuple_size : 1;
    return n ? n : 1;
}
static inline size_t ps_wire_link_frame_max(size_t tuple_size) {
    return PS_WIRE_HEADER + ps_wire_batch_tuples(tuple_size) * tuple_size;
}

/* How a link's operations travel, asked for in a BUILD's argument. */
typedef enum ps_wire_transport {
    PS_TRANSPORT_ZMQ = 0, /* the link's own ZeroMQ socket (the one CURVE protects) */
    PS_TRANSPORT_TCP,     /* a direct TCP connection */
    PS_TRANSPORT_IPC,     /* a direct Unix-socket connection */
    PS_TRANSPORT_LIMIT
} ps_wire_transport;

/* A decoded frame. For a request, `status` is 0 or PS_WIRE_BEHIND (sent behind requests not
 * answered yet) and `value` holds the timeout in nanoseconds (< 0: none); for an answer, `status`
 * is the operation's status and `argument` a link's axe point as its path shows it (else 0). */
typedef struct ps_frame {
    uint8_t op;
    uint16_t status;
    uint64_t request_id;
    uint64_t handle_id;
    int64_t argument;
    int64_t value;
    const unsigned char *payload;
    uint32_t payload_length;
} ps_frame;

/* Writes frame's header and copies its payload into buf (capacity bytes). Returns the frame's
 * length, or 0 when it does not fit. */
size_t ps_wire_encode(const ps_frame *frame, unsigned char *buf, size_t capacity);
/* Writes the PS_WIRE_HEADER bytes of frame's header alone (its payload goes out from where it
 * lies); payload_length must be at most PS_WIRE_MAX_PAYLOAD. */
void ps_wire_encode_header(const ps_frame *frame, unsigned char *buf);

/* Whether a frame's payload is `secret` (PS_WIRE_SECRET bytes), compared in constant time: what a
 * direct connection presents in its CONNECT. */
int ps_wire_presents(const ps_frame *frame, const unsigned char *secret);

/* Decodes a checked header (ps_wire_payload_length >= 0) into out, with no payload. */
void ps_wire_decode_header(const unsigned char *header, ps_frame *out);

/* Checks and decodes a received frame: version, op, lengths. payload points into buf.
 * Returns 0, or -1 for a malformed frame (nothing in out is to be trusted then). */
int ps_wire_decode(const unsigned char *buf, size_t length, ps_frame *out);

/* The payload length a frame's header (its first PS_WIRE_HEADER bytes) announces, or -1 when the
 * header is malformed (version, op, a length beyond the largest): what a stream reader needs to
 * know where the frame ends. */
int64_t ps_wire_payload_length(const unsigned char *header);

#ifdef __cplusplus
}
#endif

#endif
