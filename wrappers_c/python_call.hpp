// python_call.hpp — how a call from Python reaches C and comes back: arguments checked and
// converted (timeouts, ints, text), blocking calls run without the GIL in slices so that Ctrl-C
// is seen, and status codes raised as Python exceptions. Every file of the module builds on it.
#ifndef WRAPPERS_PYTHON_CALL_HPP
#define WRAPPERS_PYTHON_CALL_HPP

#include <pybind11/pybind11.h>
#include <pybind11/stl.h>  // in every file of the module alike: its conversions must not differ

#include <algorithm>
#include <memory>
#include <string>

#include "control_plane.h"
#include "failure_cause.h"
#include "released_gil.hpp"
extern "C" {
#include "pastset.h"
}

namespace py = pybind11;

namespace paths_native {

constexpr int64_t kWaitSliceNs = 100 * 1000 * 1000;  // how long a wait goes between signal checks

// paths.AxedError, made when the module is.
extern PyObject *g_axed_error;

// An exception raised inside a Python stage, kept as the failure's cause (failure_cause.h) until
// the operation returns to Python, in this thread or in the caller's a deferred failure reaches.
void keep_python_stage_error(py::error_already_set &&error);

// Text from C as a Python str: a message cut to fit its buffer may end in half a UTF-8 character.
py::str text_of(const std::string &text);
[[noreturn]] void raise_text(PyObject *type, const std::string &message);
// Raises the status as its Python exception (wire.md's table), or the exception a Python stage
// raised on the way, with `what` as its note.
[[noreturn]] void raise_status(int rc, const std::string &what);

// A value as a message shows it: its repr, cut to a line.
std::string shown(const py::handle &value);
// Seconds (None = forever) to nanoseconds (PS_FOREVER), refusing negative or NaN timeouts.
int64_t timeout_ns(const py::object &timeout);
// An int argument's value, or false when it does not fit in 64 bits; a TypeError naming `what`
// when it is no int (a bool is no index either).
bool int64_of(const py::handle &value, const std::string &what, int64_t *out);
// An int argument that must fit in 64 bits, or a TypeError/ValueError naming it.
int64_t int_argument(const py::handle &value, const std::string &what);
// A str argument's UTF-8 text; for anything else a TypeError, and for a str UTF-8 cannot hold (lone
// surrogates) a ValueError, each "call: expected <expected> as text ..., got <value>".
std::string text_argument(const py::handle &given, const std::string &call, const std::string &expected);
// Text handed to C, where a NUL byte would silently end it ('a\0b' would be 'a').
const std::string &c_text(const std::string &text, const std::string &what);

// A C wait of this thread that cannot come back to Python between its slices asks this (without
// the GIL): 1 once a signal's handler raised (Ctrl-C's KeyboardInterrupt, kept as the thread's
// error for the caller to raise), so that the wait gives up. Only the main thread (as the module
// found it, remember_main_thread) runs handlers: on any other it is 0.
int signal_raised();
void remember_main_thread();

// While it lives, this thread's waits for a server (a remote stage's BUILD and CONNECT, wherever in
// a path its stage is made or attached; an answer a silent server owes) ask signal_raised: made
// around a call that sets up stages, or that waits in slices, after which a raised signal is
// thrown (throw_if_signal_raised).
class WaitsHearSignals {
public:
    WaitsHearSignals() : before_(ps_interrupt_check_set(signal_raised)) {}
    ~WaitsHearSignals() { ps_interrupt_check_set(before_); }
    WaitsHearSignals(const WaitsHearSignals &) = delete;
    WaitsHearSignals &operator=(const WaitsHearSignals &) = delete;

private:
    ps_interrupt_check before_;
};

// After a call: the exception a signal's handler raised meanwhile (whatever the call returned: a
// stage may have made a failure below it a success).
inline void throw_if_signal_raised() {
    if (PyErr_Occurred()) throw py::error_already_set();
}

// While it lives, this thread's calls are slices of a call that ends at `deadline` (ps_call_deadline).
class CallDeadline {
public:
    explicit CallDeadline(int64_t deadline) : before_(ps_call_deadline_set(deadline)) {}
    ~CallDeadline() { ps_call_deadline_set(before_); }
    CallDeadline(const CallDeadline &) = delete;
    CallDeadline &operator=(const CallDeadline &) = delete;

private:
    int64_t before_;
};

// Runs op(slice_timeout_ns) without the GIL, in slices, checking for signals between slices,
// until the timeout (ns, PS_FOREVER: none) or the `latest` deadline (PS_FOREVER: none), whichever
// comes first. op must leave no trace when it times out, so that it can simply be called again.
template <class Op>
int wait_in_slices(Op op, int64_t timeout, int64_t latest) {
    int64_t deadline = ps_deadline(timeout);
    if (latest != PS_FOREVER && (deadline == PS_FOREVER || latest < deadline)) deadline = latest;
    CallDeadline whole(deadline);
    WaitsHearSignals hearing;
    for (;;) {
        int64_t slice = kWaitSliceNs;
        if (deadline != PS_FOREVER) slice = std::max<int64_t>(0, std::min(slice, deadline - ps_now_ns()));
        int rc;
        {
            ReleasedGil released;
            rc = op(slice);
        }
        throw_if_signal_raised();
        if (rc != PS_ETIMEDOUT) return rc;
        if (deadline != PS_FOREVER && ps_now_ns() >= deadline) return PS_ETIMEDOUT;
        if (PyErr_CheckSignals() != 0) throw py::error_already_set();
    }
}

// wait_in_slices with a timeout as Python gives it (seconds, None: no limit).
template <class Op>
int wait_in_slices(Op op, const py::object &timeout, int64_t latest) {
    return wait_in_slices(op, timeout_ns(timeout), latest);
}

}  // namespace paths_native

#endif
