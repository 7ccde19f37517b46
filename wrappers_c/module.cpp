// module.cpp — the pybind11 module `paths._native`: the only C++ file and the only place where
// Python meets C. It converts Python tuples to and from tuple bytes (with Python's own `struct`
// module, so both sides read a format string the same way), maps status codes to Python
// exceptions, and releases the GIL around every call that may block. Blocking calls wait in
// slices so that Ctrl-C still interrupts them.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cmath>
#include <memory>
#include <string>
#include <vector>

extern "C" {
#include "kernels.h"
#include "pastset.h"
}

namespace py = pybind11;

namespace {

constexpr int64_t kWaitSliceNs = 100 * 1000 * 1000;  // how long a wait goes between signal checks
constexpr size_t kStackTuple = 256;                  // tuples up to this size are read on the stack

PyObject *g_axed_error = nullptr;

// ---- status codes -> Python exceptions --------------------------------------------------------

[[noreturn]] void raise_status(int rc, const std::string &what) {
    std::string msg = what + ": " + ps_status_name(rc);
    switch (rc) {
    case PS_ETIMEDOUT: PyErr_SetString(PyExc_TimeoutError, msg.c_str()); break;
    case PS_EAXED: PyErr_SetString(g_axed_error, msg.c_str()); break;
    case PS_EINDEX: PyErr_SetString(PyExc_IndexError, msg.c_str()); break;
    case PS_EFORMAT: case PS_EMISMATCH: case PS_EINVAL:
        PyErr_SetString(PyExc_ValueError, msg.c_str()); break;
    case PS_ENOMEM: PyErr_SetString(PyExc_MemoryError, msg.c_str()); break;
    case PS_ENOTSUP: PyErr_SetString(PyExc_NotImplementedError, msg.c_str()); break;
    case PS_EREMOTE: PyErr_SetString(PyExc_ConnectionError, msg.c_str()); break;
    default: PyErr_SetString(PyExc_RuntimeError, msg.c_str()); break;
    }
    throw py::error_already_set();
}

// Seconds (None = forever) to nanoseconds (PS_FOREVER), refusing negative or NaN timeouts.
int64_t timeout_ns(const py::object &timeout) {
    if (timeout.is_none()) return PS_FOREVER;
    double seconds = py::cast<double>(timeout);
    if (!(seconds >= 0.0) || std::isinf(seconds))
        throw py::value_error("timeout: expected None or a finite number of seconds >= 0, got " +
                              py::repr(timeout).cast<std::string>());
    return static_cast<int64_t>(seconds * 1e9);
}

// Runs op(slice_timeout_ns) without the GIL, in slices, checking for signals between slices.
// op must leave no trace when it times out, so that it can simply be called again.
template <class Op>
int wait_in_slices(Op op, const py::object &timeout) {
    int64_t total = timeout_ns(timeout);
    int64_t deadline = ps_deadline(total);
    for (;;) {
        int64_t slice = kWaitSliceNs;
        if (deadline != PS_FOREVER) slice = std::max<int64_t>(0, std::min(slice, deadline - ps_now_ns()));
        int rc;
        {
            py::gil_scoped_release released;
            rc = op(slice);
        }
        if (rc != PS_ETIMEDOUT) return rc;
        if (deadline != PS_FOREVER && ps_now_ns() >= deadline) return PS_ETIMEDOUT;
        if (PyErr_CheckSignals() != 0) throw py::error_already_set();
    }
}

// ---- tuples <-> bytes ---------------------------------------------------------------------------

// Packs and unpacks the tuples of one format with Python's struct module, and explains a wrong
// tuple in the element's own terms.
class TupleCodec {
public:
    explicit TupleCodec(const std::string &format) : format_(format) {
        char error[160];
        if (ps_tuple_format_parse(format.c_str(), &parsed_, error, sizeof error) != 0)
            throw py::value_error(error);
        py::module_ struct_module = py::module_::import("struct");
        try {
            py::object compiled = struct_module.attr("Struct")(format);
            size_ = compiled.attr("size").cast<size_t>();
            pack_ = compiled.attr("pack");
            unpack_ = compiled.attr("unpack");
        } catch (py::error_already_set &e) {
            throw py::value_error("bad format '" + format + "': " + py::str(e.value()).cast<std::string>());
        }
        if (size_ != parsed_.size)
            throw py::value_error("bad format '" + format + "': size disagrees with struct.calcsize");
        describe_fields();
    }

    const ps_tuple_format &parsed() const { return parsed_; }
    size_t size() const { return parsed_.size; }
    const std::string &format() const { return format_; }

