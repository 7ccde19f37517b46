/* trace.c — the `trace` stage: timestamps every operation that passes through it.
 *
 * Each operation becomes one event: its start and end tick (the CPU's timestamp counter), the
 * operation, the caller's slot (its thread id in the trace), the status and, for observe_at and
 * axe, the index. The `operation` mode also keeps the tuple moved or observed. Everything is
 * preallocated and pre-faulted at creation; an operation claims its event slot with one relaxed
 * atomic add and writes it, with no lock, no allocation and no I/O. When the buffer is full the
 * slot number runs past the capacity and the event is counted as dropped. The last release writes
 * the file (format in trace.h) to a temporary name in the same directory, then renames it; a
 * file that cannot be written is said on stderr and kept for ps_trace_take_failures. Two live
 * trace stages of a process never share a file (the second is refused at creation): the later
 * rename would replace the earlier trace. A process that ends with trace stages alive (its
 * threads still in them) writes none of their files and leaves no temporary one behind
 * (ps_trace_discard_unwritten, at exit).
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#if defined(__x86_64__)
#include <x86intrin.h>
#endif

#include "stage_base.h"
#include "stage_kinds.h"
#include "trace.h"
#include "waitpoint.h"

_Static_assert(sizeof(ps_trace_header) == PS_TRACE_HEADER_SIZE, "trace header layout");
_Static_assert(sizeof(ps_trace_event) == PS_TRACE_EVENT_SIZE, "trace event layout");
_Static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "trace files are little-endian");

enum { CACHE_LINE = 64, CALIBRATION_NS = 10 * 1000 * 1000 };

typedef struct trace_stage {
    ps_stage base;
    ps_trace_event *events;        /* capacity records */
    unsigned char *tuples;         /* operation mode: capacity * tuple_size bytes; else NULL */
    uint64_t capacity;
    ps_trace_header header;        /* filled at creation; the counts are added when written */
    char *path;                    /* where the trace goes */
    char *temporary_path;          /* where it is written first */
    FILE *out;                     /* open on temporary_path from creation on */
    dev_t folder_device;           /* the file's folder and name: who else writes it */
    ino_t folder_inode;
    const char *name;              /* in path */
    struct trace_stage *next_live; /* the process's live trace stages */
    int discarded;                 /* its temporary file is gone: nothing is written (under live_lock) */
    _Alignas(CACHE_LINE) _Atomic uint64_t claimed;  /* event slots claimed, dropped ones included */
} trace_stage;

static inline uint64_t ticks_now(void) {
#if defined(__x86_64__)
    return __rdtsc();
#else
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC_RAW, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
#endif
}

static double calibrated_ticks_per_ns;
static pthread_once_t calibration_once = PTHREAD_ONCE_INIT;

static void calibrate(void) {
    int64_t ns_start = ps_now_ns();
    uint64_t ticks_start = ticks_now();
    struct timespec pause = {0, CALIBRATION_NS};
    while (nanosleep(&pause, &pause) != 0 && errno == EINTR) {}
    int64_t ns_end = ps_now_ns();
    uint64_t ticks_end = ticks_now();
    calibrated_ticks_per_ns = (double)(ticks_end - ticks_start) / (double)(ns_end - ns_start);
}

double ps_trace_ticks_per_ns(void) {
    pthread_once(&calibration_once, calibrate);
    return calibrated_ticks_per_ns;
}

double ps_trace_clock_read_ns(int64_t reads) {
    uint64_t sum = 0;
    int64_t start = ps_now_ns();
    for (int64_t i = 0; i < reads; i++) sum += ticks_now();
    int64_t ns = ps_now_ns() - start;
    __asm__ volatile("" : : "r"(sum)); /* the reads are used */
    return reads > 0 ? (double)ns / (double)reads : 0.0;
}

/* ---- files still to write, and those that could not be ----------------------------------- */

static pthread_mutex_t failures_lock = PTHREAD_MUTEX_INITIALIZER;
static char failures[PS_TRACE_FAILURES_KEPT][PS_TRACE_FAILURE_TEXT];
static int64_t failure_count;            /* since the last take; those beyond the kept are counted */
static _Atomic int64_t unwritten;        /* trace stages alive: their files are still to come */
static ps_waitpoint written;             /* bumped when one of them is done (a zero is ready) */

