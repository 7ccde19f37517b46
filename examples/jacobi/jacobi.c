/* jacobi.c — a user's own kernel: a 1-D heat (Poisson) problem solved by Jacobi iteration, the
 * same library on any map.
 *
 *   -u'' = 2 on (0, 1), u(0) = u(1) = 0, whose answer is u(x) = x (1 - x)
 *
 * (exact on the grid too: the second difference of a parabola is exact). The `points` interior
 * grid points are split into blocks, one per thread in thread order. Each iteration every thread
 * moves the edge values of its block into elements named after itself, `halo.left@T` and
 * `halo.right@T` (a name `NAME@T` lives on thread T's node: its owner's), observes its
 * neighbours' edges from theirs, updates its block, and adds its squared change and squared
 * error into the sum element `residual`: every thread sees the same totals, so all stop at the
 * same iteration, once the root of the summed squared change is below `tolerance`. Thread 0
 * reports the iterations, that residual, and the root-mean-square error against the answer.
 *
 *   cc -shared -fPIC -O2 -I"$(python -c 'import paths; print(paths.get_include())')" \
 *      jacobi.c -o libjacobi.so
 *   paths run ./libjacobi.so:jacobi --map local --threads 4
 *   paths run ./libjacobi.so:jacobi --map paper-2w --threads 4
 *   paths run ./libjacobi.so:jacobi --map multicluster --threads 4
 *
 * Arguments (--arg): points (16), tolerance (1e-8), max_iterations (100000), timeout (seconds each
 * wait may take: paths run always passes its --timeout, default 120).
 */
#include <math.h>
#include <paths.h>
#include <stdio.h>
#include <stdlib.h>

PATHS_SUMS(jacobi, "residual");

typedef struct residual {  /* the tuple of "residual", format "dd" */
    double change2;        /* squared change of this iteration */
    double error2;         /* squared distance from the answer */
} residual;

/* A handle on halo element `side`@`owner` (format "d"); NULL if it failed. */
static paths_handle *halo(paths_kernel_ctx *c, const char *side, int owner) {
    char name[64];
    snprintf(name, sizeof name, "halo.%s@%d", side, owner);
    return paths_acquire(c, name, "d");
}

typedef struct block {
    int64_t first, count; /* global index of the first point (1-based), and how many */
    double h;             /* grid spacing */
    double *u, *next;     /* count + 2 values: u[0] and u[count + 1] are the neighbours' edges */
} block;

/* One Jacobi sweep over the block; returns this block's part of the residual. */
static residual sweep(block *b) {
    residual mine = {0.0, 0.0};
    for (int64_t i = 1; i <= b->count; i++) {
        double x = (double)(b->first + i - 1) * b->h, value = (b->u[i - 1] + b->u[i + 1] + 2.0 * b->h * b->h) / 2.0;
        mine.change2 += (value - b->u[i]) * (value - b->u[i]);
        mine.error2 += (value - x * (1.0 - x)) * (value - x * (1.0 - x));
        b->next[i] = value;
    }
    double *swap = b->u;
    b->u = b->next;
    b->next = swap;
    return mine;
}

int jacobi(paths_kernel_ctx *c) {
    int64_t points = 16, max_iterations = 100000;
    double tolerance = 1e-8, timeout_s = 60.0;
    int rc = paths_arg_int(c, "points", &points);
    if (rc == PATHS_OK) rc = paths_arg_int(c, "max_iterations", &max_iterations);
    if (rc == PATHS_OK) rc = paths_arg_double(c, "tolerance", &tolerance);
    if (rc == PATHS_OK) rc = paths_arg_double(c, "timeout", &timeout_s);
    if (rc != PATHS_OK) return rc;
    int t = paths_thread(c), threads = paths_threads(c);
    if (points < threads)
        return paths_fail(c, PATHS_EINVAL, "jacobi: %lld points for %d threads: give each at least one",
                          (long long)points, threads);
    int64_t timeout_ns = (int64_t)(timeout_s * 1e9);
    block b = {t * points / threads + 1, (t + 1) * points / threads - t * points / threads, 1.0 / (double)(points + 1),
               NULL, NULL};
    b.u = calloc((size_t)b.count + 2, sizeof *b.u);
    b.next = calloc((size_t)b.count + 2, sizeof *b.next);
    paths_handle *sum = paths_acquire(c, "residual", "dd");
    /* My edges, and my neighbours' (none at the ends of the rod: u = 0 there). */
    paths_handle *my_left = t > 0 ? halo(c, "left", t) : NULL, *from_left = t > 0 ? halo(c, "right", t - 1) : NULL;
    paths_handle *my_right = t < threads - 1 ? halo(c, "right", t) : NULL;
    paths_handle *from_right = t < threads - 1 ? halo(c, "left", t + 1) : NULL;
    if (!b.u || !b.next) rc = paths_fail(c, PATHS_ENOMEM, "jacobi: no memory for %lld points", (long long)b.count);
    else if (!sum || (t > 0 && (!my_left || !from_left)) || (t < threads - 1 && (!my_right || !from_right)))
        rc = PATHS_EFAILED; /* paths_last_error says why */
    residual total = {INFINITY, INFINITY};
    int64_t iterations = 0;
    int64_t begin = paths_now_ns();
    while (rc == PATHS_OK && iterations < max_iterations && !(sqrt(total.change2) < tolerance)) {
        if (my_left) rc = paths_move(my_left, &b.u[1], timeout_ns);
        if (rc == PATHS_OK && my_right) rc = paths_move(my_right, &b.u[b.count], timeout_ns);
        if (rc == PATHS_OK && from_left) rc = paths_observe(from_left, &b.u[0], timeout_ns);
        if (rc == PATHS_OK && from_right) rc = paths_observe(from_right, &b.u[b.count + 1], timeout_ns);
        residual mine = sweep(&b);
        if (rc == PATHS_OK) rc = paths_move(sum, &mine, timeout_ns);
        if (rc == PATHS_OK) rc = paths_observe(sum, &total, timeout_ns);
        iterations++;
    }
    free(b.u);
    free(b.next);
    if (rc != PATHS_OK) return rc;
    if (t == 0) {
        paths_report(c, "iterations", (double)iterations);
        paths_report(c, "residual", sqrt(total.change2));
        paths_report(c, "rms_error", sqrt(total.error2 / (double)points));
        paths_report(c, "seconds", (double)(paths_now_ns() - begin) / 1e9);
    }
    if (!(sqrt(total.change2) < tolerance))
        return paths_fail(c, PATHS_EFAILED, "jacobi: residual %g after %lld iterations, not below %g",
                          sqrt(total.change2), (long long)iterations, tolerance);
    return PATHS_OK;
}
