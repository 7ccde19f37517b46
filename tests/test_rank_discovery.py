"""A program under an existing launcher: rank, size and job from each launcher's variables; the
rendezvous through rank 0 (by a file, or a given endpoint), its errors, each with what is
missing; the ready barrier, without which a rank may build at a server that does not admit it
or know the run's servers yet; and for real, `mpirun -np 4 python app.py` with Open MPI (its
srun twin is in tests/test_slurm.py)."""

import os
import re
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from paths.runtime.rank_discovery import Discovered, discover
from paths.runtime.rendezvous import Rendezvous, RendezvousError

APP = str(Path(__file__).resolve().parent / "rank_app.py")


@pytest.mark.parametrize("environ, found", [
    ({}, Discovered("", 0, 1, "", True)),
    ({"PATHS_RANK": "2", "PATHS_SIZE": "5", "SLURM_PROCID": "0", "SLURM_NTASKS": "9"},
     Discovered("paths launch", 2, 5)),  # paths launch first, even inside an allocation
    ({"SLURM_PROCID": "3", "SLURM_NTASKS": "4", "SLURM_JOB_ID": "17", "SLURM_STEP_ID": "2",
      "SLURM_STEP_NUM_NODES": "1"}, Discovered("srun", 3, 4, "17.2", True)),
    ({"SLURM_PROCID": "0", "SLURM_NPROCS": "8", "SLURM_JOB_ID": "5", "SLURM_STEP_ID": "0",
      "SLURM_STEP_NUM_NODES": "2"}, Discovered("srun", 0, 8, "5.0", False)),
    ({"OMPI_COMM_WORLD_RANK": "1", "OMPI_COMM_WORLD_SIZE": "4", "OMPI_COMM_WORLD_LOCAL_SIZE": "4",
      "PMIX_RANK": "1", "PMIX_NAMESPACE": "2611", "OMPI_MCA_ess_base_jobid": "77"},
     Discovered("mpirun", 1, 4, "2611", True)),
    ({"OMPI_COMM_WORLD_RANK": "1", "OMPI_COMM_WORLD_SIZE": "4", "OMPI_COMM_WORLD_LOCAL_SIZE": "2",
      "OMPI_MCA_ess_base_jobid": "77"}, Discovered("mpirun", 1, 4, "77", False)),
    ({"PMIX_RANK": "6", "PMI_SIZE": "7", "PMIX_NAMESPACE": "ns"}, Discovered("pmix", 6, 7, "ns", False)),
    ({"PMI_RANK": "0", "PMI_SIZE": "3", "PMI_KVSNAME": "kvs_1", "MPI_LOCALNRANKS": "3"},
     Discovered("pmi", 0, 3, "kvs_1", True)),
    ({"SLURM_PROCID": "0", "SLURM_NTASKS": "2", "SLURM_JOB_ID": "7", "OMPI_COMM_WORLD_RANK": "1",
      "OMPI_COMM_WORLD_SIZE": "2", "OMPI_COMM_WORLD_LOCAL_SIZE": "2", "PMIX_NAMESPACE": "ns"},
     Discovered("mpirun", 1, 2, "ns", True)),  # mpirun in a batch script: the script's SLURM_PROCID is not its
    ({"SLURM_PROCID": "1", "SLURM_NTASKS": "2", "SLURM_JOB_ID": "7", "SLURM_STEP_ID": "0",
      "OMPI_COMM_WORLD_RANK": "3", "OMPI_COMM_WORLD_SIZE": "4", "PMIX_NAMESPACE": "ns"},
     Discovered("mpirun", 3, 4, "ns", False)),  # a rank of the daemon mpirun started with srun on a host
    ({"SLURM_PROCID": "0", "SLURM_NTASKS": "2", "SLURM_JOB_ID": "7"}, Discovered("", 0, 1, "", True)),
], ids=["alone", "paths launch", "srun", "srun on two hosts", "mpirun", "mpirun on two hosts", "pmix", "pmi",
        "mpirun in a batch script", "mpirun's rank on another host of a job", "a batch script"])
def test_each_launcher_is_recognised_by_its_variables(environ, found):
    assert discover(environ) == found


@pytest.mark.parametrize("environ, problem", [
    ({"SLURM_PROCID": "1", "SLURM_STEP_ID": "0"}, "srun: SLURM_PROCID is set but not SLURM_NTASKS or SLURM_NPROCS: cannot tell how many "
                            "ranks the run has"),
    ({"OMPI_COMM_WORLD_RANK": "x", "OMPI_COMM_WORLD_SIZE": "2"}, "OMPI_COMM_WORLD_RANK='x': expected a whole number >= 0"),
    ({"PMI_RANK": "3", "PMI_SIZE": "3"}, "pmi: PMI_RANK=3: expected a rank below PMI_SIZE=3"),
    ({"PATHS_RANK": "0", "PATHS_SIZE": "0"}, "PATHS_SIZE='0': expected a whole number >= 1"),
])
def test_variables_that_say_nothing_sensible_are_named(environ, problem):
    with pytest.raises(ValueError) as failed:
        discover(environ)
    assert str(failed.value) == problem


