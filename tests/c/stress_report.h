/* stress_report.h — how the C stress tests report a failed check: a line on stderr (the first
 * MAX_REPORTS of them, which the including file defines) and a count that decides the exit code. */
#ifndef STRESS_REPORT_H
#define STRESS_REPORT_H

#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>

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

#endif
