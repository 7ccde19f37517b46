/* wire.c — encoding and checked decoding of PATHS frames (little-endian, fixed header). */
#include "wire.h"

#include <string.h>

static void put16(unsigned char *p, uint16_t v) {
    p[0] = (unsigned char)v;
    p[1] = (unsigned char)(v >> 8);
}

static void put32(unsigned char *p, uint32_t v) {
    for (int i = 0; i < 4; i++) p[i] = (unsigned char)(v >> (8 * i));
}

static void put64(unsigned char *p, uint64_t v) {
    for (int i = 0; i < 8; i++) p[i] = (unsigned char)(v >> (8 * i));
}

static uint16_t get16(const unsigned char *p) { return (uint16_t)(p[0] | (p[1] << 8)); }

static uint32_t get32(const unsigned char *p) {
    uint32_t v = 0;
    for (int i = 3; i >= 0; i--) v = (v << 8) | p[i];
    return v;
}

static uint64_t get64(const unsigned char *p) {
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--) v = (v << 8) | p[i];
    return v;
}

/* Header: version u8 | op u8 | status u16 | payload_length u32 | request_id u64 |
 *         handle_id u64 | argument i64 | value i64 */
void ps_wire_encode_header(const ps_frame *frame, unsigned char *buf) {
    buf[0] = PS_WIRE_VERSION;
    buf[1] = frame->op;
    put16(buf + 2, frame->status);
    put32(buf + 4, frame->payload_length);
    put64(buf + 8, frame->request_id);
    put64(buf + 16, frame->handle_id);
    put64(buf + 24, (uint64_t)frame->argument);
    put64(buf + 32, (uint64_t)frame->value);
}

size_t ps_wire_encode(const ps_frame *frame, unsigned char *buf, size_t capacity) {
    size_t length = PS_WIRE_HEADER + frame->payload_length;
    if (frame->payload_length > PS_WIRE_MAX_PAYLOAD || length > capacity) return 0;
    ps_wire_encode_header(frame, buf);
    if (frame->payload_length) memcpy(buf + PS_WIRE_HEADER, frame->payload, frame->payload_length);
    return length;
}

int64_t ps_wire_payload_length(const unsigned char *header) {
    if (header[0] != PS_WIRE_VERSION || header[1] < PS_WIRE_OP_FIRST || header[1] >= PS_WIRE_OP_LIMIT) return -1;
    uint32_t payload_length = get32(header + 4);
    return payload_length > PS_WIRE_MAX_PAYLOAD ? -1 : (int64_t)payload_length;
}

void ps_wire_decode_header(const unsigned char *header, ps_frame *out) {
    out->op = header[1];
    out->status = get16(header + 2);
    out->payload_length = 0;
    out->request_id = get64(header + 8);
    out->handle_id = get64(header + 16);
    out->argument = (int64_t)get64(header + 24);
    out->value = (int64_t)get64(header + 32);
    out->payload = NULL;
}

int ps_wire_decode(const unsigned char *buf, size_t length, ps_frame *out) {
    if (length < PS_WIRE_HEADER) return -1;
    int64_t payload_length = ps_wire_payload_length(buf);
    if (payload_length < 0 || (size_t)payload_length != length - PS_WIRE_HEADER) return -1;
    ps_wire_decode_header(buf, out);
    out->payload_length = (uint32_t)payload_length;
    out->payload = payload_length ? buf + PS_WIRE_HEADER : NULL;
    return 0;
}

void ps_wire_put_u32(uint32_t value, unsigned char *out) { put32(out, value); }
uint32_t ps_wire_get_u32(const unsigned char *in) { return get32(in); }
void ps_wire_put_u64(uint64_t value, unsigned char *out) { put64(out, value); }
uint64_t ps_wire_get_u64(const unsigned char *in) { return get64(in); }

int ps_wire_presents(const ps_frame *frame, const unsigned char *secret) {
    if (frame->payload_length != PS_WIRE_SECRET) return 0;
    unsigned char differ = 0;
    for (int i = 0; i < PS_WIRE_SECRET; i++) differ |= frame->payload[i] ^ secret[i];
    return differ == 0;
}
