/* rank_program.c — a program of its own (a main) that tests/test_kernels.py runs as ranks under
 * mpirun's variables, as tests/rank_app.py is run in Python:
 *     rank_program sum           every rank adds rank+1 into the sum TOTAL, prints
 *                                `rank R total T` (waiting at most 60 s for it), calls
 *                                paths_finalize and returns 0
 *     rank_program unfinalized   as sum, but returns 0 without paths_finalize
 *     rank_program fail R S      as sum, but rank R returns S without paths_finalize before it
 *                                adds its part (the others wait for it)
 *     rank_program said R [bytes] as sum, but rank R says `rank R gives up` with paths_fail (which
 *                                paths_finalize prints; with `bytes`, a byte 0xff that is no UTF-8
 *                                follows), calls paths_finalize and returns 1 before its part
 *     rank_program said_acquired R  as said, but rank R then acquires the element AFTER (which
 *                                works) before paths_finalize: what paths_fail said stays
 *     rank_program said_then_0 R  as said, but rank R returns 0 (which exits 1 all the same); an
 *                                exit handler registered before paths_init says `goodbye` on stderr
 *     rank_program said_unfinalized R  as said_then_0, but without paths_finalize
 *     rank_program wait          prints `waiting`, then observes the element NEVER, which nobody
 *                                moves into, with no timeout: until Ctrl-C
 */
#include <paths.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void goodbye(void) { fprintf(stderr, "goodbye\n"); }

int main(int argc, char **argv) {
    if (argc > 1 && strcmp(argv[1], "said_then_0") == 0) atexit(goodbye);
    if (paths_init(&argc, &argv) != PATHS_OK) return 2; /* it said why */
    const char *what = argc > 1 ? argv[1] : "";
    int rank = paths_thread(NULL);
    if (strcmp(what, "fail") == 0 && argc == 4 && rank == atoi(argv[2])) return atoi(argv[3]);
    int said_acquired = strcmp(what, "said_acquired") == 0, unfinalized = strcmp(what, "said_unfinalized") == 0;
    int then_0 = unfinalized || strcmp(what, "said_then_0") == 0;
    if ((strcmp(what, "said") == 0 || said_acquired || then_0) && argc >= 3 && rank == atoi(argv[2])) {
        paths_fail(NULL, PATHS_EFAILED, "rank %d gives up%s", rank, argc == 4 ? " \xff" : "");
        if (said_acquired && !paths_acquire(NULL, "AFTER", "q")) return 3;
        if (!unfinalized) paths_finalize();
        return then_0 ? 0 : 1;
    }
    if (strcmp(what, "wait") == 0) {
        paths_handle *never = paths_acquire(NULL, "NEVER", "q");
        int64_t value;
        printf("waiting\n");
        fflush(stdout);
        return never && paths_observe(never, &value, PATHS_FOREVER) == PATHS_OK ? 0 : 1;
    }
    paths_handle *total = paths_acquire(NULL, "TOTAL", "q");
    int64_t mine = rank + 1, all = 0;
    int rc = total ? paths_move(total, &mine, PATHS_FOREVER) : PATHS_EFAILED;
    if (rc == PATHS_OK) rc = paths_observe(total, &all, 60 * 1000000000LL);
    if (rc != PATHS_OK) {
        fprintf(stderr, "rank %d: the sum TOTAL: %s %s\n", rank, paths_strerror(rc), paths_last_error(NULL));
        return 1;
    }
    printf("rank %d total %lld\n", rank, (long long)all);
    fflush(stdout);
    if (strcmp(what, "unfinalized") != 0) paths_finalize();
    return 0;
}
