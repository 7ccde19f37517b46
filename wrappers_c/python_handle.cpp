// python_handle.cpp — paths._native.Stage and paths.Handle.
#include "python_handle.hpp"

#include "python_module.hpp"

#include <pybind11/stl.h>

#include <optional>
#include <vector>

extern "C" {
#include "paths.h"
}

namespace paths_native {

py::dict Stage::counters() const {
    ps_counter values[32];
    int n = ps_stage_counters(stage_, values, 32);
    py::dict d;
    for (int i = 0; i < n; i++) d[values[i].name] = values[i].value;
    return d;
}

namespace {

// A new caller on `stage`; the link it gets on `remote` (the remote stage at the bottom of the path's
// part in this process) sends `remote_spec` at BUILD, if given (ps_remote_attach_spec).
std::shared_ptr<Handle> attach(const std::shared_ptr<Stage> &stage, const std::string &label, py::object owner,
                               const std::shared_ptr<Stage> &remote, const std::optional<std::string> &remote_spec) {
    struct AttachSpec {
        AttachSpec(const Stage *stage, const char *spec) { ps_remote_attach_spec(stage ? stage->get() : nullptr, spec); }
        ~AttachSpec() { ps_remote_attach_spec(nullptr, nullptr); }
    } spec(remote.get(), remote && remote_spec ? remote_spec->c_str() : nullptr);
    return std::make_shared<Handle>(stage->format(), label, stage, nullptr, std::move(owner));
}

// A capsule named "paths_handle" whose pointer is the handle's paths_handle: C code of a user's own
// extension module works on it with paths.h. The capsule keeps the Handle alive.
py::object handle_capsule(const py::object &self) {
    Handle &handle = self.cast<Handle &>();
    if (!handle.link()) raise_text(PyExc_RuntimeError, handle.label() + " capsule: " + handle.explanation());
    PyObject *capsule = PyCapsule_New(handle.link(), "paths_handle", [](PyObject *c) {
        Py_XDECREF(static_cast<PyObject *>(PyCapsule_GetContext(c)));
    });
    if (!capsule) throw py::error_already_set();
    Py_INCREF(self.ptr());
    PyCapsule_SetContext(capsule, self.ptr());
    return py::reinterpret_steal<py::object>(capsule);
}

// paths.fence(handles): paths_fence over the handles, in slices without the GIL (a slice that ends
// first sends what is held back again: it is gone already, so nothing is sent twice).
void fence(const py::object &handles, const py::object &timeout) {
    std::vector<std::shared_ptr<Handle>> held;
    if (py::isinstance<Handle>(handles)) {
        held.push_back(handles.cast<std::shared_ptr<Handle>>());
    } else {
        if (!py::isinstance<py::iterable>(handles))
            throw py::type_error("fence: expected a Handle or handles, got " + shown(handles));
        for (py::handle item : handles) {
            if (!py::isinstance<Handle>(item))
                throw py::type_error("fence: expected handles, got " + shown(item) + " among them");
            held.push_back(item.cast<std::shared_ptr<Handle>>());
        }
    }
    std::vector<ps_link *> links;
    for (auto &handle : held)
        if (!handle->link()) raise_text(PyExc_RuntimeError, "fence: " + handle->label() + ": " + handle->explanation());
    for (auto &handle : held) links.push_back(handle->link());
    struct Claimed {  // each handle, for the fence's thread alone while it runs (the same one twice is fine)
        std::vector<std::shared_ptr<Handle>> &held;
        size_t count = 0;
        explicit Claimed(std::vector<std::shared_ptr<Handle>> &held) : held(held) {
            try {
                for (; count < held.size(); count++) held[count]->claim();
            } catch (...) {  // one in use by another thread: the others are let go again
                release();
                throw;
            }
        }
        ~Claimed() { release(); }
        void release() {
            while (count) held[--count]->unclaim();
        }
    } claimed(held);
    size_t failed = 0;
    ps_error_mark began = ps_stage_error_mark();
    int rc = wait_in_slices([&](int64_t slice) { return ps_links_fence(links.data(), links.size(), slice, &failed); },
                            timeout, PS_FOREVER);
    if (rc == PS_OK) return;
    std::string what = "fence of " + std::to_string(held.size()) + " handle" + (held.size() == 1 ? "" : "s");
    if (held.size() > 1) what += ", at handle " + std::to_string(failed) + " (" + held[failed]->label() + ")";
    std::string why = rc == PS_ETIMEDOUT ? "" : held[failed]->explanation(began);
    raise_status(rc, why.empty() ? what : what + " (" + why + ")");
}

}  // namespace

void bind_handle(py::module_ &m) {
    m.def("fence", &fence, py::arg("handles"), py::arg("timeout") = py::none(),
          "Whatever the handles' paths hold back (a batch's buffered moves) goes down, and it returns once every\n"
          "move made through them before it has been applied at its element (through a sum: once the round's\n"
          "total came back). `handles`: a Handle or an iterable of them. TimeoutError when timeout passes first.");
    py::class_<Stage, std::shared_ptr<Stage>>(m, "Stage", "One built C stage (one reference to it).")
        .def_property_readonly("kind", &Stage::kind)
        .def_property_readonly("format", &Stage::format)
        .def_property_readonly("max_links", &Stage::max_links, "The fan-in: callers allowed (0 = any).")
        .def_property_readonly("link_count", &Stage::link_count, "Callers attached so far.")
        .def("counters", &Stage::counters, "The stage's counters: operations, waits, bytes, and its own.")
        .def_property_readonly("below", &Stage::below, "The stage below it; None at the bottom (the element's).")
        .def("attach", &attach, py::arg("label"), py::arg("owner") = py::none(), py::arg("remote") = nullptr,
             py::arg("remote_spec") = py::none(),
             "A new caller's handle on this stage; `owner` is kept alive as long as the handle. `remote`, the\n"
             "remote stage at the bottom of the caller's path here, sends `remote_spec` for the caller's link\n"
             "at BUILD instead of the spec it was made with.");

    py::class_<Handle, std::shared_ptr<Handle>> handle(m, "Handle", "One caller's handle on a path: use it from one thread.");
    bind_endpoint(handle, "Handle");
    handle.def_property_readonly("stage", &Handle::stage)
        .def_property_readonly("slot", &Handle::slot)
        .def("_release_if_idle", &Handle::release_if_idle,
             "Releases the caller's link now unless an operation of it runs in another thread (then False);\n"
             "operations after it are refused. What paths does at exit for handles the collector cannot free.")
        .def("capsule", &handle_capsule,
             "A PyCapsule named \"paths_handle\" holding this handle's paths_handle, for C code of your own\n"
             "(paths.h); it keeps the handle alive.");
}

}  // namespace paths_native