static void keep_failure(const char *message) {
    pthread_mutex_lock(&failures_lock);
    if (failure_count < PS_TRACE_FAILURES_KEPT) snprintf(failures[failure_count], PS_TRACE_FAILURE_TEXT, "%s", message);
    failure_count++;
    pthread_mutex_unlock(&failures_lock);
}

static void file_done(void) {
    atomic_fetch_sub(&unwritten, 1);
    ps_waitpoint_wake(&written);
}

int64_t ps_trace_wait_written(int64_t wait_ns) {
    int64_t deadline = ps_deadline(wait_ns);
    uint32_t spins = 0;
    for (;;) {
        uint32_t seen = ps_waitpoint_sequence(&written);
        int64_t left = atomic_load(&unwritten);
        if (left == 0 || ps_waitpoint_wait(&written, seen, deadline, &spins) == PS_ETIMEDOUT) return left;
    }
}

void ps_trace_take_failures(void (*visit)(void *context, const char *message), void *context) {
    pthread_mutex_lock(&failures_lock);
    int64_t kept = failure_count < PS_TRACE_FAILURES_KEPT ? failure_count : PS_TRACE_FAILURES_KEPT;
    for (int64_t i = 0; i < kept; i++) visit(context, failures[i]);
    if (failure_count > kept) {
        char more[96];
        snprintf(more, sizeof more, "and %lld more trace file(s) that could not be written",
                 (long long)(failure_count - kept));
        visit(context, more);
    }
    failure_count = 0;
    pthread_mutex_unlock(&failures_lock);
}

/* ---- the files live stages will write ---------------------------------------------------- */

static pthread_mutex_t live_lock = PTHREAD_MUTEX_INITIALIZER;
static trace_stage *live;

static int discarding; /* the process is ending: no temporary file is opened (under live_lock) */

static void register_discard(void) { atexit(ps_trace_discard_unwritten); }

/* Opens the temporary file, with live_lock held: one that ps_trace_discard_unwritten would remove
 * is either in the list by then, or never made. */