# ---- the rendezvous ------------------------------------------------------------------------------

def meet(size: int, environ: dict, checks=None, absent=(), then=None, failures=None, ended=None):
    """Every rank but `absent` exchanges at once (a thread each), then does then(rank, meeting)
    if given, then finishes (failing with failures[rank] if given; when it ended in ended[rank]);
    each rank's answer (then's, if given) or error."""
    answers: dict = {}

    def rank(r: int) -> None:
        found = Discovered("srun", r, size, "42.0", True)
        meeting = Rendezvous(found, environ)
        try:
            answers[r] = meeting.exchange({"endpoints": {f"n{r}": f"tcp://127.0.0.1:{7000 + r}"}, "keys": {}},
                                          (checks or {}).get(r, "map m"))
            if then is not None:
                answers[r] = then(r, meeting)
            meeting.finish((failures or {}).get(r, ""))
        except RendezvousError as e:
            answers[r] = e
            meeting.close()
        if ended is not None:
            ended[r] = time.monotonic()

    threads = [threading.Thread(target=rank, args=(r,)) for r in range(size) if r not in absent]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    return answers


def test_ranks_exchange_their_servers_through_rank_0_by_a_file(tmp_path):
    answers = meet(6, {"PATHS_RENDEZVOUS_DIR": str(tmp_path)})
    everyone = {f"n{r}": f"tcp://127.0.0.1:{7000 + r}" for r in range(6)}
    assert answers == {r: {"endpoints": everyone, "keys": {}} for r in range(6)}
    assert list(tmp_path.iterdir()) == []  # rank 0 removed its file


def test_ranks_meet_at_a_given_endpoint(tmp_path):
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    answers = meet(3, {"PATHS_RENDEZVOUS": f"tcp://127.0.0.1:{port}", "PATHS_RENDEZVOUS_DIR": str(tmp_path)})
    assert sorted(answers[2]["endpoints"]) == ["n0", "n1", "n2"]
    assert list(tmp_path.iterdir()) == []  # no file when the endpoint is given


def test_rank_0_ignores_what_is_no_rank_of_its_run(tmp_path):
    """Strangers at rank 0's endpoint (not JSON, a rank out of range, a second rank 0, silence)
    are dropped; the real rank still gets through."""
    import socket

    environ = {"PATHS_RENDEZVOUS_DIR": str(tmp_path)}
    result = {}

    def rank_0() -> None:
        meeting = Rendezvous(Discovered("srun", 0, 2, "42.0", True), environ)
        result["answer"] = meeting.exchange({"endpoints": {"n0": "tcp://127.0.0.1:7000"}, "keys": {}}, "map m")
        meeting.finish()

    gather = threading.Thread(target=rank_0)
    gather.start()
    file = tmp_path / ".paths-rendezvous-srun-42.0"
    while not file.exists():
        time.sleep(0.01)
    host, port = file.read_text().strip()[len("tcp://"):].split(":")
    strangers = []
    for junk in (b"hello\n", b'{"rank": 9, "size": 2}\n', b'{"rank": 0, "size": 2}\n', b""):
        stranger = socket.create_connection((host, int(port)))
        stranger.sendall(junk)
        strangers.append(stranger)
    answers = meet(2, environ, absent=(0,))
    gather.join(timeout=30)
    for stranger in strangers:
        stranger.close()
    assert answers[1]["endpoints"] == {"n0": "tcp://127.0.0.1:7000", "n1": "tcp://127.0.0.1:7001"}
    assert result["answer"] == answers[1]


