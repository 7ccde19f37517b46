/* mm2.c — Aurora's two-phase matrix multiply MM2 (P = Q x R, barrier, S = Q x P), on paths.h
 * alone: a user-level workload whose writes a map may batch and whose reads it may prefetch.
 *
 * Matrices are n x n doubles, one row per tuple (format "<n>d"). Thread 0 moves the inputs Q and
 * R (Q[i][j] = (i + 2j) % 7 - 3, R[i][j] = (3i + j) % 5 - 2: small integers, so every sum is exact
 * and every mapping gives the same bits). Between two barriers every thread computes its block
 * of rows, phase by phase: it reads its rows of Q, then each row k of R (P) once, adding Q[i][k]
 * times it to each of its rows; it moves its rows of P into element P.<thread> (of S into
 * S.<thread>), ends the write scope with paths_fence, and waits at a barrier before the next
 * phase reads them. Every element lives where the map's acquire hook says; the kernel only
 * reads by index (paths_observe_at) and moves.
 *
 * Thread 0 reports `seconds` (from the first barrier to the last) and `checksum` (the sum of S's
 * entries, read back after the last barrier).
 *
 * Arguments (--arg): n (256), timeout (seconds, 60).
 */
#include <paths.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct mm2_run {
    paths_kernel_ctx *c;
    int64_t n, first, rows, per_thread, timeout_ns;
    int threads;
    char format[32];
    double *q, *out, *row; /* this thread's rows of Q, its rows of the product, one row read */
} mm2_run;

static paths_handle *acquire(mm2_run *m, const char *name, int index) {
    char element[64];
    if (index < 0) snprintf(element, sizeof element, "%s", name);
    else snprintf(element, sizeof element, "%s.%d", name, index);
    return paths_acquire(m->c, element, m->format);
}

/* Thread 0: the inputs, row by row, as one move_many each. */
static int move_inputs(mm2_run *m) {
    paths_handle *q = acquire(m, "Q", -1), *r = acquire(m, "R", -1);
    if (!q || !r) return PATHS_EFAILED;
    double *rows = malloc((size_t)(m->n * m->n) * sizeof *rows);
    if (!rows) return paths_fail(m->c, PATHS_ENOMEM, "mm2: no memory for the inputs");
    for (int64_t i = 0; i < m->n; i++)
        for (int64_t j = 0; j < m->n; j++) rows[i * m->n + j] = (double)((i + 2 * j) % 7 - 3);
    int rc = paths_move_many(q, rows, (size_t)m->n, m->timeout_ns);
    for (int64_t i = 0; i < m->n && rc == PATHS_OK; i++)
        for (int64_t j = 0; j < m->n; j++) rows[i * m->n + j] = (double)((3 * i + j) % 5 - 2);
    if (rc == PATHS_OK) rc = paths_move_many(r, rows, (size_t)m->n, m->timeout_ns);
    free(rows);
    if (rc == PATHS_OK) rc = paths_fence((paths_handle *const[]){q, r}, 2, m->timeout_ns);
    return rc == PATHS_OK ? PATHS_OK : paths_fail(m->c, rc, "mm2: moving the inputs: %s", paths_strerror(rc));
}

/* Row k of a matrix stored as `name` (one element) or as `name`.<t> (the row blocks of threads). */
static int read_row(mm2_run *m, paths_handle **blocks, int blocked, int64_t k) {
    paths_handle *h = blocked ? blocks[k / m->per_thread] : blocks[0];
    int64_t index = blocked ? k % m->per_thread : k;
    int rc = paths_observe_at(h, index, m->row, m->timeout_ns);
    return rc == PATHS_OK ? rc : paths_fail(m->c, rc, "mm2: reading row %lld: %s", (long long)k, paths_strerror(rc));
}

/* One phase: out = Q x B for this thread's rows, moved into `into`, the write scope fenced. */
static int phase(mm2_run *m, paths_handle **b, int blocked, paths_handle *into) {
    memset(m->out, 0, (size_t)(m->rows * m->n) * sizeof *m->out);
    for (int64_t k = 0; k < m->n; k++) {
        int rc = read_row(m, b, blocked, k);
        if (rc != PATHS_OK) return rc;
        for (int64_t i = 0; i < m->rows; i++) {
            double factor = m->q[i * m->n + k];
            double *target = m->out + i * m->n;
            for (int64_t j = 0; j < m->n; j++) target[j] += factor * m->row[j];
        }
    }
    for (int64_t i = 0; i < m->rows; i++) {
        int rc = paths_move(into, m->out + i * m->n, m->timeout_ns);
        if (rc != PATHS_OK) return paths_fail(m->c, rc, "mm2: moving a row of the product: %s", paths_strerror(rc));
    }
    int rc = paths_fence(&into, 1, m->timeout_ns);
    return rc == PATHS_OK ? rc : paths_fail(m->c, rc, "mm2: fence: %s", paths_strerror(rc));
}

