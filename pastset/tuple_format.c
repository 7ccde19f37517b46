/* tuple_format.c — Python `struct` format strings: size, alignment and field runs. */
#include "tuple_format.h"

#include <ctype.h>
#include <stdio.h>
#include <string.h>

typedef struct code_info {
    char code;
    uint8_t kind;
    uint8_t native_size;
    uint8_t standard_size; /* 0: native mode only */
} code_info;

static const code_info CODES[] = {
    {'x', PS_FIELD_PAD, 1, 1},      {'c', PS_FIELD_BYTES, 1, 1},
    {'b', PS_FIELD_SIGNED, 1, 1},   {'B', PS_FIELD_UNSIGNED, 1, 1},
    {'?', PS_FIELD_BOOL, 1, 1},     {'h', PS_FIELD_SIGNED, 2, 2},
    {'H', PS_FIELD_UNSIGNED, 2, 2}, {'i', PS_FIELD_SIGNED, 4, 4},
    {'I', PS_FIELD_UNSIGNED, 4, 4}, {'l', PS_FIELD_SIGNED, sizeof(long), 4},
    {'L', PS_FIELD_UNSIGNED, sizeof(long), 4},
    {'q', PS_FIELD_SIGNED, 8, 8},   {'Q', PS_FIELD_UNSIGNED, 8, 8},
    {'n', PS_FIELD_SIGNED, sizeof(size_t), 0},
    {'N', PS_FIELD_UNSIGNED, sizeof(size_t), 0},
    {'e', PS_FIELD_FLOAT, 2, 2},    {'f', PS_FIELD_FLOAT, 4, 4},
    {'d', PS_FIELD_FLOAT, 8, 8},    {'s', PS_FIELD_BYTES, 1, 1},
    {'p', PS_FIELD_BYTES, 1, 1},    {'P', PS_FIELD_UNSIGNED, sizeof(void *), 0},
};

static const code_info *find_code(char c) {
    for (size_t i = 0; i < sizeof CODES / sizeof CODES[0]; i++)
        if (CODES[i].code == c) return &CODES[i];
    return NULL;
}

/* Writes "bad format '<text>': <why>", the text cut to PS_FORMAT_MAX_TEXT bytes (never inside a
 * UTF-8 character, so that the message stays valid text). */
static int fail(char *error, size_t error_size, const char *text, const char *why) {
    if (!error || !error_size) return -1;
    size_t shown = strlen(text);
    const char *more = "";
    if (shown > PS_FORMAT_MAX_TEXT) {
        shown = PS_FORMAT_MAX_TEXT;
        while (shown > 0 && ((unsigned char)text[shown] & 0xC0) == 0x80) shown--;
        more = "...";
    }
    snprintf(error, error_size, "bad format '%.*s%s': %s", (int)shown, text, more, why);
    return -1;
}

static int machine_is_little_endian(void) {
    const uint16_t probe = 1;
    return *(const uint8_t *)&probe == 1;
}

