/* kernel_context.c — the context half of paths.h: who a kernel thread is, its arguments, its
 * handles (through the run's hooks), the barrier of the whole run, and its reports.
 *
 * A NULL context is the process's own (a program of its own, after paths_init): the context of
 * the run set by ps_kernel_run_serve_process, or, before that, none, whose calls fail saying so.
 */
#include <ctype.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "failure_cause.h"
#include "kernel_context.h"

static _Atomic(paths_kernel_ctx *) process_context;
static paths_kernel_ctx no_context; /* run == NULL: every call says that paths_init is missing */

void ps_kernel_run_serve_process(ps_kernel_run *run) {
    atomic_store(&process_context, run ? &run->contexts[0] : NULL);
}

static paths_kernel_ctx *context(const paths_kernel_ctx *c) {
    if (c) return (paths_kernel_ctx *)c;
    paths_kernel_ctx *own = atomic_load(&process_context);
    return own ? own : &no_context;
}

static _Thread_local paths_kernel_ctx *kernel_here; /* the context of the kernel this thread runs */

void ps_context_runs_kernel(paths_kernel_ctx *c) { kernel_here = c; }

/* Who a refused call fails (and whose error paths_fail and paths_last_error take): the context
 * it was given, or, when a kernel gave NULL where no program of its own has one, the kernel's
 * thread. */
static paths_kernel_ctx *blamed(const paths_kernel_ctx *c) {
    paths_kernel_ctx *own = context(c);
    return own == &no_context && kernel_here ? kernel_here : own;
}

const char *ps_kernel_program_failure(void) {
    const paths_kernel_ctx *own = atomic_load(&process_context);
    if (!own || !own->failed) return NULL;
    return own->failure[0] ? own->failure : "paths_fail with no reason";
}

/* ---- error lines ------------------------------------------------------------------------------- */

/* A message shows a value of up to PS_NAME_MAX bytes (the longest element name) whole; a longer
 * one, which no element's name is, by its first SHOWN_CUT characters, then SHORTENED. */
enum { SHOWN_CUT = 60 };
#define SHORTENED "...(%zu bytes)"

/* Bytes of the UTF-8 character at s (as Python decodes it: no overlong form, no surrogate), or 0
 * when s starts none. */
static size_t utf8_character(const unsigned char *s) {
    size_t n = s[0] < 0x80 ? 1 : s[0] >= 0xc2 && s[0] < 0xe0 ? 2 : s[0] >= 0xe0 && s[0] < 0xf0 ? 3
             : s[0] >= 0xf0 && s[0] < 0xf5 ? 4 : 0;
    for (size_t i = 1; i < n; i++)
        if ((s[i] & 0xc0) != 0x80) return 0;
    if ((s[0] == 0xe0 && s[1] < 0xa0) || (s[0] == 0xed && s[1] >= 0xa0) || (s[0] == 0xf0 && s[1] < 0x90) ||
        (s[0] == 0xf4 && s[1] >= 0x90))
        return 0;
    return n;
}

/* Where `text` stops being UTF-8 text, or -1 when it is all UTF-8. */
static long not_utf8_at(const char *text) {
    for (const unsigned char *s = (const unsigned char *)text; *s;) {
        size_t n = utf8_character(s);
        if (!n) return (long)(s - (const unsigned char *)text);
        s += n;
    }
    return -1;
}

/* `value` in quotes, as a message shows it (SHORTENED when long): a byte that is no UTF-8
 * character, or a control character, as \xNN. */
enum { QUOTED_SIZE = 4 * PS_NAME_MAX + 32 };
static const char *quoted(char out[QUOTED_SIZE], const char *value) {
    size_t at = 0, shown = strlen(value) <= PS_NAME_MAX ? PS_NAME_MAX : SHOWN_CUT; /* characters */
    const unsigned char *s = (const unsigned char *)value;
    out[at++] = '\'';
    for (size_t characters = 0; *s && characters < shown; characters++) {
        size_t n = utf8_character(s);
        if (n == 1 && (*s < 0x20 || *s == 0x7f)) n = 0;
        at += n ? (size_t)snprintf(out + at, QUOTED_SIZE - at, "%.*s", (int)n, (const char *)s)
                : (size_t)snprintf(out + at, QUOTED_SIZE - at, "\\x%02x", *s);
        s += n ? n : 1;
    }
    if (*s) at += (size_t)snprintf(out + at, QUOTED_SIZE - at, SHORTENED, strlen(value));
    snprintf(out + at, QUOTED_SIZE - at, "'");
    return out;
}