    // Returns the packed bytes of t (a tuple, or a bare value when the format has one value).
    py::bytes pack(const py::handle &t, const std::string &owner) const {
        py::tuple values;
        if (py::isinstance<py::tuple>(t) || py::isinstance<py::list>(t)) values = py::tuple(py::reinterpret_borrow<py::object>(t));
        else if (parsed_.value_count == 1) values = py::make_tuple(t);
        else wrong_tuple(t, owner, "not a tuple");
        if (values.size() != parsed_.value_count) wrong_tuple(t, owner, "wrong number of values");
        try {
            return pack_(*values);
        } catch (py::error_already_set &e) {
            if (!e.matches(PyExc_Exception)) throw;
            wrong_tuple(t, owner, py::str(e.value()).cast<std::string>());
        }
    }

    py::object unpack(const void *bytes) const {
        py::bytes raw(static_cast<const char *>(bytes), parsed_.size);
        return unpack_(raw);
    }

private:
    [[noreturn]] void wrong_tuple(const py::handle &t, const std::string &owner, const std::string &why) const {
        std::string given = py::repr(t).cast<std::string>();
        if (given.size() > 120) given = given.substr(0, 117) + "...";
        throw py::type_error(owner + " (format '" + format_ + "'): expected a tuple of " +
                             std::to_string(parsed_.value_count) + " value(s) (" + fields_ + "), got " +
                             given + " (" + why + ")");
    }

    void describe_fields() {
        for (uint32_t i = 0; i < parsed_.run_count; i++) {
            const ps_field_run &run = parsed_.runs[i];
            const char *type = nullptr;
            switch (run.kind) {
            case PS_FIELD_SIGNED: case PS_FIELD_UNSIGNED: type = "int"; break;
            case PS_FIELD_FLOAT: type = "float"; break;
            case PS_FIELD_BOOL: type = "bool"; break;
            case PS_FIELD_BYTES: type = "bytes"; break;
            default: continue;
            }
            uint32_t repeat = (run.code == 's' || run.code == 'p') ? 1 : run.count;
            for (uint32_t k = 0; k < repeat; k++) fields_ += (fields_.empty() ? "" : ", ") + std::string(type);
        }
    }

    std::string format_;
    ps_tuple_format parsed_;
    size_t size_ = 0;
    py::object pack_, unpack_;  // bound methods of the compiled struct.Struct
    std::string fields_;
};

// A tuple-sized buffer: on the stack for small tuples, so observe does not allocate.
class TupleBuffer {
public:
    explicit TupleBuffer(size_t size) {
        if (size > kStackTuple) heap_.resize(size);
    }
    void *data() { return heap_.empty() ? static_cast<void *>(stack_) : heap_.data(); }

private:
    alignas(16) unsigned char stack_[kStackTuple];
    std::vector<unsigned char> heap_;
};

// ---- PastSet and Element ----------------------------------------------------------------------

struct SpaceOwner {
    ps_space *space;
    SpaceOwner() : space(ps_space_new()) {
        if (!space) throw std::bad_alloc();
    }
    ~SpaceOwner() { ps_space_free(space); }
};

class Element {
public:
    Element(std::shared_ptr<SpaceOwner> owner, ps_element *e)
        : owner_(std::move(owner)), e_(e), codec_(ps_element_format(e)->text),
          label_(std::string("element '") + ps_element_name(e) + "'") {}

    std::string name() const { return ps_element_name(e_); }
    std::string format() const { return codec_.format(); }

    void move(const py::handle &t, const py::object &timeout) {
        py::bytes packed = codec_.pack(t, label_);
        const char *bytes = PyBytes_AS_STRING(packed.ptr());
        int rc = wait_in_slices([&](int64_t slice) { return ps_move(e_, bytes, slice); }, timeout);
        if (rc != PS_OK) raise_status(rc, label_ + " move");
    }

    py::object observe(const py::object &index, const py::object &timeout) {
        TupleBuffer buffer(codec_.size());
        void *out = buffer.data();
        int rc;
        if (index.is_none()) {
            rc = wait_in_slices([&](int64_t slice) { return ps_observe(e_, out, nullptr, slice); }, timeout);
            if (rc != PS_OK) raise_status(rc, label_ + " observe");
        } else {
            int64_t i = py::cast<int64_t>(index);
            rc = wait_in_slices([&](int64_t slice) { return ps_observe_at(e_, i, out, slice); }, timeout);
            if (rc == PS_EAXED)
                raise_status(rc, label_ + " observe(" + std::to_string(i) + "): tuple " + std::to_string(i) +
                                     " was freed by axe (first live index is " + std::to_string(ps_axed(e_)) + ")");
            if (rc == PS_EINDEX)
                raise_status(rc, label_ + " observe(" + std::to_string(i) + "): expected an index >= 0");
            if (rc != PS_OK) raise_status(rc, label_ + " observe(" + std::to_string(i) + ")");
        }
        return codec_.unpack(out);
    }

    int64_t first() const { return ps_first(e_); }
    int64_t last() const { return ps_last(e_); }

    int64_t delta(const py::object &bound) {
        if (!bound.is_none()) {
            int64_t n = py::cast<int64_t>(bound);
            if (n < 0) throw py::value_error(label_ + " delta(" + std::to_string(n) + "): expected a bound >= 0 (0 = unbounded)");
            ps_set_delta(e_, n);
        }
        return ps_delta(e_);
    }

