"""Editing paths by role, and a server keeping the trace files clients send in its own folder and
granting their paths only so much."""

import os
import time

import pytest

import paths
from paths import build_path, make_path, stage
from paths.model.path_edit import confine_trace_files, insert_before, insert_top
from paths.runtime.server import PathServer
from paths.runtime.trace_file import read_trace

CORE = stage("core", name="E", format="q")


def test_insert_top_and_before_a_kind():
    p = make_path(stage("reduce-sum", num_threads=2), stage("remote", host="n0"), stage("reduce-sum", num_threads=2),
                  stage("remote", host="root"), CORE)
    t = stage("trace", file="t.bin")
    assert [s.kind for s in insert_top(p, t)] == ["trace", "reduce-sum", "remote", "reduce-sum", "remote", "core"]
    assert [s.kind for s in insert_before(p, "remote", t)] == [
        "reduce-sum", "trace", "remote", "reduce-sum", "trace", "remote", "core"]
    assert [s.kind for s in p] == ["reduce-sum", "remote", "reduce-sum", "remote", "core"]  # unchanged


@pytest.mark.parametrize("name", ["/etc/x.bin", "../x.bin", "a/b.bin", "", ".."])
def test_trace_files_from_elsewhere_must_be_bare_names(name):
    with pytest.raises(ValueError, match="bare file name"):
        confine_trace_files(make_path(stage("trace", file=name), CORE), "/tmp")


def test_trace_files_are_placed_in_the_folder_or_refused(tmp_path):
    p = make_path(stage("trace", file="t.bin"), CORE)
    assert confine_trace_files(p, str(tmp_path))[0].param("file") == str(tmp_path / "t.bin")
    with pytest.raises(ValueError, match="writes no trace files"):
        confine_trace_files(p, None)


def test_trace_files_placed_are_those_of_the_stages_built_here(tmp_path):
    """The stages past a remote are built by the server it names, which places their files itself
    and refuses any but a bare name."""
    p = make_path(stage("trace", file="near.bin"), stage("remote", host="n1"), stage("trace", file="far.bin"), CORE)
    placed = confine_trace_files(p, str(tmp_path))
    assert [s.param("file") for s in placed if s.kind == "trace"] == [str(tmp_path / "near.bin"), "far.bin"]
    far_only = make_path(stage("remote", host="n1"), stage("trace", file="/x/far.bin"), CORE)
    assert confine_trace_files(far_only, None) == far_only


def remote_trace_path(endpoint, name):
    return make_path(stage("remote", host=endpoint, timeout_ms=5000), stage("trace", file=name), CORE)


@pytest.mark.parametrize("trace_dir, name, refusal", [
    (None, "t.bin", "writes no trace files"),
    ("traces", "/tmp/t.bin", "bare file name"),
    ("traces", "../t.bin", "bare file name"),
])
def test_server_refuses_trace_files_it_would_not_own(tmp_path, trace_dir, name, refusal):
    folder = str(tmp_path / trace_dir) if trace_dir else None
    with PathServer("tcp://127.0.0.1:*", pastset=paths.PastSet(), trace_dir=folder).start() as server:
        with pytest.raises(ValueError, match=refusal):
            build_path(remote_trace_path(server.endpoint, name), pastset=paths.PastSet())
    assert os.listdir(tmp_path) == []


def test_server_writes_client_traces_in_its_trace_dir(tmp_path):
    with PathServer("tcp://127.0.0.1:*", pastset=paths.PastSet(), trace_dir=str(tmp_path)).start() as server:
        h = build_path(remote_trace_path(server.endpoint, "client.bin"), pastset=paths.PastSet())
        h.move(3)
        assert h.observe(timeout=5) == (3,)
        del h  # the client releases its link; the server drops the tree, and the trace is written
        deadline = time.monotonic() + 10
        while not (tmp_path / "client.bin").exists() and time.monotonic() < deadline:
            time.sleep(0.01)  # a bounded poll: the server's own thread reaps the link
    assert [e.op for e in read_trace(str(tmp_path / "client.bin")).events] == ["move", "observe"]


def test_each_server_of_a_chain_keeps_the_trace_files_of_the_stages_it_builds(tmp_path):
    """A path through server A on to server B, a trace on each: A places its own trace in its
    folder and sends B's on as a bare name, which B places in its own (A placed both, as absolute
    names, which B refused)."""
    near, far = tmp_path / "a", tmp_path / "b"
    near.mkdir()
    far.mkdir()
    with PathServer("tcp://127.0.0.1:*", pastset=paths.PastSet(), trace_dir=str(far)).start() as b, \
            PathServer("tcp://127.0.0.1:*", pastset=paths.PastSet(), trace_dir=str(near),
                       policy=paths.ServerPolicy(allow_remote=(b.endpoint,))).start() as a:
        h = build_path(make_path(stage("remote", host=a.endpoint, timeout_ms=5000), stage("trace", file="a.bin"),
                                 stage("remote", host=b.endpoint, timeout_ms=5000), stage("trace", file="b.bin"),
                                 CORE), pastset=paths.PastSet())
        h.move(3)
        assert h.observe(timeout=5) == (3,)
        del h
        deadline = time.monotonic() + 10
        while not ((near / "a.bin").exists() and (far / "b.bin").exists()) and time.monotonic() < deadline:
            time.sleep(0.01)  # a bounded poll: each server's own thread reaps the link
    assert sorted(os.listdir(near)) == ["a.bin"] and sorted(os.listdir(far)) == ["b.bin"]


@pytest.mark.parametrize("spec, words", [
    (stage("remote", host="tcp://127.0.0.1:1", timeout_ms=3_600_000), "timeout_ms may be at most 60000"),
    (stage("trace", file="t.bin", capacity=1 << 26), r"bytes, beyond the memory budget of client"),
])
def test_a_server_grants_client_paths_only_so_much(tmp_path, spec, words):
    with PathServer("tcp://127.0.0.1:*", pastset=paths.PastSet(), trace_dir=str(tmp_path)).start() as s:
        with pytest.raises(ValueError, match=words):
            build_path(make_path(stage("remote", host=s.endpoint, timeout_ms=5000), spec,
                                 stage("core", name="L", format="q")), pastset=paths.PastSet())
