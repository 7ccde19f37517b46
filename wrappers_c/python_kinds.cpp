// python_kinds.cpp — the stage registry and the table of operation kinds, as Python sees them,
// and the creation of C stages from Python.
#include <optional>
#include <utility>
#include <vector>

#include <pybind11/stl.h>

#include "python_handle.hpp"
#include "python_module.hpp"

extern "C" {
#include "operation.h"
#include "stage.h"
}

namespace paths_native {

namespace {

py::object param_default(const ps_param_spec &spec) {
    if (!spec.default_value) return py::none();
    if (spec.type == PS_PARAM_INT) return py::int_(std::stoll(spec.default_value));
    if (spec.type == PS_PARAM_FLOAT) return py::float_(std::stod(spec.default_value));
    return py::str(spec.default_value);
}

const char *param_role(ps_param_role role) {
    switch (role) {
    case PS_PARAM_BUILT: return "built";
    case PS_PARAM_WRITTEN_FILE: return "written file";
    case PS_PARAM_WAIT_MS: return "wait ms";
    case PS_PARAM_NODES: return "nodes";
    default: return "given";
    }
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
            p["role"] = param_role(spec.role);
            params[spec.name] = p;
        }
        py::dict entry;
        entry["doc"] = kind->doc;
        entry["role"] = kind->role == PS_PASS_THROUGH ? "pass-through" : "joining";
        entry["needs_below"] = static_cast<bool>(kind->needs_below);
        entry["rest_at"] = kind->rest_at ? py::object(py::str(kind->rest_at)) : py::object(py::none());
        entry["params"] = params;
        kinds[kind->name] = entry;
    }
    return kinds;
}

py::list operations() {
    py::list out;
    for (int k = 0; k < PS_OP_KIND_COUNT; k++) {
        const ps_op_info &info = ps_op_kinds[k];
        py::list shape;
        const std::pair<uint32_t, const char *> flags[] = {
            {PS_OP_TUPLE_IN, "tuple in"}, {PS_OP_TUPLES_IN, "tuples in"}, {PS_OP_TUPLE_OUT, "tuple out"},
            {PS_OP_INDEX, "index"},       {PS_OP_BOUND, "bound"},         {PS_OP_VALUE_OUT, "value out"},
            {PS_OP_WAITS, "waits"},       {PS_OP_COMPOSED, "composed"},     {PS_OP_TUPLES_OUT, "tuples out"},
        };
        for (auto &[flag, name] : flags)
            if (info.shape & flag) shape.append(name);
        py::dict entry;
        entry["name"] = info.name;
        entry["code"] = k;
        entry["wire"] = info.wire;
        entry["shape"] = shape;
        out.append(entry);
    }
    return out;
}

// A stage's parameters from Python (int, float or str each), held for C: the values point into
// the strings kept here. `given` shows them as messages do: "capacity=1024, ...".
class NativeParams {
public:
    NativeParams(const std::string &kind_name, const py::dict &params) {
        names_.reserve(params.size());
        texts_.reserve(params.size());
        for (auto item : params) {
            names_.push_back(py::str(item.first));
            std::string what = "stage '" + kind_name + "': parameter '" + names_.back() + "'";
            ps_param_value v{nullptr, PS_PARAM_STR, 0, 0.0, nullptr, 0};
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
                texts_.push_back(c_text(value.cast<std::string>(), what));
                v.s = texts_.back().c_str();
            } else {
                throw py::type_error(what + " must be an int, float or str, got " + shown(value));
            }
            values_.push_back(v);
            given_ += (given_.empty() ? "" : ", ") + names_.back() + "=" + shown(value);
        }
        for (size_t i = 0; i < values_.size(); i++) values_[i].name = names_[i].c_str();
    }

    ps_params get() const { return ps_params{values_.data(), values_.size()}; }
    const std::string &given() const { return given_; }

private:
    std::vector<std::string> names_, texts_;
    std::vector<ps_param_value> values_;
    std::string given_;
};

const ps_stage_kind *kind_named(const std::string &kind_name) {
    const ps_stage_kind *kind = ps_stage_kind_find(kind_name.c_str());
    if (!kind) throw py::value_error("unknown stage kind '" + kind_name + "'");
    return kind;
}