static int open_temporary(trace_stage *t, char *error, size_t error_size) {
    int fd = discarding ? -1 : open(t->temporary_path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (fd < 0 || !(t->out = fdopen(fd, "wb"))) {
        snprintf(error, error_size, "stage 'trace': cannot write trace file '%s': %s", t->path,
                 discarding ? "the process is ending" : strerror(errno));
        if (fd >= 0) {
            close(fd);
            unlink(t->temporary_path);
        }
        return PS_EINVAL;
    }
    return PS_OK;
}

/* Makes the stage's file its own (known by its folder's device and inode, so that two spellings
 * of one folder match): refused while another live stage writes it, or says which; then its
 * temporary file is opened and the stage is live. */
static int claim_file(trace_stage *t, char *error, size_t error_size) {
    const char *slash = strrchr(t->path, '/');
    char *folder_path = slash ? strndup(t->path, (size_t)(slash - t->path) + 1) : strdup(".");
    struct stat where;
    int known = folder_path && stat(folder_path, &where) == 0;
    free(folder_path);
    struct stat self;
    int exists = known && stat(t->path, &self) == 0;
    if (known && (!*(slash ? slash + 1 : t->path) || (exists && S_ISDIR(self.st_mode)))) {
        errno = EISDIR; /* rename at release would fail on a folder */
        known = 0;
    }
    if (!known) {
        snprintf(error, error_size, "stage 'trace': cannot write trace file '%s': %s", t->path, strerror(errno));
        return PS_EINVAL;
    }
    if (exists && !S_ISREG(self.st_mode)) { /* the rename would replace a device, a pipe */
        snprintf(error, error_size, "stage 'trace': cannot write trace file '%s': it exists and is no regular file "
                 "(a trace file is written anew and replaces what has its name)", t->path);
        return PS_EINVAL;
    }
    t->folder_device = where.st_dev;
    t->folder_inode = where.st_ino;
    t->name = slash ? slash + 1 : t->path;
    pthread_mutex_lock(&live_lock);
    for (trace_stage *other = live; other; other = other->next_live) {
        if (other->folder_device == t->folder_device && other->folder_inode == t->folder_inode &&
            strcmp(other->name, t->name) == 0) {
            pthread_mutex_unlock(&live_lock);
            snprintf(error, error_size, "stage 'trace': file '%s' is written by another live trace stage "
                     "('%s'): give each trace stage a file of its own", t->path, other->path);
            return PS_EINVAL;
        }
    }
    int rc = open_temporary(t, error, error_size);
    if (rc != PS_OK) {
        pthread_mutex_unlock(&live_lock);
        return rc;
    }
    t->next_live = live;
    live = t;
    pthread_mutex_unlock(&live_lock);
    static pthread_once_t discard_at_exit = PTHREAD_ONCE_INIT;
    pthread_once(&discard_at_exit, register_discard);
    return PS_OK;
}

void ps_trace_discard_unwritten(void) {
    pthread_mutex_lock(&live_lock);
    discarding = 1;
    for (trace_stage *t = live; t; t = t->next_live) {
        if (!t->discarded) unlink(t->temporary_path);
        t->discarded = 1;
    }
    pthread_mutex_unlock(&live_lock);
}

static int discarded(trace_stage *t) {
    pthread_mutex_lock(&live_lock);
    int gone = t->discarded;
    pthread_mutex_unlock(&live_lock);
    return gone;
}

static void release_file(trace_stage *t) {
    pthread_mutex_lock(&live_lock);
    for (trace_stage **at = &live; *at; at = &(*at)->next_live) {
        if (*at == t) {
            *at = t->next_live;
            break;
        }
    }
    pthread_mutex_unlock(&live_lock);
}

/* ---- the hot path ------------------------------------------------------------------------- */

/* The tuple an event keeps in operation mode: the one the operation moved (move_many: its first),
 * else the one it observed, else none. */
static inline const void *kept_tuple(const ps_op *op, uint32_t shape, int status) {
    if (shape & PS_OP_TUPLE_IN || (shape & PS_OP_TUPLES_IN && op->count)) return op->in;
    return shape & PS_OP_TUPLE_OUT && status == PS_OK ? op->out : NULL;
}

/* Ends the event of an operation that started at `start`; the table says what its index is (an
 * index argument; move_many: the tuples moved; else -1). */
static inline void record(ps_link *link, const ps_op *op, uint64_t start, int status) {
    uint64_t end = ticks_now();
    trace_stage *t = (trace_stage *)link->stage;
    uint64_t slot = atomic_fetch_add_explicit(&t->claimed, 1, memory_order_relaxed);
    if (slot >= t->capacity) return;
    uint32_t shape = ps_op_kinds[op->kind].shape;
    ps_trace_event *e = &t->events[slot];
    e->start_ticks = start;
    e->end_ticks = end;
    e->index = shape & PS_OP_INDEX ? op->argument : shape & PS_OP_TUPLES_IN ? (int64_t)op->done : -1;
    e->thread = link->slot;
    e->op = (uint8_t)op->kind;
    e->status = (uint16_t)status;
    e->flags = 0;
    const void *tuple = t->tuples ? kept_tuple(op, shape, status) : NULL;
    if (tuple) {
        memcpy(t->tuples + slot * t->base.tuple_size, tuple, t->base.tuple_size);
        e->flags = PS_TRACE_HAS_TUPLE;
    }
}

/* Every operation, whatever its kind: timed on its way down and back. */
static int trace_call(ps_link *link, ps_op *op) {
    uint64_t start = ticks_now();
    int rc = ps_stage_pass(link, op);
    record(link, op, start, rc);
    return rc;
}

/* ---- counters, writing, life cycle ---------------------------------------------------------- */

/* Events recorded and operations dropped so far, from one reading of the claimed slots. */
static void event_counts(trace_stage *t, uint64_t *events, uint64_t *dropped) {
    uint64_t claimed = atomic_load_explicit(&t->claimed, memory_order_relaxed);
    *events = claimed < t->capacity ? claimed : t->capacity;
    *dropped = claimed - *events;
}

static int trace_counters(ps_stage *stage, ps_counter *out, int max) {
    trace_stage *t = (trace_stage *)stage;
    if (max < 3) return 0;
    uint64_t events, dropped;
    event_counts(t, &events, &dropped);
    out[0] = (ps_counter){"events", (int64_t)events};
    out[1] = (ps_counter){"dropped", (int64_t)dropped};
    out[2] = (ps_counter){"capacity", (int64_t)t->capacity};
    return 3;
}

/* Writes header, events and tuples to the temporary file, then renames it into place.
 * Returns 0, or -1 with errno set. */
static int write_trace(trace_stage *t) {
    uint64_t events;
    event_counts(t, &events, &t->header.dropped);
    t->header.event_count = events;
    size_t tuple_bytes = t->tuples ? (size_t)events * t->base.tuple_size : 0;
    errno = 0;
    int written = fwrite(&t->header, sizeof t->header, 1, t->out) == 1 &&
                  fwrite(t->events, sizeof *t->events, (size_t)events, t->out) == (size_t)events &&
                  (tuple_bytes == 0 || fwrite(t->tuples, 1, tuple_bytes, t->out) == tuple_bytes);
    int write_errno = errno ? errno : EIO;
    int closed = fclose(t->out) == 0;
    t->out = NULL;
    if (!written) {
        errno = write_errno;
        return -1;
    }
    if (!closed) return -1;
    return rename(t->temporary_path, t->path);
}

/* Frees what the kind allocated; a file not yet written is discarded. */
static void free_trace(trace_stage *t) {
    if (t->out) {
        fclose(t->out);
        unlink(t->temporary_path);
    }
    free(t->events);
    free(t->tuples);
    free(t->path);
    free(t->temporary_path);
}

static void trace_destroy(ps_stage *stage) {
    trace_stage *t = (trace_stage *)stage;
    if (!discarded(t) && write_trace(t) != 0) {
        char message[PS_TRACE_FAILURE_TEXT];
        snprintf(message, sizeof message, "stage 'trace': cannot write trace file '%s': %s", t->path, strerror(errno));
        fprintf(stderr, "paths: %s\n", message);
        keep_failure(message);
        unlink(t->temporary_path);
    }
    release_file(t);
    free_trace(t);
    file_done();
}

/* Zeroed memory with every page already touched, so that the hot path never takes a page fault
 * (calloc alone may hand out untouched zero pages). */
static void *prefaulted(size_t size) {
    volatile unsigned char *p = calloc(1, size);
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    for (size_t i = 0; p && i < size; i += page) p[i] = 0;
    return (void *)p;
}

/* Names the file and, next to it (so that the final rename stays on one file system), a fresh
 * temporary one, which claim_file opens. */
static int name_files(trace_stage *t, const char *path) {
    static _Atomic uint32_t sequence;
    size_t size = strlen(path) + 64;
    t->path = strdup(path);
    t->temporary_path = malloc(size);
    if (!t->path || !t->temporary_path) return PS_ENOMEM;
    snprintf(t->temporary_path, size, "%s.tmp-%ld-%u", path, (long)getpid(), atomic_fetch_add(&sequence, 1));
    return PS_OK;
}

static int check_params(const char *file, const char *node, uint64_t capacity, size_t tuple_size,
                        char *error, size_t error_size) {
    if (!file[0]) {
        snprintf(error, error_size, "stage 'trace': parameter 'file' must name the trace file to write, got ''");
        return PS_EINVAL;
    }
    if (strlen(node) >= PS_TRACE_NODE_TEXT) {
        snprintf(error, error_size, "stage 'trace': parameter 'node' must be at most %d bytes, got %zu",
                 PS_TRACE_NODE_TEXT - 1, strlen(node));
        return PS_EINVAL;
    }
    if (tuple_size && capacity > SIZE_MAX / tuple_size) {
        snprintf(error, error_size, "stage 'trace': capacity %llu of %zu-byte tuples does not fit in memory",
                 (unsigned long long)capacity, tuple_size);
        return PS_EINVAL;
    }
    return PS_OK;
}

static size_t trace_footprint(const ps_params *params, size_t tuple_size) {
    size_t capacity = (size_t)ps_params_int(params, "capacity");
    int operation_mode = strcmp(ps_params_str(params, "mode"), "operation") == 0;
    return sizeof(trace_stage) + capacity * (sizeof(ps_trace_event) + (operation_mode ? tuple_size : 0));
}

static int trace_create(const ps_params *params, const ps_build_context *context, ps_stage *below,
                        ps_stage **out, char *error, size_t error_size) {
    (void)context;
    if (!below) {
        snprintf(error, error_size, "stage 'trace': needs a stage below it (a path ends with 'core')");
        return PS_EINVAL;
    }
    const char *file = ps_params_str(params, "file");
    const char *node = ps_params_str(params, "node");
    uint64_t capacity = (uint64_t)ps_params_int(params, "capacity");
    int operation_mode = strcmp(ps_params_str(params, "mode"), "operation") == 0;
    const ps_tuple_format *format = ps_stage_format(below);
    int rc = check_params(file, node, capacity, format->size, error, error_size);
    if (rc != PS_OK) return rc;

    trace_stage *t = aligned_alloc(CACHE_LINE, sizeof *t);
    if (!t) return PS_ENOMEM;
    memset(t, 0, sizeof *t);
    t->capacity = capacity;
    atomic_init(&t->claimed, 0);
    rc = ps_stage_init(&t->base, &ps_kind_trace, format, 0, below);
    if (rc == PS_OK) rc = name_files(t, file);
    if (rc == PS_OK) {
        t->events = prefaulted((size_t)capacity * sizeof *t->events);
        if (operation_mode) t->tuples = prefaulted((size_t)capacity * format->size);
        if (!t->events || (operation_mode && !t->tuples)) {
            snprintf(error, error_size, "stage 'trace': cannot preallocate %llu events: out of memory",
                     (unsigned long long)capacity);
            rc = PS_ENOMEM;
        }
    }
    if (rc == PS_OK) rc = claim_file(t, error, error_size);
    if (rc != PS_OK) {
        free_trace(t);
        ps_stage_abandon(&t->base);
        return rc;
    }
    ps_trace_header *h = &t->header;
    memcpy(h->magic, PS_TRACE_MAGIC, sizeof h->magic);
    h->version = PS_TRACE_VERSION;
    h->header_size = PS_TRACE_HEADER_SIZE;
    h->event_size = PS_TRACE_EVENT_SIZE;
    h->mode = operation_mode ? PS_TRACE_OPERATION : PS_TRACE_TIMESTAMP;
    h->tuple_size = format->size;
    h->ticks_per_ns = ps_trace_ticks_per_ns();
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    h->origin_ticks = ticks_now();
    h->origin_unix_ns = (int64_t)now.tv_sec * 1000000000LL + now.tv_nsec;
    snprintf(h->format, sizeof h->format, "%s", format->text);
    snprintf(h->node, sizeof h->node, "%s", node);
    atomic_fetch_add(&unwritten, 1);
    *out = &t->base;
    return PS_OK;
}

static const ps_param_spec TRACE_PARAMS[] = {
    {"file", PS_PARAM_STR, 1, NULL, 0, -1, NULL, "where the trace is written when the stage is released",
     PS_PARAM_WRITTEN_FILE},
    {"capacity", PS_PARAM_INT, 0, "1048576", 1, 1 << 26, NULL, "events kept; later ones are counted as dropped",
     PS_PARAM_GIVEN},
    {"mode", PS_PARAM_STR, 0, "timestamp", 0, -1, "timestamp|operation",
     "timestamp: times only; operation: also the tuples moved and observed", PS_PARAM_GIVEN},
    {"node", PS_PARAM_STR, 0, "", 0, -1, NULL, "a label for this process or node (the Perfetto process name)",
     PS_PARAM_GIVEN},
};

const ps_stage_kind ps_kind_trace = {
    .version = PS_STAGE_KIND_VERSION,
    .name = "trace",
    .doc = "Timestamps every operation into a preallocated buffer; writes the trace file when released.",
    .params = TRACE_PARAMS,
    .param_count = sizeof TRACE_PARAMS / sizeof TRACE_PARAMS[0],
    .role = PS_PASS_THROUGH,
    .needs_below = 1,
    .create = trace_create,
    .call = trace_call,
    .footprint = trace_footprint,
    .counters = trace_counters,
    .destroy = trace_destroy,
};
