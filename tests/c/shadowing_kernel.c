/* shadowing_kernel.c — a kernel with a function of its own named as one of libpaths' internal
 * ones: refused at load, not bound to libpaths' function. */
#include <paths.h>

int ps_deadline(int x);
int ps_deadline(int x) { return x + 1000; }

int shadowing(paths_kernel_ctx *c) {
    int r = ps_deadline(1);
    return r == 1001 ? PATHS_OK : paths_fail(c, PATHS_EFAILED, "ps_deadline(1) returned %d", r);
}
