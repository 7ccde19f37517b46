// released_gil.cpp — see released_gil.hpp.
#include "released_gil.hpp"

#include <cxxabi.h>
#include <unistd.h>

#include <atomic>

namespace py = pybind11;

namespace paths_native {

namespace {
std::atomic<unsigned long> g_finalizing_thread{0};  // the thread that ran the exit functions (0: none yet)

bool interpreter_finalizing() {
#if PY_VERSION_HEX >= 0x030D0000
    return Py_IsFinalizing();
#else
    return _Py_IsFinalizing();
#endif
}
}  // namespace

void sleep_until_the_process_ends() {
    for (;;) pause();
}

void wait_out_finalization() {
    if (interpreter_finalizing() && PyThread_get_thread_ident() != g_finalizing_thread.load())
        sleep_until_the_process_ends();
}

void remember_finalizing_thread(py::module_ &m) {
    // Python runs the exit functions on the thread that then finalizes, before it says so.
    m.def("_note_finalizing_thread", [] { g_finalizing_thread.store(PyThread_get_thread_ident()); });
    py::module_::import("atexit").attr("register")(m.attr("_note_finalizing_thread"));
}

ReleasedGil::~ReleasedGil() {
    wait_out_finalization();
    try {
        PyEval_RestoreThread(state_);
    } catch (abi::__forced_unwind &) {  // the interpreter began to finalize just now
        sleep_until_the_process_ends();
    }
}

HeldGil::HeldGil() {
    if (!PyGILState_Check()) wait_out_finalization();  // a thread holding it goes on
    try {
        gil_.emplace();
    } catch (abi::__forced_unwind &) {
        sleep_until_the_process_ends();
    }
}

py::object call_python(const py::handle &callable, const py::tuple &args) {
    PyObject *result;
    try {  // no frame of this call's but Python's own between here and where the thread may end
        result = PyObject_Call(callable.ptr(), args.ptr(), nullptr);
    } catch (abi::__forced_unwind &) {
        sleep_until_the_process_ends();
    }
    if (!result) throw py::error_already_set();
    return py::reinterpret_steal<py::object>(result);
}

}  // namespace paths_native
