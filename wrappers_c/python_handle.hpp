// python_handle.hpp — built stages and callers' handles as Python sees them: paths._native.Stage
// (one reference to a C stage) and paths.Handle (one caller's link, with the operations every
// endpoint offers; its capsule gives C code of a user's own the same link as a paths_handle).
#ifndef WRAPPERS_PYTHON_HANDLE_HPP
#define WRAPPERS_PYTHON_HANDLE_HPP

#include <pybind11/pybind11.h>

#include <atomic>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>

#include "endpoint.hpp"
#include "python_element.hpp"

extern "C" {
#include "stage.h"
}

namespace paths_native {

// What the stage or one below it could say about its last failure ("" if nothing).
inline std::string stage_error(ps_stage *stage) {
    char line[PS_STAGE_ERROR_MAX];
    ps_stage_error(stage, line, sizeof line);
    return line;
}

// What the stage or one below it said of a failed call this thread began at `since`
// (ps_stage_error_since: "" if nothing).
inline std::string stage_error_since(ps_stage *stage, ps_error_mark since) {
    char line[PS_STAGE_ERROR_MAX];
    ps_stage_error_since(stage, since, line, sizeof line);
    return line;
}

// One reference to a built C stage, owned by Python. Keeps the PastSet alive for the core.
class Stage {
public:
    Stage(ps_stage *stage, std::shared_ptr<SpaceOwner> owner) : stage_(stage), owner_(std::move(owner)) {}
    ~Stage() {
        {
            ReleasedGil released;  // a trace may write its file here
            ps_stage_release(stage_);
        }
        ps_failure_cause_clear();  // what a Python stage raised in the release has no caller to reach
    }
    Stage(const Stage &) = delete;
    Stage &operator=(const Stage &) = delete;

    ps_stage *get() const { return stage_; }
    const std::shared_ptr<SpaceOwner> &owner() const { return owner_; }
    std::string kind() const { return ps_stage_kind_name(stage_); }
    uint32_t max_links() const { return ps_stage_max_links(stage_); }
    uint32_t link_count() const { return ps_stage_link_count(stage_); }
    std::string format() const { return ps_stage_format(stage_)->text; }

    py::dict counters() const;
    // The stage below it (its own reference), None at the bottom of a path.
    std::shared_ptr<Stage> below() const {
        ps_stage *below = ps_stage_below(stage_);
        if (!below) return nullptr;
        ps_stage_retain(below);
        return std::make_shared<Stage>(below, owner_);
    }

private:
    ps_stage *stage_;
    std::shared_ptr<SpaceOwner> owner_;
};

// One caller's link, running operations through the path. The link is owned (a thread's handle)
// or borrowed (the view a Python stage gets of its link below).
class LinkCalls {
public:
    LinkCalls(std::shared_ptr<Stage> stage, ps_link *borrowed, py::object owner)
        : stage_(std::move(stage)), owner_(std::move(owner)), link_(borrowed) {
        if (!link_) {
            link_ = &owned_;
            int rc;
            ps_error_mark began = ps_stage_error_mark();
            {
                ReleasedGil released;  // a remote stage waits for its server here ...
                WaitsHearSignals hearing;          // ... hearing Ctrl-C
                rc = ps_stage_attach(stage_->get(), &owned_);
            }
            if (rc == PS_OK && PyErr_Occurred()) {  // attached, but Ctrl-C came meanwhile: undone
                ReleasedGil released;
                ps_link_detach(&owned_);
            }
            throw_if_signal_raised();
            if (rc == PS_ESTATE)
                throw py::value_error("attach to stage '" + stage_->kind() + "': its fan-in of " +
                                      std::to_string(stage_->max_links()) + " callers (or one below it) is used up");
            if (rc != PS_OK) {
                std::string why = stage_error_since(stage_->get(), began);
                raise_status(rc, "attach to stage '" + stage_->kind() + "'" + (why.empty() ? "" : ": " + why));
            }
            owns_ = true;
        }
        slot_ = link_->slot;
    }
    ~LinkCalls() {
        if (!owns_) return;
        {
            ReleasedGil released;  // a batch sends what its caller holds, a remote releases its link
            ps_link_detach(&owned_);
        }
        ps_failure_cause_clear();  // what a Python stage raised in the detach has no caller to reach
    }
    LinkCalls(const LinkCalls &) = delete;

