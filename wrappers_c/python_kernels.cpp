// python_kernels.cpp — kernels as Python runs them: a C kernel loaded from a shared library (its
// API version checked; loaded in a child process first), or a Python function, run on one C
// thread per thread of a run, whose paths_acquire and paths_release go to Python hooks; the
// context of a program of its own.

#include <dlfcn.h>
#include <fcntl.h>
#include <link.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "python_handle.hpp"
#include "python_module.hpp"
#include "shadowed_names.hpp"

extern "C" {
#include "kernel_run.h"
#include "paths.h"

}

namespace paths_native {

namespace {

// A C kernel: `int NAME(paths_kernel_ctx *)` in a shared library compiled against paths.h, and
// the elements it declares as sums (PATHS_SUMS).
struct CKernel {
    std::string path, symbol;
    paths_kernel_fn function;
    std::vector<std::string> sums;
};

// The libraries of kernels and programs find paths_* in libpaths when they are loaded: it is made
// part of the global scope (the interpreter loaded it as this module's dependency, locally).
void export_public_api() {
    Dl_info info;
    if (!dladdr(reinterpret_cast<void *>(&paths_move), &info) || !info.dli_fname ||
        !dlopen(info.dli_fname, RTLD_NOW | RTLD_GLOBAL | RTLD_NOLOAD))
        throw std::runtime_error("paths: cannot make libpaths (the C API) visible to kernels");
}

// A child process of this one that loads a library, and is ended and reaped once given up. It
// leads a process group of its own, which goes with it (what a constructor forked off too), and
// writes nothing (this process loads the library next, and its constructors print then).
class LoadingChild {
public:
    // The child has loaded `path` when it writes a byte into the pipe, then ends.
    explicit LoadingChild(const std::string &path) {
        int ends[2];
        if (pipe2(ends, O_CLOEXEC) != 0) throw py::value_error(std::string("cannot load it: pipe: ") + strerror(errno));
        pid_t parent = getpid();
        pid_ = fork();
        if (pid_ == 0) {  // no Python here: the loading, then _exit
            prctl(PR_SET_PDEATHSIG, SIGKILL);
            if (getppid() != parent) _exit(1);
            signal(SIGINT, SIG_IGN);  // Ctrl-C is the parent's to answer: it ends this child
            setpgid(0, 0);
            int nowhere = open("/dev/null", O_WRONLY);
            if (nowhere >= 0) dup2(nowhere, 1), dup2(nowhere, 2);
            dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
            char loaded = 1;
            _exit(write(ends[1], &loaded, 1) == 1 ? 0 : 1);
        }
        if (pid_ > 0) setpgid(pid_, pid_);  // as the child does: whichever comes first
        close(ends[1]);
        pipe_ = ends[0];
        if (pid_ < 0) {
            close(pipe_);
            throw py::value_error(std::string("cannot load it: fork: ") + strerror(errno));
        }
    }
    ~LoadingChild() {
        if (pid_ > 0) kill(-pid_, SIGKILL);  // its group: the child, and what its constructors forked
        if (!reaped_) {
            kill(pid_, SIGKILL);
            waitpid(pid_, nullptr, 0);
        }
        close(pipe_);
    }
    LoadingChild(const LoadingChild &) = delete;
    LoadingChild &operator=(const LoadingChild &) = delete;