/* `text` with each occurrence of `value`, when it is too long to be shown whole, shortened
 * (SHORTENED); NULL when there is none (or no memory for the copy). */
static char *with_value_shortened(const char *text, const char *value) {
    size_t cut = 0, length = strlen(value);
    if (length <= PS_NAME_MAX || !strstr(text, value)) return NULL;
    for (int characters = 0; characters < SHOWN_CUT; characters++) {
        size_t n = utf8_character((const unsigned char *)value + cut);
        cut += n ? n : 1;
    }
    char short_form[QUOTED_SIZE];
    size_t short_length = (size_t)snprintf(short_form, sizeof short_form, "%.*s" SHORTENED, (int)cut, value, length);
    char *out = malloc(strlen(text) + 1), *end = out; /* no longer than text: each occurrence shrinks */
    if (!out) return NULL;
    for (const char *found; (found = strstr(text, value)); text = found + length) {
        memcpy(end, text, (size_t)(found - text));
        end += found - text;
        memcpy(end, short_form, short_length);
        end += short_length;
    }
    strcpy(end, text);
    return out;
}

/* `text` as an error line of at most size - 1 bytes (the acquire hook's, a context's): each of
 * `values` (NULL-ended: what paths_acquire was given) in it shortened, and, should it still not
 * fit, its middle cut out. */
void ps_error_line(char *line, size_t size, const char *text, const char *const *values) {
    char *shortened = NULL;
    for (int v = 0; values && values[v]; v++) {
        char *next = with_value_shortened(shortened ? shortened : text, values[v]);
        if (!next) continue;
        free(shortened);
        shortened = next;
    }
    const char *whole = shortened ? shortened : text;
    size_t length = strlen(whole);
    if (length < size) {
        memcpy(line, whole, length + 1);
    } else { /* its middle goes: its end says why; no UTF-8 character is split */
        static const char gap[] = " [...] ";
        size_t room = size - sizeof gap, head = room / 4, tail = length - (room - head);
        while (head > 0 && ((unsigned char)whole[head] & 0xc0) == 0x80) head--;
        while (((unsigned char)whole[tail] & 0xc0) == 0x80) tail++;
        snprintf(line, size, "%.*s%s%s", (int)head, whole, gap, whole + tail);
    }
    free(shortened);
}

/* The context's error line; an argument may be that line itself (paths_last_error). A line too
 * long for it loses its middle, not its end (ps_error_line). */
static void say(paths_kernel_ctx *c, const char *format, va_list args) {
    char line[sizeof c->error];
    va_list again;
    va_copy(again, args);
    int length = vsnprintf(line, sizeof line, format, args);
    char *whole = length >= (int)sizeof line ? malloc((size_t)length + 1) : NULL;
    if (whole) {
        vsnprintf(whole, (size_t)length + 1, format, again);
        ps_error_line(line, sizeof line, whole, NULL);
        free(whole);
    }
    va_end(again);
    memcpy(c->error, line, sizeof line);
}

int paths_fail(paths_kernel_ctx *c, int status, const char *format, ...) {
    c = blamed(c);
    va_list args;
    va_start(args, format);
    say(c, format, args);
    va_end(args);
    memcpy(c->failure, c->error, sizeof c->error);
    c->failed = 1;
    return status;
}

/* Why a call failed, as paths_fail says it, but the thread has not said that it fails. */
__attribute__((format(printf, 3, 4))) static int explain(paths_kernel_ctx *c, int status, const char *format, ...) {
    va_list args;
    va_start(args, format);
    say(c, format, args);
    va_end(args);
    return status;
}

static int no_run(paths_kernel_ctx *c, const char *call) {
    if (blamed(c) != c)
        return explain(blamed(c), PS_EINVAL, "%s: no context (NULL): a kernel passes the context its run gave it "
                       "(its argument); NULL is a program's own, after paths_init", call);
    return explain(c, PS_EINVAL, "%s: no PATHS run here: a program of its own calls paths_init first", call);
}

int paths_thread(const paths_kernel_ctx *c) { return context(c)->thread; }

int paths_threads(const paths_kernel_ctx *c) {
    const paths_kernel_ctx *own = context(c);
    return own->run ? own->run->threads : 0;
}

const char *paths_node(const paths_kernel_ctx *c) {
    const paths_kernel_ctx *own = context(c);
    return own->run ? own->run->node : "";
}

const char *paths_arg(const paths_kernel_ctx *c, const char *key) {
    const ps_kernel_run *run = context(c)->run;
    if (!run || !key) return NULL;
    for (int i = 0; i < run->arg_count; i++)
        if (strcmp(run->args[i].key, key) == 0) return run->args[i].value;
    return NULL;
}

