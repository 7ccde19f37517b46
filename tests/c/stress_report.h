/* stress_report.h — how the C stress tests report a failed check: a line on stderr (the first
 * MAX_REPORTS of them, which the including file defines) and a count that decides the exit code;
 * and a set-up step that cannot fail without ending the test. */
#ifndef STRESS_REPORT_H
#define STRESS_REPORT_H

#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>

#include "pastset.h"

static atomic_int failures;

static void fail(const char *format, ...) {
    if (atomic_fetch_add(&failures, 1) >= MAX_REPORTS) return;
    va_list args;
    va_start(args, format);
    fputs("FAIL: ", stderr);
    vfprintf(stderr, format, args);
    fputc('\n', stderr);
    va_end(args);
}

#define CHECK(condition, ...) \
    do {                      \
        if (!(condition)) fail(__VA_ARGS__); \
    } while (0)

/* The element (name, format), or the end of the test with a message. */
static ps_element *enter_or_die(ps_space *space, const char *name, const char *format) {
    ps_element *e = NULL;
    int rc = ps_enter(space, name, format, &e);
    if (rc != PS_OK) {
        fprintf(stderr, "FAIL: enter %s: %s\n", name, ps_status_name(rc));
        exit(1);
    }
    return e;
}

#endif
