// python_bench.cpp — paths._native.bench: the single-thread C loops the benchmarks time, each with
// no Python on its path.
#include <string>

#include "python_handle.hpp"
#include "python_module.hpp"

extern "C" {
#include "kernels.h"
#include "trace.h"
}

namespace paths_native {

namespace {

ps_link *q_link_of(const std::shared_ptr<Handle> &handle, const char *loop) {
    if (!handle->stage()) throw py::value_error(std::string(loop) + ": the handle was released");
    const ps_tuple_format *f = ps_stage_format(handle->stage()->get());
    if (f->size != 8 || f->run_count != 1 || f->runs[0].code != 'q')
        throw py::value_error(std::string(loop) + ": expected a path over a 'q' element, got format '" + f->text + "'");
    return handle->link();
}

// Runs loop(link, count, timeout_ns), a single-thread C loop of `count` operations through one
// handle, without the GIL; its ns per operation.
template <class Loop>
double single_link_loop(const std::shared_ptr<Handle> &handle, int64_t count, const py::object &timeout,
                        const char *name, Loop loop, const char *failure) {
    ps_link *link = q_link_of(handle, name);
    if (count <= 0) throw py::value_error(std::string(name) + ": expected a count > 0");
    int64_t wait = timeout_ns(timeout);
    double ns;
    {
        ReleasedGil released;
        ns = loop(link, count, wait);
    }
    if (ns < 0) throw std::runtime_error(std::string(name) + ": " + failure);
    return ns;
}

// single_link_loop of a loop that takes one more number, `size` (> 0, named `size_name`):
// loop(link, count, size, timeout_ns).
template <class Loop>
double sized_link_loop(const std::shared_ptr<Handle> &handle, int64_t count, int64_t size, const char *size_name,
                       const py::object &timeout, const char *name, Loop loop, const char *failure) {
    if (size <= 0) throw py::value_error(std::string(name) + ": expected " + size_name + " > 0");
    auto sized = [&](ps_link *link, int64_t n, int64_t wait) { return loop(link, n, size, wait); };
    return single_link_loop(handle, count, timeout, name, sized, failure);
}

}  // namespace

void bind_bench(py::module_ &m) {
    py::module_ bench = m.def_submodule("bench", "single-thread C loops of the benchmarks");
    bench.def("core_pairs_ns", [](int64_t pairs) {
        if (pairs <= 0) throw py::value_error("core_pairs_ns: expected pairs > 0");
        ReleasedGil released;
        return ps_kernel_core_pairs_ns(pairs);
    }, py::arg("pairs"), "Nanoseconds per move+observe pair from a C loop on one element.");
    bench.def("clock_read_ns", [](int64_t reads) {
        if (reads <= 0) throw py::value_error("clock_read_ns: expected reads > 0");
        ReleasedGil released;
        return ps_trace_clock_read_ns(reads);
    }, py::arg("reads"), "Nanoseconds one read of the trace stage's clock takes (a traced operation reads it twice).");
    bench.def("pairs_ns", [](const std::shared_ptr<Handle> &handle, int64_t pairs, const py::object &timeout) {
        return single_link_loop(handle, pairs, timeout, "pairs_ns", ps_kernel_link_pairs_ns,
                                "an operation failed or returned a wrong tuple");
    }, py::arg("handle"), py::arg("pairs"), py::arg("timeout") = 60.0,
       "Nanoseconds per move+observe pair through one handle, from a C loop (single thread).");
    bench.def("axed_pairs_ns", [](const std::shared_ptr<Handle> &handle, int64_t pairs, const py::object &timeout) {
        return single_link_loop(handle, pairs, timeout, "axed_pairs_ns", ps_kernel_link_axed_pairs_ns,
                                "an operation failed or returned a wrong tuple");
    }, py::arg("handle"), py::arg("pairs"), py::arg("timeout") = 60.0,
       "pairs_ns with an axe of the log every 4096 pairs, as core_pairs_ns does.");
    bench.def("pair_median_ns", [](const std::shared_ptr<Handle> &handle, int64_t pairs, const py::object &timeout) {
        return single_link_loop(handle, pairs, timeout, "pair_median_ns", ps_kernel_link_pair_median_ns,
                                "an operation failed or returned a wrong tuple");
    }, py::arg("handle"), py::arg("pairs"), py::arg("timeout") = 60.0,
       "The median nanoseconds of one move+observe pair through one handle, each pair of a C loop timed on its\n"
       "own (single thread).");
    bench.def("link_moves_ns", [](const std::shared_ptr<Handle> &handle, int64_t moves, const py::object &timeout) {
        return single_link_loop(handle, moves, timeout, "link_moves_ns", ps_kernel_link_moves_ns,
                                "a move failed, or last() grew by fewer than the moves made");
    }, py::arg("handle"), py::arg("moves"), py::arg("timeout") = 60.0,
       "Nanoseconds per move through one handle from a C loop, until every move is acknowledged (single thread).");
    bench.def("link_batches_ns", [](const std::shared_ptr<Handle> &handle, int64_t moves, uint32_t batch,
                                    const py::object &timeout) {
        auto loop = [](ps_link *link, int64_t count, int64_t size, int64_t wait) {
            return ps_kernel_link_batches_ns(link, count, static_cast<uint32_t>(size), wait);
        };
        return sized_link_loop(handle, moves, batch, "a batch", timeout, "link_batches_ns", loop,
                               "a move_many failed, or last() grew by fewer than the tuples moved");
    }, py::arg("handle"), py::arg("moves"), py::arg("batch"), py::arg("timeout") = 60.0,
       "Nanoseconds per tuple moved through one handle `batch` at a time (each batch one move_many), from a C\n"
       "loop, until every one is acknowledged (single thread).");
    bench.def("moves_then_observe_ns", [](const std::shared_ptr<Handle> &handle, int64_t k, int64_t rounds,
                                          const py::object &timeout) {
        auto loop = [](ps_link *link, int64_t count, int64_t size, int64_t wait) {
            return ps_kernel_link_moves_then_observe_ns(link, size, count, wait);
        };
        return sized_link_loop(handle, rounds, k, "k", timeout, "moves_then_observe_ns", loop,
                               "an operation failed, or the observe did not see the round's last move");
    }, py::arg("handle"), py::arg("k"), py::arg("rounds"), py::arg("timeout") = 60.0,
       "ARMI's ping sweep: nanoseconds per round of k moves, then one observe of the round's last move by its\n"
       "index, through one handle, from a C loop (single thread).");
    bench.def("indexed_reads_ns", [](const std::shared_ptr<Handle> &handle, int64_t reads, int64_t tuples,
                                     const py::object &timeout) {
        return sized_link_loop(handle, reads, tuples, "tuples", timeout, "indexed_reads_ns",
                               ps_kernel_link_indexed_reads_ns, "a read failed, or tuple i did not hold i");
    }, py::arg("handle"), py::arg("reads"), py::arg("tuples"), py::arg("timeout") = 60.0,
       "Nanoseconds per observe(i) through one handle, reading tuples 0 .. tuples-1 (tuple i holding i) over and\n"
       "over, from a C loop without the GIL: threads calling it at once on handles of one cache measure its hits.");
}

}  // namespace paths_native
