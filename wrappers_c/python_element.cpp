// python_element.cpp — paths.PastSet and paths.Element.
#include "python_element.hpp"

#include "python_module.hpp"

namespace paths_native {

py::dict ElementCalls::stats() const {
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

Element PastSet::enter(const py::handle &name_arg, const py::handle &format_arg) {
    std::string call = "enter(" + shown(name_arg) + ", " + shown(format_arg) + ")";
    std::string name = text_argument(name_arg, call, "a name"), format = text_argument(format_arg, call, "a format");
    ps_element *e = nullptr;
    int rc = ps_enter(owner_->space, c_text(name, call).c_str(), c_text(format, call).c_str(), &e);
    if (rc == PS_EFORMAT) TupleCodec explain(format);  // throws ValueError with the reason
    if (rc == PS_EMISMATCH)
        throw py::value_error(call + ": element '" + name + "' exists with format '" + existing_format(name) + "'");
    if (rc == PS_EINVAL) throw py::value_error(call + ": expected a name of 1 to 255 bytes");
    if (rc != PS_OK) raise_status(rc, call);
    return Element(format, "element '" + name + "'", owner_, e);
}

void PastSet::remove(const py::handle &name_arg, const py::handle &format_arg) {
    std::string call = "remove(" + shown(name_arg) + ", " + shown(format_arg) + ")";
    std::string name = text_argument(name_arg, call, "a name"), format = text_argument(format_arg, call, "a format");
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

bool PastSet::remove_unused(const py::handle &name_arg, const py::handle &format_arg) {
    std::string call = "_remove_unused(" + shown(name_arg) + ", " + shown(format_arg) + ")";
    std::string name = text_argument(name_arg, call, "a name"), format = text_argument(format_arg, call, "a format");
    return ps_remove_unused(owner_->space, c_text(name, call).c_str(), c_text(format, call).c_str()) == PS_OK;
}

std::optional<std::string> PastSet::format_of(const py::handle &name_arg) const {
    std::string call = "format_of(" + shown(name_arg) + ")";
    std::string name = text_argument(name_arg, call, "a name");
    char format[PS_FORMAT_MAX_TEXT + 1];
    if (ps_format_of(owner_->space, c_text(name, call).c_str(), format, sizeof format) != PS_OK) return std::nullopt;
    return std::string(format);
}

std::vector<std::pair<std::string, std::string>> PastSet::elements() const {
    std::vector<std::pair<std::string, std::string>> out;
    ps_space_each(owner_->space, [](void *context, const ps_element *e) {
        static_cast<decltype(out) *>(context)->emplace_back(ps_element_name(e), ps_element_format(e)->text);
    }, &out);
    return out;
}

std::string PastSet::existing_format(const std::string &name) const {
    char format[PS_FORMAT_MAX_TEXT + 1] = "";
    ps_format_of(owner_->space, name.c_str(), format, sizeof format);
    return format;
}

void bind_element(py::module_ &m) {
    py::class_<Element> element(m, "Element", "A PastSet element: an ordered, append-only log of tuples of one format.");
    bind_endpoint(element, "Element");
    element.def_property_readonly("name", &Element::name)
        .def("stats", &Element::stats, "Counters: live_tuples, bytes_held, moves, observes, waits.");

    py::class_<PastSet>(m, "PastSet", "A PastSet tuple space: elements addressed by (name, format).")
        .def(py::init<>())
        .def("enter", &PastSet::enter, py::arg("name"), py::arg("format"),
             "Find or create the element (name, format).")
        .def("remove", &PastSet::remove, py::arg("name"), py::arg("format"),
             "Free the element (name, format) and its tuples (PastSet's delelement); refused while an\n"
             "Element object or a path built over it still holds it.")
        .def("format_of", &PastSet::format_of, py::arg("name"),
             "The format of the element named `name`, or None when there is none.")
        .def("_remove_unused", &PastSet::remove_unused, py::arg("name"), py::arg("format"),
             "Free the element (name, format) if nothing holds it and no tuple was ever moved into it (what a\n"
             "refused build made); whether it was freed.")
        .def("elements", &PastSet::elements, "[(name, format), ...] in creation order.");
}

}  // namespace paths_native