def test_a_rank_given_twice_or_beyond_the_run_is_told_why_at_once(tmp_path):
    """Launcher variables that disagree: a second process of rank 1, and a rank of a run of
    another size. Each is turned away by rank 0 with the reason, not left to wait out its timeout
    and then blame the rendezvous file; the run itself goes on."""
    import json
    import socket

    environ = {"PATHS_RENDEZVOUS_DIR": str(tmp_path), "PATHS_RENDEZVOUS_TIMEOUT": "20"}
    servers = {"endpoints": {}, "keys": {}}
    result = {}
    gather = threading.Thread(target=lambda: result.update(
        answer=Rendezvous(Discovered("srun", 0, 3, "42.0", True), environ).exchange(servers, "map m")))
    gather.start()
    file = tmp_path / ".paths-rendezvous-srun-42.0"
    while not file.exists():
        time.sleep(0.01)
    host, port = file.read_text().strip()[len("tcp://"):].split(":")
    first = socket.create_connection((host, int(port)))  # rank 1, checked in first
    first.sendall(json.dumps({"rank": 1, "size": 3, "check": "map m", "servers": servers}).encode() + b"\n")
    for found, why in ((Discovered("srun", 1, 3, "42.0", True),
                        "rank 1 checked in already: the launcher's variables gave two processes rank 1"),
                       (Discovered("srun", 4, 5, "42.0", True),
                        "rank 4 is no rank of rank 0's run of 3 ranks: the launcher's variables disagree about the "
                        "run's size")):
        started = time.monotonic()
        with pytest.raises(RendezvousError) as refused:
            Rendezvous(found, environ).exchange(servers, "map m")
        assert str(refused.value) == f"paths: {found.describe()}: {why}"
        assert time.monotonic() - started < 10
    last = Rendezvous(Discovered("srun", 2, 3, "42.0", True), environ)
    assert last.exchange(servers, "map m") == servers
    last.close()
    gather.join(timeout=30)
    first.close()
    assert result["answer"] == servers


def test_a_rank_that_never_comes_is_named_by_rank_0_to_every_rank_that_came(tmp_path):
    """Rank 1 checked in: it is told at once what rank 0 found missing, rather than waiting out
    its own timeout and then blaming the rendezvous file."""
    answers = meet(3, {"PATHS_RENDEZVOUS_DIR": str(tmp_path), "PATHS_RENDEZVOUS_TIMEOUT": "1"}, absent=(2,))
    for r in (0, 1):
        assert re.fullmatch(rf"paths: rank {r} of 3 \(srun, job 42\.0\): ranks 2 did not check in at "
                            r"tcp://127\.0\.0\.1:\d+ within 1 s \(PATHS_RENDEZVOUS_TIMEOUT to wait longer\)",
                            str(answers[r])), answers


def test_without_rank_0_a_rank_says_where_it_looked(tmp_path):
    answers = meet(2, {"PATHS_RENDEZVOUS_DIR": str(tmp_path), "PATHS_RENDEZVOUS_TIMEOUT": "0.5"}, absent=(0,))
    assert str(answers[1]) == (
        f"paths: rank 1 of 2 (srun, job 42.0): no rendezvous with rank 0 within 0.5 s: expected the endpoint "
        f"rank 0 writes to {tmp_path}/.paths-rendezvous-srun-42.0 (set PATHS_RENDEZVOUS_DIR to a folder every "
        f"rank sees, or PATHS_RENDEZVOUS=tcp://HOST:PORT for rank 0 to listen on)")


@pytest.mark.parametrize("listening", [False, True], ids=["nobody listens", "it gives no verdict"])
def test_a_rendezvous_file_whose_endpoint_does_not_answer_is_named_with_it(tmp_path, monkeypatch, listening):
    """A rank 0 killed during the rendezvous leaves its file: a rank of a later run of the job id
    says that the file's endpoint refused it, not that rank 0 never wrote it; one that took its
    hello and never answered (a rank 0 stopped) is told apart."""
    monkeypatch.setattr("paths.runtime.rendezvous.VERDICT_SECONDS", 0.2)
    with socket.socket() as there:
        there.bind(("127.0.0.1", 0))
        if listening:
            there.listen()
        endpoint, file = f"tcp://127.0.0.1:{there.getsockname()[1]}", tmp_path / ".paths-rendezvous-srun-42.0"
        file.write_text(endpoint + "\n")
        answers = meet(2, {"PATHS_RENDEZVOUS_DIR": str(tmp_path), "PATHS_RENDEZVOUS_TIMEOUT": "0.5"}, absent=(0,))
    why = (f"rank 0 at {endpoint} (from {file}) took this rank's hello, and gave no verdict" if listening else
           f"{file} names {endpoint}, where nobody answered (a file a rank 0 that ended left, if this run's rank 0 "
           "has not written it yet)")
    assert str(answers[1]) == f"paths: rank 1 of 2 (srun, job 42.0): no rendezvous with rank 0 within 0.5 s: {why}"


def test_a_sum_named_as_the_runs_barrier_is_refused():
    """Its acquire said the thread held a handle on it already: the runtime's barrier's."""
    env = {**{k: v for k, v in os.environ.items() if not k.startswith(("PATHS_", "OMPI_", "PMI", "SLURM_"))},
           "PATHS_MAP": "local", "PATHS_SUM": "paths.barrier"}
    done = subprocess.run([sys.executable, "-c", "import paths\npaths.acquire('x', 'q')\n"], env=env,
                          capture_output=True, text=True, timeout=60)
    assert (done.returncode, done.stderr) == (1, "paths: sum 'paths.barrier': the run's own barrier (paths_barrier) "
                                                 "is the element of that name: give the sum another\n")