int paths_arg_int(paths_kernel_ctx *c, const char *key, int64_t *out) {
    if (!out)
        return explain(context(c), PS_EINVAL, "paths_arg_int('%s'): expected where to put the value, got NULL",
                       key ? key : "(null)");
    const char *text = paths_arg(c, key);
    if (!text) return PS_OK;
    char *end = NULL;
    errno = 0;
    long long value = strtoll(text, &end, 10);
    if (!*text || *end || errno)
        return explain(context(c), PS_EINVAL, "--arg %s=%s: expected a whole number", key, text);
    *out = value;
    return PS_OK;
}

int paths_arg_double(paths_kernel_ctx *c, const char *key, double *out) {
    if (!out)
        return explain(context(c), PS_EINVAL, "paths_arg_double('%s'): expected where to put the value, got NULL",
                       key ? key : "(null)");
    const char *text = paths_arg(c, key);
    if (!text) return PS_OK;
    char *end = NULL;
    errno = 0;
    double value = strtod(text, &end);
    if (!*text || *end || errno)
        return explain(context(c), PS_EINVAL, "--arg %s=%s: expected a number", key, text);
    *out = value;
    return PS_OK;
}

const char *paths_last_error(const paths_kernel_ctx *c) { return blamed(c)->error; }

/* ---- handles ------------------------------------------------------------------------------- */

/* The hook's link for (element, format), or NULL with *status and the context's error set. */
static ps_link *acquire_link(paths_kernel_ctx *c, const char *element, const char *format, int *status) {
    ps_kernel_run *run = c->run;
    *status = PS_EINVAL;
    c->error[0] = '\0';
    ps_link *link = run->hooks.acquire(run->hooks.data, c->thread, element, format, status, c->error,
                                       sizeof c->error);
    if (!link && !c->error[0]) {
        char shown_element[QUOTED_SIZE], shown_format[QUOTED_SIZE];
        explain(c, *status, "paths_acquire(%s, %s) by thread %d: %s", quoted(shown_element, element),
                quoted(shown_format, format), c->thread, ps_status_name(*status));
    }
    return link;
}

paths_handle *paths_acquire(paths_kernel_ctx *c, const char *element, const char *format) {
    c = context(c);
    if (!c->run) {
        no_run(c, "paths_acquire");
        return NULL;
    }
    char shown_element[QUOTED_SIZE], shown_format[QUOTED_SIZE];
    if (!element || !*element || !format || !*format) {
        explain(c, PS_EINVAL, "paths_acquire: expected an element name and a format, got %s, %s",
                element ? quoted(shown_element, element) : "(null)", format ? quoted(shown_format, format) : "(null)");
        return NULL;
    }
    long element_not_utf8 = not_utf8_at(element), format_not_utf8 = not_utf8_at(format);
    if (element_not_utf8 >= 0 || format_not_utf8 >= 0) { /* the hook, and every message, takes text */
        int in_element = element_not_utf8 >= 0;
        long at = in_element ? element_not_utf8 : format_not_utf8;
        explain(c, PS_EINVAL, "paths_acquire(%s, %s) by thread %d: %s must be UTF-8 text, and its byte %ld is 0x%02x",
                quoted(shown_element, element), quoted(shown_format, format), c->thread,
                in_element ? "an element's name" : "a format", at, (unsigned char)(in_element ? element : format)[at]);
        return NULL;
    }
    if (c->held_count == c->held_capacity) { /* room first: nothing can fail once the link exists */
        int capacity = c->held_capacity ? 2 * c->held_capacity : 8;
        ps_link **grown = realloc(c->held, (size_t)capacity * sizeof *grown);
        if (!grown) {
            explain(c, PS_ENOMEM, "paths_acquire(%s, %s) by thread %d: out of memory", quoted(shown_element, element),
                    quoted(shown_format, format), c->thread);
            return NULL;
        }
        c->held = grown;
        c->held_capacity = capacity;
    }
    int status;
    ps_link *link = acquire_link(c, element, format, &status);
    if (link) c->held[c->held_count++] = link;
    return (paths_handle *)link;
}

/* A call of the API that returns nothing was refused (c->error says why): the first such call
 * fails the thread, with its reason. */
static void misused(paths_kernel_ctx *c) {
    if (c->misuse != PS_OK) return;
    c->misuse = PS_EINVAL;
    memcpy(c->misuse_error, c->error, sizeof c->error);
}