// Creates a C stage of a registered kind above `below` (None for the core). Parameters are a
// dict of int, float or str; the registry checks them again, naming the stage and parameter.
// The build context besides the PastSet: the endpoint patterns a build for a client may reach
// (None: any) and this process's CURVE client key pair (None: a fresh one per connection).
std::shared_ptr<Stage> create_stage(const std::string &kind_name, const py::dict &params,
                                    const std::shared_ptr<Stage> &below, const PastSet &pastset,
                                    const std::optional<std::vector<std::string>> &trusted_endpoints,
                                    const std::optional<std::pair<std::string, std::string>> &curve_client) {
    const ps_stage_kind *kind = kind_named(kind_name);
    NativeParams native(kind_name, params);
    ps_params checked = native.get();
    std::vector<const char *> patterns;
    if (trusted_endpoints)
        for (const std::string &pattern : *trusted_endpoints) patterns.push_back(c_text(pattern, "trusted endpoint").c_str());
    ps_build_context context{pastset.owner()->space, trusted_endpoints ? patterns.data() : nullptr, patterns.size(),
                             curve_client ? curve_client->first.c_str() : nullptr,
                             curve_client ? curve_client->second.c_str() : nullptr};
    static const char *const kNone[] = {""};
    if (trusted_endpoints && patterns.empty()) context.trusted_endpoints = kNone;  // trusts nothing: not NULL
    char error[512] = "";
    ps_stage *stage = nullptr;
    int rc;
    {
        ReleasedGil released;  // attaching to a remote stage below waits for its server ...
        WaitsHearSignals hearing;          // ... hearing Ctrl-C
        rc = ps_stage_create(kind, &checked, &context, below ? below->get() : nullptr, &stage, error, sizeof error);
    }
    if (rc == PS_OK && PyErr_Occurred()) {  // made, but Ctrl-C came meanwhile: it goes
        Stage made(stage, pastset.owner());
    }
    throw_if_signal_raised();
    if (rc != PS_OK) {
        std::string message = error;  // the stage's own reason, if it gave one
        if (message.empty() && rc == PS_ENOMEM) {  // what the stage asked for, since it could not say
            std::string tuples = below ? " over " + std::to_string(ps_stage_format(below->get())->size) + "-byte tuples" : "";
            message = "stage '" + kind_name + "' (" + native.given() + ")" + tuples + ": out of memory";
        }
        if (message.empty()) {
            std::string why = below ? stage_error(below->get()) : "";
            message = "stage '" + kind_name + "': " + ps_status_name(rc) + (why.empty() ? "" : ": " + why);
        }
        raise_text(rc == PS_EREMOTE ? PyExc_ConnectionError : rc == PS_ENOMEM ? PyExc_MemoryError : PyExc_ValueError,
                   message);
    }
    return std::make_shared<Stage>(stage, pastset.owner());
}

// The bytes a stage of the kind would hold with these parameters over tuples of `format`.
size_t stage_footprint(const std::string &kind_name, const py::dict &params, const std::string &format) {
    const ps_stage_kind *kind = kind_named(kind_name);
    NativeParams native(kind_name, params);
    ps_params checked = native.get();
    TupleCodec codec(format);
    char error[512] = "";
    size_t bytes = ps_stage_footprint(kind, &checked, codec.size(), error, sizeof error);
    if (!bytes) throw py::value_error(error);
    return bytes;
}

}  // namespace

void bind_kinds(py::module_ &m) {
    m.def("stage_kinds", &stage_kinds,
          "{kind: {doc, role, needs_below, rest_at, params: {name: {type, required, default, min, max, choices,\n"
          "doc, role}}}}: every registered C stage kind, as its record says.");
    m.def("operations", &operations,
          "[{name, code, wire, shape}]: the operation kinds, by code (a trace event's op), with their op codes\n"
          "on the wire and the shape of their arguments and results.");
    m.def("create_stage", &create_stage, py::arg("kind"), py::arg("params"), py::arg("below"), py::arg("pastset"),
          py::arg("trusted_endpoints") = py::none(), py::arg("curve_client") = py::none(),
          "Create one C stage above `below` (None for the core). trusted_endpoints: the shell patterns of the\n"
          "endpoints a remote stage may reach (None: any); curve_client: the (public, secret) CURVE key pair it\n"
          "presents (None: a fresh one per connection).");
    m.def("stage_footprint", &stage_footprint, py::arg("kind"), py::arg("params"), py::arg("format"),
          "The bytes a stage of this kind would hold with these parameters (defaults filled in) over tuples of\n"
          "`format`: what a budget holds it to.");
}

}  // namespace paths_native
