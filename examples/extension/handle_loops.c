/* handle_loops.c — a Python extension module of your own that runs C loops on PATHS handles
 * built in Python (the paper's way: Python makes the paths, C code works on them). A Handle gives
 * its C side as a capsule, `handle.capsule()`, named "paths_handle"; paths.h works on it.
 *
 *   cc -shared -fPIC -O2 $(python -m paths config --cflags) handle_loops.c \
 *      -o handle_loops$(python -c 'import sysconfig; print(sysconfig.get_config_var("EXT_SUFFIX"))')
 *
 *   import paths, handle_loops
 *   h = paths.build_path(paths.make_path(paths.stage("core", name="N", format="q")))
 *   handle_loops.move_range(h.capsule(), 1000)      # moves 0 .. 999, in C, the GIL released
 *   handle_loops.observe_sum(h.capsule(), 1000)     # -> 499500
 *
 * `import paths` comes first: it makes the paths_* functions visible to this module.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <paths.h>
#include <string.h>

/* The arguments (capsule, n, timeout=10.0): the handle in the capsule (a "q" element's), n, and
 * the timeout in nanoseconds; NULL with a Python error set for anything else. */
static paths_handle *arguments(PyObject *args, long long *n, int64_t *timeout_ns) {
    PyObject *capsule;
    double timeout = 10.0;
    if (!PyArg_ParseTuple(args, "OL|d", &capsule, n, &timeout)) return NULL;
    paths_handle *h = PyCapsule_GetPointer(capsule, "paths_handle");
    if (h && strcmp(paths_format(h), "q") != 0) {
        PyErr_Format(PyExc_ValueError, "expected a handle on a 'q' element, got format '%s'", paths_format(h));
        return NULL;
    }
    *timeout_ns = (int64_t)(timeout * 1e9);
    return h;
}

static PyObject *fail(int status) {
    PyErr_Format(status == PATHS_ETIMEDOUT ? PyExc_TimeoutError : PyExc_RuntimeError, "%s", paths_strerror(status));
    return NULL;
}

/* move_range(capsule, n, timeout=10.0): moves 0 .. n-1. */
static PyObject *move_range(PyObject *self, PyObject *args) {
    long long n;
    int64_t timeout_ns;
    paths_handle *h = arguments(args, &n, &timeout_ns);
    if (!h) return NULL;
    int rc = PATHS_OK;
    Py_BEGIN_ALLOW_THREADS
    for (int64_t i = 0; i < n && rc == PATHS_OK; i++) rc = paths_move(h, &i, timeout_ns);
    Py_END_ALLOW_THREADS
    if (rc != PATHS_OK) return fail(rc);
    Py_RETURN_NONE;
}

/* observe_sum(capsule, n, timeout=10.0): the sum of the next n tuples. */
static PyObject *observe_sum(PyObject *self, PyObject *args) {
    long long n;
    int64_t timeout_ns, sum = 0, value = 0;
    paths_handle *h = arguments(args, &n, &timeout_ns);
    if (!h) return NULL;
    int rc = PATHS_OK;
    Py_BEGIN_ALLOW_THREADS
    for (int64_t i = 0; i < n && rc == PATHS_OK; i++) {
        rc = paths_observe(h, &value, timeout_ns);
        sum += value;
    }
    Py_END_ALLOW_THREADS
    return rc == PATHS_OK ? PyLong_FromLongLong(sum) : fail(rc);
}

static PyMethodDef METHODS[] = {
    {"move_range", move_range, METH_VARARGS, "move_range(capsule, n, timeout=10.0): move 0 .. n-1 from C."},
    {"observe_sum", observe_sum, METH_VARARGS, "observe_sum(capsule, n, timeout=10.0): the sum of the next n tuples."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef MODULE = {PyModuleDef_HEAD_INIT, "handle_loops", "C loops on PATHS handles.", -1, METHODS};

PyMODINIT_FUNC PyInit_handle_loops(void) { return PyModule_Create(&MODULE); }
