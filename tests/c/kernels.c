/* kernels.c — small kernels on paths.h for tests/test_kernels.py: each does one thing a test
 * checks from the outside (a total, a barrier, reports, a failure). Built like a user's kernel. */
#include <paths.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

PATHS_SUMS(count, "TOTAL");

/* Every thread adds thread+1 into TOTAL `rounds` times (each round after a barrier of the whole
 * run) and checks each total; thread 0 reports the last total and the barriers passed. */
int count(paths_kernel_ctx *c) {
    int64_t rounds = 3, threads = paths_threads(c), total = 0;
    int rc = paths_arg_int(c, "rounds", &rounds);
    paths_handle *sum = rc == PATHS_OK ? paths_acquire(c, "TOTAL", "q") : NULL;
    if (!sum) return rc != PATHS_OK ? rc : PATHS_EFAILED;
    for (int64_t r = 0; r < rounds; r++) {
        int64_t mine = paths_thread(c) + 1;
        rc = paths_barrier(c, 20 * 1000000000LL);
        if (rc == PATHS_OK) rc = paths_move(sum, &mine, 20 * 1000000000LL);
        if (rc == PATHS_OK) rc = paths_observe(sum, &total, 20 * 1000000000LL);
        if (rc != PATHS_OK) return rc;
        if (total != threads * (threads + 1) / 2)
            return paths_fail(c, PATHS_EFAILED, "round %lld: total %lld", (long long)r, (long long)total);
    }
    paths_release(c, sum);
    if (paths_thread(c) == 0) {
        paths_report(c, "total", (double)total);
        paths_report(c, "barriers", (double)rounds);
    }
    paths_report(c, "thread", paths_thread(c)); /* every thread: the run's value is their mean */
    return PATHS_OK;
}

/* Thread `fail` (an --arg) says why and fails at once, with `status` (PATHS_EFAILED unless given);
 * the others wait for it in a barrier, for `timeout` seconds. */
int failing(paths_kernel_ctx *c) {
    int64_t fail = 1, status = PATHS_EFAILED;
    double timeout = 60.0;
    paths_arg_int(c, "fail", &fail);
    paths_arg_int(c, "status", &status);
    paths_arg_double(c, "timeout", &timeout);
    if (paths_thread(c) == fail)
        return paths_fail(c, (int)status, "thread %d of %d on %s says no", paths_thread(c), paths_threads(c),
                          paths_node(c));
    return paths_barrier(c, (int64_t)(timeout * 1e9));
}

/* Thread 0 acquires X and says it gives up, then ends its thread with pthread_exit instead of
 * returning; thread 1 tries to cancel it first (which a kernel's thread does not let it). */
static pthread_t first;

int exits_thread(paths_kernel_ctx *c) {
    int64_t second = 20 * 1000000000LL;
    if (paths_thread(c) == 0) first = pthread_self();
    if (paths_barrier(c, second) != PATHS_OK) return PATHS_EFAILED;
    if (paths_thread(c) == 1) return pthread_cancel(first) == 0 && paths_barrier(c, second) == PATHS_OK ? PATHS_OK
                                                                                                         : PATHS_EFAILED;
    if (paths_barrier(c, second) != PATHS_OK) return PATHS_EFAILED;
    if (paths_acquire(c, "X", "q")) paths_fail(c, PATHS_EINVAL, "thread %d gives up", paths_thread(c));
    pthread_exit(NULL);
}

/* Says why it fails, then acquires element AFTER, which works, and fails: the reason stays. */
int fails_then_acquires(paths_kernel_ctx *c) {
    paths_fail(c, PATHS_EFAILED, "thread %d gives up", paths_thread(c));
    if (!paths_acquire(c, "AFTER", "q")) return paths_fail(c, PATHS_EFAILED, "AFTER: %s", paths_last_error(c));
    return PATHS_EFAILED;
}

/* Thread 0 acquires element X (--arg name) as "q"; after a barrier the last thread acquires it
 * as "d". */
