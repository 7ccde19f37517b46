// python_call.cpp — statuses as Python exceptions, and the checked conversion of arguments.
#include "python_call.hpp"

#include <cmath>

namespace paths_native {

PyObject *g_axed_error = nullptr;

namespace {
void drop_python_stage_error(void *cause) { delete static_cast<py::error_already_set *>(cause); }
}  // namespace

void keep_python_stage_error(py::error_already_set &&error) {
    ps_failure_cause_set(new py::error_already_set(std::move(error)), drop_python_stage_error);
}

py::str text_of(const std::string &text) {
    PyObject *decoded = PyUnicode_DecodeUTF8(text.data(), static_cast<Py_ssize_t>(text.size()), "replace");
    if (!decoded) throw py::error_already_set();
    return py::reinterpret_steal<py::str>(decoded);
}

[[noreturn]] void raise_text(PyObject *type, const std::string &message) {
    PyErr_SetObject(type, text_of(message).ptr());
    throw py::error_already_set();
}

[[noreturn]] void raise_status(int rc, const std::string &what) {
    ps_cause_drop drop;
    void *cause = ps_failure_cause_take(&drop);
    if (cause && drop != drop_python_stage_error) drop(cause);  // not a Python stage's: the status says it
    if (cause && drop == drop_python_stage_error) {  // a Python stage's own exception, noted with the call
        std::unique_ptr<py::error_already_set> error(static_cast<py::error_already_set *>(cause));
        try {
            error->value().attr("add_note")(text_of(what));
        } catch (py::error_already_set &) {  // not an exception that takes notes: raised as it is
        }
        error->restore();
        throw py::error_already_set();
    }
    PyObject *type;
    switch (rc) {
    case PS_ETIMEDOUT: type = PyExc_TimeoutError; break;
    case PS_EAXED: type = g_axed_error; break;
    case PS_EINDEX: type = PyExc_IndexError; break;
    case PS_EFORMAT: case PS_EMISMATCH: case PS_EINVAL: type = PyExc_ValueError; break;
    case PS_ENOMEM: type = PyExc_MemoryError; break;
    case PS_ENOTSUP: type = PyExc_NotImplementedError; break;
    case PS_EREMOTE: type = PyExc_ConnectionError; break;
    default: type = PyExc_RuntimeError; break;
    }
    raise_text(type, what + ": " + ps_status_name(rc));
}

std::string shown(const py::handle &value) {
    std::string text = py::repr(value).cast<std::string>();
    return text.size() > 120 ? text.substr(0, 117) + "..." : text;
}

namespace {
unsigned long g_main_thread = 0;  // the interpreter's main thread (threading.main_thread())
}  // namespace

void remember_main_thread() {
    g_main_thread = py::module_::import("threading").attr("main_thread")().attr("ident").cast<unsigned long>();
}

int signal_raised() {
    // Only the main thread runs signal handlers, and another thread must not take the GIL: the
    // interpreter may be ending around it (a daemon thread's build as the program exits).
    if (PyThread_get_thread_ident() != g_main_thread) return 0;
    HeldGil gil;
    return PyErr_Occurred() != nullptr || PyErr_CheckSignals() != 0;
}

int64_t timeout_ns(const py::object &timeout) {
    if (timeout.is_none()) return PS_FOREVER;
    if (!py::isinstance<py::int_>(timeout) && !py::isinstance<py::float_>(timeout))
        throw py::type_error("timeout: expected None or a number of seconds, got " + shown(timeout));
    double seconds = PyFloat_AsDouble(timeout.ptr());
    if (seconds == -1.0 && PyErr_Occurred()) {  // an int beyond any double: as long as its sign says
        PyErr_Clear();
        seconds = py::int_(timeout) < py::int_(0) ? -1.0 : 2e9;
    }
    if (!(seconds >= 0.0) || std::isinf(seconds))
        throw py::value_error("timeout: expected None or a finite number of seconds >= 0, got " + shown(timeout));
    constexpr double kLongest = 1e9;  // seconds: beyond 31 years, a timeout is no timeout
    return seconds >= kLongest ? PS_FOREVER : static_cast<int64_t>(seconds * 1e9);
}

bool int64_of(const py::handle &value, const std::string &what, int64_t *out) {
    if (!PyLong_Check(value.ptr()) || PyBool_Check(value.ptr()))
        throw py::type_error(what + ": expected an int, got " + shown(value));
    int overflow = 0;
    *out = PyLong_AsLongLongAndOverflow(value.ptr(), &overflow);
    return overflow == 0;
}

int64_t int_argument(const py::handle &value, const std::string &what) {
    int64_t v;
    if (!int64_of(value, what, &v))
        throw py::value_error(what + ": expected an int from -2**63 to 2**63-1, got " + shown(value));
    return v;
}

std::string text_argument(const py::handle &given, const std::string &call, const std::string &expected) {
    if (!PyUnicode_Check(given.ptr())) throw py::type_error(call + ": expected " + expected + " as text, got " + shown(given));
    Py_ssize_t size = 0;
    const char *utf8 = PyUnicode_AsUTF8AndSize(given.ptr(), &size);
    if (!utf8) {
        PyErr_Clear();
        throw py::value_error(call + ": expected " + expected + " as text UTF-8 can hold (no lone surrogates), got " +
                              shown(given));
    }
    return std::string(utf8, static_cast<size_t>(size));
}

const std::string &c_text(const std::string &text, const std::string &what) {
    if (text.find('\0') != std::string::npos)
        throw py::value_error(what + ": expected text without NUL bytes, got " + shown(py::str(text)));
    return text;
}

}  // namespace paths_native