    // Waits up to slice_ns for the child to end: PS_OK once it has (reaped), else PS_ETIMEDOUT.
    int wait(int64_t slice_ns) {
        struct pollfd ready = {pipe_, POLLIN, 0};
        int ms = static_cast<int>((slice_ns + 999999) / 1000000);
        if (poll(&ready, 1, ms) == 1 && read(pipe_, &loaded_, 1) >= 0)  // the byte, or the end of the pipe
            reaped_ = waitpid(pid_, &status_, 0) == pid_;  // the child has ended or is ending
        else
            reaped_ = waitpid(pid_, &status_, WNOHANG) == pid_;
        return reaped_ ? PS_OK : PS_ETIMEDOUT;
    }
    bool loaded() const { return loaded_; }
    int status() const { return status_; }

private:
    pid_t pid_ = -1;
    int pipe_ = -1;
    char loaded_ = 0;
    int status_ = 0;
    bool reaped_ = false;
};

// The library is loaded in a child process first: one that crashes, ends the process or hangs
// as it loads (a constructor in it, or in a library it needs) is a ValueError saying so, within
// `timeout` seconds and with Ctrl-C heard meanwhile, and this process goes on. A library this
// process has loaded already has nothing more to show. (The launcher checks so, before any node
// starts and while it has no threads of its own: a fork from a process with threads may find a
// lock held that no thread will release in the child.)
void load_in_child_first(const std::string &path, const py::object &timeout) {
    if (void *loaded = dlopen(path.c_str(), RTLD_NOW | RTLD_NOLOAD)) {
        dlclose(loaded);
        return;
    }
    LoadingChild child(path);
    if (wait_in_slices([&](int64_t slice_ns) { return child.wait(slice_ns); }, timeout, PS_FOREVER) != PS_OK) {
        char seconds[32];
        snprintf(seconds, sizeof seconds, "%g", timeout.cast<double>());
        throw py::value_error(std::string("the library did not finish loading within ") + seconds +
                              " s: a constructor in it (or in a library it needs) still ran");
    }
    if (child.loaded()) return;
    if (WIFSIGNALED(child.status()))
        throw py::value_error("the library crashed while loading: signal " + std::to_string(WTERMSIG(child.status())) +
                              " (" + strsignal(WTERMSIG(child.status())) + ")");
    throw py::value_error("the library ended the process while loading, with exit status " +
                          std::to_string(WEXITSTATUS(child.status())));
}

// Whether the symbol at `address` may be code: not a variable, which called as a kernel would
// crash the node (an assembler's label without a type may be code).
bool names_a_function(void *address) {
    Dl_info info;
    void *found = nullptr;
    if (!dladdr1(address, &info, &found, RTLD_DL_SYMENT) || !found) return false;
    auto entry = static_cast<const ElfW(Sym) *>(found);
    unsigned char type = ELF64_ST_TYPE(entry->st_info);  // the same in ELF32
    return type == STT_FUNC || type == STT_GNU_IFUNC || type == STT_NOTYPE;
}

CKernel load_kernel(const std::string &path, const std::string &symbol, const py::object &timeout) {
    if (!timeout.is_none()) load_in_child_first(path, timeout);
    void *library = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!library) throw py::value_error(std::string("cannot load it: ") + dlerror());
    auto version = static_cast<const int *>(dlsym(library, "paths_kernel_api_version"));
    if (!version)
        throw py::value_error("it has no paths_kernel_api_version: compile it with #include <paths.h> "
                              "(-I paths.get_include())");
    if (*version != PATHS_API_VERSION)
        throw py::value_error("compiled against PATHS API version " + std::to_string(*version) +
                              ", this PATHS has version " + std::to_string(PATHS_API_VERSION) +
                              ": compile it again with -I paths.get_include()");
    std::string shadowed = name_libpaths_shadows(path);
    if (!shadowed.empty())
        throw py::value_error("it defines '" + shadowed + "', a name libpaths (PATHS' library) exports too: the " +
                              "kernel's own uses of it would reach libpaths' instead; rename it, or make it static");
    void *function = dlsym(library, symbol.c_str());
    if (!function)
        throw py::value_error("no function '" + symbol + "' in it (a kernel is `int " + symbol +
                              "(paths_kernel_ctx *c)`, not static; in C++ extern \"C\")");
    if (!names_a_function(function))
        throw py::value_error("'" + symbol + "' in it is not a function (a kernel is `int " + symbol +
                              "(paths_kernel_ctx *c)`)");
    std::vector<std::string> sums;
    auto declared = static_cast<const char *const *>(dlsym(library, ("paths_sums_" + symbol).c_str()));
    for (size_t i = 0; declared && declared[i]; i++) sums.emplace_back(declared[i]);
    return CKernel{path, symbol, reinterpret_cast<paths_kernel_fn>(function), sums};
}

// What a run's hooks reach: the Python callables that acquire and release handles, the handles
// the kernels hold (kept alive here, found by link), and why an acquire or a release failed.
struct RunHooks {
    py::object acquire, release;  // acquire(thread, element, format) -> Handle; release(thread, handle)
    std::unordered_map<ps_link *, std::shared_ptr<Handle>> held;
    std::unordered_map<int, std::shared_ptr<py::error_already_set>> acquire_errors;  // by thread
    std::string release_error;
};

// 'Type: message (at file:line)': the exception, and the user's line that raised it.
std::string raised_where(const py::error_already_set &e) {
    py::object where = py::module_::import("paths.model.named_function").attr("raised_where");
    return where(e.value(), e.trace()).cast<std::string>();
}

int status_of(const py::error_already_set &e) {
    if (e.matches(PyExc_TimeoutError)) return PS_ETIMEDOUT;
    if (e.matches(PyExc_ConnectionError)) return PS_EREMOTE;
    if (e.matches(PyExc_MemoryError)) return PS_ENOMEM;
    return PS_EINVAL;
}

// Kernel threads run the hooks one at a time: a thousand of them asking for the GIL at once would
// starve the main thread, which needs it to see a signal (Ctrl-C; SIGTERM, which ends a node). A
// thread that holds the GIL already (a Python kernel's) takes no turn: it would wait for a thread
// that waits for its GIL.
std::mutex g_hook_turns;

class HookTurn {
public:
    HookTurn() {
        if (!PyGILState_Check()) turn_ = std::unique_lock<std::mutex>(g_hook_turns);
    }

private:
    std::unique_lock<std::mutex> turn_;
};

ps_link *acquire_hook(void *data, int thread, const char *element, const char *format, int *status, char *error,
                      size_t error_size) {
    HookTurn turn;
    HeldGil gil;
    RunHooks &hooks = *static_cast<RunHooks *>(data);
    std::string why, call = "paths_acquire('" + std::string(element) + "', '" + format + "')";
    try {
        py::object given = call_python(hooks.acquire, py::make_tuple(thread, element, format));
        if (!py::isinstance<Handle>(given))
            throw py::type_error(call + ": the acquire hook gave " + py::repr(given).cast<std::string>() +
                                 ", not a Handle");
        std::shared_ptr<Handle> handle = given.cast<std::shared_ptr<Handle>>();
        if (handle->format() != format)
            throw py::value_error(call + ": the acquire hook gave a path to format '" + handle->format() + "'");
        if (!hooks.held.emplace(handle->link(), handle).second)
            throw py::value_error(call + ": the acquire hook gave a handle that a thread holds already");
        hooks.acquire_errors.erase(thread);
        return handle->link();
    } catch (py::error_already_set &e) {
        *status = status_of(e);
        why = py::str(e.value()).cast<std::string>();
        hooks.acquire_errors[thread] = std::make_shared<py::error_already_set>(std::move(e));
    } catch (py::builtin_exception &e) {
        *status = PS_EINVAL;
        why = e.what();
        e.set_error();
        hooks.acquire_errors[thread] = std::make_shared<py::error_already_set>();
    } catch (std::exception &e) {  // nothing may escape into the C caller
        *status = dynamic_cast<std::bad_alloc *>(&e) ? PS_ENOMEM : PS_EINVAL;
        why = e.what();
    }
    const char *values[] = {element, format, nullptr};  // shown short in the line when long
    ps_error_line(error, error_size, why.c_str(), values);
    return nullptr;
}

void release_hook(void *data, int thread, ps_link *link) {
    HookTurn turn;
    HeldGil gil;
    RunHooks &hooks = *static_cast<RunHooks *>(data);
    auto found = hooks.held.find(link);
    if (found == hooks.held.end()) return;
    std::shared_ptr<Handle> handle = std::move(found->second);
    hooks.held.erase(found);
    try {
        call_python(hooks.release, py::make_tuple(thread, handle));
    } catch (py::error_already_set &e) {
        if (hooks.release_error.empty()) hooks.release_error = py::str(e.value()).cast<std::string>();
    } catch (std::exception &e) {  // nothing may escape into the C caller
        if (hooks.release_error.empty()) hooks.release_error = e.what();
    }
}

// A thread's context, seen from a kernel written in Python (the slow path): ctx.thread,
// ctx.acquire(element, format), ctx.report(name, value), ...
class KernelContext {
public:
    KernelContext(paths_kernel_ctx *c, RunHooks *hooks) : c_(c), hooks_(hooks) {}
    int thread() const { return paths_thread(c_); }
    int threads() const { return paths_threads(c_); }
    std::string node() const { return paths_node(c_); }
    py::object arg(const py::object &key, const py::object &fallback) const {
        const char *value = paths_arg(c_, text(key, "ctx.arg(key)", "a key").c_str());
        return value ? py::object(py::str(value)) : fallback;
    }
    std::shared_ptr<Handle> acquire(const py::object &element, const py::object &format) {
        paths_handle *h = paths_acquire(c_, text(element, "ctx.acquire(element, format)", "the element's name").c_str(),
                                        text(format, "ctx.acquire(element, format)", "a format").c_str());
        if (h) return hooks_->held.at(reinterpret_cast<ps_link *>(h));
        auto failed = hooks_->acquire_errors.find(paths_thread(c_));
        if (failed != hooks_->acquire_errors.end()) {
            std::shared_ptr<py::error_already_set> error = std::move(failed->second);
            hooks_->acquire_errors.erase(failed);
            std::string line = paths_last_error(c_);  // what a C kernel is told: long values shortened
            if (py::str(error->value()).cast<std::string>() != line) error->value().attr("args") = py::make_tuple(line);
            error->restore();
            throw py::error_already_set();
        }
        throw py::value_error(paths_last_error(c_));
    }
    void release(const py::object &given) {
        if (!py::isinstance<Handle>(given))
            throw py::type_error("ctx.release(handle): expected a handle of ctx.acquire, got " + shown(given));
        auto handle = given.cast<std::shared_ptr<Handle>>();
        if (ps_kernel_ctx_release(c_, reinterpret_cast<paths_handle *>(handle->link())) != PS_OK)
            throw py::value_error(paths_last_error(c_));
        handle->refuse_calls();
    }
    void barrier(const py::object &timeout) {
        int64_t wait = timeout_ns(timeout);
        int rc;
        {
            ReleasedGil released;  // the other threads (Python ones too) must get here
            rc = paths_barrier(c_, wait);
        }
        if (rc != PS_OK) raise_status(rc, paths_last_error(c_));
    }
    void report(const py::object &name, const py::object &value) {
        std::string column = text(name, "ctx.report(name, value)", "a name");
        double number = PyFloat_AsDouble(value.ptr());
        if (number == -1.0 && PyErr_Occurred()) {
            PyErr_Clear();
            throw py::type_error("ctx.report(" + column + ", value): expected a number, got " + shown(value));
        }
        if (ps_kernel_ctx_report(c_, column.c_str(), number) != PS_OK)
            throw py::value_error(paths_last_error(c_));
    }

private:
    // A str argument's text, which C reads up to its first NUL (so one is refused).
    static std::string text(const py::object &given, const char *call, const char *expected) {
        std::string value = text_argument(given, call, expected);
        if (value.find('\0') != std::string::npos)
            throw py::value_error(std::string(call) + ": expected " + expected + " without a NUL character, got " +
                                  shown(given));
        return value;
    }

