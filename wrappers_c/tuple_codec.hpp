// tuple_codec.hpp — tuples as Python sees them and as C stores them: packed and unpacked with
// Python's own `struct` module, so that both sides read a format string the same way, and a wrong
// tuple explained in the element's own terms.
#ifndef WRAPPERS_TUPLE_CODEC_HPP
#define WRAPPERS_TUPLE_CODEC_HPP

#include <pybind11/pybind11.h>

#include <string>
#include <vector>

extern "C" {
#include "pastset.h"
}

namespace py = pybind11;

namespace paths_native {

constexpr size_t kStackTuple = 256;  // tuples up to this size are read on the stack

// Packs and unpacks the tuples of one format with Python's struct module, and explains a wrong
// tuple in the element's own terms.
class TupleCodec {
public:
    explicit TupleCodec(const std::string &format);

    const ps_tuple_format &parsed() const { return parsed_; }
    size_t size() const { return parsed_.size; }
    const std::string &format() const { return format_; }

    // Returns the packed bytes of t (a tuple, or a bare value when the format has one value).
    py::bytes pack(const py::handle &t, const std::string &owner) const;
    // Appends the packed bytes of every tuple of an iterable to `out`; returns how many.
    size_t pack_all(const py::handle &tuples, const std::string &owner, std::vector<unsigned char> &out) const;
    py::object unpack(const void *bytes) const;

private:
    // An 's' or 'p' field: struct.pack would silently cut longer bytes to fit it.
    struct BytesField {
        size_t value;      // its place in the tuple
        size_t capacity;   // bytes it holds ('p' keeps one for the length)
        std::string code;  // as written: "16s"
    };

    void check_length(const py::handle &value, const BytesField &field, const std::string &owner) const;
    [[noreturn]] void wrong_tuple(const py::handle &t, const std::string &owner, const std::string &why) const;
    void describe_fields();

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

}  // namespace paths_native

#endif