/* What a handle's stages hold back for its thread (a batch's buffer) goes down as the thread lets
 * the handle go, within RELEASE_FLUSH_MS, whether or not the release hook frees the handle then
 * (`paths run` keeps a run's stages until its last repeat, for their counters). Only moves are
 * held back, and any other operation sends them down first: a handle whose last operation was no
 * move holds nothing back. */
enum { RELEASE_FLUSH_MS = 1000 };

static int flush_held_back(paths_kernel_ctx *c, ps_link *link, const char *when, int say_why) {
    if (!link->moved_last) return PS_OK;
    ps_op op = {.kind = PS_OP_FLUSH, .timeout_ns = RELEASE_FLUSH_MS * 1000000LL};
    ps_error_mark began = ps_stage_error_mark();
    int rc = ps_link_call(link, &op);
    if (rc != PS_OK) ps_failure_cause_clear(); /* the explanation says it: no later call raises it */
    if (rc == PS_ETIMEDOUT) return PS_OK; /* on its way still (a slow link, a full bound): it stays in
                                             the stage's care, whose own release says what is lost */
    if (rc == PS_OK || !say_why) return rc;
    char why[PS_STAGE_ERROR_MAX];
    ps_stage_error_since(link->stage, began, why, sizeof why);
    return explain(c, rc, "%s: the moves a handle held back could not go down: %s", when,
                   *why ? why : ps_status_name(rc));
}

int ps_kernel_ctx_release(paths_kernel_ctx *c, paths_handle *h) {
    c = context(c);
    if (!c->run) return no_run(c, "paths_release");
    for (int i = 0; i < c->held_count; i++) {
        if (c->held[i] != (ps_link *)h) continue;
        c->held[i] = c->held[--c->held_count];
        int rc = flush_held_back(c, (ps_link *)h, "paths_release", 1);
        c->run->hooks.release(c->run->hooks.data, c->thread, (ps_link *)h);
        return rc;
    }
    return explain(c, PS_EINVAL, "paths_release: given a handle thread %d does not hold (released already?)",
                   c->thread);
}

void paths_release(paths_kernel_ctx *c, paths_handle *h) {
    if (ps_kernel_ctx_release(c, h) != PS_OK) misused(blamed(c));
}

void ps_context_flush_held(paths_kernel_ctx *c) {
    for (int i = 0; i < c->held_count; i++) {
        int fine = c->status == PS_OK && c->misuse == PS_OK; /* else the kernel's own reason stands */
        if (flush_held_back(c, c->held[i], "as the kernel returned", fine) != PS_OK && fine) misused(c);
    }
}

void ps_context_release_all(paths_kernel_ctx *c) {
    ps_kernel_run *run = c->run;
    while (c->held_count > 0) run->hooks.release(run->hooks.data, c->thread, c->held[--c->held_count]);
    if (c->barrier) run->hooks.release(run->hooks.data, c->thread, c->barrier);
    c->barrier = NULL;
    free(c->held);
    c->held = NULL;
    c->held_capacity = 0;
}

/* ---- the barrier ----------------------------------------------------------------------------- */

/* The threads of this process: the last to arrive opens the next generation (arrivals back to
 * 0) in the same step as its arrival. A thread whose wait times out takes its arrival back,
 * unless the generation opened meanwhile: then it has passed. */
static int local_barrier(ps_local_barrier *b, int parties, int64_t timeout_ns) {
    enum { GENERATION = 32 };
    uint64_t state = atomic_load(&b->state), arrived;
    do {
        arrived = (state & UINT32_MAX) + 1;
    } while (!atomic_compare_exchange_weak(&b->state, &state, arrived == (uint64_t)parties
                                           ? ((state >> GENERATION) + 1) << GENERATION : state + 1));
    uint64_t generation = state >> GENERATION;
    if (arrived == (uint64_t)parties) {
        ps_waitpoint_wake(&b->changed);
        return PS_OK;
    }
    int64_t deadline = ps_deadline(timeout_ns);
    uint32_t spins = 0;
    for (;;) {
        uint32_t seen = ps_waitpoint_sequence(&b->changed);
        if (atomic_load(&b->state) >> GENERATION != generation) return PS_OK;
        if (ps_waitpoint_wait(&b->changed, seen, deadline, &spins) != PS_ETIMEDOUT) continue;
        state = atomic_load(&b->state);
        while (state >> GENERATION == generation) {
            if (atomic_compare_exchange_weak(&b->state, &state, state - 1)) return PS_ETIMEDOUT;
        }
        return PS_OK;
    }
}