    paths_kernel_ctx *c_;
    RunHooks *hooks_;
};

// A kernel written in Python: run on the kernel thread with the GIL; its exception fails the
// thread, saying what was raised and where.
struct PythonKernel {
    py::object function;
    RunHooks *hooks;
};

int run_python_kernel(paths_kernel_ctx *c) {
    HeldGil gil;
    PythonKernel &kernel = *static_cast<PythonKernel *>(ps_kernel_ctx_data(c));
    try {
        py::object result = call_python(kernel.function, py::make_tuple(KernelContext(c, kernel.hooks)));
        if (result.is_none()) return PS_OK;
        if (py::isinstance<py::int_>(result) && !py::isinstance<py::bool_>(result)) {
            int overflow = 0;
            long status = PyLong_AsLongAndOverflow(result.ptr(), &overflow);
            if (!overflow && status >= INT_MIN && status <= INT_MAX) return static_cast<int>(status);
        }
        return paths_fail(c, PS_EINVAL, "a Python kernel returns None or a status (an int from %d to %d), "
                          "it returned %s", INT_MIN, INT_MAX, shown(result).c_str());
    } catch (py::error_already_set &e) {
        return paths_fail(c, PATHS_EFAILED, "%s", raised_where(e).c_str());
    } catch (std::exception &e) {  // nothing may escape into the C caller
        return paths_fail(c, PATHS_EFAILED, "%s", e.what());
    }
}

// A kernel run and all it needs while its threads run: on the heap, so that a run given up (Ctrl-C,
// or a failed thread in a process about to end) can be left to its threads.
struct KernelRunState {
    RunHooks hooks;
    ps_kernel_hooks c_hooks{acquire_hook, release_hook, &hooks};
    PythonKernel python{py::none(), &hooks};
    std::unique_ptr<ps_kernel_run, void (*)(ps_kernel_run *)> run{nullptr, ps_kernel_run_free};
};

// What local thread i left (it has ended).
py::dict thread_outcome(ps_kernel_run *run, int local, int thread) {
    int status = ps_kernel_run_status(run, local);
    py::list reports;
    for (int k = 0; k < ps_kernel_run_report_count(run, local); k++) {
        double value;
        const char *name = ps_kernel_run_report(run, local, k, &value);
        reports.append(py::make_tuple(name, value));
    }
    py::dict outcome;
    outcome["thread"] = thread;
    outcome["status"] = status;
    std::string name = paths_strerror(status);  // "PATHS_...: what it means" for a status PATHS knows
    outcome["status_name"] = name.rfind("PATHS_", 0) == 0 ? name : "status " + std::to_string(status) + ": " + name;
    const char *error = ps_kernel_run_error(run, local);  // the kernel's own text: bytes not UTF-8 as \xNN
    PyObject *text = PyUnicode_DecodeUTF8(error, static_cast<Py_ssize_t>(strlen(error)), "backslashreplace");
    if (!text) throw py::error_already_set();
    outcome["error"] = py::reinterpret_steal<py::str>(text);
    outcome["reports"] = reports;
    return outcome;
}

// Runs a kernel (a CKernel, or a Python function) on one thread per local thread of a run, and
// waits for them in slices, so that Ctrl-C is seen. Returns {"failed": the outcome of the thread
// that failed first, or None; "threads": every thread's outcome; "seconds"}. With until_failure,
// a failed thread ends the wait: only "failed" comes back, at once, and the other threads are
// left running (for a process that ends next, as a node whose run failed). Ctrl-C leaves them
// running too.
py::dict run_kernel(const py::object &kernel, const std::vector<int> &thread_ids, int threads, const std::string &node,
                    bool spans_processes, const std::map<std::string, std::string> &args, py::object acquire,
                    py::object release, bool pin, bool until_failure) {
    if (thread_ids.empty() || threads < static_cast<int>(thread_ids.size()))
        throw py::value_error("run_kernel: expected 1 to `threads` thread ids");
    auto state = std::make_unique<KernelRunState>();
    state->hooks.acquire = std::move(acquire);
    state->hooks.release = std::move(release);
    state->python.function = kernel;
    state->run.reset(ps_kernel_run_new(static_cast<int>(thread_ids.size()), thread_ids.data(), threads, node.c_str(),
                                       spans_processes, &state->c_hooks));
    ps_kernel_run *run = state->run.get();
    if (!run) throw std::bad_alloc();
    for (auto &[key, value] : args)
        if (ps_kernel_run_arg(run, key.c_str(), value.c_str()) != PS_OK)
            throw py::value_error("--arg " + key + "=" + value + ": expected KEY=VALUE with a KEY");
    paths_kernel_fn function = run_python_kernel;
    void *data = &state->python;
    if (py::isinstance<CKernel>(kernel)) {
        function = kernel.cast<const CKernel &>().function;
        data = nullptr;
    }
    int rc;
    {
        ReleasedGil released;
        rc = ps_kernel_run_start(run, function, data, pin);
    }
    if (rc != PS_OK) {
        ReleasedGil released;
        ps_kernel_run_join(run);
        throw std::runtime_error("could not start " + std::to_string(thread_ids.size()) + " kernel threads");
    }
    for (;;) {
        {
            ReleasedGil released;
            rc = ps_kernel_run_wait(run, kWaitSliceNs, until_failure);
        }
        if (rc != PS_ETIMEDOUT) break;
        if (PyErr_CheckSignals() != 0) {
            state.release();  // its threads still use it: theirs now
            throw py::error_already_set();
        }
    }
    int first = ps_kernel_run_first_failed(run);
    py::dict out;
    out["failed"] = first < 0 ? py::object(py::none()) : py::object(thread_outcome(run, first, thread_ids[first]));
    if (rc == PATHS_EFAILED) {
        state.release();  // its other threads still use it: theirs now
        return out;
    }
    {
        ReleasedGil released;
        ps_kernel_run_join(run);
    }
    py::list outcomes;
    for (size_t i = 0; i < thread_ids.size(); i++) outcomes.append(thread_outcome(run, static_cast<int>(i), thread_ids[i]));
    out["seconds"] = ps_kernel_run_seconds(run);
    out["threads"] = outcomes;
    state->run.reset();  // gives back what the kernels still hold: the release hook runs here
    if (!state->hooks.release_error.empty()) throw py::value_error(state->hooks.release_error);
    return out;
}

// The context of a program of its own (paths_init): one thread of a run, its handles from the
// runtime's hooks. Kept until end_process.
struct ProcessRun {
    RunHooks hooks;
    ps_kernel_hooks c_hooks;
    std::unique_ptr<ps_kernel_run, void (*)(ps_kernel_run *)> run{nullptr, ps_kernel_run_free};
};
std::unique_ptr<ProcessRun> g_process;

void end_process() {
    if (!g_process) return;
    ps_kernel_run_serve_process(nullptr);
    g_process->run.reset();
    g_process.reset();
}

void serve_process(int thread, int threads, const std::string &node, const std::map<std::string, std::string> &args,
                   py::object acquire, py::object release) {
    end_process();
    auto process = std::make_unique<ProcessRun>();
    process->hooks.acquire = std::move(acquire);
    process->hooks.release = std::move(release);
    process->c_hooks = ps_kernel_hooks{acquire_hook, release_hook, &process->hooks};
    process->run.reset(ps_kernel_run_new(1, &thread, threads, node.c_str(), threads > 1, &process->c_hooks));
    if (!process->run) throw py::value_error("paths: a program's thread must be 0 <= thread < threads");
    for (auto &[key, value] : args)
        if (ps_kernel_run_arg(process->run.get(), key.c_str(), value.c_str()) != PS_OK)
            throw py::value_error("--paths-arg " + key + "=" + value + ": expected KEY=VALUE with a KEY");
    g_process = std::move(process);
    ps_kernel_run_serve_process(g_process->run.get());
}

}  // namespace

