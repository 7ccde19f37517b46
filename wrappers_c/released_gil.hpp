// released_gil.hpp — the GIL given up around a C call and taken back after it, as
// py::gil_scoped_release does, but safe for a daemon thread at exit. Python ends a thread that
// comes back while the interpreter finalizes from inside PyEval_RestoreThread (pthread_exit: a
// forced unwind), and pybind11's destructor, noexcept as destructors are, turned that into
// std::terminate ("terminate called without an active exception", exit 134). This one lets the
// unwind through (noexcept(false)), and the thread ends as Python's own threads do.
#ifndef WRAPPERS_RELEASED_GIL_HPP
#define WRAPPERS_RELEASED_GIL_HPP

#include <Python.h>

namespace paths_native {

class ReleasedGil {
public:
    ReleasedGil() : state_(PyEval_SaveThread()) {}
    ~ReleasedGil() noexcept(false) { PyEval_RestoreThread(state_); }
    ReleasedGil(const ReleasedGil &) = delete;
    ReleasedGil &operator=(const ReleasedGil &) = delete;

private:
    PyThreadState *state_;
};

}  // namespace paths_native

#endif