int two_formats(paths_kernel_ctx *c) {
    int last = paths_thread(c) == paths_threads(c) - 1;
    const char *name = paths_arg(c, "name") ? paths_arg(c, "name") : "X";
    paths_handle *h = paths_thread(c) == 0 ? paths_acquire(c, name, "q") : NULL;
    if (paths_thread(c) == 0 && !h) return PATHS_EFAILED;
    int rc = paths_barrier(c, 20 * 1000000000LL);
    if (rc == PATHS_OK && last && !paths_acquire(c, name, "d")) return PATHS_EFAILED;
    return rc;
}

PATHS_SUMS(sum_twice, "TOTAL");

/* The last thread acquires the sum TOTAL a second time; the others acquire it once. */
int sum_twice(paths_kernel_ctx *c) {
    paths_handle *sum = paths_acquire(c, "TOTAL", "q");
    if (!sum || (paths_thread(c) == paths_threads(c) - 1 && !paths_acquire(c, "TOTAL", "q"))) return PATHS_EFAILED;
    int64_t one = 1, total;
    int rc = paths_move(sum, &one, 20 * 1000000000LL);
    return rc == PATHS_OK ? paths_observe(sum, &total, 20 * 1000000000LL) : rc;
}

/* Acquires element X ("q") and moves 1 into it: what a hook does to the path is seen outside. */
int touch(paths_kernel_ctx *c) {
    int64_t one = 1;
    paths_handle *h = paths_acquire(c, "X", "q");
    return h ? paths_move(h, &one, PATHS_FOREVER) : PATHS_EFAILED;
}

/* Every operation of paths.h on element H ("q"), from thread 0; fails naming the first surprise. */
int history(paths_kernel_ctx *c) {
    paths_handle *h = paths_acquire(c, "H", "q");
    if (!h) return PATHS_EFAILED;
    int64_t value = 0, first = -1, last = -1;
    for (int64_t i = 0; i < 10; i++)
        if (paths_move(h, &i, PATHS_FOREVER) != PATHS_OK)
            return paths_fail(c, PATHS_EFAILED, "move %lld", (long long)i);
    if (paths_last(h, &last) != PATHS_OK || last != 10)
        return paths_fail(c, PATHS_EFAILED, "last %lld", (long long)last);
    if (paths_observe_at(h, 3, &value, 0) != PATHS_OK || value != 3)
        return paths_fail(c, PATHS_EFAILED, "observe_at(3) %lld", (long long)value);
    if (paths_observe(h, &value, 0) != PATHS_OK || value != 0 || paths_first(h, &first) != PATHS_OK || first != 1)
        return paths_fail(c, PATHS_EFAILED, "observe %lld, then first %lld", (long long)value, (long long)first);
    if (paths_axe(h, 1) != PATHS_OK) return paths_fail(c, PATHS_EFAILED, "axe(1)");
    int rc = paths_observe_at(h, 0, &value, 0);
    if (rc != PATHS_EAXED) return paths_fail(c, PATHS_EFAILED, "observe_at(0) after axe(1): %s", paths_strerror(rc));
    if (paths_observe_at(h, 10, &value, 1000) != PATHS_ETIMEDOUT)
        return paths_fail(c, PATHS_EFAILED, "observe_at(10) did not time out");
    if (strncmp(paths_strerror(PATHS_EAXED), "PATHS_EAXED:", 12) != 0)
        return paths_fail(c, PATHS_EFAILED, "paths_strerror(PATHS_EAXED) is '%s'", paths_strerror(PATHS_EAXED));
    paths_report(c, "tuple_size", (double)paths_tuple_size(h));
    paths_report(c, "format_is_q", strcmp(paths_format(h), "q") == 0);
    paths_report(c, "now_moves", paths_now_ns() > 0);
    return PATHS_OK;
}

/* Every call that waits, given a negative timeout other than PATHS_FOREVER (a deadline already
 * passed), from one thread on element N ("q"): refused with PATHS_EINVAL at once, nothing done,
 * rather than waiting with no limit. Fails naming the first surprise. */
