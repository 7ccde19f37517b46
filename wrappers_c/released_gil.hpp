// released_gil.hpp — the GIL given up around a C call and taken back after it (ReleasedGil), and
// taken by a thread that comes from C (HeldGil), as pybind11's gil_scoped_release and
// gil_scoped_acquire do, but safe for a thread that comes back while the interpreter finalizes
// (a daemon thread at exit, a C thread of a stage or a kernel). Python ends such a thread from
// inside PyEval_RestoreThread (pthread_exit: a forced unwind through every frame above it, whose
// destructors then call Python without the GIL, or end in std::terminate: exit 134 or 139). These
// find the interpreter finalizing and sleep instead, until the process ends (what Python itself
// does from 3.14 on). One that comes back in the moment between that look and the GIL lets the
// unwind through (noexcept(false)), and ends as Python's own threads do.
#ifndef WRAPPERS_RELEASED_GIL_HPP
#define WRAPPERS_RELEASED_GIL_HPP

#include <Python.h>
#include <pybind11/pybind11.h>

namespace paths_native {

// Sleeps for good if the interpreter finalizes and this is not the thread that finalizes it (the
// main thread: its calls at exit go on): the thread never takes the GIL again.
void wait_out_finalization();

class ReleasedGil {
public:
    ReleasedGil() : state_(PyEval_SaveThread()) {}
    ~ReleasedGil() noexcept(false) {
        wait_out_finalization();
        PyEval_RestoreThread(state_);
    }
    ReleasedGil(const ReleasedGil &) = delete;
    ReleasedGil &operator=(const ReleasedGil &) = delete;

private:
    PyThreadState *state_;
};

// pybind11's gil_scoped_acquire, once the interpreter is known not to be finalizing.
struct FinalizationWaitedOut {
    FinalizationWaitedOut() { wait_out_finalization(); }
};

class HeldGil : FinalizationWaitedOut {
    pybind11::gil_scoped_acquire gil_;
};

}  // namespace paths_native

#endif