def test_a_python_program_whose_rendezvous_fails_says_so_in_one_line(tmp_path):
    """Not handled, the error is its one line on stderr (no traceback of the program's call), and
    the program exits 1; so is a map that cannot be read."""
    env = {**{k: v for k, v in os.environ.items() if not k.startswith(("PATHS_", "OMPI_", "PMI", "SLURM_"))},
           "PATHS_MAP": "paper-4w", "SLURM_PROCID": "1", "SLURM_NTASKS": "2", "SLURM_JOB_ID": "7",
           "SLURM_STEP_ID": "0", "PATHS_RENDEZVOUS_DIR": str(tmp_path), "PATHS_RENDEZVOUS_TIMEOUT": "0.5"}
    program = [sys.executable, "-c", "import paths\nparts = paths.acquire('S', 'q')\n"]
    done = subprocess.run(program, env=env, capture_output=True, text=True, timeout=60)
    assert (done.returncode, done.stderr.splitlines()) == (1, [
        f"paths: rank 1 of 2 (srun, job 7.0): no rendezvous with rank 0 within 0.5 s: expected the endpoint rank 0 "
        f"writes to {tmp_path}/.paths-rendezvous-srun-7.0 (set PATHS_RENDEZVOUS_DIR to a folder every rank sees, or "
        f"PATHS_RENDEZVOUS=tcp://HOST:PORT for rank 0 to listen on)"])
    done = subprocess.run(program, env={**env, "PATHS_MAP": str(tmp_path / "none.yaml")}, capture_output=True,
                          text=True, timeout=60)
    assert (done.returncode, done.stderr) == (
        1, f"paths: PATHS_MAP: {tmp_path}/none.yaml: cannot read the cluster map: No such file or directory\n")


@pytest.mark.parametrize("variables, line", [
    ({"OMPI_COMM_WORLD_RANK": "5", "OMPI_COMM_WORLD_SIZE": "3"},
     "paths: mpirun: OMPI_COMM_WORLD_RANK=5: expected a rank below OMPI_COMM_WORLD_SIZE=3"),
    ({"OMPI_COMM_WORLD_RANK": "abc", "OMPI_COMM_WORLD_SIZE": "3"},
     "paths: OMPI_COMM_WORLD_RANK='abc': expected a whole number >= 0"),
    ({"PATHS_RANK": "1"}, "paths: paths launch: PATHS_RANK is set but not PATHS_SIZE: cannot tell how many ranks "
                          "the run has"),
    ({"PMI_RANK": "0", "PMI_SIZE": "99999999999"},
     "paths: PMI_SIZE='99999999999': expected at most 1048576 (the most threads a run places)"),
    ({"PMI_RANK": "0", "PMI_SIZE": "1", "PATHS_POLICY": "bogus"},
     "paths: unknown policy 'bogus': expected 'block', 'cyclic' (or their aliases 'bucket', 'even') or a function "
     "named 'pkg.mod:func' or 'pkg.mod.func'"),
    ({"PMI_RANK": "0", "PMI_SIZE": "1", "PATHS_ACQUIRE": "nosuch:hook"},
     "paths: acquire hook 'nosuch:hook': cannot import module 'nosuch' (No module named 'nosuch')"),
    ({"PMI_RANK": "0", "PMI_SIZE": "1", "PATHS_RELEASE": "os:getcwd"},
     "paths: release hook 'os:getcwd': getcwd is not marked as one: decorate it with @paths.release_hook"),
    ({"PATHS_RANK": "0", "PATHS_SIZE": "2"}, "paths: PATHS_NODE is not set, but map 'paper-2w' places rank 0 on "
                                             "'n0': the launcher and this rank read another map or policy"),
    ({"PATHS_RANK": "0", "PATHS_SIZE": "2", "PATHS_NODE": "n0", "PATHS_SERVERS": "{"},
     "paths: PATHS_SERVERS: expected the servers as JSON {\"endpoints\": {node: endpoint}, \"keys\": {node: key}, "
     "\"client\": [public, secret]}, got '{'"),
    *(({"PMI_RANK": "0", "PMI_SIZE": "1", "PATHS_SUM": sums},
       f"paths: PATHS_SUM={sums!r}: expected an element name or several, separated by commas, none empty")
      for sums in (",,", "TOTAL,")),
], ids=["rank past the size", "not a number", "no size", "size past the most", "unknown policy", "no hook module",
        "not a hook", "no node", "servers not JSON", "sums of commas", "a sum and an empty one"])
