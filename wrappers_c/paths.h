/* paths.h — the public C API of PATHS: write a kernel once, run it on any map.
 *
 * A kernel is a function `int NAME(paths_kernel_ctx *c)` in a shared library. `paths run
 * FILE.so:NAME` runs it once per thread of the run, on the nodes the map places the threads on,
 * with no Python on its path. It gets handles on elements with paths_acquire(), which asks the
 * process's acquire hook (Python, replaceable) for the path from this thread to the element and
 * builds it; from then on every operation is a plain C call through the path's stages. It
 * returns PATHS_OK or a status, which the run reports with the thread that returned it (a
 * thread it ends otherwise, with pthread_exit, fails, saying so; the run's threads cannot be
 * cancelled).
 *
 *     #include <paths.h>
 *     PATHS_SUMS(count, "TOTAL");                              // TOTAL is a sum (see below)
 *     int count(paths_kernel_ctx *c) {
 *         paths_handle *sum = paths_acquire(c, "TOTAL", "q");
 *         if (!sum) return PATHS_EFAILED;                      // why: paths_last_error(c)
 *         int64_t mine = paths_thread(c), total = 0;
 *         int rc = paths_move(sum, &mine, PATHS_FOREVER);
 *         if (rc == PATHS_OK) rc = paths_observe(sum, &total, PATHS_FOREVER);
 *         if (rc == PATHS_OK && paths_thread(c) == 0) paths_report(c, "total", (double)total);
 *         return rc;
 *     }
 *
 *     cc -shared -fPIC -O2 -I"$(python -c 'import paths; print(paths.get_include())')" \
 *        count.c -o libcount.so
 *     paths run ./libcount.so:count --map paper-4w --threads 1-8
 *
 * No -l flag is needed: the paths_* functions live in the library the `paths` package ships
 * (libpaths.so, next to its Python module), which the package makes globally visible before it
 * loads a kernel, so a kernel's references resolve when it is loaded. A program of its own
 * (not a kernel) links that library and embeds Python: see paths_init below.
 *
 * Tuples. An element holds tuples of one format, a Python `struct` format string with native
 * alignment: the bytes are those of the C struct with the same fields in the same order.
 *
 *     format "q"    int64_t                                  (8 bytes)
 *     format "qd"   struct { int64_t id; double value; }     (16 bytes)
 *     format "id"   struct { int32_t n; double x; }          (16 bytes: 4 of padding after n)
 *     format "16s"  char[16]                                 (16 bytes)
 *
 * paths_move copies paths_tuple_size(h) bytes from `tuple`; paths_observe writes as many to
 * `out`. A sum element (a reduce-sum tree) adds tuples field by field.
 *
 * Threads. A handle is one caller's path: use it from one thread at a time. A context belongs to
 * its kernel thread. Every call that waits takes a timeout in nanoseconds (PATHS_FOREVER: no
 * limit) and returns PATHS_ETIMEDOUT when it passes; any other negative timeout is refused with
 * PATHS_EINVAL, nothing done, and so is a NULL handle or a NULL buffer for tuples or results.
 */
#ifndef PATHS_H
#define PATHS_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The version of this API. A kernel records the version it was compiled against (below); the
 * loader refuses a kernel compiled against another one. */
#define PATHS_API_VERSION 1

typedef struct paths_handle paths_handle;         /* one caller's path; one thread at a time */
typedef struct paths_kernel_ctx paths_kernel_ctx; /* what a kernel thread is given */

/* Statuses. The values below PATHS_EFAILED are the PastSet core's own. */
#define PATHS_OK 0
#define PATHS_ETIMEDOUT 1   /* a timeout passed */
#define PATHS_EAXED 2       /* the tuple was freed by axe */
#define PATHS_EINDEX 3      /* a bad index */
#define PATHS_EFORMAT 4     /* a bad format string */
#define PATHS_EMISMATCH 5   /* the element exists with another format */
#define PATHS_ENOMEM 6      /* out of memory */
#define PATHS_EINVAL 7      /* a bad argument */
#define PATHS_ECLOSED 8     /* the element or a stage is shutting down */
#define PATHS_ESTATE 9      /* the call does not fit the stage's state (a sum's round order) */
#define PATHS_ENOTSUP 10    /* a stage on the path does not support the call */
#define PATHS_EREMOTE 11    /* a server on the path failed or is gone */
#define PATHS_EINTR 12      /* interrupted */
#define PATHS_EFAILED 64    /* the kernel's own failure: a wrong result, a failed paths_acquire */

#define PATHS_FOREVER (-1)                        /* a timeout that never expires */

/* ---- operations on a handle: plain C calls through the path's stages ---------------------- */

