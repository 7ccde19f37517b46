/* cache_load.c — Aurora's read-cache load (its Figure 6 method), on paths.h alone: the time to
 * read a whole rows x cols matrix of 32-bit ints, one row per tuple, between two barriers.
 *
 * Thread 0 moves the matrix into element MATRIX (row r holds r * cols + j), then every thread
 * waits at a barrier, reads every row by index (paths_observe_at) checking it, and waits at a
 * second barrier. The acquire hook decides how a row comes: a cache that fetches one row per
 * miss, or one that fetches the whole window at the first miss. Thread 0 reports `load_ms`, the
 * time from the first barrier to the second: the slowest thread's load.
 *
 * Arguments (--arg): rows (704), cols (704), timeout (seconds, 60).
 */
#include <paths.h>
#include <stdio.h>
#include <stdlib.h>

/* Row r of the matrix, as thread 0 moves it and every thread expects it. */
static void fill_row(int32_t *row, int64_t r, int64_t cols) {
    for (int64_t j = 0; j < cols; j++) row[j] = (int32_t)(r * cols + j);
}

static int move_matrix(paths_kernel_ctx *c, paths_handle *matrix, int64_t rows, int64_t cols, int64_t timeout_ns) {
    int32_t *all = malloc((size_t)(rows * cols) * sizeof *all);
    if (!all) return paths_fail(c, PATHS_ENOMEM, "cache_load: no memory for the matrix");
    for (int64_t r = 0; r < rows; r++) fill_row(all + r * cols, r, cols);
    int rc = paths_move_many(matrix, all, (size_t)rows, timeout_ns);
    if (rc == PATHS_OK) rc = paths_fence(&matrix, 1, timeout_ns);
    free(all);
    return rc == PATHS_OK ? rc : paths_fail(c, rc, "cache_load: moving the matrix: %s", paths_strerror(rc));
}

static int load(paths_kernel_ctx *c, paths_handle *matrix, int64_t rows, int64_t cols, int64_t timeout_ns) {
    int32_t *row = malloc((size_t)cols * sizeof *row), *expected = malloc((size_t)cols * sizeof *expected);
    int rc = row && expected ? PATHS_OK : paths_fail(c, PATHS_ENOMEM, "cache_load: no memory for a row");
    for (int64_t r = 0; r < rows && rc == PATHS_OK; r++) {
        rc = paths_observe_at(matrix, r, row, timeout_ns);
        if (rc != PATHS_OK) {
            rc = paths_fail(c, rc, "cache_load: reading row %lld: %s", (long long)r, paths_strerror(rc));
            break;
        }
        fill_row(expected, r, cols);
        for (int64_t j = 0; j < cols; j++)
            if (row[j] != expected[j])
                rc = paths_fail(c, PATHS_EFAILED, "cache_load: row %lld, column %lld is %d, expected %d",
                                (long long)r, (long long)j, row[j], expected[j]);
    }
    free(row);
    free(expected);
    return rc;
}

int cache_load(paths_kernel_ctx *c) {
    int64_t rows = 704, cols = 704;
    double timeout_s = 60.0;
    int rc = paths_arg_int(c, "rows", &rows);
    if (rc == PATHS_OK) rc = paths_arg_int(c, "cols", &cols);
    if (rc == PATHS_OK) rc = paths_arg_double(c, "timeout", &timeout_s);
    if (rc != PATHS_OK) return rc;
    if (rows < 1 || cols < 1 || cols > 65536)
        return paths_fail(c, PATHS_EINVAL, "cache_load: expected rows >= 1 and 1 <= cols <= 65536, got %lld x %lld",
                          (long long)rows, (long long)cols);
    int64_t timeout_ns = timeout_s < 0 ? PATHS_FOREVER : (int64_t)(timeout_s * 1e9);
    char format[32];
    snprintf(format, sizeof format, "%lldi", (long long)cols);
    paths_handle *matrix = paths_acquire(c, "MATRIX", format);
    if (!matrix) return PATHS_EFAILED;
    if (paths_thread(c) == 0) rc = move_matrix(c, matrix, rows, cols, timeout_ns);
    if (rc == PATHS_OK) rc = paths_barrier(c, timeout_ns);
    int64_t begin = paths_now_ns();
    if (rc == PATHS_OK) rc = load(c, matrix, rows, cols, timeout_ns);
    if (rc == PATHS_OK) rc = paths_barrier(c, timeout_ns);
    if (rc == PATHS_OK && paths_thread(c) == 0) paths_report(c, "load_ms", (double)(paths_now_ns() - begin) / 1e6);
    return rc;
}
