/* trace.h — the trace file format written by the `trace` stage, and the tick calibration.
 *
 * A trace file holds, in this order (all integers little-endian, no padding anywhere):
 *
 *   header   PS_TRACE_HEADER_SIZE bytes: ps_trace_header below
 *   events   event_count records of PS_TRACE_EVENT_SIZE bytes: ps_trace_event below, in the
 *            order their slots were claimed (operation ends, give or take a few ticks)
 *   tuples   operation mode only: event_count * tuple_size bytes; tuple i belongs to event i
 *            and is meaningful when that event has PS_TRACE_HAS_TUPLE set (zeros otherwise): the
 *            tuple the operation moved (move_many: its first), else the one it observed
 *
 * Times are raw ticks of the CPU's timestamp counter (or CLOCK_MONOTONIC_RAW nanoseconds where
 * there is none). Nanoseconds since the stage was created are (ticks - origin_ticks) /
 * ticks_per_ns; origin_unix_ns (CLOCK_REALTIME at creation) lines up traces of several processes.
 * paths/runtime/trace_file.py reads this format; it takes the operations' names from the same table.
 */
#ifndef WRAPPERS_TRACE_H
#define WRAPPERS_TRACE_H

#include <stdint.h>

#define PS_TRACE_MAGIC "PATHSTR1"   /* 8 bytes, no terminating NUL in the file */
#define PS_TRACE_VERSION 1

enum {
    PS_TRACE_HEADER_SIZE = 256,
    PS_TRACE_EVENT_SIZE = 32,
    PS_TRACE_FORMAT_TEXT = 72,   /* the tuple format, NUL-padded */
    PS_TRACE_NODE_TEXT = 112,    /* the node label, NUL-padded: at most 111 bytes of text */
};

typedef enum ps_trace_mode { PS_TRACE_TIMESTAMP = 0, PS_TRACE_OPERATION = 1 } ps_trace_mode;

enum { PS_TRACE_HAS_TUPLE = 1 };  /* event flag: the tuples section holds this event's tuple */

typedef struct ps_trace_header {
    char magic[8];                       /* PS_TRACE_MAGIC */
    uint32_t version;                    /* PS_TRACE_VERSION */
    uint32_t header_size;                /* PS_TRACE_HEADER_SIZE */
    uint32_t event_size;                 /* PS_TRACE_EVENT_SIZE */
    uint32_t mode;                       /* ps_trace_mode */
    uint64_t tuple_size;                 /* bytes per tuple of the traced path */
    double ticks_per_ns;                 /* calibrated against CLOCK_MONOTONIC over ~10 ms */
    uint64_t origin_ticks;               /* the tick count when the stage was created */
    int64_t origin_unix_ns;              /* CLOCK_REALTIME when the stage was created */
    uint64_t event_count;                /* event records that follow */
    uint64_t dropped;                    /* operations not recorded: the buffer was full */
    char format[PS_TRACE_FORMAT_TEXT];   /* Python struct format of the tuples */
    char node[PS_TRACE_NODE_TEXT];       /* the node label ("" if none was given) */
} ps_trace_header;

typedef struct ps_trace_event {
    uint64_t start_ticks;   /* when the operation was called */
    uint64_t end_ticks;     /* when it returned */
    int64_t index;          /* an index argument (observe_at, axe); move_many: the tuples it moved;
                               -1 for the other operations */
    uint32_t thread;        /* the caller's slot at the trace stage */
    uint8_t op;             /* the operation's kind: its index in ps_op_kinds (operation.h) */
    uint8_t flags;          /* PS_TRACE_HAS_TUPLE */
    uint16_t status;        /* the operation's ps_status */
} ps_trace_event;

#ifdef __cplusplus
extern "C" {
#endif

/* Ticks of the trace clock per nanosecond, measured once per process (~10 ms, on first use). */
double ps_trace_ticks_per_ns(void);
/* Nanoseconds one read of the trace clock takes, from `reads` of them in a row: a traced
 * operation reads it twice (what a virtual machine's clock costs shows here). */
double ps_trace_clock_read_ns(int64_t reads);

/* Trace files are written when their stages are released, often by a thread no one waits on (a
 * server's link ending): a file that cannot be written must still reach the user. The process
 * keeps what went wrong until asked. */
enum { PS_TRACE_FAILURES_KEPT = 16, PS_TRACE_FAILURE_TEXT = 512 };

/* Waits up to wait_ns (PS_FOREVER: no limit) until every trace stage of the process has been
 * released and its file written or failed; returns how many are still to be written. */
int64_t ps_trace_wait_written(int64_t wait_ns);
/* Hands each failure kept since the last call to visit (oldest first; at most
 * PS_TRACE_FAILURES_KEPT, then one line counting the others) and forgets them. */
void ps_trace_take_failures(void (*visit)(void *context, const char *message), void *context);
/* The process ends with trace stages alive (their threads may still be in them): their temporary
 * files are removed, and none of them is written later. Runs at exit (registered with the first
 * trace stage); call it before an exit that skips those (_exit). */
void ps_trace_discard_unwritten(void);

#ifdef __cplusplus
}
#endif

#endif