int paths_move(paths_handle *h, const void *tuple, int64_t timeout_ns);     /* append a tuple */
/* Appends the n tuples at `tuples` (n * paths_tuple_size(h) bytes), in order, as one operation:
 * through a remote stage one frame and one acknowledgement per 16 KiB of tuples, through a sum n
 * contributions of consecutive rounds (refused with PATHS_ESTATE, nothing moved, when they do not
 * all fit in the caller's 4 rounds ahead). Its effect is that of n paths_move calls; a call that
 * fails (a timeout, say at a full delta bound) may have moved a first part of them. n == 0 moves
 * nothing. */
int paths_move_many(paths_handle *h, const void *tuples, size_t n, int64_t timeout_ns);
int paths_observe(paths_handle *h, void *out, int64_t timeout_ns);          /* the next unread one */
int paths_observe_at(paths_handle *h, int64_t index, void *out, int64_t timeout_ns); /* tuple `index` */
/* Reads tuples index, index+1, ... as one operation (Aurora's bulk load; through a remote stage
 * one request, its answer streamed): it waits until tuple `index` exists, then copies every one
 * of the next n that exists at that moment to `out` (room for n tuples) and sets *got to how many
 * it copied (1 to n; 0 on failure). n runs from 1 to paths_range_max(h), 4 MiB of tuples; else
 * PATHS_EINVAL, nothing read. An index before the axe point: PATHS_EAXED. */
int paths_observe_range(paths_handle *h, int64_t index, size_t n, void *out, size_t *got, int64_t timeout_ns);
size_t paths_range_max(const paths_handle *h);                                /* 0 for NULL */
/* A fence over n handles (ARMI's rmi_fence, the end of a write scope): whatever a stage on their
 * paths holds back (a batch's buffered moves) goes down, and it returns once every move made
 * through them before it has been applied at its element. A move into a sum counts as applied
 * once its round's total has come back: a fence through a sum tree waits for the other
 * contributors' moves of that round too (so every process fences, as with rmi_fence). It fails
 * with the first failure on the way (a batch's failed send: see docs/semantics.md). */
int paths_fence(paths_handle *const *handles, size_t n, int64_t timeout_ns);
int paths_first(paths_handle *h, int64_t *out);   /* index of the next unread tuple */
int paths_last(paths_handle *h, int64_t *out);    /* number of tuples moved */
int paths_axe(paths_handle *h, int64_t index);    /* free the tuples before index */
size_t paths_tuple_size(const paths_handle *h);
const char *paths_format(const paths_handle *h);
const char *paths_strerror(int status);           /* "PATHS_ETIMEDOUT: a timeout passed", ... */
/* What a status alone cannot say about the calling thread's last operation, failed, when it was
 * on h (or a fence that failed at h), as one line: what a stage of h's path explained while it ran
 * (which server did not answer; a batch's failed send and how many of its moves took effect); ""
 * when none did, or h is NULL. Asked of another handle: the last failure a stage of its path
 * explained. Stages are shared by the handles merged into them, so where the thread's own call
 * explained nothing, the line may be another handle's. It is the calling thread's copy, kept
 * until the thread calls paths_handle_error again. */
const char *paths_handle_error(const paths_handle *h);

/* ---- the kernel's context ------------------------------------------------------------------ */

int paths_thread(const paths_kernel_ctx *c);       /* 0 .. threads-1 over the whole run */
int paths_threads(const paths_kernel_ctx *c);      /* threads in the whole run */
const char *paths_node(const paths_kernel_ctx *c); /* this thread's node, from the map */
const char *paths_arg(const paths_kernel_ctx *c, const char *key); /* --arg key=value; NULL if absent */
/* --arg key=value as a number: *out is left as it is when the key is absent; PATHS_EINVAL (and
 * paths_last_error says which argument) when the value is not a whole number / a number. */
int paths_arg_int(paths_kernel_ctx *c, const char *key, int64_t *out);
int paths_arg_double(paths_kernel_ctx *c, const char *key, double *out);

/* A handle on (element, format) for this thread: the acquire hook gives the path, which is built
 * (and merged with the paths of other threads) here; the GIL is taken for that only. NULL on
 * failure: paths_last_error(c) says why (the hook's exception and where it was raised, a server
 * that did not answer, an element acquired with two formats, a sum this thread holds a handle
 * on already). The run releases every handle a kernel still holds when the kernel returns. */
paths_handle *paths_acquire(paths_kernel_ctx *c, const char *element, const char *format);
/* Releases a handle this thread acquired: what its stages hold back for the thread (a batch's
 * moves) goes down first (waiting at most 1 s), as it does for the handles a kernel holds as it
 * returns; a send that fails fails the thread, saying why. A released handle is not used again
 * (as freed memory is not). Given any other handle (one released already), it does nothing and,
 * as it returns no status, fails the thread: the run ends with PATHS_EINVAL and this call's
 * reason, though the kernel returns PATHS_OK. A refused paths_report does the same. */
void paths_release(paths_kernel_ctx *c, paths_handle *h);
/* Why the last failed paths_acquire, paths_barrier or paths_arg_* of this context failed (or
 * what paths_fail said), as one line; "" if nothing failed yet (a paths_acquire that works
 * clears it). What paths_fail said last stays the thread's reason for the run, and for
 * paths_finalize, whatever comes after it. */
