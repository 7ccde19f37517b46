// python_element.hpp — a PastSet and its elements as Python sees them: paths.PastSet, whose
// enter() gives an Element, the core's element with the operations every endpoint offers.
#ifndef WRAPPERS_PYTHON_ELEMENT_HPP
#define WRAPPERS_PYTHON_ELEMENT_HPP

#include <pybind11/pybind11.h>

#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "endpoint.hpp"

extern "C" {
#include "pastset.h"
#include "stage_kinds.h"
}

namespace paths_native {

// The PastSet core's space, freed when the last Python object that needs it goes.
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

// An element's operations, straight into the PastSet core (as its core stage does them).
class ElementCalls {
public:
    ElementCalls(std::shared_ptr<SpaceOwner> owner, ps_element *e)
        : hold_(std::make_shared<ElementHold>(std::move(owner), e)), e_(e) {}

    int call(ps_op *op) { return ps_element_call(e_, op); }
    int64_t deadline() const { return PS_FOREVER; }
    std::string explanation() const { return ""; }
    void hold() {}    // an element serves every thread at once
    void let_go() {}

    std::string name() const { return ps_element_name(e_); }
    py::dict stats() const;

private:
    std::shared_ptr<ElementHold> hold_;
    ps_element *e_;
};

using Element = Endpoint<ElementCalls>;

class PastSet {
public:
    PastSet() : owner_(std::make_shared<SpaceOwner>()) {}

    Element enter(const py::handle &name, const py::handle &format);
    void remove(const py::handle &name, const py::handle &format);
    bool remove_unused(const py::handle &name, const py::handle &format);
    std::optional<std::string> format_of(const py::handle &name) const;
    std::vector<std::pair<std::string, std::string>> elements() const;
    const std::shared_ptr<SpaceOwner> &owner() const { return owner_; }

private:
    std::string existing_format(const std::string &name) const;

    std::shared_ptr<SpaceOwner> owner_;
};

}  // namespace paths_native

#endif
