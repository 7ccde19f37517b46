// endpoint.hpp — the operations every tuple endpoint offers Python: an Element and a Handle
// answer the same calls and differ only in what runs an operation value. Endpoint<Backend> makes
// the operation from Python's arguments, runs it in slices without the GIL, and words its errors;
// Backend supplies
//   int call(ps_op *op)              runs one operation (its results are in op)
//   int64_t deadline()               the latest any call may wait (PS_FOREVER: no limit)
//   std::string explanation()        what the path could say about its last failure
//   void hold(), void let_go()       around a call of several slices: no other thread's call between
#ifndef WRAPPERS_ENDPOINT_HPP
#define WRAPPERS_ENDPOINT_HPP

#include <pybind11/pybind11.h>

#include <cstdint>
#include <string>
#include <vector>

#include "python_call.hpp"
#include "tuple_codec.hpp"

extern "C" {
#include "operation.h"
}

namespace paths_native {

// A fresh operation of `kind`, every argument and result zero.
inline ps_op operation(ps_op_kind kind) {
    ps_op op{};
    op.kind = kind;
    return op;
}

template <class Backend>
class Endpoint : public Backend {
public:
    template <class... Args>
    Endpoint(const std::string &format, std::string label, Args &&...args)
        : Backend(std::forward<Args>(args)...), codec_(format), label_(std::move(label)), move_call_(label_ + " move"),
          exchange_call_(label_ + " exchange") {}

    const std::string &format() const { return codec_.format(); }
    const std::string &label() const { return label_; }
    const TupleCodec &codec() const { return codec_; }

    void move(const py::handle &t, const py::object &timeout) {
        py::bytes packed = codec_.pack(t, move_call_);
        ps_op op = operation(PS_OP_MOVE);
        op.in = PyBytes_AS_STRING(packed.ptr());
        int rc = waiting(op, timeout);
        if (rc != PS_OK) fail(rc, move_call_);
    }

    // What the stages hold back (a batch's buffered moves) goes down; paths.fence also waits until
    // it is applied.
    void flush(const py::object &timeout) {
        ps_op op = operation(PS_OP_FLUSH);
        int rc = waiting(op, timeout);
        if (rc != PS_OK) fail(rc, label_ + " flush");
    }

    // The tuples in order, as one operation (a remote stage: one frame per 16 KiB of them).
    void move_many(const py::handle &tuples, const py::object &timeout) {
        std::string call = label_ + " move_many";
        std::vector<unsigned char> packed;
        size_t n = codec_.pack_all(tuples, call, packed), done = 0;
        bool unsure = false; // a failure's lost answer: the tuples not counted done may have moved too
        int rc = sliced([&](int64_t slice) {
            int64_t deadline = ps_deadline(slice);
            int status = PS_OK;
            while (done < n && status == PS_OK) {
                ps_op op = operation(PS_OP_MOVE_MANY);
                op.in = packed.data() + done * codec_.size();
                op.count = static_cast<uint32_t>(std::min<size_t>(n - done, UINT32_MAX));
                op.timeout_ns = ps_remaining(deadline);
                status = Backend::call(&op);
                // Failed: the caller's moves a stage dropped are its latest, those an earlier slice's
                // call took of these tuples first.
                if (status != PS_OK && status != PS_ETIMEDOUT && op.dropped > 0)
                    done -= std::min<size_t>(static_cast<size_t>(op.dropped), done);
                done += op.done;
                unsure = ps_op_done_is_at_least(status) && !op.sent_nothing;
            }
            return status;
        }, timeout);
        std::string moved = (unsure && done < n ? "at least " : "") + std::to_string(done) + " of " +
                            std::to_string(n) + " tuples moved";
        if (rc != PS_OK) fail(rc, call + " (" + moved + ")");
    }

