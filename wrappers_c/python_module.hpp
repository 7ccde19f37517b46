// python_module.hpp — the parts of the module paths._native, each bound by the file named beside
// it; module.cpp calls them in turn.
#ifndef WRAPPERS_PYTHON_MODULE_HPP
#define WRAPPERS_PYTHON_MODULE_HPP

#include <pybind11/pybind11.h>

namespace paths_native {

void bind_element(pybind11::module_ &m);        // python_element.cpp: PastSet, Element
void bind_handle(pybind11::module_ &m);         // python_handle.cpp: Stage, Handle
void bind_kinds(pybind11::module_ &m);          // python_kinds.cpp: the registry, operations, create_stage
void bind_python_bridge(pybind11::module_ &m);  // python_bridge.cpp: stages written in Python
void bind_server(pybind11::module_ &m);         // python_server.cpp: Server, BuildRequest, CURVE keys
void bind_trace(pybind11::module_ &m);          // python_trace.cpp: trace files not written
void bind_wire(pybind11::module_ &m);           // python_wire.cpp: the wire protocol's constants
void bind_kernels(pybind11::module_ &m);        // python_kernels.cpp: kernels, their runs, programs
void bind_bench(pybind11::module_ &m);          // python_bench.cpp: the benchmarks' C loops

}  // namespace paths_native

#endif