def test_a_python_program_given_a_wrong_rank_says_so_in_one_line(variables, line):
    env = {**{k: v for k, v in os.environ.items() if not k.startswith(("PATHS_", "OMPI_", "PMI", "SLURM_"))},
           "PATHS_MAP": "paper-2w", **variables}
    done = subprocess.run([sys.executable, "-c", "import paths\npaths.acquire('S', 'q')\n"], env=env,
                          capture_output=True, text=True, timeout=60)
    assert (done.returncode, done.stderr) == (1, line + "\n")


def test_ranks_that_name_one_policy_by_its_two_names_meet(tmp_path):
    """block and bucket are one policy, whichever a rank's PATHS_POLICY says (or its map's default)."""
    base = {**{k: v for k, v in os.environ.items() if not k.startswith(("PATHS_", "OMPI_", "PMI", "SLURM_"))},
            "PATHS_MAP": "paper-2w", "PATHS_SUM": "TOTAL", "SLURM_NTASKS": "3", "SLURM_JOB_ID": "8",
            "SLURM_STEP_ID": "0", "PATHS_RENDEZVOUS_DIR": str(tmp_path), "PATHS_RENDEZVOUS_TIMEOUT": "30"}
    program = [sys.executable, "-c", "import paths\nt = paths.acquire('TOTAL', 'q')\nt.move(1)\nprint(t.observe(timeout=30))\n"]
    ranks = [subprocess.Popen(program, env={**base, "SLURM_PROCID": str(rank), **policy}, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True)
             for rank, policy in enumerate([{"PATHS_POLICY": "block"}, {"PATHS_POLICY": "bucket"}, {}])]
    outcomes = [(rank.communicate(timeout=60), rank.returncode) for rank in ranks]
    assert outcomes == [(("(3,)\n", ""), 0)] * 3, outcomes


def test_ranks_that_reduce_other_sums_are_refused_in_one_line_not_left_waiting(tmp_path):
    base = {**{k: v for k, v in os.environ.items() if not k.startswith(("PATHS_", "OMPI_", "PMI", "SLURM_"))},
            "PATHS_MAP": "paper-2w", "SLURM_NTASKS": "2", "SLURM_JOB_ID": "9", "SLURM_STEP_ID": "0",
            "PATHS_RENDEZVOUS_DIR": str(tmp_path), "PATHS_RENDEZVOUS_TIMEOUT": "30"}
    program = [sys.executable, "-c", "import paths\nt = paths.acquire('TOTAL', 'q')\nt.move(1)\nt.observe(timeout=30)\n"]
    ranks = [subprocess.Popen(program, env={**base, "SLURM_PROCID": str(rank), **sums}, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True)
             for rank, sums in enumerate([{"PATHS_SUM": "TOTAL"}, {}])]
    outcomes = [(rank.communicate(timeout=60)[1], rank.returncode) for rank in ranks]
    line = (r"paths: .*rank 1 runs map paper-2w \(\w+\) with policy block, no sums but the map's, rank 0 map "
            r"paper-2w \(\w+\) with policy block, sums TOTAL: give every rank the same\n")
    assert all(code == 1 and re.fullmatch(line, err) for err, code in outcomes), outcomes


def test_ranks_with_another_map_are_refused_everywhere(tmp_path):
    answers = meet(3, {"PATHS_RENDEZVOUS_DIR": str(tmp_path)}, checks={2: "map other"})
    expected = "rank 2 runs map other, rank 0 map m: give every rank the same"
    assert all(str(answer).endswith(expected) for answer in answers.values()), answers


@pytest.mark.parametrize("timeout", ["inf", "1e10"])
def test_a_timeout_of_no_limit_is_taken(tmp_path, timeout):
    """inf (or seconds past what a socket's timeout holds) waits as long as it takes, here not long."""
    answers = meet(3, {"PATHS_RENDEZVOUS_DIR": str(tmp_path), "PATHS_RENDEZVOUS_TIMEOUT": timeout})
    assert sorted(answers) == [0, 1, 2] and not any(isinstance(a, Exception) for a in answers.values()), answers


def test_a_bad_timeout_is_named():
    with pytest.raises(RendezvousError, match=r"PATHS_RENDEZVOUS_TIMEOUT='soon': expected a number of seconds > 0"):
        Rendezvous(Discovered("srun", 0, 2, "1.0"), {"PATHS_RENDEZVOUS_TIMEOUT": "soon"})


# ---- the ready barrier -----------------------------------------------------------------------------

def ready_unless(others: dict, times: dict):
    """then for meet: rank r does others[r](meeting) if r is in others, else ready(), its start
    and end in times[r]."""
    def then(r: int, meeting: Rendezvous) -> str:
        times[r] = [time.monotonic()]
        try:
            return others[r](meeting) if r in others else meeting.ready() or "ready"
        finally:
            times[r].append(time.monotonic())
    return then