void bind_kernels(py::module_ &m) {
    export_public_api();
    m.attr("API_VERSION") = PATHS_API_VERSION;
    py::tuple run_columns = py::tuple();
    for (int i = 0; ps_run_columns[i]; i++) run_columns = run_columns + py::make_tuple(ps_run_columns[i]);
    m.attr("RUN_COLUMNS") = run_columns;
    m.attr("PATHS_ETIMEDOUT") = PATHS_ETIMEDOUT;
    m.attr("PATHS_ENOMEM") = PATHS_ENOMEM;
    m.attr("PATHS_EREMOTE") = PATHS_EREMOTE;
    py::class_<CKernel>(m, "CKernel", "A C kernel loaded from a shared library.")
        .def_readonly("path", &CKernel::path)
        .def_readonly("symbol", &CKernel::symbol)
        .def_readonly("sums", &CKernel::sums, "the elements it declares as sums (PATHS_SUMS)");
    m.def("load_kernel", &load_kernel, py::arg("path"), py::arg("symbol"), py::arg("timeout") = py::none(),
          "Load `int SYMBOL(paths_kernel_ctx *)` from the shared library at path, checking its API version;\n"
          "with a timeout (seconds), loaded in a child process first, which must load it within that.");
    py::class_<KernelContext>(m, "KernelContext", "A kernel thread's context, for a kernel written in Python.")
        .def_property_readonly("thread", &KernelContext::thread, "0 .. threads-1 over the whole run")
        .def_property_readonly("threads", &KernelContext::threads, "threads in the whole run")
        .def_property_readonly("node", &KernelContext::node, "this thread's node, from the map")
        .def("arg", &KernelContext::arg, py::arg("key"), py::arg("default") = py::none(),
             "--arg key=value as text, or default")
        .def("acquire", &KernelContext::acquire, py::arg("element"), py::arg("format"),
             "A Handle on (element, format) for this thread, through the acquire hook.")
        .def("release", &KernelContext::release, py::arg("handle"))
        .def("barrier", &KernelContext::barrier, py::arg("timeout") = py::none(),
             "Wait until every thread of the run has come here as often.")
        .def("report", &KernelContext::report, py::arg("name"), py::arg("value"),
             "A result column (the run's value is the mean over the threads that report it).");
    m.def("run_kernel", &run_kernel, py::arg("kernel"), py::arg("thread_ids"), py::arg("threads"), py::arg("node"),
          py::arg("spans_processes"), py::arg("args"), py::arg("acquire"), py::arg("release"), py::arg("pin") = false,
          py::arg("until_failure") = false,
          "Run a kernel (CKernel or a Python function of a KernelContext) on one C thread per thread id;\n"
          "acquire(thread, element, format) -> Handle and release(thread, handle) are its hooks. With\n"
          "until_failure, the first failed thread's outcome comes back at once (the others run on).");
    m.def("serve_process", &serve_process, py::arg("thread"), py::arg("threads"), py::arg("node"), py::arg("args"),
          py::arg("acquire"), py::arg("release"),
          "Give paths_* calls with a NULL context (a program of its own) this thread of a run.");
    m.def("end_process", &end_process, "Give back the program's handles and end its context.");
    m.def(
        "error_line",
        [](const std::string &text, const std::string &element, const std::string &format) {
            char line[PS_ERROR_LINE];
            const char *values[] = {element.c_str(), format.c_str(), nullptr};
            ps_error_line(line, sizeof line, text.c_str(), values);
            return std::string(line);
        },
        py::arg("text"), py::arg("element"), py::arg("format"),
        "An acquire error as paths_last_error says it: a long element or format shown short, a line\n"
        "still too long without its middle.");
}

}  // namespace paths_native
