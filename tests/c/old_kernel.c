/* old_kernel.c — a kernel compiled against another version of paths.h than this PATHS has, as
 * a stale build would be: the loader must refuse it, saying so. */
typedef struct paths_kernel_ctx paths_kernel_ctx;

__attribute__((visibility("default"))) const int paths_kernel_api_version = 0;

int stale(paths_kernel_ctx *c) {
    (void)c;
    return 0;
}
