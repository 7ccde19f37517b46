// module.cpp — the pybind11 module `paths._native`: the only C++ file and the only place where
// Python meets C. It converts Python tuples to and from tuple bytes (with Python's own `struct`
// module, so both sides read a format string the same way), maps status codes to Python
// exceptions, and releases the GIL around every call that may block. Blocking calls wait in
// slices so that Ctrl-C still interrupts them.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>
#include <zmq.h>

#include <dlfcn.h>

#include <cmath>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

extern "C" {
#include "kernel_run.h"
#include "kernels.h"
#include "pastset.h"
#include "bridge_stage.h"
#include "server.h"
#include "stage.h"
#include "trace.h"
}

namespace py = pybind11;

namespace {

constexpr int64_t kWaitSliceNs = 100 * 1000 * 1000;  // how long a wait goes between signal checks
constexpr size_t kStackTuple = 256;                  // tuples up to this size are read on the stack

PyObject *g_axed_error = nullptr;

// ---- status codes -> Python exceptions --------------------------------------------------------

// An exception raised inside a Python stage, kept until the operation returns to Python.
thread_local std::unique_ptr<py::error_already_set> t_python_stage_error;

// Text from C as a Python str: a message cut to fit its buffer may end in half a UTF-8 character.
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
    if (t_python_stage_error) {
        std::unique_ptr<py::error_already_set> error = std::move(t_python_stage_error);
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

// A value as a message shows it: its repr, cut to a line.
std::string shown(const py::handle &value) {
    std::string text = py::repr(value).cast<std::string>();
    return text.size() > 120 ? text.substr(0, 117) + "..." : text;
}

// Seconds (None = forever) to nanoseconds (PS_FOREVER), refusing negative or NaN timeouts.
int64_t timeout_ns(const py::object &timeout) {
    if (timeout.is_none()) return PS_FOREVER;
    if (!py::isinstance<py::int_>(timeout) && !py::isinstance<py::float_>(timeout))
        throw py::type_error("timeout: expected None or a number of seconds, got " + shown(timeout));
    double seconds = py::cast<double>(timeout);
    if (!(seconds >= 0.0) || std::isinf(seconds))
        throw py::value_error("timeout: expected None or a finite number of seconds >= 0, got " + shown(timeout));
    constexpr double kLongest = 1e9;  // seconds: beyond 31 years, a timeout is no timeout
    return seconds >= kLongest ? PS_FOREVER : static_cast<int64_t>(seconds * 1e9);
}

// An int argument's value, or false when it does not fit in 64 bits; a TypeError naming `what`
// when it is no int (a bool is no index either).
bool int64_of(const py::handle &value, const std::string &what, int64_t *out) {
    if (!PyLong_Check(value.ptr()) || PyBool_Check(value.ptr()))
        throw py::type_error(what + ": expected an int, got " + shown(value));
    int overflow = 0;
    *out = PyLong_AsLongLongAndOverflow(value.ptr(), &overflow);
    return overflow == 0;
}

// An int argument that must fit in 64 bits, or a TypeError/ValueError naming it.
int64_t int_argument(const py::handle &value, const std::string &what) {
    int64_t v;
    if (!int64_of(value, what, &v))
        throw py::value_error(what + ": expected an int that fits in 64 bits, got " + shown(value));
    return v;
}

// Text handed to C, where a NUL byte would silently end it ('a\0b' would be 'a').
const std::string &c_text(const std::string &text, const std::string &what) {
    if (text.find('\0') != std::string::npos)
        throw py::value_error(what + ": expected text without NUL bytes, got " + shown(py::str(text)));
    return text;
}

// Runs op(slice_timeout_ns) without the GIL, in slices, checking for signals between slices,
// until the timeout or the `latest` deadline (PS_FOREVER: none), whichever comes first. op must
// leave no trace when it times out, so that it can simply be called again.
template <class Op>
int wait_in_slices(Op op, const py::object &timeout, int64_t latest) {
    int64_t deadline = ps_deadline(timeout_ns(timeout));
    if (latest != PS_FOREVER && (deadline == PS_FOREVER || latest < deadline)) deadline = latest;
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
        for (const BytesField &field : bytes_fields_) check_length(values[field.value], field, owner);
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
    // An 's' or 'p' field: struct.pack would silently cut longer bytes to fit it.
    struct BytesField {
        size_t value;      // its place in the tuple
        size_t capacity;   // bytes it holds ('p' keeps one for the length)
        std::string code;  // as written: "16s"
    };

    void check_length(const py::handle &value, const BytesField &field, const std::string &owner) const {
        Py_ssize_t length = PyBytes_Check(value.ptr())       ? PyBytes_GET_SIZE(value.ptr())
                            : PyByteArray_Check(value.ptr()) ? PyByteArray_GET_SIZE(value.ptr())
                                                             : -1;  // not bytes: struct explains
        if (length > static_cast<Py_ssize_t>(field.capacity))
            throw py::value_error(owner + " (format '" + format_ + "'): field " + std::to_string(field.value) +
                                  " ('" + field.code + "') holds at most " + std::to_string(field.capacity) +
                                  " bytes, got " + std::to_string(length));
    }

    [[noreturn]] void wrong_tuple(const py::handle &t, const std::string &owner, const std::string &why) const {
        throw py::type_error(owner + " (format '" + format_ + "'): expected a tuple of " +
                             std::to_string(parsed_.value_count) + " value(s) (" + fields_ + "), got " +
                             shown(t) + " (" + why + ")");
    }

    void describe_fields() {
        size_t value = 0;
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
            bool string = run.code == 's' || run.code == 'p';
            if (string) {
                size_t capacity = run.code == 'p' && run.count > 0 ? run.count - 1 : run.count;
                bytes_fields_.push_back({value, capacity, std::to_string(run.count) + static_cast<char>(run.code)});
            }
            uint32_t repeat = string ? 1 : run.count;
            for (uint32_t k = 0; k < repeat; k++, value++) fields_ += (fields_.empty() ? "" : ", ") + std::string(type);
        }
    }

    std::string format_;
    ps_tuple_format parsed_;
    size_t size_ = 0;
    py::object pack_, unpack_;  // bound methods of the compiled struct.Struct
    std::string fields_;
    std::vector<BytesField> bytes_fields_;
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

// ---- the operations every tuple endpoint offers ----------------------------------------------

// An Element and a Handle answer the same calls; they differ only in the C functions behind
// them. Endpoint<Backend> holds the codec and the error wording once; Backend holds the calls:
//   int move(const void *, int64_t), observe(void *, int64_t), observe_at(int64_t, void *, int64_t)
//   int first(int64_t *), last(int64_t *), delta(int64_t, int64_t *), axe(int64_t); int64_t axed()
template <class Backend>
class Endpoint : public Backend {
public:
    template <class... Args>
    Endpoint(const std::string &format, std::string label, Args &&...args)
        : Backend(std::forward<Args>(args)...), codec_(format), label_(std::move(label)) {}

    const std::string &format() const { return codec_.format(); }
    const std::string &label() const { return label_; }
    const TupleCodec &codec() const { return codec_; }

    void move(const py::handle &t, const py::object &timeout) {
        py::bytes packed = codec_.pack(t, label_);
        const char *bytes = PyBytes_AS_STRING(packed.ptr());
        int rc = wait_in_slices([&](int64_t slice) { return Backend::move(bytes, slice); }, timeout, Backend::deadline());
        if (rc == PS_ESTATE)
            fail(rc, label_ + " move: a sum holds 4 rounds, and this caller has moved 4 it has not observed yet: observe first");
        if (rc != PS_OK) fail(rc, label_ + " move");
    }

    py::object observe(const py::object &index, const py::object &timeout) {
        TupleBuffer buffer(codec_.size());
        void *out = buffer.data();
        if (index.is_none()) {
            int rc = wait_in_slices([&](int64_t slice) { return Backend::observe(out, slice); }, timeout, Backend::deadline());
            if (rc == PS_ESTATE) fail(rc, label_ + " observe: each observe answers one earlier move");
            if (rc != PS_OK) fail(rc, label_ + " observe");
            return codec_.unpack(out);
        }
        int64_t i = int_argument(index, label_ + " observe(index)");
        std::string call = label_ + " observe(" + std::to_string(i) + ")";
        int rc = wait_in_slices([&](int64_t slice) { return Backend::observe_at(i, out, slice); }, timeout, Backend::deadline());
        if (rc == PS_EAXED)
            fail(rc, call + ": tuple " + std::to_string(i) + " was freed by axe (first live index is " +
                                 std::to_string(Backend::axed()) + ")");
        if (rc == PS_EINDEX) fail(rc, call + ": expected an index >= 0");
        if (rc != PS_OK) fail(rc, call);
        return codec_.unpack(out);
    }

    int64_t first() { return number("first", [&](int64_t *v) { return Backend::first(v); }); }
    int64_t last() { return number("last", [&](int64_t *v) { return Backend::last(v); }); }

    int64_t delta(const py::object &bound) {
        int64_t n = -1;
        if (!bound.is_none()) {
            n = int_argument(bound, label_ + " delta(bound)");
            if (n < 0)
                throw py::value_error(label_ + " delta(" + std::to_string(n) + "): expected a bound >= 0 (0 = unbounded)");
        }
        return number("delta", [&](int64_t *v) { return Backend::delta(n, v); });
    }

    void axe(const py::object &index) {
        std::string call = label_ + " axe(" + shown(index) + ")";
        int64_t i;
        int rc = PS_EINDEX;  // an index beyond 64 bits is beyond last() too
        if (int64_of(index, call, &i)) {
            py::gil_scoped_release released;
            rc = Backend::axe(i);
        }
        if (rc == PS_EINDEX || rc == PS_EINVAL)
            fail(rc, call + ": expected 0 <= index <= last() = " + std::to_string(last()));
        if (rc != PS_OK) fail(rc, call);
    }

    std::string repr(const char *type) {
        return std::string("<paths.") + type + " " + label_ + " format '" + format() + "' first=" +
               std::to_string(first()) + " last=" + std::to_string(last()) + ">";
    }

private:
    // Raises the status as a Python exception, with what the stage could say about it.
    [[noreturn]] void fail(int rc, const std::string &what) {
        std::string why = rc == PS_EREMOTE || rc == PS_EINVAL ? Backend::explanation() : "";
        raise_status(rc, why.empty() ? what : what + " (" + why + ")");
    }

    template <class Call>
    int64_t number(const char *what, Call call) {
        int64_t value = 0;
        int rc;
        {
            py::gil_scoped_release released;
            rc = call(&value);
        }
        if (rc != PS_OK) fail(rc, label_ + " " + what);
        return value;
    }

    TupleCodec codec_;
    std::string label_;
};

template <class T, class... Options>
void bind_endpoint(py::class_<T, Options...> &cls, const char *type) {
    cls.def_property_readonly("format", &T::format)
        .def("move", &T::move, py::arg("t"), py::arg("timeout") = py::none(),
             "Append tuple t; blocks while the unread tuples reach the delta bound.")
        .def("observe", &T::observe, py::arg("index") = py::none(), py::arg("timeout") = py::none(),
             "observe() reads the next unread tuple; observe(i) reads tuple i. Both block until it exists.")
        .def("first", &T::first, "Index of the next unread tuple.")
        .def("last", &T::last, "Number of tuples moved.")
        .def("delta", &T::delta, py::arg("bound") = py::none(),
             "delta(n) bounds the unread tuples (0 = unbounded); delta() reads the bound.")
        .def("axe", &T::axe, py::arg("index"), "Free the tuples before index.")
        .def("__repr__", [type](T &self) { return self.repr(type); });
}

// ---- PastSet and Element ----------------------------------------------------------------------

struct SpaceOwner {
    ps_space *space;
    SpaceOwner() : space(ps_space_new()) {
        if (!space) {
            PyErr_SetString(PyExc_MemoryError, "PastSet(): out of memory");
            throw py::error_already_set();
        }
    }
    ~SpaceOwner() { ps_space_free(space); }
};

// One hold on an element (so it cannot be removed), given back when the last Element object
// sharing it goes. Keeps the PastSet alive too.
struct ElementHold {
    ElementHold(std::shared_ptr<SpaceOwner> owner, ps_element *e) : owner(std::move(owner)), e(e) {}
    ~ElementHold() { ps_leave(e); }
    ElementHold(const ElementHold &) = delete;
    ElementHold &operator=(const ElementHold &) = delete;

    std::shared_ptr<SpaceOwner> owner;
    ps_element *e;
};

// The element calls, straight into the PastSet core.
class ElementCalls {
public:
    ElementCalls(std::shared_ptr<SpaceOwner> owner, ps_element *e)
        : hold_(std::make_shared<ElementHold>(std::move(owner), e)), e_(e) {}

    int move(const void *t, int64_t timeout) { return ps_move(e_, t, timeout); }
    int observe(void *out, int64_t timeout) { return ps_observe(e_, out, nullptr, timeout); }
    int observe_at(int64_t i, void *out, int64_t timeout) { return ps_observe_at(e_, i, out, timeout); }
    int first(int64_t *v) { *v = ps_first(e_); return PS_OK; }
    int last(int64_t *v) { *v = ps_last(e_); return PS_OK; }
    int delta(int64_t bound, int64_t *v) {
        if (bound >= 0) ps_set_delta(e_, bound);
        *v = ps_delta(e_);
        return PS_OK;
    }
    int axe(int64_t index) { return ps_axe(e_, index); }
    int64_t axed() { return ps_axed(e_); }
    int64_t deadline() const { return PS_FOREVER; }
    std::string explanation() const { return ""; }

    std::string name() const { return ps_element_name(e_); }

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

private:
    std::shared_ptr<ElementHold> hold_;
    ps_element *e_;
};

using Element = Endpoint<ElementCalls>;

class PastSet {
public:
    PastSet() : owner_(std::make_shared<SpaceOwner>()) {}

    Element enter(const std::string &name, const std::string &format) {
        std::string call = "enter(" + shown(py::str(name)) + ", " + shown(py::str(format)) + ")";
        ps_element *e = nullptr;
        int rc = ps_enter(owner_->space, c_text(name, call).c_str(), c_text(format, call).c_str(), &e);
        if (rc == PS_EFORMAT) TupleCodec explain(format);  // throws ValueError with the reason
        if (rc == PS_EMISMATCH)
            throw py::value_error(call + ": element '" + name + "' exists with format '" + existing_format(name) + "'");
        if (rc == PS_EINVAL) throw py::value_error(call + ": expected a name of 1 to 255 bytes");
        if (rc != PS_OK) raise_status(rc, call);
        return Element(format, "element '" + name + "'", owner_, e);
    }

    void remove(const std::string &name, const std::string &format) {
        std::string call = "remove(" + shown(py::str(name)) + ", " + shown(py::str(format)) + ")";
        int64_t holds = 0;
        int rc = ps_remove(owner_->space, c_text(name, call).c_str(), c_text(format, call).c_str(), &holds);
        if (rc == PS_EFORMAT) TupleCodec explain(format);
        if (rc == PS_EINVAL) throw py::value_error(call + ": there is no element '" + name + "'");
        if (rc == PS_EMISMATCH)
            throw py::value_error(call + ": element '" + name + "' has format '" + existing_format(name) + "'");
        if (rc == PS_ESTATE)
            throw std::runtime_error(call + ": element '" + name + "' is in use (" + std::to_string(holds) +
                                     " hold(s): Element objects, and paths built over it); drop them first");
        if (rc != PS_OK) raise_status(rc, call);
    }

    std::vector<std::pair<std::string, std::string>> elements() const {
        std::vector<std::pair<std::string, std::string>> out;
        ps_space_each(owner_->space, [](void *context, const ps_element *e) {
            static_cast<decltype(out) *>(context)->emplace_back(ps_element_name(e), ps_element_format(e)->text);
        }, &out);
        return out;
    }

    const std::shared_ptr<SpaceOwner> &owner() const { return owner_; }

private:
    std::string existing_format(const std::string &name) const {
        for (auto &[n, f] : elements())
            if (n == name) return f;
        return "";
    }

    std::shared_ptr<SpaceOwner> owner_;
};

// ---- stages and handles -----------------------------------------------------------------------

// One reference to a built C stage, owned by Python. Keeps the PastSet alive for the core.
class Stage {
public:
    Stage(ps_stage *stage, std::shared_ptr<SpaceOwner> owner) : stage_(stage), owner_(std::move(owner)) {}
    ~Stage() {
        py::gil_scoped_release released;  // a trace may write its file here
        ps_stage_release(stage_);
    }
    Stage(const Stage &) = delete;
    Stage &operator=(const Stage &) = delete;

    ps_stage *get() const { return stage_; }
    const std::shared_ptr<SpaceOwner> &owner() const { return owner_; }
    std::string kind() const { return ps_stage_kind_name(stage_); }
    uint32_t max_links() const { return ps_stage_max_links(stage_); }
    uint32_t link_count() const { return ps_stage_link_count(stage_); }
    std::string format() const { return ps_stage_format(stage_)->text; }

    py::dict counters() const {
        ps_counter values[32];
        int n = ps_stage_counters(stage_, values, 32);
        py::dict d;
        for (int i = 0; i < n; i++) d[values[i].name] = values[i].value;
        return d;
    }

private:
    ps_stage *stage_;
    std::shared_ptr<SpaceOwner> owner_;
};

// The calls of one caller's link. The link is owned (a thread's handle) or borrowed (the view a
// Python stage gets of its link below).
class LinkCalls {
public:
    LinkCalls(std::shared_ptr<Stage> stage, ps_link *borrowed, py::object owner)
        : stage_(std::move(stage)), owner_(std::move(owner)), link_(borrowed) {
        if (!link_) {
            link_ = &owned_;
            int rc;
            {
                py::gil_scoped_release released;  // a remote stage waits for its server here
                rc = ps_stage_attach(stage_->get(), &owned_);
            }
            if (rc == PS_ESTATE)
                throw py::value_error("attach to stage '" + stage_->kind() + "': its fan-in of " +
                                      std::to_string(stage_->max_links()) + " callers (or one below it) is used up");
            if (rc != PS_OK) {
                std::string why = ps_stage_error(stage_->get());
                raise_status(rc, "attach to stage '" + stage_->kind() + "'" + (why.empty() ? "" : ": " + why));
            }
            owns_ = true;
        }
    }
    ~LinkCalls() {
        if (owns_) ps_link_detach(&owned_);
    }
    LinkCalls(const LinkCalls &) = delete;

    int move(const void *t, int64_t timeout) { return ps_link_move(link_, t, timeout); }
    int observe(void *out, int64_t timeout) { return ps_link_observe(link_, out, timeout); }
    int observe_at(int64_t i, void *out, int64_t timeout) { return ps_link_observe_at(link_, i, out, timeout); }
    int first(int64_t *v) { return ps_link_first(link_, v); }
    int last(int64_t *v) { return ps_link_last(link_, v); }
    int delta(int64_t bound, int64_t *v) { return ps_link_delta(link_, bound, v); }
    int axe(int64_t index) { return ps_link_axe(link_, index); }
    int64_t axed() { return -1; }
    // The latest any call may wait: the caller's deadline, for the view a Python stage gets of
    // its link below (set for each call it serves); PS_FOREVER for a thread's own handle.
    int64_t deadline() const { return deadline_; }
    void set_deadline(int64_t deadline) { deadline_ = deadline; }
    // What the stage could say about its last failure (a remote names its server).
    std::string explanation() const { return ps_stage_error(stage_->get()); }

    ps_link *link() { return link_; }
    const std::shared_ptr<Stage> &stage() const { return stage_; }
    uint32_t slot() const { return link_->slot; }

private:
    std::shared_ptr<Stage> stage_;
    py::object owner_;  // whatever the builder wants kept alive as long as the handle
    // Written by every operation: on a cache line of its own, so that threads' handles never
    // share one.
    alignas(64) ps_link owned_{};
    ps_link *link_;
    bool owns_ = false;
    int64_t deadline_ = PS_FOREVER;
};

using Handle = Endpoint<LinkCalls>;

std::shared_ptr<Handle> attach(const std::shared_ptr<Stage> &stage, const std::string &label, py::object owner) {
    return std::make_shared<Handle>(stage->format(), label, stage, nullptr, std::move(owner));
}

// ---- the stage registry, seen from Python -----------------------------------------------------

py::object param_default(const ps_param_spec &spec) {
    if (!spec.default_value) return py::none();
    if (spec.type == PS_PARAM_INT) return py::int_(std::stoll(spec.default_value));
    if (spec.type == PS_PARAM_FLOAT) return py::float_(std::stod(spec.default_value));
    return py::str(spec.default_value);
}

py::dict stage_kinds() {
    py::dict kinds;
    for (size_t i = 0; i < ps_stage_kind_count(); i++) {
        const ps_stage_kind *kind = ps_stage_kind_at(i);
        py::dict params;
        for (size_t k = 0; k < kind->param_count; k++) {
            const ps_param_spec &spec = kind->params[k];
            py::dict p;
            p["type"] = spec.type == PS_PARAM_INT ? "int" : spec.type == PS_PARAM_FLOAT ? "float" : "str";
            p["required"] = static_cast<bool>(spec.required);
            p["default"] = param_default(spec);
            p["min"] = spec.min <= spec.max ? py::object(py::int_(spec.min)) : py::object(py::none());
            p["max"] = spec.min <= spec.max ? py::object(py::int_(spec.max)) : py::object(py::none());
            py::list choices;
            if (spec.choices) {
                for (auto &c : py::str(spec.choices).attr("split")("|")) choices.append(c);
            }
            p["choices"] = spec.choices ? py::object(choices) : py::object(py::none());
            p["doc"] = spec.doc;
            params[spec.name] = p;
        }
        py::dict entry;
        entry["doc"] = kind->doc;
        entry["pass_through"] = kind->joining == PS_PASS_THROUGH;
        entry["params"] = params;
        kinds[kind->name] = entry;
    }
    return kinds;
}

// Creates a C stage of a registered kind above `below` (None for the core). Parameters are a
// dict of int, float or str; the registry checks them again, naming the stage and parameter.
std::shared_ptr<Stage> create_stage(const std::string &kind_name, const py::dict &params,
                                    const std::shared_ptr<Stage> &below, const PastSet &pastset) {
    const ps_stage_kind *kind = ps_stage_kind_find(kind_name.c_str());
    if (!kind) throw py::value_error("unknown stage kind '" + kind_name + "'");
    std::vector<std::string> names, texts;
    std::vector<ps_param_value> values;
    std::string given;  // the parameters as the messages show them: "capacity=1024, ..."
    names.reserve(params.size());
    texts.reserve(params.size());
    for (auto item : params) {
        names.push_back(py::str(item.first));
        std::string what = "stage '" + kind_name + "': parameter '" + names.back() + "'";
        ps_param_value v{nullptr, PS_PARAM_STR, 0, 0.0, nullptr};
        py::handle value = item.second;
        if (py::isinstance<py::bool_>(value)) {
            throw py::type_error(what + " must not be a bool");
        } else if (py::isinstance<py::int_>(value)) {
            v.type = PS_PARAM_INT;
            v.i = int_argument(value, what);
        } else if (py::isinstance<py::float_>(value)) {
            v.type = PS_PARAM_FLOAT;
            v.f = value.cast<double>();
        } else if (py::isinstance<py::str>(value)) {
            texts.push_back(c_text(value.cast<std::string>(), what));
            v.s = texts.back().c_str();
        } else {
            throw py::type_error(what + " must be an int, float or str, got " + shown(value));
        }
        values.push_back(v);
        given += (given.empty() ? "" : ", ") + names.back() + "=" + shown(value);
    }
    for (size_t i = 0; i < values.size(); i++) values[i].name = names[i].c_str();
    ps_params checked{values.data(), values.size()};
    ps_build_context context{pastset.owner()->space};
    char error[512] = "";
    ps_stage *stage = nullptr;
    int rc;
    {
        py::gil_scoped_release released;  // attaching to a remote stage below waits for its server
        rc = ps_stage_create(kind, &checked, &context, below ? below->get() : nullptr, &stage, error, sizeof error);
    }
    if (rc != PS_OK) {
        std::string message = error;  // the stage's own reason, if it gave one
        if (message.empty() && rc == PS_ENOMEM) {  // what the stage asked for, since it could not say
            std::string tuples = below ? " over " + std::to_string(ps_stage_format(below->get())->size) + "-byte tuples" : "";
            message = "stage '" + kind_name + "' (" + given + ")" + tuples + ": out of memory";
        }
        if (message.empty()) {
            std::string why = below ? ps_stage_error(below->get()) : "";
            message = "stage '" + kind_name + "': " + ps_status_name(rc) + (why.empty() ? "" : ": " + why);
        }
        raise_text(rc == PS_EREMOTE ? PyExc_ConnectionError : rc == PS_ENOMEM ? PyExc_MemoryError : PyExc_ValueError,
                   message);
    }
    return std::make_shared<Stage>(stage, pastset.owner());
}

// ---- trace files that could not be written -----------------------------------------------------

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

// ---- stages written in Python (the slow path) --------------------------------------------------

// What the bridge stage calls for a stage kind written in Python: the Python object, and one
// Handle per caller on that caller's own link below (made on first use).
struct PythonStage {
    py::object impl;
    std::shared_ptr<Stage> below;
    std::vector<std::shared_ptr<Handle>> views;

    // How a message names what one of its methods returned: "python stage Doubler.observe() returned".
    std::string returned(const char *method) const {
        return "python stage " + py::str(py::type::of(impl).attr("__qualname__")).cast<std::string>() + "." + method +
               "() returned";
    }
};

const std::shared_ptr<Handle> &below_view(PythonStage &stage, ps_bridge_call *call) {
    if (call->slot >= stage.views.size()) stage.views.resize(call->slot + 1);
    std::shared_ptr<Handle> &view = stage.views[call->slot];
    if (!view)
        view = std::make_shared<Handle>(stage.below->format(), "below " + std::to_string(call->slot), stage.below,
                                        call->below, py::none());
    return view;
}

void copy_out(const TupleCodec &codec, const py::object &t, void *out, const std::string &what) {
    py::bytes packed = codec.pack(t, what);
    std::memcpy(out, PyBytes_AS_STRING(packed.ptr()), codec.size());
}

// Calls impl.<op>(below, ...) with the GIL held; the blocking calls the stage makes on `below` wait
// no longer than the caller's timeout, and a TimeoutError is the status PS_ETIMEDOUT (the caller
// may try again). Any other Python exception is kept for the caller's thread (raise_status
// re-raises it when the operation returns to Python); the status is PS_EINVAL.
int python_bridge_call(void *impl, ps_bridge_call *call) {
    py::gil_scoped_acquire gil;
    PythonStage &stage = *static_cast<PythonStage *>(impl);
    try {
        const std::shared_ptr<Handle> &view = below_view(stage, call);
        view->set_deadline(ps_deadline(call->timeout_ns));
        py::object below = py::cast(view);
        const TupleCodec &codec = view->codec();
        py::object &obj = stage.impl;
        switch (call->op) {
        case PS_BRIDGE_MOVE: obj.attr("move")(below, codec.unpack(call->tuple_in)); break;
        case PS_BRIDGE_OBSERVE:
            copy_out(codec, obj.attr("observe")(below), call->tuple_out, stage.returned("observe"));
            break;
        case PS_BRIDGE_OBSERVE_AT:
            copy_out(codec, obj.attr("observe_at")(below, call->argument), call->tuple_out, stage.returned("observe_at"));
            break;
        case PS_BRIDGE_FIRST: call->result = int_argument(obj.attr("first")(below), stage.returned("first")); break;
        case PS_BRIDGE_LAST: call->result = int_argument(obj.attr("last")(below), stage.returned("last")); break;
        case PS_BRIDGE_DELTA: {
            py::object bound = call->argument >= 0 ? py::object(py::int_(call->argument)) : py::object(py::none());
            call->result = int_argument(obj.attr("delta")(below, bound), stage.returned("delta"));
            break;
        }
        case PS_BRIDGE_AXE: obj.attr("axe")(below, call->argument); break;
        }
        return PS_OK;
    } catch (py::error_already_set &e) {
        if (e.matches(PyExc_TimeoutError)) return PS_ETIMEDOUT;
        t_python_stage_error = std::make_unique<py::error_already_set>(std::move(e));
    } catch (py::builtin_exception &e) {
        e.set_error();
        t_python_stage_error = std::make_unique<py::error_already_set>();
    }
    return PS_EINVAL;
}

void python_bridge_release(void *impl) {
    py::gil_scoped_acquire gil;
    delete static_cast<PythonStage *>(impl);
}

const ps_bridge kPythonBridge = {python_bridge_call, python_bridge_release};

std::shared_ptr<Stage> create_python_stage(const py::object &impl, const std::shared_ptr<Stage> &below) {
    if (!below) throw py::value_error("a Python stage needs a stage below it (a path ends with 'core')");
    ps_stage *stage = nullptr;
    int rc = ps_bridge_stage_create(&kPythonBridge, new PythonStage{impl, below, {}}, below->get(), &stage);
    if (rc != PS_OK) raise_status(rc, "python stage");
    return std::make_shared<Stage>(stage, below->owner());
}

// ---- the server ----------------------------------------------------------------------------

// One BUILD request, waiting for Python to build its path and answer it.
class BuildRequest {
public:
    BuildRequest() : request_(std::make_unique<ps_build_request>()) {}
    ps_build_request *get() { return request_.get(); }
    py::bytes spec() const { return py::bytes(request_->spec); }  // as sent: not necessarily UTF-8

private:
    std::unique_ptr<ps_build_request> request_;
};

class Server {
public:
    Server(const std::string &endpoint, const std::string &curve_secret) {
        char error[256] = "";
        int rc = ps_server_start(endpoint.c_str(), curve_secret.c_str(), &server_, error, sizeof error);
        if (rc != PS_OK) throw py::value_error(std::string("paths server: ") + error);
    }
    ~Server() { stop(); }

    std::string endpoint() const { return server_ ? ps_server_endpoint(server_) : ""; }

    py::object next_build(const py::object &timeout) {
        auto request = std::make_shared<BuildRequest>();
        int64_t wait = timeout_ns(timeout);
        int rc;
        {
            py::gil_scoped_release released;
            rc = live()->next_build_wait(request->get(), wait);
        }
        if (rc == PS_ETIMEDOUT) return py::none();
        if (rc != PS_OK) raise_status(rc, "paths server: next_build");
        return py::cast(request);
    }

    uint64_t answer_build(BuildRequest &request, const std::shared_ptr<Handle> &handle, const std::string &error) {
        uint64_t id = 0;
        int rc = ps_server_answer_build(live()->server_, request.get(), handle ? handle->link() : nullptr,
                                        error.c_str(), &id);
        if (rc != PS_OK) raise_status(rc, "paths server: answer_build");
        return id;
    }

    std::vector<uint64_t> reap() {
        std::vector<uint64_t> ids(256);
        size_t n;
        {
            py::gil_scoped_release released;
            n = ps_server_reap(live()->server_, ids.data(), ids.size());
        }
        ids.resize(n);
        return ids;
    }

    py::dict counters() {
        ps_server_counters c;
        ps_server_read_counters(live()->server_, &c);
        py::dict d;
        d["frames"] = c.frames;
        d["bad_frames"] = c.bad_frames;
        d["builds"] = c.builds;
        d["direct"] = c.direct;
        d["live"] = c.live;
        d["abandoned"] = c.abandoned;
        d["refused"] = c.refused;
        return d;
    }

    void stop() {
        if (!server_) return;
        ps_server *server = server_;
        server_ = nullptr;
        py::gil_scoped_release released;
        ps_server_stop(server);
    }

private:
    Server *live() {
        if (!server_) throw std::runtime_error("paths server: already stopped");
        return this;
    }
    int next_build_wait(ps_build_request *request, int64_t wait) { return ps_server_next_build(server_, wait, request); }

    ps_server *server_ = nullptr;
};

// ---- single-thread loops of the benchmarks -------------------------------------------------------

ps_link *q_link_of(const std::shared_ptr<Handle> &handle, const char *loop) {
    const ps_tuple_format *f = ps_stage_format(handle->stage()->get());
    if (f->size != 8 || f->run_count != 1 || f->runs[0].code != 'q')
        throw py::value_error(std::string(loop) + ": expected a path over a 'q' element, got format '" + f->text + "'");
    return handle->link();
}

// Runs a single-thread C loop of `count` operations through one handle; ns per operation.
double single_link_loop(const std::shared_ptr<Handle> &handle, int64_t count, const py::object &timeout,
                        const char *name, double (*loop)(ps_link *, int64_t, int64_t), const char *failure) {
    ps_link *link = q_link_of(handle, name);
    if (count <= 0) throw py::value_error(std::string(name) + ": expected a count > 0");
    int64_t wait = timeout_ns(timeout);
    double ns;
    {
        py::gil_scoped_release released;
        ns = loop(link, count, wait);
    }
    if (ns < 0) throw std::runtime_error(std::string(name) + ": " + failure);
    return ns;
}

// ---- kernels: loaded from shared libraries, run on a thread each --------------------------------

// A C kernel: `int NAME(paths_kernel_ctx *)` in a shared library compiled against paths.h, and
// the elements it declares as sums (PATHS_SUMS).
struct CKernel {
    std::string path, symbol;
    paths_kernel_fn function;
    std::vector<std::string> sums;
};

// The libraries of kernels and programs find paths_* in libpaths when they are loaded: it is made
// part of the global scope (the interpreter loaded it as this module's dependency, locally).
void export_public_api() {
    Dl_info info;
    if (!dladdr(reinterpret_cast<void *>(&paths_move), &info) || !info.dli_fname ||
        !dlopen(info.dli_fname, RTLD_NOW | RTLD_GLOBAL | RTLD_NOLOAD))
        throw std::runtime_error("paths: cannot make libpaths (the C API) visible to kernels");
}

CKernel load_kernel(const std::string &path, const std::string &symbol) {
    void *library = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!library) throw py::value_error(std::string("cannot load it: ") + dlerror());
    auto version = static_cast<const int *>(dlsym(library, "paths_kernel_api_version"));
    if (!version)
        throw py::value_error("it has no paths_kernel_api_version: compile it with #include <paths.h> "
                              "(-I paths.get_include())");
    if (*version != PATHS_API_VERSION)
        throw py::value_error("compiled against PATHS API version " + std::to_string(*version) +
                              ", this PATHS has version " + std::to_string(PATHS_API_VERSION) +
                              ": compile it again with -I paths.get_include()");
    void *function = dlsym(library, symbol.c_str());
    if (!function)
        throw py::value_error("no function '" + symbol + "' in it (a kernel is `int " + symbol +
                              "(paths_kernel_ctx *c)`, not static; in C++ extern \"C\")");
    std::vector<std::string> sums;
    auto declared = static_cast<const char *const *>(dlsym(library, ("paths_sums_" + symbol).c_str()));
    for (size_t i = 0; declared && declared[i]; i++) sums.emplace_back(declared[i]);
    return CKernel{path, symbol, reinterpret_cast<paths_kernel_fn>(function), sums};
}

// What a run's hooks reach: the Python callables that acquire and release handles, the handles
// the kernels hold (kept alive here, found by link), and why an acquire or a release failed.
struct RunHooks {
    py::object acquire, release;  // acquire(thread, element, format) -> Handle; release(thread, handle)
    std::unordered_map<ps_link *, std::shared_ptr<Handle>> held;
    std::unordered_map<int, std::shared_ptr<py::error_already_set>> acquire_errors;  // by thread
    std::string release_error;
};

int status_of(const py::error_already_set &e) {
    if (e.matches(PyExc_TimeoutError)) return PS_ETIMEDOUT;
    if (e.matches(PyExc_ConnectionError)) return PS_EREMOTE;
    if (e.matches(PyExc_MemoryError)) return PS_ENOMEM;
    return PS_EINVAL;
}

ps_link *acquire_hook(void *data, int thread, const char *element, const char *format, int *status, char *error,
                      size_t error_size) {
    py::gil_scoped_acquire gil;
    RunHooks &hooks = *static_cast<RunHooks *>(data);
    std::string why;
    try {
        py::object given = hooks.acquire(thread, element, format);
        if (!py::isinstance<Handle>(given))
            throw py::type_error("paths_acquire('" + std::string(element) + "', '" + format +
                                 "'): the acquire hook gave " + py::repr(given).cast<std::string>() + ", not a Handle");
        std::shared_ptr<Handle> handle = given.cast<std::shared_ptr<Handle>>();
        if (handle->format() != format)
            throw py::value_error("paths_acquire('" + std::string(element) + "', '" + format +
                                  "'): the acquire hook gave a path to format '" + handle->format() + "'");
        if (!hooks.held.emplace(handle->link(), handle).second)
            throw py::value_error("paths_acquire('" + std::string(element) + "', '" + format +
                                  "'): the acquire hook gave a handle that a thread holds already");
        hooks.acquire_errors.erase(thread);
        return handle->link();
    } catch (py::error_already_set &e) {
        *status = status_of(e);
        why = py::str(e.value()).cast<std::string>();
        hooks.acquire_errors[thread] = std::make_shared<py::error_already_set>(std::move(e));
    } catch (py::builtin_exception &e) {
        *status = PS_EINVAL;
        why = e.what();
        e.set_error();
        hooks.acquire_errors[thread] = std::make_shared<py::error_already_set>();
    } catch (std::exception &e) {  // nothing may escape into the C caller
        *status = dynamic_cast<std::bad_alloc *>(&e) ? PS_ENOMEM : PS_EINVAL;
        why = e.what();
    }
    snprintf(error, error_size, "%s", why.c_str());
    return nullptr;
}

void release_hook(void *data, int thread, ps_link *link) {
    py::gil_scoped_acquire gil;
    RunHooks &hooks = *static_cast<RunHooks *>(data);
    auto found = hooks.held.find(link);
    if (found == hooks.held.end()) return;
    std::shared_ptr<Handle> handle = std::move(found->second);
    hooks.held.erase(found);
    try {
        hooks.release(thread, handle);
    } catch (py::error_already_set &e) {
        if (hooks.release_error.empty()) hooks.release_error = py::str(e.value()).cast<std::string>();
    } catch (std::exception &e) {  // nothing may escape into the C caller
        if (hooks.release_error.empty()) hooks.release_error = e.what();
    }
}

// A thread's context, seen from a kernel written in Python (the slow path): ctx.thread,
// ctx.acquire(element, format), ctx.report(name, value), ...
class KernelContext {
public:
    KernelContext(paths_kernel_ctx *c, RunHooks *hooks) : c_(c), hooks_(hooks) {}
    int thread() const { return paths_thread(c_); }
    int threads() const { return paths_threads(c_); }
    std::string node() const { return paths_node(c_); }
    py::object arg(const std::string &key, const py::object &fallback) const {
        const char *value = paths_arg(c_, key.c_str());
        return value ? py::object(py::str(value)) : fallback;
    }
    std::shared_ptr<Handle> acquire(const std::string &element, const std::string &format) {
        paths_handle *h = paths_acquire(c_, element.c_str(), format.c_str());
        if (h) return hooks_->held.at(reinterpret_cast<ps_link *>(h));
        auto failed = hooks_->acquire_errors.find(paths_thread(c_));
        if (failed != hooks_->acquire_errors.end()) {
            std::shared_ptr<py::error_already_set> error = std::move(failed->second);
            hooks_->acquire_errors.erase(failed);
            error->restore();
            throw py::error_already_set();
        }
        throw py::value_error(paths_last_error(c_));
    }
    void release(const std::shared_ptr<Handle> &handle) {
        paths_release(c_, reinterpret_cast<paths_handle *>(handle->link()));
    }
    void barrier(const py::object &timeout) {
        int64_t wait = timeout_ns(timeout);
        int rc;
        {
            py::gil_scoped_release released;  // the other threads (Python ones too) must get here
            rc = paths_barrier(c_, wait);
        }
        if (rc != PS_OK) raise_status(rc, paths_last_error(c_));
    }
    void report(const std::string &name, double value) { paths_report(c_, name.c_str(), value); }

private:
    paths_kernel_ctx *c_;
    RunHooks *hooks_;
};

// A kernel written in Python: run on the kernel thread with the GIL; its exception fails the
// thread, saying what was raised and where.
struct PythonKernel {
    py::object function;
    RunHooks *hooks;
};

int run_python_kernel(paths_kernel_ctx *c) {
    py::gil_scoped_acquire gil;
    PythonKernel &kernel = *static_cast<PythonKernel *>(ps_kernel_ctx_data(c));
    try {
        py::object result = kernel.function(KernelContext(c, kernel.hooks));
        if (result.is_none()) return PS_OK;
        if (py::isinstance<py::int_>(result) && !py::isinstance<py::bool_>(result)) return result.cast<int>();
        return paths_fail(c, PS_EINVAL, "a Python kernel returns None or a status, it returned %s",
                          py::repr(result).cast<std::string>().c_str());
    } catch (py::error_already_set &e) {
        std::string where = py::module_::import("paths.kernel").attr("raised_where")(e.value(), e.trace()).cast<std::string>();
        return paths_fail(c, PATHS_EFAILED, "%s", where.c_str());
    } catch (std::exception &e) {  // nothing may escape into the C caller
        return paths_fail(c, PATHS_EFAILED, "%s", e.what());
    }
}

// A kernel run and all it needs while its threads run: on the heap, so that a run given up (Ctrl-C,
// or a failed thread in a process about to end) can be left to its threads.
struct KernelRunState {
    RunHooks hooks;
    ps_kernel_hooks c_hooks{acquire_hook, release_hook, &hooks};
    PythonKernel python{py::none(), &hooks};
    std::unique_ptr<ps_kernel_run, void (*)(ps_kernel_run *)> run{nullptr, ps_kernel_run_free};
};

// What local thread i left (it has ended).
py::dict thread_outcome(ps_kernel_run *run, int local, int thread) {
    int status = ps_kernel_run_status(run, local);
    py::list reports;
    for (int k = 0; k < ps_kernel_run_report_count(run, local); k++) {
        double value;
        const char *name = ps_kernel_run_report(run, local, k, &value);
        reports.append(py::make_tuple(name, value));
    }
    py::dict outcome;
    outcome["thread"] = thread;
    outcome["status"] = status;
    outcome["status_name"] = paths_strerror(status);
    outcome["error"] = ps_kernel_run_error(run, local);
    outcome["reports"] = reports;
    return outcome;
}

// Runs a kernel (a CKernel, or a Python function) on one thread per local thread of a run, and
// waits for them in slices, so that Ctrl-C is seen. Returns {"failed": the outcome of the thread
// that failed first, or None; "threads": every thread's outcome; "seconds"}. With until_failure,
// a failed thread ends the wait: only "failed" comes back, at once, and the other threads are
// left running (for a process that ends next, as a node whose run failed). Ctrl-C leaves them
// running too.
py::dict run_kernel(const py::object &kernel, const std::vector<int> &thread_ids, int threads, const std::string &node,
                    bool spans_processes, const std::map<std::string, std::string> &args, py::object acquire,
                    py::object release, bool pin, bool until_failure) {
    if (thread_ids.empty() || threads < static_cast<int>(thread_ids.size()))
        throw py::value_error("run_kernel: expected 1 to `threads` thread ids");
    auto state = std::make_unique<KernelRunState>();
    state->hooks.acquire = std::move(acquire);
    state->hooks.release = std::move(release);
    state->python.function = kernel;
    state->run.reset(ps_kernel_run_new(static_cast<int>(thread_ids.size()), thread_ids.data(), threads, node.c_str(),
                                       spans_processes, &state->c_hooks));
    ps_kernel_run *run = state->run.get();
    if (!run) throw std::bad_alloc();
    for (auto &[key, value] : args)
        if (ps_kernel_run_arg(run, key.c_str(), value.c_str()) != PS_OK)
            throw py::value_error("--arg " + key + "=" + value + ": expected KEY=VALUE with a KEY");
    paths_kernel_fn function = run_python_kernel;
    void *data = &state->python;
    if (py::isinstance<CKernel>(kernel)) {
        function = kernel.cast<const CKernel &>().function;
        data = nullptr;
    }
    int rc;
    {
        py::gil_scoped_release released;
        rc = ps_kernel_run_start(run, function, data, pin);
    }
    if (rc != PS_OK) {
        py::gil_scoped_release released;
        ps_kernel_run_join(run);
        throw std::runtime_error("could not start " + std::to_string(thread_ids.size()) + " kernel threads");
    }
    for (;;) {
        {
            py::gil_scoped_release released;
            rc = ps_kernel_run_wait(run, kWaitSliceNs, until_failure);
        }
        if (rc != PS_ETIMEDOUT) break;
        if (PyErr_CheckSignals() != 0) {
            state.release();  // its threads still use it: theirs now
            throw py::error_already_set();
        }
    }
    int first = ps_kernel_run_first_failed(run);
    py::dict out;
    out["failed"] = first < 0 ? py::object(py::none()) : py::object(thread_outcome(run, first, thread_ids[first]));
    if (rc == PATHS_EFAILED) {
        state.release();  // its other threads still use it: theirs now
        return out;
    }
    {
        py::gil_scoped_release released;
        ps_kernel_run_join(run);
    }
    py::list outcomes;
    for (size_t i = 0; i < thread_ids.size(); i++) outcomes.append(thread_outcome(run, static_cast<int>(i), thread_ids[i]));
    out["seconds"] = ps_kernel_run_seconds(run);
    out["threads"] = outcomes;
    state->run.reset();  // gives back what the kernels still hold: the release hook runs here
    if (!state->hooks.release_error.empty()) throw py::value_error(state->hooks.release_error);
    return out;
}

// The context of a program of its own (paths_init): one thread of a run, its handles from the
// runtime's hooks. Kept until end_process.
struct ProcessRun {
    RunHooks hooks;
    ps_kernel_hooks c_hooks;
    std::unique_ptr<ps_kernel_run, void (*)(ps_kernel_run *)> run{nullptr, ps_kernel_run_free};
};
std::unique_ptr<ProcessRun> g_process;

void end_process() {
    if (!g_process) return;
    ps_kernel_run_serve_process(nullptr);
    g_process->run.reset();
    g_process.reset();
}

void serve_process(int thread, int threads, const std::string &node, const std::map<std::string, std::string> &args,
                   py::object acquire, py::object release) {
    end_process();
    auto process = std::make_unique<ProcessRun>();
    process->hooks.acquire = std::move(acquire);
    process->hooks.release = std::move(release);
    process->c_hooks = ps_kernel_hooks{acquire_hook, release_hook, &process->hooks};
    process->run.reset(ps_kernel_run_new(1, &thread, threads, node.c_str(), threads > 1, &process->c_hooks));
    if (!process->run) throw py::value_error("paths: a program's thread must be 0 <= thread < threads");
    for (auto &[key, value] : args)
        if (ps_kernel_run_arg(process->run.get(), key.c_str(), value.c_str()) != PS_OK)
            throw py::value_error("--paths-arg " + key + "=" + value + ": expected KEY=VALUE with a KEY");
    g_process = std::move(process);
    ps_kernel_run_serve_process(g_process->run.get());
}

// A capsule named "paths_handle" whose pointer is the handle's paths_handle: C code of a user's own
// extension module works on it with paths.h. The capsule keeps the Handle alive.
py::object handle_capsule(const py::object &self) {
    Handle &handle = self.cast<Handle &>();
    PyObject *capsule = PyCapsule_New(handle.link(), "paths_handle", [](PyObject *c) {
        Py_XDECREF(static_cast<PyObject *>(PyCapsule_GetContext(c)));
    });
    if (!capsule) throw py::error_already_set();
    Py_INCREF(self.ptr());
    PyCapsule_SetContext(capsule, self.ptr());
    return py::reinterpret_steal<py::object>(capsule);
}

}  // namespace