const char *paths_last_error(const paths_kernel_ctx *c);

/* Says why the kernel fails, as one line (printf-style), for the run's error message; returns
 * `status`:  return paths_fail(c, PATHS_EINVAL, "--arg rounds: expected > 0, got %lld", r);
 * An argument may be paths_last_error(c). A program of its own (NULL context) that calls it has
 * failed: paths_finalize then prints this line on stderr (`paths: rank R of N fails: ...`), tells
 * the other ranks, and waits for none (see below). */
int paths_fail(paths_kernel_ctx *c, int status, const char *format, ...)
    __attribute__((format(printf, 3, 4)));

/* Waits until every thread of the run, on every node, has called it as often. */
int paths_barrier(paths_kernel_ctx *c, int64_t timeout_ns);  /* every thread of the run */
/* A result column (a name of letters, digits and _ . - / %, at most 63, and none of the columns
 * `paths run` writes itself: kernel, map, policy, max_fanin, tree_form, threads, nodes, repeat; a
 * thread reports at most 32): the run's value of `name` is the mean over the threads that reported
 * it (the last report of a thread counts); `paths run` shows min/avg/max per thread count. */
void paths_report(paths_kernel_ctx *c, const char *name, double value); /* a result column */
int64_t paths_now_ns(void);                        /* a monotonic clock */

/* ---- a program of its own ------------------------------------------------------------------- *
 * A program that is not a kernel (a main of its own) passes NULL as the context: it is one
 * thread of a run (call from one thread at a time), on the node where the map's placement puts
 * that thread. paths_init starts the embedded Python, loads the map and the hooks, and takes its
 * own options out of argv (`--paths-X VALUE` or `--paths-X=VALUE`, up to a `--`, which stays with
 * what follows it: the program's own):
 *     --paths-map MAP       a YAML file or a shipped map's name (default: PATHS_MAP, else local)
 *     --paths-policy P      the placement policy (default: PATHS_POLICY, else the map's)
 *     --paths-sum NAME      an element to reduce as a sum (repeatable; default: PATHS_SUM, a,b)
 *     --paths-arg KEY=VALUE what paths_arg(NULL, KEY) returns (repeatable)
 *     --paths-acquire pkg.mod:func, --paths-release pkg.mod:func   the hooks (PATHS_ACQUIRE, ...)
 *     --paths-thread T      this program's thread in the run, --paths-threads N its size: the
 *                           program says its rank itself, and its paths stay in this process
 * Without --paths-thread the program is a rank of `paths launch`, srun or mpirun (rank 0 of 1
 * under none): its rank, the size and the node servers come from the launcher's environment
 * (docs/launch.md), and paths_finalize waits for the other ranks. It returns PATHS_OK, or a
 * status after printing one line that says what to fix. A program that fails waits for no
 * rank but tells them, so that none waits for it (its part of a sum) and its launcher ends the
 * run at once: one that said so with paths_fail(NULL, ...) before paths_finalize, or that ends
 * without paths_finalize (returns from main, calls exit) with a status other than 0 (it is
 * finalized on its way out; with status 0 as paths_finalize would). One that said it fails and
 * then exits 0 exits 1 (status 1 is what its launcher reports). Signals stay the program's:
 * Ctrl-C ends it as it would without PATHS (its own SIGINT handler, if any, runs; else it is
 * killed), in paths_init as in any call; a call that waits goes on waiting after such a handler
 * ran (until its timeout: a program that stops on a flag its handler sets waits in timeouts it
 * can afford, and looks at the flag between them). A process calls paths_init
 * once, as MPI_Init: not again after paths_finalize, and never in a kernel or in a process that
 * runs Python (PATHS_EINVAL: it has PATHS already). Compile and link with
 * `cc prog.c $(python -m paths config --cflags --libs)`. */
int paths_init(int *argc, char ***argv);
void paths_finalize(void);

/* The elements a kernel reduces as sums, declared in its library, so that `paths run` plans
 * their reduction trees with no --sum and no map entry:   PATHS_SUMS(count, "TOTAL");   */
#ifdef __cplusplus
#define PATHS_EXPORT extern "C" __attribute__((visibility("default")))
#else
#define PATHS_EXPORT extern __attribute__((visibility("default")))
#endif
#define PATHS_SUMS(kernel, ...)                                  \
    PATHS_EXPORT const char *const paths_sums_##kernel[];        \
    const char *const paths_sums_##kernel[] = {__VA_ARGS__, NULL}

/* The API version a kernel library was compiled against, checked when it is loaded. One weak
 * definition per translation unit that includes this header. */
#ifndef PATHS_BUILDING_LIBRARY
extern __attribute__((weak, visibility("default"))) const int paths_kernel_api_version;
const int paths_kernel_api_version = PATHS_API_VERSION;
#endif

#ifdef __cplusplus
}
#endif

#endif
