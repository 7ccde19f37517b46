// python_trace.cpp — trace files that could not be written, reported to Python.
#include <string>
#include <vector>

#include "python_call.hpp"
#include "python_module.hpp"

extern "C" {
#include "trace.h"
}

namespace paths_native {

namespace {

// Waits up to `wait` for every trace stage of the process to be released and its file written,
// then returns what went wrong since the last call: a message per file that could not be
// written, and one for the files still to come.
py::list take_trace_failures(const py::object &wait) {
    int64_t unwritten = 0;
    wait_in_slices([&](int64_t slice) { return (unwritten = ps_trace_wait_written(slice)) ? PS_ETIMEDOUT : PS_OK; },
                   wait, PS_FOREVER);
    std::vector<std::string> failures;
    ps_trace_take_failures([](void *context, const char *message) {
        static_cast<std::vector<std::string> *>(context)->emplace_back(message);
    }, &failures);
    if (unwritten && !wait.is_none() && py::cast<double>(wait) > 0)
        failures.push_back(std::to_string(unwritten) + " trace file(s) not written yet after " +
                           py::str(wait).cast<std::string>() + " s: their stages are still in use");
    py::list out;
    for (const std::string &failure : failures) out.append(text_of(failure));
    return out;
}

}  // namespace

void bind_trace(py::module_ &m) {
    m.def("take_trace_failures", &take_trace_failures, py::arg("wait") = 0.0,
          "Wait up to `wait` seconds (None: no limit) for every trace stage of this process to be released\n"
          "and its file written; return (and forget) the messages of the files that could not be written.");
    m.def("discard_unwritten_traces", &ps_trace_discard_unwritten,
          "The process ends now with trace stages alive: remove their temporary files, and write none of them\n"
          "(done at exit; call it before os._exit).");
}

}  // namespace paths_native