def leave(meeting: Rendezvous):
    """A rank gone (its process ended): its connections close, and it does nothing more."""
    meeting.close()
    raise RendezvousError("gone")


def test_every_rank_gets_ready_only_once_every_rank_is(tmp_path):
    times: dict = {}
    late = {3: lambda meeting: time.sleep(0.5) or meeting.ready() or "ready"}
    answers = meet(4, {"PATHS_RENDEZVOUS_DIR": str(tmp_path)}, then=ready_unless(late, times))
    assert answers == {r: "ready" for r in range(4)}
    last_came = times[3][0] + 0.5
    assert all(end >= last_came for _, end in times.values()), times


def test_a_rank_that_never_gets_ready_is_named_within_the_timeout(tmp_path):
    times: dict = {}
    never = {2: lambda meeting: time.sleep(2.5) or "never"}  # holds its connection, then finishes
    answers = meet(3, {"PATHS_RENDEZVOUS_DIR": str(tmp_path), "PATHS_RENDEZVOUS_TIMEOUT": "1"},
                   then=ready_unless(never, times))
    for r in (0, 1):
        assert str(answers[r]) == (f"paths: rank {r} of 3 (srun, job 42.0): ranks 2 did not get ready within 1 s "
                                   f"(PATHS_RENDEZVOUS_TIMEOUT to wait longer)"), answers
        # rank 0 gives up the timeout after it began to wait, and rank 1 hears so then
        assert times[r][1] - times[0][0] >= 1 and times[r][1] - times[r][0] < 2, times


def test_a_rank_gone_before_it_is_ready_is_named_at_once(tmp_path):
    times: dict = {}
    answers = meet(3, {"PATHS_RENDEZVOUS_DIR": str(tmp_path)}, then=ready_unless({2: leave}, times))
    for r in (0, 1):
        assert str(answers[r]) == f"paths: rank {r} of 3 (srun, job 42.0): rank 2 is gone before it was ready", answers
        assert times[r][1] - times[r][0] < 5, times


def test_rank_0_gone_before_every_rank_is_ready_is_said(tmp_path):
    answers = meet(2, {"PATHS_RENDEZVOUS_DIR": str(tmp_path)}, then=ready_unless({0: leave}, {}))
    assert str(answers[1]) == "paths: rank 1 of 2 (srun, job 42.0): rank 0 is gone before every rank was ready"


def test_the_last_barrier_is_not_taken_for_ready(tmp_path):
    """A rank that skips ready and finishes: its {"done": true} is no {"ready": true}."""
    answers = meet(3, {"PATHS_RENDEZVOUS_DIR": str(tmp_path)}, then=ready_unless({2: lambda meeting: "skipped"}, {}))
    for r in (0, 1):
        assert str(answers[r]) == (f"paths: rank {r} of 3 (srun, job 42.0): rank 2 sent something other than "
                                   f'{{"ready": true}}'), answers


# ---- the last barrier -------------------------------------------------------------------------------

def test_a_rank_that_fails_ends_the_last_barrier_for_every_rank_at_once(tmp_path):
    """Rank 1 fails at its end while rank 3 still works (it waits, say, for rank 1's part of a
    sum, which never comes). Rank 1 waits for no rank, and rank 0 tells every rank at once: ranks
    0 and 2 wait no more for rank 3, and rank 3 learns it as soon as it comes to the barrier."""
    ended: dict = {}
    started = time.monotonic()
    answers = meet(4, {"PATHS_RENDEZVOUS_DIR": str(tmp_path)}, then=lambda r, meeting: r == 3 and time.sleep(3),
                   failures={1: "RuntimeError: boom (at app.py:3)"}, ended=ended)
    assert answers[1] is False and ended[1] - started < 2, (answers, ended)
    for r in (0, 2, 3):
        assert str(answers[r]) == f"paths: rank {r} of 4 (srun, job 42.0): rank 1 failed: RuntimeError: boom (at app.py:3)"
    assert ended[0] - started < 2 and ended[2] - started < 2 and 3 <= ended[3] - started < 5, ended


def test_a_rank_gone_ends_the_last_barrier_for_every_rank_at_once(tmp_path):
    """Rank 2 is gone without a word (killed, say): the others wait no more for rank 3."""
    ended: dict = {}
    started = time.monotonic()
    answers = meet(4, {"PATHS_RENDEZVOUS_DIR": str(tmp_path)},
                   then=lambda r, meeting: (r == 2 and leave(meeting)) or (r == 3 and time.sleep(3)), ended=ended)
    for r in (0, 1):
        assert str(answers[r]) == f"paths: rank {r} of 4 (srun, job 42.0): rank 2 is gone before the last barrier"
        assert ended[r] - started < 2, ended