int ps_tuple_format_parse(const char *text, ps_tuple_format *out, char *error, size_t error_size) {
    memset(out, 0, sizeof *out);
    if (!text) return fail(error, error_size, "", "no format given");
    size_t len = strlen(text);
    if (len == 0) return fail(error, error_size, text, "empty format (expected e.g. 'q' or 'qd')");
    if (len > PS_FORMAT_MAX_TEXT) return fail(error, error_size, text, "longer than 64 characters");
    memcpy(out->text, text, len + 1);

    const char *p = text;
    int native = 1, swapped = 0;
    switch (*p) {
    case '@': p++; break;
    case '=': native = 0; p++; break;
    case '<': native = 0; swapped = !machine_is_little_endian(); p++; break;
    case '>': case '!': native = 0; swapped = machine_is_little_endian(); p++; break;
    default: break;
    }

    size_t offset = 0;
    while (*p) {
        if (isspace((unsigned char)*p)) { p++; continue; }
        uint64_t count = 1;
        int has_count = 0;
        if (isdigit((unsigned char)*p)) {
            count = 0;
            while (isdigit((unsigned char)*p)) {
                count = count * 10 + (uint64_t)(*p - '0');
                if (count > PS_TUPLE_MAX_SIZE)
                    return fail(error, error_size, text, "a repeat count is at most 1048576 (a tuple: 1 MiB at most)");
                p++;
            }
            has_count = 1;
            if (!*p) return fail(error, error_size, text, "repeat count without a format character");
        }
        const code_info *info = find_code(*p);
        if (!info) {
            char why[128];
            unsigned char c = (unsigned char)*p;
            if (c >= 0x80)
                snprintf(why, sizeof why, "a non-ASCII character at byte %zu (expected one of xcbB?hHiIlLqQnNefdspP)",
                         (size_t)(p - text));
            else if (!isprint(c))
                snprintf(why, sizeof why, "unknown format character 0x%02x (expected one of xcbB?hHiIlLqQnNefdspP)", c);
            else
                snprintf(why, sizeof why, "unknown format character '%c' (expected one of xcbB?hHiIlLqQnNefdspP)", c);
            return fail(error, error_size, text, why);
        }
        if (!native && info->standard_size == 0) {
            char why[96];
            snprintf(why, sizeof why, "'%c' is only allowed in native mode (no byte-order prefix)", *p);
            return fail(error, error_size, text, why);
        }
        size_t item = native ? info->native_size : info->standard_size;
        int is_bytes = (*p == 's' || *p == 'p');
        if (native && !is_bytes && *p != 'x' && item > 1) offset = (offset + item - 1) / item * item;
        p++;
        /* "0q" is allowed and takes no space; "0s" and "0p" take no space but, as in struct, still
         * hold one (empty) value. */
        if (count == 0 && has_count && !is_bytes) continue;
        size_t run_bytes = is_bytes ? count : count * item;
        if (offset + run_bytes > PS_TUPLE_MAX_SIZE) return fail(error, error_size, text, "tuple larger than 1 MiB");

        /* Extend the previous run when it is the same code and contiguous. */
        ps_field_run *last = out->run_count ? &out->runs[out->run_count - 1] : NULL;
        if (last && !is_bytes && last->code == info->code &&
            last->offset + last->count * last->item_size == offset) {
            last->count += (uint32_t)count;
        } else {
            if (out->run_count == PS_FORMAT_MAX_RUNS)
                return fail(error, error_size, text, "more than 32 runs of distinct fields");
            ps_field_run *run = &out->runs[out->run_count++];
            run->kind = info->kind;
            run->code = (uint8_t)info->code;
            run->item_size = (uint8_t)(is_bytes ? 1 : item);
            run->swapped = (uint8_t)(swapped && item > 1 && !is_bytes);
            run->offset = (uint32_t)offset;
            run->count = (uint32_t)count;
        }
        if (info->kind != PS_FIELD_PAD) out->value_count += is_bytes ? 1 : (uint32_t)count;
        offset += run_bytes;
    }
    if (offset == 0) return fail(error, error_size, text, "a tuple must hold at least one byte");
    out->size = offset;
    return 0;
}

int ps_tuple_format_summable(const ps_tuple_format *f) {
    for (uint32_t i = 0; i < f->run_count; i++) {
        const ps_field_run *r = &f->runs[i];
        if (r->kind == PS_FIELD_PAD) continue;
        if (r->swapped) return 0;
        if (r->kind == PS_FIELD_SIGNED || r->kind == PS_FIELD_UNSIGNED) continue;
        if (r->kind == PS_FIELD_FLOAT && (r->item_size == 4 || r->item_size == 8)) continue;
        return 0;
    }
    return 1;
}

#define ADD_RUN(type)                                                    \
    do {                                                                 \
        type *a = (type *)((char *)acc + r->offset);                     \
        const type *b = (const type *)((const char *)t + r->offset);     \
        for (uint32_t k = 0; k < r->count; k++) {                        \
            type x, y;                                                   \
            memcpy(&x, a + k, sizeof x);                                 \
            memcpy(&y, b + k, sizeof y);                                 \
            x = (type)(x + y);                                           \
            memcpy(a + k, &x, sizeof x);                                 \
        }                                                                \
    } while (0)

void ps_tuple_add(const ps_tuple_format *f, void *acc, const void *t) {
    for (uint32_t i = 0; i < f->run_count; i++) {
        const ps_field_run *r = &f->runs[i];
        if (r->kind == PS_FIELD_FLOAT) {
            if (r->item_size == 8) ADD_RUN(double);
            else ADD_RUN(float);
        } else if (r->kind == PS_FIELD_SIGNED || r->kind == PS_FIELD_UNSIGNED) {
            /* Unsigned arithmetic: two's complement wrap, no undefined overflow. */
            switch (r->item_size) {
            case 1: ADD_RUN(uint8_t); break;
            case 2: ADD_RUN(uint16_t); break;
            case 4: ADD_RUN(uint32_t); break;
            default: ADD_RUN(uint64_t); break;
            }
        }
    }
}