PYBIND11_MODULE(_native, m) {
    m.doc() = "PATHS native core: PastSet elements, stages, kernels and their runs";
    g_axed_error = PyErr_NewExceptionWithDoc("paths.AxedError",
                                             "Raised when observing a tuple that axe() has freed.",
                                             PyExc_IndexError, nullptr);
    m.add_object("AxedError", py::handle(g_axed_error));

    py::class_<Element> element(m, "Element", "A PastSet element: an ordered, append-only log of tuples of one format.");
    bind_endpoint(element, "Element");
    element.def_property_readonly("name", &Element::name)
        .def("stats", &Element::stats, "Counters: live_tuples, bytes_held, moves, observes, waits.");

    py::class_<PastSet>(m, "PastSet", py::dynamic_attr(), "A PastSet tuple space: elements addressed by (name, format).")
        .def(py::init<>())
        .def("enter", &PastSet::enter, py::arg("name"), py::arg("format"),
             "Find or create the element (name, format).")
        .def("remove", &PastSet::remove, py::arg("name"), py::arg("format"),
             "Free the element (name, format) and its tuples (PastSet's delelement); refused while an\n"
             "Element object or a path built over it still holds it.")
        .def("elements", &PastSet::elements, "[(name, format), ...] in creation order.");

    py::class_<Stage, std::shared_ptr<Stage>>(m, "Stage", "One built C stage (one reference to it).")
        .def_property_readonly("kind", &Stage::kind)
        .def_property_readonly("format", &Stage::format)
        .def_property_readonly("max_links", &Stage::max_links, "The fan-in: callers allowed (0 = any).")
        .def_property_readonly("link_count", &Stage::link_count, "Callers attached so far.")
        .def("counters", &Stage::counters, "The stage's counters: operations, waits, bytes, and its own.")
        .def("attach", &attach, py::arg("label"), py::arg("owner") = py::none(),
             "A new caller's handle on this stage; `owner` is kept alive as long as the handle.");

    py::class_<Handle, std::shared_ptr<Handle>> handle(m, "Handle", "One caller's handle on a path: use it from one thread.");
    bind_endpoint(handle, "Handle");
    handle.def_property_readonly("stage", &Handle::stage).def_property_readonly("slot", &Handle::slot);

    py::class_<BuildRequest, std::shared_ptr<BuildRequest>>(m, "BuildRequest", "A BUILD request waiting for its answer.")
        .def_property_readonly("spec", &BuildRequest::spec);
    py::class_<Server>(m, "Server", "The C side of a PastSet server: sockets, and one thread per served link.")
        .def(py::init<const std::string &, const std::string &>(), py::arg("endpoint"), py::arg("curve_secret") = "")
        .def_property_readonly("endpoint", &Server::endpoint)
        .def("next_build", &Server::next_build, py::arg("timeout") = py::none(),
             "The next BUILD request, or None when the timeout passes.")
        .def("answer_build", &Server::answer_build, py::arg("request"), py::arg("handle"), py::arg("error") = "",
             "Serve the handle for the requester (its id is returned), or refuse with the error text.")
        .def("reap", &Server::reap, "Ids of handles whose clients released them.")
        .def("counters", &Server::counters)
        .def("stop", &Server::stop, "End every link's thread and close every socket.");
    m.def("curve_keypair", [] {
        char public_key[41], secret_key[41];
        if (zmq_curve_keypair(public_key, secret_key) != 0) throw std::runtime_error("libzmq has no CURVE support");
        return std::make_pair(std::string(public_key), std::string(secret_key));
    }, "A new CURVE key pair (public, secret), Z85 text.");
    m.def("take_trace_failures", &take_trace_failures, py::arg("wait") = 0.0,
          "Wait up to `wait` seconds (None: no limit) for every trace stage of this process to be released\n"
          "and its file written; return (and forget) the messages of the files that could not be written.");
    m.def("stage_kinds", &stage_kinds, "{kind: {doc, params: {name: {type, required, default, min, max, choices, doc}}}}");
    m.def("create_python_stage", &create_python_stage, py::arg("impl"), py::arg("below"),
          "Wrap a Python object (methods move, observe, observe_at, first, last, delta, axe, each taking\n"
          "the Handle below first) as a pass-through stage. The slow path: every operation takes the GIL.");
    m.def("create_stage", &create_stage, py::arg("kind"), py::arg("params"), py::arg("below"), py::arg("pastset"),
          "Create one C stage above `below` (None for the core).");

    handle.def("capsule", &handle_capsule,
               "A PyCapsule named \"paths_handle\" holding this handle's paths_handle, for C code of your own\n"
               "(paths.h); it keeps the handle alive.");

    export_public_api();
    m.attr("API_VERSION") = PATHS_API_VERSION;
    m.attr("PATHS_ETIMEDOUT") = PATHS_ETIMEDOUT;
    m.attr("PATHS_ENOMEM") = PATHS_ENOMEM;
    m.attr("PATHS_EREMOTE") = PATHS_EREMOTE;
    py::class_<CKernel>(m, "CKernel", "A C kernel loaded from a shared library.")
        .def_readonly("path", &CKernel::path)
        .def_readonly("symbol", &CKernel::symbol)
        .def_readonly("sums", &CKernel::sums, "the elements it declares as sums (PATHS_SUMS)");
    m.def("load_kernel", &load_kernel, py::arg("path"), py::arg("symbol"),
          "Load `int SYMBOL(paths_kernel_ctx *)` from the shared library at path, checking its API version.");
    py::class_<KernelContext>(m, "KernelContext", "A kernel thread's context, for a kernel written in Python.")
        .def_property_readonly("thread", &KernelContext::thread, "0 .. threads-1 over the whole run")
        .def_property_readonly("threads", &KernelContext::threads, "threads in the whole run")
        .def_property_readonly("node", &KernelContext::node, "this thread's node, from the map")
        .def("arg", &KernelContext::arg, py::arg("key"), py::arg("default") = py::none(),
             "--arg key=value as text, or default")
        .def("acquire", &KernelContext::acquire, py::arg("element"), py::arg("format"),
             "A Handle on (element, format) for this thread, through the acquire hook.")
        .def("release", &KernelContext::release, py::arg("handle"))
        .def("barrier", &KernelContext::barrier, py::arg("timeout") = py::none(),
             "Wait until every thread of the run has come here as often.")
        .def("report", &KernelContext::report, py::arg("name"), py::arg("value"),
             "A result column (the run's value is the mean over the threads that report it).");
    m.def("run_kernel", &run_kernel, py::arg("kernel"), py::arg("thread_ids"), py::arg("threads"), py::arg("node"),
          py::arg("spans_processes"), py::arg("args"), py::arg("acquire"), py::arg("release"), py::arg("pin") = false,
          py::arg("until_failure") = false,
          "Run a kernel (CKernel or a Python function of a KernelContext) on one C thread per thread id;\n"
          "acquire(thread, element, format) -> Handle and release(thread, handle) are its hooks. With\n"
          "until_failure, the first failed thread's outcome comes back at once (the others run on).");
    m.def("serve_process", &serve_process, py::arg("thread"), py::arg("threads"), py::arg("node"), py::arg("args"),
          py::arg("acquire"), py::arg("release"),
          "Give paths_* calls with a NULL context (a program of its own) this thread of a run.");
    m.def("end_process", &end_process, "Give back the program's handles and end its context.");

    py::module_ bench = m.def_submodule("bench", "single-thread C loops of the benchmarks");
    bench.def("core_pairs_ns", [](int64_t pairs) {
        if (pairs <= 0) throw py::value_error("core_pairs_ns: expected pairs > 0");
        py::gil_scoped_release released;
        return ps_kernel_core_pairs_ns(pairs);
    }, py::arg("pairs"), "Nanoseconds per move+observe pair from a C loop on one element.");
    bench.def("pairs_ns", [](const std::shared_ptr<Handle> &handle, int64_t pairs, const py::object &timeout) {
        return single_link_loop(handle, pairs, timeout, "pairs_ns", ps_kernel_link_pairs_ns,
                                "an operation failed or returned a wrong tuple");
    }, py::arg("handle"), py::arg("pairs"), py::arg("timeout") = 60.0,
       "Nanoseconds per move+observe pair through one handle, from a C loop (single thread).");
    bench.def("link_moves_ns", [](const std::shared_ptr<Handle> &handle, int64_t moves, const py::object &timeout) {
        return single_link_loop(handle, moves, timeout, "link_moves_ns", ps_kernel_link_moves_ns,
                                "a move failed, or last() grew by fewer than the moves made");
    }, py::arg("handle"), py::arg("moves"), py::arg("timeout") = 60.0,
       "Nanoseconds per move through one handle from a C loop, until every move is acknowledged (single thread).");
}