    int call(ps_op *op) {
        bool owned = owns_;
        if (owned) claim();  // seq_cst, against release_if_idle
        int rc = PS_ECLOSED;
        ps_failure_cause_clear();  // one an earlier call left: not this one's
        began_ = ps_stage_error_mark();
        if (!released_.load() && link_) {
            rc = ps_link_call(link_, op);
            moved_ += op->done;
        }
        if (owned) unclaim();
        return rc;
    }
    // A thread's handle serves one thread at a time, as its link does (a remote stage's connection,
    // a sum's contributor): a call from another thread while one runs is refused (RuntimeError),
    // not let through to break the link. The same thread may nest calls.
    void claim() {
        std::thread::id me = std::this_thread::get_id(), using_it{};
        if (!user_.compare_exchange_strong(using_it, me) && using_it != me)
            throw std::runtime_error("this handle is in use by another thread right now: give each thread a handle "
                                     "of its own (one build_path each)");
        ++depth_;
    }
    void unclaim() {
        if (--depth_ == 0) user_.store(std::thread::id{});
    }
    // A call of several slices claims the handle from its first to its last (Endpoint::sliced).
    void hold() {
        if (owns_) claim();
    }
    void let_go() {
        if (owns_) unclaim();
    }
    // Releases the caller's link and what it holds of the path now, with the GIL held, unless an
    // operation of it runs in another thread (then false: they stay until the handle goes).
    // Operations after it are refused (PS_ECLOSED) either way.
    bool release_if_idle() {
        if (!owns_) return true;
        released_.store(true);
        if (user_.load() != std::thread::id{}) return false;  // a call, or a fence, is running
        {
            ReleasedGil released;  // as when the handle goes
            ps_link_detach(&owned_);
        }
        ps_failure_cause_clear();
        owns_ = false;
        link_ = nullptr;
        stage_.reset();  // the last handle of a tree releases it: a trace writes its file
        owner_ = py::object();
        return true;
    }
    // Refuses the operations from now on (PS_ECLOSED), its link kept: a kernel released the handle,
    // and the run holds the path until it ends.
    void refuse_calls() { released_.store(true); }
    // The latest any call may wait: the caller's deadline, for the view a Python stage gets of
    // its link below (set for each call it serves); PS_FOREVER for a thread's own handle.
    int64_t deadline() const { return deadline_; }
    void set_deadline(int64_t deadline) { deadline_ = deadline; }
    // The tuples moved through the link (moves, exchanges' moves, move_many's parts) since the last
    // reset: what a Python stage's call already did below when it raises.
    int64_t moved() const { return moved_; }
    void reset_moved() { moved_ = 0; }
    // What the stage could say about the failure of its last call (a remote names its server),
    // or of a call this thread began at `since`.
    std::string explanation() const { return explanation(began_); }
    std::string explanation(ps_error_mark since) const {
        if (!stage_ || released_.load()) return "the handle was released";
        if (!link_) return "a Python stage's `below` is a handle only during the call it was given to";
        return stage_error_since(stage_->get(), since);
    }
    // The view a Python stage gets of its link below has the link only while a call it serves runs
    // (nullptr otherwise: its caller's handle, and the link with it, may be gone): lends it one.
    void lend(ps_link *link) { link_ = link; }

    ps_link *link() { return link_; }
    const std::shared_ptr<Stage> &stage() const { return stage_; }
    uint32_t slot() const { return slot_; }

private:
    std::shared_ptr<Stage> stage_;
    py::object owner_;  // whatever the builder wants kept alive as long as the handle
    // Written by every operation: on a cache line of its own, so that threads' handles never
    // share one.
    alignas(64) ps_link owned_{};
    ps_link *link_;
    uint32_t slot_ = 0;
    bool owns_ = false;
    std::atomic<std::thread::id> user_{}; // the thread in a call or fence of a thread's handle (claim)
    int depth_ = 0;                     // its calls in progress, nested ones too
    std::atomic<bool> released_{false};
    int64_t deadline_ = PS_FOREVER;
    int64_t moved_ = 0;
    ps_error_mark began_{};  // where its last call began, for explanation()
};

using Handle = Endpoint<LinkCalls>;


}  // namespace paths_native

#endif
