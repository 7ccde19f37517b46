// tuple_codec.cpp — packing and unpacking tuples with Python's struct module.
#include "tuple_codec.hpp"

#include "python_call.hpp"

#include <algorithm>

namespace paths_native {

TupleCodec::TupleCodec(const std::string &format) : format_(format) {
    char error[160];
    if (ps_tuple_format_parse(format.c_str(), &parsed_, error, sizeof error) != 0) throw py::value_error(error);
    py::module_ struct_module = py::module_::import("struct");
    try {
        py::object compiled = struct_module.attr("Struct")(format);
        size_ = compiled.attr("size").cast<size_t>();
        pack_ = compiled.attr("pack");
        unpack_ = compiled.attr("unpack");
    } catch (py::error_already_set &e) {
        throw py::value_error("bad format '" + format + "': " + py::str(e.value()).cast<std::string>());
    }
    if (size_ != parsed_.size) throw py::value_error("bad format '" + format + "': size disagrees with struct.calcsize");
    describe_fields();
}

py::bytes TupleCodec::pack(const py::handle &t, const std::string &owner) const {
    py::tuple values;
    if (py::isinstance<py::tuple>(t) || py::isinstance<py::list>(t)) values = py::tuple(py::reinterpret_borrow<py::object>(t));
    else if (parsed_.value_count == 1) values = py::make_tuple(t);
    else wrong_tuple(t, owner, "not a tuple or list");
    if (values.size() != parsed_.value_count) wrong_tuple(t, owner, "wrong number of values");
    for (const BytesField &field : bytes_fields_) check_length(values[field.value], field, owner);
    try {
        return pack_(*values);
    } catch (py::error_already_set &e) {
        if (!e.matches(PyExc_Exception)) throw;
        wrong_tuple(t, owner, py::str(e.value()).cast<std::string>());
    }
}

size_t TupleCodec::pack_all(const py::handle &tuples, const std::string &owner, std::vector<unsigned char> &out) const {
    if (py::isinstance<py::str>(tuples) || py::isinstance<py::bytes>(tuples) || !py::isinstance<py::iterable>(tuples))
        throw py::type_error(owner + ": expected an iterable of tuples, got " + shown(tuples));
    size_t count = 0;
    for (py::handle t : tuples) {
        py::bytes packed = pack(t, owner + " (tuple " + std::to_string(count) + ")");
        const unsigned char *bytes = reinterpret_cast<const unsigned char *>(PyBytes_AS_STRING(packed.ptr()));
        out.insert(out.end(), bytes, bytes + parsed_.size);
        count++;
    }
    return count;
}

py::object TupleCodec::unpack(const void *bytes) const {
    py::bytes raw(static_cast<const char *>(bytes), parsed_.size);
    return unpack_(raw);
}

void TupleCodec::check_length(const py::handle &value, const BytesField &field, const std::string &owner) const {
    Py_ssize_t length = PyBytes_Check(value.ptr())       ? PyBytes_GET_SIZE(value.ptr())
                        : PyByteArray_Check(value.ptr()) ? PyByteArray_GET_SIZE(value.ptr())
                                                         : -1;  // not bytes: struct explains
    if (length > static_cast<Py_ssize_t>(field.capacity))
        throw py::value_error(owner + " (format '" + format_ + "'): field " + std::to_string(field.value) + " ('" +
                              field.code + "') holds at most " + std::to_string(field.capacity) + " bytes, got " +
                              std::to_string(length));
}

void TupleCodec::wrong_tuple(const py::handle &t, const std::string &owner, const std::string &why) const {
    throw py::type_error(owner + " (format '" + format_ + "'): expected a tuple of " +
                         std::to_string(parsed_.value_count) + " value(s) (" + fields_ + "), got " + shown(t) + " (" +
                         why + ")");
}

void TupleCodec::describe_fields() {
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
            // 'p' keeps a byte for the length, which struct caps at 255 (it would cut longer bytes there).
            size_t capacity = run.code == 'p' && run.count > 0 ? std::min<size_t>(run.count - 1, 255) : run.count;
            bytes_fields_.push_back({value, capacity, std::to_string(run.count) + static_cast<char>(run.code)});
        }
        uint32_t repeat = string ? 1 : run.count;
        for (uint32_t k = 0; k < repeat; k++, value++) fields_ += (fields_.empty() ? "" : ", ") + std::string(type);
    }
}

}  // namespace paths_native
