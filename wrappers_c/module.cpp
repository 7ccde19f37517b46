// module.cpp — the pybind11 module `paths._native`: the only place where Python meets C. Each part
// is bound by the file of its concept (python_module.hpp lists them); this file makes the module
// and its exception. Blocking calls release the GIL and wait in slices, so Ctrl-C interrupts them.
#include "python_call.hpp"
#include "python_module.hpp"

PYBIND11_MODULE(_native, m) {
    using namespace paths_native;
    m.doc() = "PATHS native core: PastSet elements, stages, kernels and their runs";
    g_axed_error = PyErr_NewExceptionWithDoc("paths.AxedError",
                                             "Raised when observing a tuple that axe() has freed.",
                                             PyExc_IndexError, nullptr);
    m.add_object("AxedError", py::handle(g_axed_error));
    remember_main_thread();
    remember_finalizing_thread(m);
    bind_element(m);
    bind_handle(m);
    bind_kinds(m);
    bind_python_bridge(m);
    bind_server(m);
    bind_trace(m);
    bind_wire(m);
    bind_kernels(m);
    bind_bench(m);
}