def test_rank_0_that_fails_tells_every_rank(tmp_path):
    answers = meet(3, {"PATHS_RENDEZVOUS_DIR": str(tmp_path)}, failures={0: "exit status 3"})
    assert {r: str(answers[r]) for r in (1, 2)} == {
        r: f"paths: rank {r} of 3 (srun, job 42.0): rank 0 failed: exit status 3" for r in (1, 2)}


def test_ranks_that_succeed_wait_for_the_slowest_at_the_last_barrier(tmp_path):
    ended: dict = {}
    answers = meet(3, {"PATHS_RENDEZVOUS_DIR": str(tmp_path)}, then=lambda r, meeting: r == 2 and time.sleep(1),
                   ended=ended)
    assert answers == {0: False, 1: False, 2: None}
    assert min(ended.values()) >= ended[2] - 0.1, ended


def test_no_rank_builds_at_a_server_before_it_admits_the_run(monkeypatch):
    """Two ranks taken to be on two hosts (their servers authenticate clients), but on loopback:
    rank 0 is slow to admit the run's client keys, and rank 1 builds at rank 0's server as soon
    as it is wired. A refused CURVE handshake is not tried again, so without the ready barrier
    the build fails."""
    import socket

    from paths import build_path, make_path, stage
    from paths.model.cluster_map import open_map
    from paths.runtime import rank_wiring
    from paths.runtime.build import BuildContext
    from paths.runtime.process_context import make_runtime
    from paths.runtime.server import PathServer

    def on_loopback(bind, *args, **kwargs):
        return PathServer(bind.replace("0.0.0.0", "127.0.0.1"), *args, **kwargs)

    admit = PathServer.allow_clients

    def slow_on_rank_0(server, clients):
        if threading.current_thread().name == "rank 0":
            time.sleep(1)
        admit(server, clients)

    monkeypatch.setattr(rank_wiring, "PathServer", on_loopback)
    monkeypatch.setattr(PathServer, "allow_clients", slow_on_rank_0)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    environ = {"PATHS_RENDEZVOUS": f"tcp://127.0.0.1:{port}"}
    results: dict = {}

    def rank(r: int) -> None:
        runtime = make_runtime(open_map("paper-2w"), 2, policy="cyclic", context=BuildContext())
        try:
            wiring = rank_wiring.wire(runtime, Discovered("mpirun", r, 2, "hosts", False), environ)
            try:
                assert all(server.endpoint.startswith("tcp://127.0.0.1:") for server in wiring.hosted)
                if r == 1:
                    handle = build_path(make_path(stage("remote", host="n0", timeout_ms=3000),
                                                  stage("core", name="RACE", format="q")), context=runtime.context)
                    handle.move((7,))
                    results[r] = handle.observe(timeout=5)
            finally:
                wiring.close()
        except Exception as e:
            results[r] = e

    threads = [threading.Thread(target=rank, args=(r,), name=f"rank {r}") for r in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert results == {1: (7,)}


def test_no_rank_builds_at_a_server_before_it_knows_the_run(monkeypatch, tmp_path):
    """Four ranks on one host, by paper-2w's bucket policy two on n0 and two on n1 (rank 2
    hosts n1's server). Rank 2 is slow to take in the run's servers after the exchange, and
    rank 3 acquires the sum at once: n1's server builds the rest of its path at n0's, which it
    can only once it knows where n0's server is and trusts it."""
    from paths.model.cluster_map import open_map
    from paths.runtime import rank_wiring
    from paths.runtime.build import BuildContext
    from paths.runtime.process_context import make_runtime

    exchange = Rendezvous.exchange

    def slow_on_rank_2(meeting, servers, check):
        everyone = exchange(meeting, servers, check)
        if meeting.found.rank == 2:
            time.sleep(1)
        return everyone

    monkeypatch.setattr(Rendezvous, "exchange", slow_on_rank_2)
    environ = {"PATHS_RENDEZVOUS_DIR": str(tmp_path)}
    results: dict = {}

    def rank(r: int) -> None:
        runtime = make_runtime(open_map("paper-2w"), 4, sums=["TOTAL"], context=BuildContext())
        try:
            wiring = rank_wiring.wire(runtime, Discovered("mpirun", r, 4, "one host", True), environ)
            try:
                runtime.via = wiring.via
                total = runtime.acquire("TOTAL", "q", r)
                total.move((r + 1,))
                results[r] = total.observe(timeout=5)
            finally:
                wiring.close()
        except Exception as e:
            results[r] = e

    threads = [threading.Thread(target=rank, args=(r,)) for r in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert results == {r: (10,) for r in range(4)}


def test_ranks_on_other_hosts_admit_only_each_other(tmp_path):
    """Two ranks that Open MPI's variables place on two hosts: their servers listen on every
    interface, prove themselves with CURVE and admit only the client keys the rendezvous hands
    out, so the sum comes out exact only if each rank presents its own and every server admits
    both (a stranger's refusal is tested on paths serve and on the node servers)."""
    env = {**os.environ, "OMPI_COMM_WORLD_SIZE": "2", "OMPI_COMM_WORLD_LOCAL_SIZE": "1", "PMIX_NAMESPACE": "hosts",
           "PATHS_MAP": "paper-2w", "PATHS_POLICY": "cyclic", "PATHS_SUM": "TOTAL", "PATHS_RENDEZVOUS_DIR": str(tmp_path)}
    ranks = [subprocess.Popen([sys.executable, APP, "sum"], env={**env, "OMPI_COMM_WORLD_RANK": str(r)},
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for r in range(2)]
    outputs = [rank.communicate(timeout=60) for rank in ranks]
    assert [rank.returncode for rank in ranks] == [0, 0], outputs
    for r, (out, _) in enumerate(outputs):
        assert re.fullmatch(rf"rank {r} of 2 on n{r} by mpirun total 3 rendezvous rank 0 at tcp://[^:]+:\d+\n", out)


@pytest.mark.parametrize("how, status, said", [
    ([], 1, "RuntimeError: rank 1 fails\n"), (["3"], 3, ""), (["rank 1 gives up"], 1, "rank 1 gives up\n"),
    (["3", "exit"], 3, ""),
], ids=["raises", "sys.exit(3)", "sys.exit(message)", "exit(3)"])
def test_a_rank_that_fails_ends_at_once_though_the_others_wait_for_it(tmp_path, how, status, said):
    """Rank 1 fails once wired (raises, or calls sys.exit or exit() with a failing status), and rank 0
    waits in the sum for rank 1's part. Rank 1 must not wait for rank 0 at the last barrier: it
    ends at once with its error and status, and so its launcher ends the run (here the test ends
    rank 0)."""
    env = {**os.environ, "OMPI_COMM_WORLD_SIZE": "2", "OMPI_COMM_WORLD_LOCAL_SIZE": "2", "PMIX_NAMESPACE": "fails",
           "PATHS_MAP": "paper-2w", "PATHS_SUM": "TOTAL", "PATHS_RENDEZVOUS_DIR": str(tmp_path)}
    ranks = [subprocess.Popen([sys.executable, APP, "fail", "1", *how], env={**env, "OMPI_COMM_WORLD_RANK": str(r)},
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for r in range(2)]
    try:
        out, err = ranks[1].communicate(timeout=20)
        assert (ranks[1].returncode, out) == (status, ""), err
        assert err.endswith(said), err
        assert ranks[0].poll() is None  # still waiting for rank 1's part
    finally:
        for rank in ranks:
            rank.kill()
            rank.communicate()


# ---- Open MPI for real ----------------------------------------------------------------------------

@pytest.mark.parametrize("policy, nodes", [("block", ["n0"] * 4), ("cyclic", ["n0", "n1", "n2", "n3"])])
def test_mpirun_ranks_find_each_other_and_sum(openmpi, tmp_path, policy, nodes):
    env = {**os.environ, **openmpi, "PATHS_MAP": "paper-4w", "PATHS_POLICY": policy, "PATHS_SUM": "TOTAL"}
    done = subprocess.run(["mpirun", "-np", "4", sys.executable, APP, "sum"], capture_output=True, text=True,
                          timeout=120, env=env, cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    # mpirun forwards the ranks' output in pieces: a line may be cut by another rank's
    found = re.findall(r"rank (\d) of 4 on (n\d) by mpirun total (\d+) rendezvous rank 0 at tcp://127\.0\.0\.1:\d+",
                       done.stdout)
    assert sorted(found) == [(str(rank), nodes[rank], "10") for rank in range(4)], done.stdout
    assert list(tmp_path.iterdir()) == []  # the rendezvous file is gone


@pytest.mark.parametrize("how, said", [([], "RuntimeError: rank 1 fails"), (["3"], "")], ids=["raises", "sys.exit(3)"])
def test_mpirun_ends_when_a_rank_fails(openmpi, tmp_path, how, said):
    """Rank 1 fails (raises, or calls sys.exit(3)) while the others wait in the sum for its part
    (each at most 60 s): mpirun ends the run as soon as rank 1 ends, with its error and a status
    that is not 0."""
    env = {**os.environ, **openmpi, "PATHS_MAP": "paper-4w", "PATHS_SUM": "TOTAL"}
    started = time.monotonic()
    done = subprocess.run(["mpirun", "-np", "4", sys.executable, APP, "fail", "1", *how], capture_output=True,
                          text=True, timeout=120, env=env, cwd=tmp_path)
    assert done.returncode != 0 and said in done.stderr, done.stdout + done.stderr
    assert time.monotonic() - started < 30
