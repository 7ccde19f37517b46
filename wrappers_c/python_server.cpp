// python_server.cpp — the C side of a PastSet server as Python drives it (paths/runtime/server.py): BUILD
// requests come to Python, which builds each path and hands the C server the link to serve.
#include <zmq.h>

#include <cstring>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "python_handle.hpp"
#include "python_module.hpp"

extern "C" {
#include "server.h"
#include "stage_kinds.h"
#include "zmq_context.h"
}

namespace paths_native {

namespace {

// One BUILD request, waiting for Python to build its path and answer it.
class BuildRequest {
public:
    BuildRequest() : request_(std::make_unique<ps_build_request>()) {}
    ps_build_request *get() { return request_.get(); }
    py::bytes spec() const { return py::bytes(request_->spec); }  // as sent: not necessarily UTF-8
    py::str client() const { return text_of(request_->client); }

private:
    std::unique_ptr<ps_build_request> request_;
};

class Server {
public:
    Server(const std::string &endpoint, const std::string &curve_secret, const py::object &clients) {
        char error[256] = "";
        int rc = ps_server_start(endpoint.c_str(), curve_secret.c_str(), !clients.is_none(), &server_, error,
                                 sizeof error);
        if (rc != PS_OK) throw py::value_error(std::string("paths server: ") + error);
        try {
            if (!clients.is_none()) allow_clients(clients.cast<py::dict>());
        } catch (...) {
            stop(py::none());  // no destructor runs for an object whose constructor threw
            throw;
        }
    }

    // name -> Z85 public key: the clients admitted from now on.
    void allow_clients(const py::dict &clients) {
        std::vector<ps_client_key> keys;
        for (auto item : clients) {
            ps_client_key key{};
            std::string name = py::str(item.first), public_key = py::str(item.second);
            if (name.empty() || name.size() >= sizeof key.name || public_key.size() != 40)
                throw py::value_error("paths server: client '" + name + "': expected a name of 1 to " +
                                      std::to_string(sizeof key.name - 1) + " characters and a 40-character key");
            std::memcpy(key.name, name.c_str(), name.size() + 1);
            std::memcpy(key.public_key, public_key.c_str(), 41);
            keys.push_back(key);
        }
        char error[256] = "";
        int rc = ps_server_allow_clients(live()->server_, keys.data(), keys.size(), error, sizeof error);
        if (rc != PS_OK) raise_text(PyExc_ValueError, std::string("paths server: ") + error);
    }
    ~Server() { stop(py::none()); }

    std::string endpoint() const { return server_ ? ps_server_endpoint(server_) : ""; }

    py::object next_build(const py::object &timeout) {
        auto request = std::make_shared<BuildRequest>();
        int64_t wait = timeout_ns(timeout);
        int rc;
        {
            ReleasedGil released;
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
            ReleasedGil released;
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
        d["crowded_out"] = c.crowded_out;
        return d;
    }

    int stop(const py::object &timeout) {
        if (!server_) return 0;
        int64_t wait = timeout_ns(timeout);
        ps_server *server = server_;
        server_ = nullptr;
        ReleasedGil released;
        return ps_server_stop(server, wait);
    }

private:
    Server *live() {
        if (!server_) throw std::runtime_error("paths server: already stopped");
        return this;
    }
    int next_build_wait(ps_build_request *request, int64_t wait) { return ps_server_next_build(server_, wait, request); }

    ps_server *server_ = nullptr;
};

}  // namespace

void bind_server(py::module_ &m) {
    py::class_<BuildRequest, std::shared_ptr<BuildRequest>>(m, "BuildRequest", "A BUILD request waiting for its answer.")
        .def_property_readonly("spec", &BuildRequest::spec)
        .def_property_readonly("client", &BuildRequest::client,
                               "Who sent it: 'key NAME' (an authenticated client), else its address, else 'local'.");
    py::class_<Server>(m, "Server", "The C side of a PastSet server: sockets, and one thread per served link.")
        .def(py::init<const std::string &, const std::string &, const py::object &>(), py::arg("endpoint"),
             py::arg("curve_secret") = "", py::arg("clients") = py::none(),
             "clients: None, or {name: Z85 public key}: only these clients are admitted (CURVE only).")
        .def("allow_clients", &Server::allow_clients, py::arg("clients"),
             "{name: Z85 public key}: the clients admitted from now on (a server started with clients).")
        .def_property_readonly("endpoint", &Server::endpoint)
        .def("next_build", &Server::next_build, py::arg("timeout") = py::none(),
             "The next BUILD request, or None when the timeout passes.")
        .def("answer_build", &Server::answer_build, py::arg("request"), py::arg("handle"), py::arg("error") = "",
             "Serve the handle for the requester (its id is returned), or refuse with the error text.")
        .def("reap", &Server::reap, "Ids of handles whose clients released them.")
        .def("counters", &Server::counters)
        .def("stop", &Server::stop, py::arg("timeout") = py::none(),
             "End every link's thread and close every socket. A link's thread still running a stage's code\n"
             "`timeout` seconds later (None: no limit) is left running: returns how many were.");
    m.def("zmq_max_sockets", &ps_zmq_max_sockets, "The most ZeroMQ sockets this process may have open at once.");
    m.def("abandon_remote_waits", [] { ps_remote_abandon_waits(); },
          "The process is exiting: every remote stage still setting up a link (waiting for the answer to its\n"
          "BUILD or CONNECT), or waiting for an overdue answer, gives up at once.");
    m.def("curve_keypair", [] {
        char public_key[41], secret_key[41];
        if (zmq_curve_keypair(public_key, secret_key) != 0) throw std::runtime_error("libzmq has no CURVE support");
        return std::make_pair(std::string(public_key), std::string(secret_key));
    }, "A new CURVE key pair (public, secret), Z85 text.");
}

}  // namespace paths_native
