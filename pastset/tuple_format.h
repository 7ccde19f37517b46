/* tuple_format.h — parsing of Python `struct` format strings into a fixed tuple layout.
 *
 * C and Python agree on a tuple's bytes because both read the same format string: this parser
 * computes exactly what Python's struct.calcsize computes (native '@' alignment by default;
 * '=', '<', '>', '!' for standard sizes without alignment) and records each run of fields so
 * that stages such as reduce-sum can add tuples field by field without knowing their type.
 */
#ifndef PASTSET_TUPLE_FORMAT_H
#define PASTSET_TUPLE_FORMAT_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define PS_FORMAT_MAX_TEXT 64     /* longest accepted format string */
#define PS_FORMAT_MAX_RUNS 32     /* distinct runs of fields ("qqd" is two runs) */
#define PS_TUPLE_MAX_SIZE (1 << 20)

typedef enum ps_field_kind {
    PS_FIELD_PAD,      /* x */
    PS_FIELD_SIGNED,   /* b h i l q n */
    PS_FIELD_UNSIGNED, /* B H I L Q N P */
    PS_FIELD_FLOAT,    /* e f d */
    PS_FIELD_BOOL,     /* ? */
    PS_FIELD_BYTES     /* c s p */
} ps_field_kind;

/* A run of `count` values of one type at `offset`; for 's' and 'p' one value of `count` bytes. */
typedef struct ps_field_run {
    uint8_t kind;        /* ps_field_kind */
    uint8_t code;        /* the format character */
    uint8_t item_size;   /* bytes per value (1 for s, p, x) */
    uint8_t swapped;     /* byte order differs from this machine's */
    uint32_t offset;
    uint32_t count;
} ps_field_run;

typedef struct ps_tuple_format {
    char text[PS_FORMAT_MAX_TEXT + 1];
    size_t size;                      /* bytes per tuple, as struct.calcsize */
    uint32_t run_count;
    uint32_t value_count;             /* values a Python tuple of this format has */
    ps_field_run runs[PS_FORMAT_MAX_RUNS];
} ps_tuple_format;

/* Parses text; returns 0 or -1 with a reason in error (error may be NULL). */
int ps_tuple_format_parse(const char *text, ps_tuple_format *out, char *error, size_t error_size);

/* 1 if every non-pad field is a native-order integer or float (a field-wise sum is defined). */
int ps_tuple_format_summable(const ps_tuple_format *f);

/* acc += t, field by field (integers wrap like C unsigned arithmetic; floats add). */
void ps_tuple_add(const ps_tuple_format *f, void *acc, const void *t);

#ifdef __cplusplus
}
#endif

#endif