    py::object observe(const py::object &index, const py::object &timeout) {
        TupleBuffer buffer(codec_.size());
        if (index.is_none()) {
            ps_op op = operation(PS_OP_OBSERVE);
            op.out = buffer.data();
            int rc = waiting(op, timeout);
            if (rc != PS_OK) fail(rc, label_ + " observe");
            return codec_.unpack(buffer.data());
        }
        int64_t i = int_argument(index, label_ + " observe(index)");
        std::string call = label_ + " observe(" + std::to_string(i) + ")";
        ps_op op = operation(PS_OP_OBSERVE_AT);
        op.argument = i;
        op.out = buffer.data();
        op.value = -1;  // a refusal for an axed tuple sets it to the first live index, where known
        int rc = waiting(op, timeout);
        if (rc == PS_EAXED)
            fail(rc, call + ": tuple " + std::to_string(i) + " was freed by axe" +
                         (op.value >= 0 ? " (first live index is " + std::to_string(op.value) + ")" : ""));
        if (rc == PS_EINDEX) fail(rc, call + ": expected an index >= 0");
        if (rc != PS_OK) fail(rc, call);
        return codec_.unpack(buffer.data());
    }

    // Tuples index, index + 1, ... that exist, at most count of them, as one operation (through a
    // remote stage: one request, its answer streamed); waits for tuple `index` only.
    py::list observe_range(const py::object &index, const py::object &count, const py::object &timeout) {
        int64_t first = int_argument(index, label_ + " observe_range(index)");
        int64_t n = int_argument(count, label_ + " observe_range(count)");
        std::string call = label_ + " observe_range(" + std::to_string(first) + ", " + std::to_string(n) + ")";
        int64_t most = ps_op_range_max(codec_.size());
        if (n < 1 || n > most)
            throw py::value_error(call + ": expected a count from 1 to " + std::to_string(most) + " (" +
                                  std::to_string(PS_OP_RANGE_MAX_BYTES >> 20) + " MiB of " +
                                  std::to_string(codec_.size()) + "-byte tuples): one range is bounded");
        std::vector<unsigned char> buffer(static_cast<size_t>(n) * codec_.size());
        ps_op op = operation(PS_OP_OBSERVE_RANGE);
        op.argument = first;
        op.count = static_cast<uint32_t>(n);
        op.out = buffer.data();
        int rc = waiting(op, timeout);
        if (rc == PS_EAXED)
            fail(rc, call + ": tuple " + std::to_string(first) + " was freed by axe (first live index is " +
                         std::to_string(op.value) + ")");
        if (rc == PS_EINDEX) fail(rc, call + ": expected an index >= 0");
        if (rc != PS_OK) fail(rc, call);
        py::list tuples;
        for (int64_t i = 0; i < op.value; i++) tuples.append(codec_.unpack(buffer.data() + i * codec_.size()));
        return tuples;
    }

    // A move of t, then an observe, as one operation (through a remote stage: one round trip).
    py::object exchange(const py::handle &t, const py::object &timeout) {
        py::bytes packed = codec_.pack(t, exchange_call_);
        TupleBuffer buffer(codec_.size());
        ps_op op = operation(PS_OP_EXCHANGE);
        op.in = PyBytes_AS_STRING(packed.ptr());
        op.out = buffer.data();
        int rc = sliced([&](int64_t slice) {
            op.timeout_ns = slice;
            int status = Backend::call(&op);
            if (op.kind == PS_OP_EXCHANGE && op.done) op.kind = PS_OP_OBSERVE;  // what is left of it
            return status;
        }, timeout);
        if (rc != PS_OK) fail(rc, op.kind == PS_OP_OBSERVE ? exchange_call_ + " (moved; its observe)" : exchange_call_);
        return codec_.unpack(buffer.data());
    }

    int64_t first() { return value_of(operation(PS_OP_FIRST), "first"); }
    int64_t last() { return value_of(operation(PS_OP_LAST), "last"); }

    int64_t delta(const py::object &bound) {
        ps_op op = operation(PS_OP_DELTA);
        op.argument = -1;
        if (!bound.is_none()) {
            op.argument = int_argument(bound, label_ + " delta(bound)");
            if (op.argument < 0)
                throw py::value_error(label_ + " delta(" + std::to_string(op.argument) +
                                      "): expected a bound >= 0 (0 = unbounded)");
        }
        return value_of(op, "delta");
    }

    void axe(const py::object &index) {
        std::string call = label_ + " axe(" + shown(index) + ")";
        ps_op op = operation(PS_OP_AXE);
        int rc = PS_EINDEX;  // an index beyond 64 bits is beyond last() too
        if (int64_of(index, call, &op.argument)) rc = held_moves_first(op);
        if (rc == PS_EINDEX || rc == PS_EINVAL)
            fail(rc, call + ": expected 0 <= index <= last() = " + std::to_string(last()));
        if (rc != PS_OK) fail(rc, call);
    }

