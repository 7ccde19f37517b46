// python_bridge.cpp — stage kinds written in Python (the slow path): a bridge stage whose
// operations call the methods of a Python object with the GIL held. The object answers the
// operations it has a method for, named as the table of operation kinds names them (move,
// observe, observe_at, first, last, delta, axe, exchange, move_many, observe_range, flush,
// fence); the others pass down unchanged, except a kind made of simpler ones (exchange,
// move_many), which comes as those. What a method is given and must return follows from its
// kind's shape in the table:
//   method(below[, tuple | [tuples] | index | bound or None][, count]) -> a tuple | [tuples] | an int | anything
#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "python_handle.hpp"
#include "python_module.hpp"

extern "C" {
#include "bridge_stage.h"
}

namespace paths_native {

namespace {

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

const std::shared_ptr<Handle> &below_view(PythonStage &stage, uint32_t slot, ps_link *below) {
    if (slot >= stage.views.size()) stage.views.resize(slot + 1);
    std::shared_ptr<Handle> &view = stage.views[slot];
    if (!view) {
        view = std::make_shared<Handle>(stage.below->format(), "below " + std::to_string(slot), stage.below, below,
                                        py::none());
        view->lend(nullptr);  // python_call lends it the link for each call
    }
    return view;
}

void copy_out(const TupleCodec &codec, const py::object &t, void *out, const std::string &what) {
    py::bytes packed = codec.pack(t, what);
    std::memcpy(out, PyBytes_AS_STRING(packed.ptr()), codec.size());
}

// The tuples a method returned for a range (1 to op->count of them) into op->out; their number.
int64_t copy_all_out(const TupleCodec &codec, const py::object &tuples, ps_op *op, const std::string &what) {
    if (!py::isinstance<py::iterable>(tuples) || py::isinstance<py::str>(tuples) || py::isinstance<py::bytes>(tuples))
        throw py::type_error(what + " " + shown(tuples) + ": expected a list of 1 to " + std::to_string(op->count) +
                             " tuples");
    py::list list = py::list(tuples);
    if (list.size() < 1 || list.size() > op->count)
        throw py::value_error(what + " " + std::to_string(list.size()) + " tuples: expected 1 to " +
                              std::to_string(op->count));
    for (size_t i = 0; i < list.size(); i++)
        copy_out(codec, py::object(list[i]), static_cast<unsigned char *>(op->out) + i * codec.size(), what);
    return static_cast<int64_t>(list.size());
}

// "ValueError: its message", cut to fit (its type's name alone when its message cannot be had).
void say_exception(const py::error_already_set &e, char *why, size_t why_size) {
    std::string type = "an exception", message;
    try {
        type = py::str(e.type().attr("__name__"));
        message = py::str(e.value());
    } catch (py::error_already_set &) {  // a __str__ that raises
    }
    snprintf(why, why_size, "%s%s%s", type.c_str(), message.empty() ? "" : ": ", message.c_str());
}

int python_answers(void *impl, ps_op_kind kind) {
    return py::hasattr(static_cast<PythonStage *>(impl)->impl, ps_op_kinds[kind].name);
}

// Calls impl.<kind>(below, ...) with the GIL held; the blocking calls the stage makes on `below` wait
// no longer than the caller's timeout, and a TimeoutError is the status PS_ETIMEDOUT (the caller
// may try again: the method did nothing). Any other Python exception is kept for the caller's
// thread (raise_status re-raises it when the operation returns to Python), and said in `why`
// ("ValueError: its message", for a caller elsewhere: behind a server, or in C); the status is
// PS_ENOTSUP for a NotImplementedError, else PS_EINVAL. Either way op->done counts the tuples the
// method moved through `below` before it raised.
int python_call(void *impl, ps_link *below_link, uint32_t slot, ps_op *op, char *why, size_t why_size) {
    HeldGil gil;
    PythonStage &stage = *static_cast<PythonStage *>(impl);
    const ps_op_info &info = ps_op_kinds[op->kind];
    // Held, not a reference into stage.views: another caller's first call may grow it while the
    // method waits. What the method moved below before it raised took effect (an exchange's move, a
    // first part of a move_many): the caller goes on with the rest, and does not move those again.
    std::shared_ptr<Handle> view;
    auto keep_moved = [&] {
        if (view) op->done = static_cast<uint32_t>(std::min<int64_t>(view->moved(), ps_op_tuples_in(op)));
    };
    try {
        view = below_view(stage, slot, below_link);
        // The link is the view's only while this call runs (what it had before again after: a call
        // re-entered from the method's own calls gives the outer one its link back).
        struct Lent {
            Handle &view;
            ps_link *before;
            Lent(Handle &view, ps_link *link) : view(view), before(view.link()) { view.lend(link); }
            ~Lent() { view.lend(before); }
        } lent(*view, below_link);
        view->set_deadline(info.shape & PS_OP_WAITS ? ps_deadline(op->timeout_ns) : PS_FOREVER);
        view->reset_moved();
        const TupleCodec &codec = view->codec();
        py::list args;
        args.append(py::cast(view));
        if (info.shape & PS_OP_TUPLE_IN) args.append(codec.unpack(op->in));
        if (info.shape & PS_OP_TUPLES_IN) {
            py::list tuples;
            for (uint32_t i = 0; i < op->count; i++)
                tuples.append(codec.unpack(static_cast<const unsigned char *>(op->in) + i * codec.size()));
            args.append(tuples);
        }
        if (info.shape & PS_OP_INDEX) args.append(op->argument);
        if (info.shape & PS_OP_BOUND) args.append(op->argument >= 0 ? py::object(py::int_(op->argument)) : py::none());
        if (info.shape & PS_OP_TUPLES_OUT) args.append(op->count);
        py::object result = call_python(stage.impl.attr(info.name), py::tuple(args));
        if (info.shape & PS_OP_TUPLE_OUT) copy_out(codec, result, op->out, stage.returned(info.name));
        if (info.shape & PS_OP_TUPLES_OUT) op->value = copy_all_out(codec, result, op, stage.returned(info.name));
        if (info.shape & PS_OP_VALUE_OUT) op->value = int_argument(result, stage.returned(info.name));
        return PS_OK;
    } catch (py::error_already_set &e) {
        keep_moved();
        if (e.matches(PyExc_TimeoutError)) return PS_ETIMEDOUT;
        int status = e.matches(PyExc_NotImplementedError) ? PS_ENOTSUP : PS_EINVAL;
        say_exception(e, why, why_size);
        keep_python_stage_error(std::move(e));
        return status;
    } catch (py::builtin_exception &e) {
        keep_moved();
        e.set_error();
        py::error_already_set error;
        say_exception(error, why, why_size);
        keep_python_stage_error(std::move(error));
    }
    return PS_EINVAL;
}

void python_release(void *impl) {
    HeldGil gil;
    delete static_cast<PythonStage *>(impl);
}

const ps_bridge kPythonBridge = {python_answers, python_call, python_release};

std::shared_ptr<Stage> create_python_stage(const py::object &impl, const std::string &name,
                                           const std::shared_ptr<Stage> &below) {
    if (!below) throw py::value_error("a Python stage needs a stage below it (a path ends with 'core')");
    ps_stage *stage = nullptr;
    int rc = ps_bridge_stage_create(&kPythonBridge, new PythonStage{impl, below, {}}, name.c_str(), below->get(), &stage);
    if (rc != PS_OK) raise_status(rc, "python stage");
    return std::make_shared<Stage>(stage, below->owner());
}

}  // namespace

void bind_python_bridge(py::module_ &m) {
    m.def("create_python_stage", &create_python_stage, py::arg("impl"), py::arg("name"), py::arg("below"),
          "Wrap a Python object as a pass-through stage of kind `name`: each operation kind (operations()) it has a\n"
          "method of that name for is answered by that method, called with the Handle below first; the others pass\n"
          "down. The slow path: every call takes the GIL.");
}

}  // namespace paths_native