#define REFUSED(call)                                                                                  \
    do {                                                                                               \
        int rc_ = (call);                                                                              \
        if (rc_ != PATHS_EINVAL) return paths_fail(c, PATHS_EFAILED, "%s: %s", #call, paths_strerror(rc_)); \
    } while (0)

int negative_timeouts(paths_kernel_ctx *c) {
    paths_handle *h = paths_acquire(c, "N", "q");
    if (!h) return PATHS_EFAILED;
    int64_t one = 1, value = 0, last = -1;
    REFUSED(paths_move(h, &one, -2));
    REFUSED(paths_move_many(h, &one, 1, -1000000));
    REFUSED(paths_fence(&h, 1, INT64_MIN));
    REFUSED(paths_barrier(c, -3));
    if (!strstr(paths_last_error(c), "paths_barrier: timeout -3 ns"))
        return paths_fail(c, PATHS_EFAILED, "paths_barrier(-3) said '%s'", paths_last_error(c));
    if (paths_last(h, &last) != PATHS_OK || last != 0)
        return paths_fail(c, PATHS_EFAILED, "%lld tuples moved by refused calls", (long long)last);
    REFUSED(paths_observe(h, &value, -5)); /* N is empty: no limit would wait for ever */
    REFUSED(paths_observe_at(h, 0, &value, -7));
    size_t got = 1;
    REFUSED(paths_observe_range(h, 0, 1, &value, &got, -9));
    if (got != 0) return paths_fail(c, PATHS_EFAILED, "a refused range said it gave %zu tuples", got);
    return PATHS_OK;
}

/* A NULL handle, a NULL buffer for tuples or results, or a count of tuples no memory holds, from
 * one thread on element Z ("q"): each refused with PATHS_EINVAL, nothing done, never a crash.
 * Fails naming the first surprise. */
int null_arguments(paths_kernel_ctx *c) {
    paths_handle *h = paths_acquire(c, "Z", "q"), *none = NULL, *pair[2] = {NULL, NULL};
    if (!h) return PATHS_EFAILED;
    int64_t one = 1, value = 0, last = -1, rounds = 0;
    pair[0] = h;
    REFUSED(paths_move(NULL, &one, PATHS_FOREVER));
    REFUSED(paths_move(h, NULL, PATHS_FOREVER));
    REFUSED(paths_move_many(NULL, &one, 1, PATHS_FOREVER));
    REFUSED(paths_move_many(h, NULL, 1, PATHS_FOREVER));
    REFUSED(paths_move_many(h, &one, SIZE_MAX / 8 + 2, PATHS_FOREVER)); /* n * 8 bytes wraps around */
    REFUSED(paths_observe(NULL, &value, 0));
    REFUSED(paths_observe(h, NULL, 0));
    REFUSED(paths_observe_at(NULL, 0, &value, 0));
    REFUSED(paths_observe_at(h, 0, NULL, 0));
    size_t got = 0;
    REFUSED(paths_observe_range(NULL, 0, 1, &value, &got, 0));
    REFUSED(paths_observe_range(h, 0, 1, NULL, &got, 0));
    REFUSED(paths_observe_range(h, 0, 1, &value, NULL, 0));
    REFUSED(paths_observe_range(h, 0, 0, &value, &got, 0));                   /* no tuple asked for */
    REFUSED(paths_observe_range(h, 0, paths_range_max(h) + 1, &value, &got, 0)); /* past the bound */
    if (paths_range_max(NULL) != 0 || paths_range_max(h) != (4u << 20) / 8)
        return paths_fail(c, PATHS_EFAILED, "paths_range_max: %zu, %zu", paths_range_max(NULL), paths_range_max(h));
    REFUSED(paths_fence(NULL, 1, 0));
    REFUSED(paths_fence(&none, 1, 0));
    REFUSED(paths_fence(pair, 2, 0));
    REFUSED(paths_first(NULL, &value));
    REFUSED(paths_first(h, NULL));
    REFUSED(paths_last(NULL, &value));
    REFUSED(paths_last(h, NULL));
    REFUSED(paths_axe(NULL, 0));
    REFUSED(paths_arg_int(c, "rounds", NULL));
    REFUSED(paths_arg_double(c, "rounds", NULL));
    if (paths_tuple_size(NULL) != 0 || strcmp(paths_format(NULL), "") != 0)
        return paths_fail(c, PATHS_EFAILED, "paths_tuple_size(NULL), paths_format(NULL): %zu, '%s'",
                          paths_tuple_size(NULL), paths_format(NULL));
    if (paths_last(h, &last) != PATHS_OK || last != 0)
        return paths_fail(c, PATHS_EFAILED, "%lld tuples moved by refused calls", (long long)last);
    if (paths_move_many(h, NULL, 0, 0) != PATHS_OK || paths_fence(NULL, 0, 0) != PATHS_OK ||
        paths_arg_int(c, "rounds", &rounds) != PATHS_OK)
        return paths_fail(c, PATHS_EFAILED, "nothing to move, to fence or to read was refused");
    return PATHS_OK;
}

/* paths_release of a handle this thread never acquired (refused: it returns nothing, so it fails
 * the thread), then a call that succeeds, then PATHS_OK: the run names the refused call. */
int refused_release(paths_kernel_ctx *c) {
    int64_t stranger = 0;
    paths_release(c, (paths_handle *)&stranger);
    return paths_acquire(c, "R", "q") ? PATHS_OK : PATHS_EFAILED;
}

/* Element S's path (the test's) holds 3 moves in a batch above a sum of 2 contributors that only
 * this thread feeds: the sum refuses the second buffer of a move_many, and paths_handle_error says
 * how many of that buffer's moves took effect, which the status alone cannot. Reports that it
 * checked; fails quoting any other line. */
int handle_error(paths_kernel_ctx *c) {
    paths_handle *h = paths_acquire(c, "S", "q");
    if (!h) return PATHS_EFAILED;
    if (*paths_handle_error(h) || *paths_handle_error(NULL))
        return paths_fail(c, PATHS_EFAILED, "explained before any failure: '%s'", paths_handle_error(h));
    int64_t tuples[6] = {0, 1, 2, 3, 4, 5};
    int rc = paths_move(h, &tuples[0], PATHS_FOREVER);
    if (rc == PATHS_OK) rc = paths_move_many(h, &tuples[1], 5, PATHS_FOREVER);
    if (rc != PATHS_ESTATE) return paths_fail(c, PATHS_EFAILED, "move_many: %s", paths_strerror(rc));
    const char *why = paths_handle_error(h);
    if (!strstr(why, "batch: 0 of 3 moves sent down together took effect"))
        return paths_fail(c, PATHS_EFAILED, "paths_handle_error said '%s'", why);
    paths_report(c, "explained", 1.0);
    return PATHS_OK;
}

/* Element R's path (the test's) holds tuples 0 .. 9 axed before 2: a range from 3 gives the 7 that
 * exist, one from 8 the 2 that exist of 5 asked, one from 1 is refused as axed, and one past the
 * last waits out its timeout. Reports what each gave; fails naming the first surprise. */
int range_read(paths_kernel_ctx *c) {
    paths_handle *h = paths_acquire(c, "R", "q");
    if (!h) return PATHS_EFAILED;
    int64_t tuples[16] = {0};
    size_t got = 99;
    int rc = paths_observe_range(h, 3, 16, tuples, &got, PATHS_FOREVER);
    if (rc != PATHS_OK || got != 7) return paths_fail(c, PATHS_EFAILED, "range(3, 16): %s, %zu", paths_strerror(rc), got);
    for (size_t i = 0; i < got; i++)
        if (tuples[i] != (int64_t)(3 + i)) return paths_fail(c, PATHS_EFAILED, "tuple %zu is %lld", 3 + i, (long long)tuples[i]);
    paths_report(c, "from_3", (double)got);
    rc = paths_observe_range(h, 8, 5, tuples, &got, PATHS_FOREVER);
    if (rc != PATHS_OK || got != 2 || tuples[0] != 8 || tuples[1] != 9)
        return paths_fail(c, PATHS_EFAILED, "range(8, 5): %s, %zu", paths_strerror(rc), got);
    paths_report(c, "from_8", (double)got);
    rc = paths_observe_range(h, 1, 4, tuples, &got, PATHS_FOREVER);
    if (rc != PATHS_EAXED || got != 0) return paths_fail(c, PATHS_EFAILED, "range(1, 4): %s, %zu", paths_strerror(rc), got);
    rc = paths_observe_range(h, 10, 4, tuples, &got, 20 * 1000000LL);
    if (rc != PATHS_ETIMEDOUT || got != 0) return paths_fail(c, PATHS_EFAILED, "range(10, 4): %s, %zu", paths_strerror(rc), got);
    paths_report(c, "checked", 1.0);
    return PATHS_OK;
}

/* Three barriers; at each thread 0 waits in turns of 10 ms (calling again after each timeout),
 * while the other threads come 200 ms late. Thread 0 reports the turns that timed out. */
int barrier_in_turns(paths_kernel_ctx *c) {
    int rc = PATHS_OK, turns = 0;
    for (int b = 0; b < 3 && rc == PATHS_OK; b++) {
        if (paths_thread(c) == 0) {
            while ((rc = paths_barrier(c, 10 * 1000000LL)) == PATHS_ETIMEDOUT) turns++;
        } else {
            struct timespec late = {0, 200 * 1000000L};
            nanosleep(&late, NULL);
            rc = paths_barrier(c, 20 * 1000000000LL);
        }
    }
    if (paths_thread(c) == 0) paths_report(c, "turns", turns);
    return rc;
}

/* Thread 0 moves 0 .. 9 (the 10th as -1 with --arg negative=1) through its handle, a path of the
 * test's with a batch that holds them, then lets the handle go: by paths_release with --arg
 * release=1, else by returning. Thread 1 waits up to 5 s for tuple `last` (--arg, default 9) by
 * its index and reports what it saw (-1: nothing). */
int release_sends(paths_kernel_ctx *c) {
    paths_handle *h = paths_acquire(c, "L", "q");
    if (!h) return PATHS_EFAILED;
    int64_t negative = 0, release = 0, last = 9;
    paths_arg_int(c, "negative", &negative);
    paths_arg_int(c, "release", &release);
    paths_arg_int(c, "last", &last);
    if (paths_thread(c) == 0) {
        for (int64_t i = 0; i < 10; i++) {
            int64_t t = negative && i == 9 ? -1 : i;
            int rc = paths_move(h, &t, PATHS_FOREVER);
            if (rc != PATHS_OK) return paths_fail(c, rc, "move %lld: %s", (long long)i, paths_strerror(rc));
        }
        if (release) paths_release(c, h);
        return PATHS_OK;
    }
    int64_t seen = -1;
    int rc = paths_observe_at(h, last, &seen, 5000000000LL);
    paths_report(c, "seen", rc == PATHS_OK ? (double)seen : -1.0);
    return PATHS_OK;
}

/* Passes NULL, a program's own context, where its own belongs: paths_acquire returns NULL saying
 * so in the kernel's context, and paths_report, which returns nothing, fails the thread. */
int null_context(paths_kernel_ctx *c) {
    if (paths_acquire(NULL, "E", "q") != NULL) return paths_fail(c, PATHS_EFAILED, "acquired with NULL");
    if (!strstr(paths_last_error(c), "paths_acquire: no context (NULL)") ||
        strcmp(paths_last_error(NULL), paths_last_error(c)) != 0)
        return paths_fail(c, PATHS_EFAILED, "paths_acquire(NULL, ...) said '%s'", paths_last_error(NULL));
    paths_report(NULL, "seen", 1.0);
    return PATHS_OK;
}

/* Fails with a NULL context: the kernel's thread fails, for the reason it gave. */
int null_context_fails(paths_kernel_ctx *c) {
    (void)c;
    return paths_fail(NULL, PATHS_EFAILED, "given up with %s", "NULL");
}

/* Calls paths_init, which a kernel must not: the process runs kernels, and started PATHS long ago. */
int init_in_kernel(paths_kernel_ctx *c) {
    (void)c;
    int argc = 1;
    char *args[] = {"kernel", NULL}, **argv = args;
    return paths_init(&argc, &argv);
}
