/* paths_init.c — a program of its own on a map: paths_init starts the embedded Python, finds the
 * installed `paths` package next to this library, and lets paths.runtime read the program's
 * --paths-* options (the map, its thread and node, the hooks), which it takes out of argv. From
 * then on the program's paths_* calls with a NULL context go to that runtime; the GIL is free
 * while the program runs, taken only to acquire and release handles. A program that ends
 * without paths_finalize (returns from main, calls exit) is finalized on its way out, by an
 * exit handler that sees its exit status: one other than 0 is its failure, as is what it said
 * with paths_fail(NULL, ...), which the other ranks are told instead of being waited for (and
 * which makes an exit status of 0 one of 1). */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <dlfcn.h>
#include <libgen.h>
#include <limits.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kernel_run.h"
#include "paths.h"

static _Atomic int entered;    /* paths_init was called (and its arguments were those of main) */
static int initialized;
static int started_python;     /* paths_init started the interpreter: paths_finalize ends it */
static int ended_python;       /* ... and ended it: it cannot start again (its modules would not) */
static int exit_handled;       /* finalize_at_exit is registered (once per process) */
static int said_failure;       /* the program said it fails (paths_fail(NULL, ...)) when finalized */
static PyThreadState *program; /* the main thread's Python state while the program runs */

/* Ctrl-C stops the program as it would without Python: the interpreter is started without its
 * signal handlers, but its signal module, once imported, takes SIGINT (to raise KeyboardInterrupt,
 * which C code never sees) wherever the program left it at its default. So it is imported at
 * once, and SIGINT given back as the program had it. */
static int keep_programs_ctrl_c(const struct sigaction *programs) {
    PyObject *module = PyImport_ImportModule("signal");
    if (!module) return PATHS_EINVAL;
    Py_DECREF(module);
    return sigaction(SIGINT, programs, NULL) == 0 ? PATHS_OK : PATHS_EINVAL;
}

/* Prints the pending Python exception as one line, "call: message" (a ValueError says what to
 * fix; any other exception is named), and clears it. */
static int report_python_error(const char *call) {
    PyObject *type, *value, *traceback;
    PyErr_Fetch(&type, &value, &traceback);
    PyErr_NormalizeException(&type, &value, &traceback);
    PyObject *text = value ? PyObject_Str(value) : NULL;
    const char *message = text ? PyUnicode_AsUTF8(text) : NULL;
    int explained = type && PyErr_GivenExceptionMatches(type, PyExc_ValueError);
    fprintf(stderr, "%s: %s%s%s\n", call, explained || !type ? "" : ((PyTypeObject *)type)->tp_name,
            explained || !type ? "" : ": ", message ? message : "(no message)");
    PyErr_Clear();
    Py_XDECREF(text);
    Py_XDECREF(type);
    Py_XDECREF(value);
    Py_XDECREF(traceback);
    return PATHS_EINVAL;
}

/* The site folder that holds the package this library belongs to (<site>/paths/libpaths.so), or
 * "" when that cannot be told. */
static void package_site(char *site_dir, size_t size) {
    Dl_info info;
    char library[PATH_MAX];
    site_dir[0] = 0;
    if (!dladdr((void *)paths_init, &info) || !info.dli_fname) return;
    snprintf(library, sizeof library, "%s", info.dli_fname);
    snprintf(site_dir, size, "%s", dirname(dirname(library)));
}

/* The interpreter of the virtual environment the package is installed in (a folder above the
 * site folder with a pyvenv.cfg: <venv>/lib/pythonX.Y/site-packages), or "": Python started
 * from it finds its own standard library and the environment's packages, whichever python3
 * comes first on PATH (else the one it would look for). */
static void environment_python(const char *site_dir, char *python, size_t size) {
    char folder[PATH_MAX], probe[PATH_MAX + 32];
    python[0] = 0;
    snprintf(folder, sizeof folder, "%s", site_dir);
    for (int up = 0; up < 4 && folder[0] && strcmp(folder, "/") != 0; up++) {
        snprintf(probe, sizeof probe, "%s/pyvenv.cfg", folder);
        if (access(probe, R_OK) == 0) {
            snprintf(probe, sizeof probe, "%s/bin/python3", folder);
            if (access(probe, X_OK) == 0) snprintf(python, size, "%s", probe);
            return;
        }
        char *parent = dirname(folder); /* folder itself, cut, or a static "/" or "." */
        if (parent != folder) snprintf(folder, sizeof folder, "%s", parent);
    }
}

/* The package's site folder, added the way site-packages is, so that an editable install's
 * finder works too. */
static int add_package_site(const char *site_dir) {
    if (!site_dir[0]) {
        fprintf(stderr, "paths_init: cannot tell where libpaths is installed\n");
        return PATHS_EINVAL;
    }
    PyObject *done = NULL, *site = PyImport_ImportModule("site");
    if (site) done = PyObject_CallMethod(site, "addsitedir", "s", site_dir);
    Py_XDECREF(site);
    if (!done) return report_python_error("paths_init");
    Py_DECREF(done);
    return PATHS_OK;
}

/* paths.runtime.process_context.start_program(argv[1:]) returns the indices of the arguments to keep. */
static int start_runtime(int *argc, char ***argv) {
    PyObject *arguments = PyList_New(0);
    for (int i = 1; arguments && i < *argc; i++) {
        PyObject *text = PyUnicode_DecodeFSDefault((*argv)[i]);
        if (!text || PyList_Append(arguments, text) != 0) Py_CLEAR(arguments);
        Py_XDECREF(text);
    }
    PyObject *runtime = arguments ? PyImport_ImportModule("paths.runtime.process_context") : NULL;
    PyObject *kept = runtime ? PyObject_CallMethod(runtime, "start_program", "O", arguments) : NULL;
    Py_XDECREF(runtime);
    Py_XDECREF(arguments);
    if (!kept) return report_python_error("paths_init");
    int count = 1;
    for (Py_ssize_t i = 0; i < PyList_Size(kept); i++) {
        long index = PyLong_AsLong(PyList_GetItem(kept, i));
        if (index >= 1 && index < *argc) (*argv)[count++] = (*argv)[index];
    }
    Py_DECREF(kept);
    (*argv)[count] = NULL;
    *argc = count;
    return PATHS_OK;
}

