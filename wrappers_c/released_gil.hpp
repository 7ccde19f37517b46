// released_gil.hpp — the GIL given up around a C call and taken back after it (ReleasedGil), taken
// by a thread that comes from C (HeldGil), and Python called from such a thread (call_python), as
// pybind11's gil_scoped_release, gil_scoped_acquire and calls do, but safe for a thread that comes
// back while the interpreter finalizes (a daemon thread at exit, a C thread of a stage or a
// kernel). Python ends such a thread where it waits for the GIL (pthread_exit: a forced unwind
// through every frame above it, whose destructors then call Python without the GIL, or end in
// std::terminate: exit 134 or 139). These find the interpreter finalizing and sleep instead, until
// the process ends (what Python itself does from 3.14 on); one that comes back in the moment
// between that look and the GIL catches the unwind where it starts, and sleeps there.
#ifndef WRAPPERS_RELEASED_GIL_HPP
#define WRAPPERS_RELEASED_GIL_HPP

#include <Python.h>
#include <pybind11/pybind11.h>

#include <optional>

namespace paths_native {

// Sleeps for good if the interpreter finalizes and this is not the thread that finalizes it
// (whose calls at exit go on): the thread never takes the GIL again.
void wait_out_finalization();
// Where a thread the interpreter ended stops: asleep until the process ends.
[[noreturn]] void sleep_until_the_process_ends();
// The thread that finalizes the interpreter is the one that runs its exit functions: it says so.
void remember_finalizing_thread(pybind11::module_ &m);

class ReleasedGil {
public:
    ReleasedGil() : state_(PyEval_SaveThread()) {}
    ~ReleasedGil();
    ReleasedGil(const ReleasedGil &) = delete;
    ReleasedGil &operator=(const ReleasedGil &) = delete;

private:
    PyThreadState *state_;
};

class HeldGil {
public:
    HeldGil();
    HeldGil(const HeldGil &) = delete;
    HeldGil &operator=(const HeldGil &) = delete;

private:
    std::optional<pybind11::gil_scoped_acquire> gil_;
};

// callable(*args), with the GIL held; a thread the interpreter ends inside it stops there.
pybind11::object call_python(const pybind11::handle &callable, const pybind11::tuple &args);

}  // namespace paths_native

#endif