/* Thread 0, after the last barrier: the sum of every entry of S. */
static int checksum(mm2_run *m, double *sum) {
    *sum = 0;
    for (int t = 0; t < m->threads; t++) {
        paths_handle *s = acquire(m, "S", t);
        if (!s) return PATHS_EFAILED;
        for (int64_t i = 0; i < m->per_thread && t * m->per_thread + i < m->n; i++) {
            int rc = paths_observe_at(s, i, m->row, m->timeout_ns);
            if (rc != PATHS_OK) return paths_fail(m->c, rc, "mm2: reading S.%d: %s", t, paths_strerror(rc));
            for (int64_t j = 0; j < m->n; j++) *sum += m->row[j];
        }
    }
    return PATHS_OK;
}

static int run(mm2_run *m) {
    int thread = paths_thread(m->c);
    paths_handle *q = acquire(m, "Q", -1), *r = acquire(m, "R", -1), *p_out = acquire(m, "P", thread);
    paths_handle *s_out = acquire(m, "S", thread), **p = calloc((size_t)m->threads, sizeof *p);
    if (!p) return paths_fail(m->c, PATHS_ENOMEM, "mm2: no memory");
    int rc = q && r && p_out && s_out ? PATHS_OK : PATHS_EFAILED;
    for (int t = 0; t < m->threads && rc == PATHS_OK; t++)
        if (!(p[t] = t == thread ? p_out : acquire(m, "P", t))) rc = PATHS_EFAILED;
    if (rc == PATHS_OK && thread == 0) rc = move_inputs(m);
    if (rc == PATHS_OK) rc = paths_barrier(m->c, m->timeout_ns);
    int64_t begin = paths_now_ns();
    for (int64_t i = 0; i < m->rows && rc == PATHS_OK; i++) {
        rc = paths_observe_at(q, m->first + i, m->q + i * m->n, m->timeout_ns);
        if (rc != PATHS_OK) rc = paths_fail(m->c, rc, "mm2: reading Q: %s", paths_strerror(rc));
    }
    if (rc == PATHS_OK) rc = phase(m, &r, 0, p_out);
    if (rc == PATHS_OK) rc = paths_barrier(m->c, m->timeout_ns);
    if (rc == PATHS_OK) rc = phase(m, p, 1, s_out);
    if (rc == PATHS_OK) rc = paths_barrier(m->c, m->timeout_ns);
    double seconds = (double)(paths_now_ns() - begin) / 1e9, sum = 0;
    if (rc == PATHS_OK && thread == 0) rc = checksum(m, &sum);
    if (rc == PATHS_OK && thread == 0) {
        paths_report(m->c, "seconds", seconds);
        paths_report(m->c, "checksum", sum);
    }
    free(p);
    return rc;
}

int mm2(paths_kernel_ctx *c) {
    mm2_run m = {.c = c, .n = 256, .threads = paths_threads(c)};
    double timeout_s = 60.0;
    int rc = paths_arg_int(c, "n", &m.n);
    if (rc == PATHS_OK) rc = paths_arg_double(c, "timeout", &timeout_s);
    if (rc != PATHS_OK) return rc;
    if (m.n < m.threads || m.n > 4096)
        return paths_fail(c, PATHS_EINVAL, "mm2: expected threads <= n <= 4096, got n = %lld", (long long)m.n);
    m.timeout_ns = timeout_s < 0 ? PATHS_FOREVER : (int64_t)(timeout_s * 1e9);
    m.per_thread = (m.n + m.threads - 1) / m.threads;
    m.first = paths_thread(c) * m.per_thread;
    m.rows = m.first >= m.n ? 0 : m.n - m.first < m.per_thread ? m.n - m.first : m.per_thread;
    snprintf(m.format, sizeof m.format, "%lldd", (long long)m.n);
    m.q = malloc((size_t)(m.per_thread * m.n) * sizeof *m.q);
    m.out = malloc((size_t)(m.per_thread * m.n) * sizeof *m.out);
    m.row = malloc((size_t)m.n * sizeof *m.row);
    rc = m.q && m.out && m.row ? run(&m) : paths_fail(c, PATHS_ENOMEM, "mm2: no memory for n = %lld", (long long)m.n);
    free(m.q);
    free(m.out);
    free(m.row);
    return rc;
}
