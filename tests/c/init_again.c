/* init_again.c — a program that calls paths_init twice, and again after paths_finalize: each
 * refused in one line (exit 3), the first run's work done. */
#include <paths.h>
#include <stdio.h>

int main(int argc, char **argv) {
    if (paths_init(&argc, &argv) != PATHS_OK || paths_init(&argc, &argv) != PATHS_EINVAL) return 2;
    paths_handle *h = paths_acquire(NULL, "E", "q");
    int64_t value = 5, seen = 0;
    if (!h || paths_move(h, &value, PATHS_FOREVER) != PATHS_OK || paths_observe(h, &seen, PATHS_FOREVER) != PATHS_OK)
        return 1;
    paths_release(NULL, h);
    paths_finalize();
    printf("first run saw %lld\n", (long long)seen);
    return paths_init(&argc, &argv) == PATHS_EINVAL ? 3 : 4;
}