    void axe(int64_t index) {
        int rc = ps_axe(e_, index);
        if (rc != PS_OK)
            raise_status(rc, label_ + " axe(" + std::to_string(index) + "): expected 0 <= index <= last() = " +
                                 std::to_string(ps_last(e_)));
    }

    py::dict stats() const {
        ps_element_stats s;
        ps_element_stats_read(e_, &s);
        py::dict d;
        d["live_tuples"] = s.live_tuples;
        d["bytes_held"] = s.bytes_held;
        d["moves"] = s.moves;
        d["observes"] = s.observes;
        d["waits"] = s.waits;
        return d;
    }

    std::string repr() const {
        return "<paths.Element '" + name() + "' format '" + format() + "' first=" + std::to_string(first()) +
               " last=" + std::to_string(last()) + ">";
    }

private:
    std::shared_ptr<SpaceOwner> owner_;
    ps_element *e_;
    TupleCodec codec_;
    std::string label_;
};

class PastSet {
public:
    PastSet() : owner_(std::make_shared<SpaceOwner>()) {}

    Element enter(const std::string &name, const std::string &format) {
        ps_element *e = nullptr;
        int rc = ps_enter(owner_->space, name.c_str(), format.c_str(), &e);
        if (rc == PS_EFORMAT) TupleCodec explain(format);  // throws ValueError with the reason
        if (rc == PS_EMISMATCH) {
            std::string existing;
            for (size_t i = 0; i < ps_space_count(owner_->space); i++) {
                ps_element *other = ps_space_element(owner_->space, i);
                if (name == ps_element_name(other)) existing = ps_element_format(other)->text;
            }
            throw py::value_error("enter('" + name + "', '" + format + "'): element '" + name +
                                  "' exists with format '" + existing + "'");
        }
        if (rc == PS_EINVAL) throw py::value_error("enter(): expected a name of 1 to 255 bytes, got '" + name + "'");
        if (rc != PS_OK) raise_status(rc, "enter('" + name + "', '" + format + "')");
        return Element(owner_, e);
    }

    std::vector<std::pair<std::string, std::string>> elements() const {
        std::vector<std::pair<std::string, std::string>> out;
        size_t n = ps_space_count(owner_->space);
        for (size_t i = 0; i < n; i++) {
            ps_element *e = ps_space_element(owner_->space, i);
            out.emplace_back(ps_element_name(e), ps_element_format(e)->text);
        }
        return out;
    }

private:
    std::shared_ptr<SpaceOwner> owner_;
};

}  // namespace

PYBIND11_MODULE(_native, m) {
    m.doc() = "PATHS native core: PastSet elements, stages and benchmark kernels";
    g_axed_error = PyErr_NewExceptionWithDoc("paths.AxedError",
                                             "Raised when observing a tuple that axe() has freed.",
                                             PyExc_IndexError, nullptr);
    m.add_object("AxedError", py::handle(g_axed_error));

    py::class_<Element>(m, "Element", "A PastSet element: an ordered, append-only log of tuples of one format.")
        .def_property_readonly("name", &Element::name)
        .def_property_readonly("format", &Element::format)
        .def("move", &Element::move, py::arg("t"), py::arg("timeout") = py::none(),
             "Append tuple t; blocks while the unread tuples reach the delta bound.")
        .def("observe", &Element::observe, py::arg("index") = py::none(), py::arg("timeout") = py::none(),
             "observe() reads the next unread tuple; observe(i) reads tuple i. Both block until it exists.")
        .def("first", &Element::first, "Index of the next unread tuple.")
        .def("last", &Element::last, "Number of tuples moved.")
        .def("delta", &Element::delta, py::arg("bound") = py::none(),
             "delta(n) bounds the unread tuples (0 = unbounded); delta() reads the bound.")
        .def("axe", &Element::axe, py::arg("index"), "Free the tuples before index.")
        .def("stats", &Element::stats, "Counters: live_tuples, bytes_held, moves, observes, waits.")
        .def("__repr__", &Element::repr);

    py::class_<PastSet>(m, "PastSet", "A PastSet tuple space: elements addressed by (name, format).")
        .def(py::init<>())
        .def("enter", &PastSet::enter, py::arg("name"), py::arg("format"),
             "Find or create the element (name, format).")
        .def("elements", &PastSet::elements, "[(name, format), ...] in creation order.");

    py::module_ bench = m.def_submodule("bench", "C benchmark kernels");
    bench.def("core_pairs_ns", [](int64_t pairs) {
        if (pairs <= 0) throw py::value_error("core_pairs_ns: expected pairs > 0");
        py::gil_scoped_release released;
        return ps_kernel_core_pairs_ns(pairs);
    }, py::arg("pairs"), "Nanoseconds per move+observe pair from a C loop on one element.");
}