    std::string repr(const char *type) {
        return std::string("<paths.") + type + " " + label_ + " format '" + format() + "' first=" +
               std::to_string(first()) + " last=" + std::to_string(last()) + ">";
    }

private:
    // Runs a call in slices (see wait_in_slices), holding the backend throughout: another thread's
    // call (or fence) between two slices is refused, as one during a slice is.
    template <class Op, class Timeout>  // a Python timeout, or one in ns
    int sliced(Op op, const Timeout &timeout) {
        Backend::hold();
        try {
            int rc = wait_in_slices(op, timeout, Backend::deadline());
            Backend::let_go();
            return rc;
        } catch (...) {
            Backend::let_go();
            throw;
        }
    }

    // Runs an operation that may wait, in slices (see wait_in_slices).
    int waiting(ps_op &op, const py::object &timeout) {
        return sliced([&](int64_t slice) {
            op.timeout_ns = slice;
            return Backend::call(&op);
        }, timeout);
    }

    // Runs an operation that does not wait at the element. It may wait for the caller's moves a
    // stage holds back (PS_UNTIMED_WAIT_NS at most): in slices, so that Ctrl-C is heard.
    int held_moves_first(ps_op &op) {
        return sliced([&](int64_t slice) {
            op.timeout_ns = std::max<int64_t>(slice, 1);  // > 0: the slice, not the stages' default
            return Backend::call(&op);
        }, PS_UNTIMED_WAIT_NS);
    }

    // Runs an operation that does not wait at the element (held_moves_first) and returns its value.
    int64_t value_of(ps_op op, const char *what) {
        int rc = held_moves_first(op);
        if (rc != PS_OK) fail(rc, label_ + " " + what);
        return op.value;
    }

    // Raises the status as a Python exception, with what the path could say about it.
    [[noreturn]] void fail(int rc, const std::string &what) {
        std::string why = ps_status_is_explained(rc) ? Backend::explanation() : "";
        raise_status(rc, why.empty() ? what : what + " (" + why + ")");
    }

    TupleCodec codec_;
    std::string label_;
    std::string move_call_, exchange_call_;  // how a message names these calls, made once
};

template <class T, class... Options>
void bind_endpoint(py::class_<T, Options...> &cls, const char *type) {
    cls.def_property_readonly("format", &T::format)
        .def("move", &T::move, py::arg("t"), py::arg("timeout") = py::none(),
             "Append tuple t; blocks while the unread tuples reach the delta bound.")
        .def("move_many", &T::move_many, py::arg("tuples"), py::arg("timeout") = py::none(),
             "Append the tuples in order, as one operation (n moves in effect; through a remote stage one\n"
             "round trip). A failure may come after a first part of them moved: its message says how many.")
        .def("observe", &T::observe, py::arg("index") = py::none(), py::arg("timeout") = py::none(),
             "observe() reads the next unread tuple; observe(i) reads tuple i. Both block until it exists.")
        .def("observe_range", &T::observe_range, py::arg("index"), py::arg("count"), py::arg("timeout") = py::none(),
             "The tuples index, index+1, ... that exist, at most count of them (a list): one operation, through a\n"
             "remote stage one request. Blocks until tuple index exists. A range holds at most 4 MiB of tuples.")
        .def("exchange", &T::exchange, py::arg("t"), py::arg("timeout") = py::none(),
             "Move t, then observe the next unread tuple, as one operation (through a remote stage: one\n"
             "round trip); returns the observed tuple.")
        .def("flush", &T::flush, py::arg("timeout") = py::none(),
             "Send down what the path holds back (a batch stage's buffered moves); paths.fence also waits\n"
             "until those moves are applied at the element.")
        .def("first", &T::first, "Index of the next unread tuple.")
        .def("last", &T::last, "Number of tuples moved.")
        .def("delta", &T::delta, py::arg("bound") = py::none(),
             "delta(n) bounds the unread tuples (0 = unbounded); delta() reads the bound.")
        .def("axe", &T::axe, py::arg("index"), "Free the tuples before index.")
        .def("__repr__", [type](T &self) { return self.repr(type); });
}

}  // namespace paths_native

#endif
