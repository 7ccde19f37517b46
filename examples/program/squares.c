/* squares.c — a program of its own (a main, not a kernel) on a map: paths_init reads its
 * --paths-* options, and its paths_* calls pass NULL as the context.
 *
 *   cc squares.c $(python -m paths config --cflags --libs) -o squares
 *   ./squares 1000 --paths-map local --paths-sum TOTAL
 *
 * It moves the squares of 0 .. N-1 into element "squares", reads them back and adds them, then
 * contributes the sum to the sum element TOTAL (a run of one thread here) and prints
 *   squares: node localhost, thread 0 of 1, sum 332833500, total 332833500
 * As ranks of `paths launch`, every rank moves into the one element "squares" and reads the next
 * N tuples of its one history, whoever moved them: a rank's sum is of those, and the total, of
 * every square moved.
 * It exits 1 when a call fails (saying which and why: paths_fail tells the other ranks too, so
 * that paths_finalize waits for none of them), 2 for bad options.
 */
#include <paths.h>
#include <stdio.h>
#include <stdlib.h>

/* Says which call failed and why (a handle's stages explain what its status cannot), then ends. */
static int failed(const char *call, int status, const paths_handle *h) {
    paths_fail(NULL, status, "squares: %s: %s %s", call, paths_strerror(status),
               h ? paths_handle_error(h) : paths_last_error(NULL));
    fprintf(stderr, "%s\n", paths_last_error(NULL));
    paths_finalize();
    return 1;
}

int main(int argc, char **argv) {
    if (paths_init(&argc, &argv) != PATHS_OK) return 2; /* it said why */
    long long n = argc == 2 ? atoll(argv[1]) : 0;
    if (n <= 0) {
        fprintf(stderr, "usage: squares N [--paths-map MAP] [--paths-sum TOTAL] ...\n");
        paths_finalize();
        return 2;
    }
    paths_handle *squares = paths_acquire(NULL, "squares", "q");
    paths_handle *total = paths_acquire(NULL, "TOTAL", "q");
    if (!squares || !total) return failed("paths_acquire", PATHS_EFAILED, NULL);
    int64_t sum = 0, value = 0, all = 0;
    for (int64_t i = 0; i < n; i++) {
        int64_t square = i * i;
        int rc = paths_move(squares, &square, PATHS_FOREVER);
        if (rc != PATHS_OK) return failed("paths_move", rc, squares);
    }
    for (int64_t i = 0; i < n; i++) {
        int rc = paths_observe(squares, &value, 10 * 1000000000LL);
        if (rc != PATHS_OK) return failed("paths_observe", rc, squares);
        sum += value;
    }
    int rc = paths_move(total, &sum, PATHS_FOREVER);
    if (rc == PATHS_OK) rc = paths_observe(total, &all, 10 * 1000000000LL);
    if (rc != PATHS_OK) return failed("the sum TOTAL", rc, total);
    printf("squares: node %s, thread %d of %d, sum %lld, total %lld\n", paths_node(NULL), paths_thread(NULL),
           paths_threads(NULL), (long long)sum, (long long)all);
    paths_release(NULL, squares);
    paths_release(NULL, total);
    paths_finalize();
    return 0;
}