/* Ends the interpreter if paths_init started it. */
static void stop_python(void) {
    if (!started_python) return;
    PyEval_RestoreThread(program);
    program = NULL;
    Py_FinalizeEx();
    started_python = 0;
    ended_python = 1;
}

/* end_program(failure) of paths.runtime (with other ranks: the last barrier, or, with a failure
 * of one line, telling them why instead), then the end of the interpreter if paths_init started it.
 * What the program said with paths_fail(NULL, ...) is its failure first, and is said on stderr
 * too (nothing else says it: a launcher that stops the other ranks at once shows only the exit). */
static void finalize(const char *failure) {
    if (!initialized) return;
    initialized = 0;
    const char *said = ps_kernel_program_failure();
    said_failure = said != NULL;
    if (said) fprintf(stderr, "paths: rank %d of %d fails: %s\n", paths_thread(NULL), paths_threads(NULL), said);
    PyGILState_STATE gil = PyGILState_Ensure();
    PyObject *runtime = PyImport_ImportModule("paths.runtime.process_context");
    const char *why = said ? said : failure; /* a program's own text: bytes not UTF-8 shown as \xNN */
    PyObject *text = PyUnicode_DecodeUTF8(why, (Py_ssize_t)strlen(why), "backslashreplace");
    PyObject *done = runtime && text ? PyObject_CallMethod(runtime, "end_program", "O", text) : NULL;
    Py_XDECREF(text);
    if (!done) report_python_error("paths_finalize");
    Py_XDECREF(done);
    Py_XDECREF(runtime);
    PyGILState_Release(gil);
    stop_python();
}

/* The program ends, with the status it gave exit (or main returned): finalized here if it was
 * not (nor Python ended by the program itself). One that said it fails and would exit 0 exits 1,
 * so that its launcher, and whoever runs it, sees the failure it said: exit again, which in glibc
 * runs the exit handlers left (the program's own, registered before paths_init) and ends the
 * process with the new status. */
static void finalize_at_exit(int status, void *unused) {
    (void)unused;
    if (initialized && Py_IsInitialized()) {
        char failure[64] = "";
        if (status & 0xff) snprintf(failure, sizeof failure, "exit status %d without paths_finalize", status & 0xff);
        finalize(failure);
    }
    if (said_failure && (status & 0xff) == 0) exit(1);
}

/* paths_init was called before in this process: refused, saying when. */
static int called_again(void) {
    fprintf(stderr, "paths_init: called %s: a process starts PATHS once (as MPI_Init)\n",
            initialized || !ended_python ? "twice" : "again after paths_finalize or a failed paths_init");
    return PATHS_EINVAL;
}

int paths_init(int *argc, char ***argv) {
    if (!argc || !argv || *argc < 1 || !*argv) {
        fprintf(stderr, "paths_init: expected &argc and &argv of main\n");
        return PATHS_EINVAL;
    }
    if (atomic_load(&entered)) return called_again();
    if (ps_kernel_runs_here()) {
        fprintf(stderr, "paths_init: called where kernels run: a kernel has its run's context already "
                        "(paths_acquire(c, ...)); paths_init starts a program of its own\n");
        return PATHS_EINVAL;
    }
    if (Py_IsInitialized()) { /* a Python program (the paths command too): it has paths itself */
        fprintf(stderr, "paths_init: called in a process that runs Python already: paths_init starts a C "
                        "program of its own; from Python, import paths\n");
        return PATHS_EINVAL;
    }
    if (atomic_exchange(&entered, 1)) return called_again(); /* by another thread just now */
    char site_dir[PATH_MAX];
    package_site(site_dir, sizeof site_dir);
    struct sigaction programs_ctrl_c;
    sigaction(SIGINT, NULL, &programs_ctrl_c);
    char python[PATH_MAX];
    PyConfig config;
    PyConfig_InitPythonConfig(&config);
    config.install_signal_handlers = 0; /* see keep_programs_ctrl_c */
    config.parse_argv = 0;
    environment_python(site_dir, python, sizeof python);
    PyStatus status = python[0] ? PyConfig_SetBytesString(&config, &config.executable, python) : PyStatus_Ok();
    if (!PyStatus_Exception(status)) status = Py_InitializeFromConfig(&config);
    PyConfig_Clear(&config);
    if (PyStatus_Exception(status)) {
        fprintf(stderr, "paths_init: cannot start Python: %s\n", status.err_msg ? status.err_msg : "?");
        return PATHS_EINVAL;
    }
    started_python = 1;
    PyGILState_STATE gil = PyGILState_Ensure();
    int rc = keep_programs_ctrl_c(&programs_ctrl_c) != PATHS_OK ? report_python_error("paths_init") : PATHS_OK;
    if (rc == PATHS_OK) rc = add_package_site(site_dir);
    if (rc == PATHS_OK) rc = start_runtime(argc, argv);
    PyGILState_Release(gil);
    program = PyEval_SaveThread();
    initialized = rc == PATHS_OK;
    if (!initialized) stop_python();
    if (initialized && !exit_handled) exit_handled = on_exit(finalize_at_exit, NULL) == 0;
    return rc;
}

void paths_finalize(void) { finalize(""); }