/* Every thread of the run, in every process: one round of a sum of ones through the planned tree.
 * A call whose observe failed (timed out) has moved its one: the next call, the caller trying
 * again, only observes that round. So a thread that waits in short turns arrives once, as it does
 * at the in-memory barrier, which takes a timed-out arrival back. */
static int run_barrier(paths_kernel_ctx *c, int64_t timeout_ns) {
    int rc = PS_OK;
    if (!c->barrier && !(c->barrier = acquire_link(c, PS_BARRIER_ELEMENT, "q", &rc))) return rc;
    int64_t deadline = ps_deadline(timeout_ns), one = 1, total = 0;
    ps_error_mark began = ps_stage_error_mark();
    if (!c->barrier_moved) {
        ps_op move = {.kind = PS_OP_MOVE, .in = &one, .timeout_ns = timeout_ns};
        rc = ps_link_call(c->barrier, &move);
        c->barrier_moved = rc == PS_OK;
    }
    ps_op observe = {.kind = PS_OP_OBSERVE, .out = &total, .timeout_ns = ps_remaining(deadline)};
    if (rc == PS_OK) rc = ps_link_call(c->barrier, &observe);
    if (rc == PS_OK) c->barrier_moved = 0;
    if (rc != PS_OK) {
        char why[PS_STAGE_ERROR_MAX];
        ps_stage_error_since(c->barrier->stage, began, why, sizeof why);
        return explain(c, rc, "paths_barrier: %s%s%s", ps_status_name(rc), *why ? ": " : "", why);
    }
    if (total != c->run->threads)
        return explain(c, PATHS_EFAILED, "paths_barrier: %lld threads arrived, the run has %d",
                       (long long)total, c->run->threads);
    return PS_OK;
}

int paths_barrier(paths_kernel_ctx *c, int64_t timeout_ns) {
    c = context(c);
    if (!c->run) return no_run(c, "paths_barrier");
    if (timeout_ns < 0 && timeout_ns != PATHS_FOREVER)
        return explain(c, PS_EINVAL, "paths_barrier: timeout %lld ns: expected 0 or more, or PATHS_FOREVER",
                       (long long)timeout_ns);
    if (c->run->spans_processes) return run_barrier(c, timeout_ns);
    int rc = local_barrier(&c->run->barrier, c->run->local, timeout_ns);
    if (rc != PS_OK) explain(c, rc, "paths_barrier: %s", ps_status_name(rc));
    return rc;
}

/* ---- reports ------------------------------------------------------------------------------- */

const char *const ps_run_columns[] = {"kernel", "map", "policy", "max_fanin", "tree_form", "threads", "nodes",
                                     "repeat", NULL};

static int run_column(const char *name) {
    for (int i = 0; ps_run_columns[i]; i++)
        if (strcmp(name, ps_run_columns[i]) == 0) return 1;
    return 0;
}

static int column_name(const char *name) {
    size_t length = name ? strlen(name) : 0;
    if (length == 0 || length > PS_REPORT_NAME_MAX) return 0;
    for (size_t i = 0; i < length; i++)
        if (!isalnum((unsigned char)name[i]) && !strchr("_.-/%", name[i])) return 0;
    return 1;
}

int ps_kernel_ctx_report(paths_kernel_ctx *c, const char *name, double value) {
    c = context(c);
    if (!c->run) return no_run(c, "paths_report");
    char shown_name[QUOTED_SIZE];
    if (!column_name(name))
        return explain(c, PS_EINVAL, "paths_report: expected a column name of 1 to %d letters, digits and _ . - / %%, "
                       "got %s", PS_REPORT_NAME_MAX, name ? quoted(shown_name, name) : "(null)");
    if (run_column(name))
        return explain(c, PS_EINVAL, "paths_report('%s'): paths run writes a column of that name itself: choose "
                       "another", name);
    for (int i = 0; i < c->report_count; i++) {
        if (strcmp(c->reports[i].name, name) == 0) {
            c->reports[i].value = value;
            return PS_OK;
        }
    }
    if (c->report_count == PS_REPORTS_MAX)
        return explain(c, PS_EINVAL, "paths_report('%s'): a thread reports at most %d columns", name, PS_REPORTS_MAX);
    ps_report *report = &c->reports[c->report_count++];
    snprintf(report->name, sizeof report->name, "%s", name);
    report->value = value;
    return PS_OK;
}

void paths_report(paths_kernel_ctx *c, const char *name, double value) {
    if (ps_kernel_ctx_report(c, name, value) != PS_OK) misused(blamed(c));
}
