// python_wire.cpp — the wire protocol's constants (wire.h, server.h) as Python sees them, so that
// wire.md and the tests that speak the protocol by hand are checked against the C code.
#include "python_call.hpp"
#include "python_module.hpp"

extern "C" {
#include "peer_directory.h"
#include "server.h"
#include "wire.h"
}

namespace paths_native {

namespace {

py::dict wire_protocol() {
    py::dict control;
    control["build"] = static_cast<int>(PS_WIRE_BUILD);
    control["release"] = static_cast<int>(PS_WIRE_RELEASE);
    control["ping"] = static_cast<int>(PS_WIRE_PING);
    control["connect"] = static_cast<int>(PS_WIRE_CONNECT);
    control["peer"] = static_cast<int>(PS_WIRE_PEER);
    control["part"] = static_cast<int>(PS_WIRE_PART);
    control["break"] = static_cast<int>(PS_WIRE_BREAK);
    py::dict transports;
    transports["zmq"] = static_cast<int>(PS_TRANSPORT_ZMQ);
    transports["tcp"] = static_cast<int>(PS_TRANSPORT_TCP);
    transports["ipc"] = static_cast<int>(PS_TRANSPORT_IPC);
    py::dict out;
    out["version"] = static_cast<int>(PS_WIRE_VERSION);
    out["header"] = static_cast<int>(PS_WIRE_HEADER);
    out["max_payload"] = static_cast<int>(PS_WIRE_MAX_PAYLOAD);
    out["batch_payload"] = static_cast<int>(PS_WIRE_BATCH_PAYLOAD);
    out["secret"] = static_cast<int>(PS_WIRE_SECRET);
    out["spec_max"] = static_cast<int>(PS_SPEC_MAX);
    out["group_max"] = static_cast<int>(PS_GROUP_MAX);
    out["op_first"] = static_cast<int>(PS_WIRE_OP_FIRST);
    out["op_limit"] = static_cast<int>(PS_WIRE_OP_LIMIT);
    out["control"] = control;
    out["transports"] = transports;
    return out;
}

}  // namespace

void bind_wire(py::module_ &m) {
    m.def("wire_protocol", &wire_protocol,
          "{version, header, max_payload, batch_payload, secret, spec_max, group_max, op_first, op_limit, control:\n"
          "{build, release, ping, connect, peer, part, break}, transports: {zmq, tcp, ipc}}: the wire protocol's constants\n"
          "(wire.md). A stage operation's op code is its kind's (operations()); a well-formed frame's op is\n"
          "op_first <= op < op_limit.");
}

}  // namespace paths_native
