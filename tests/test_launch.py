"""`paths launch`: any program on a map, one process per rank. The rank environment, sums across
ranks on an emulated multi-node map, output tagged `[rank]` or kept per rank, exit statuses,
and reaping measured with `ps`: after SIGINT, after a rank's failure and after SIGKILL of the
launcher, nothing of the run is left 2 seconds later (`paths run`'s nodes too). Also `paths
sbatch`'s script for block, cyclic and a policy of one's own, with the ranks' sums and hooks,
and the host of each rank it gives srun, run with stand-ins for scontrol and srun; and a program
alone with PATHS_MAP.
"""

import json
import math
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from hook_modules import PASS_THROUGH_HOOKS
from test_launcher import FAKE_SSH, LOOPBACK_MAP

from paths.cli.sbatch import batch_script

TESTS = Path(__file__).resolve().parent
REAPED_WITHIN = 2.0  # seconds: the bound for every process of a run to be gone


def launch(*args: str, cwd=None, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "paths", "launch", *args], capture_output=True, text=True,
                          timeout=timeout, cwd=cwd)


@pytest.fixture
def app(tmp_path):
    """rank_app.py copied into this test's folder: `ps` finds its ranks by that path."""
    copy = tmp_path / "rank_app.py"
    shutil.copy(TESTS / "rank_app.py", copy)
    return str(copy)


def processes_with(marker: str) -> list[str]:
    """`ps` lines (pid, state, command) of every live process whose command line holds marker."""
    listing = subprocess.run(["ps", "-ewwo", "pid=,stat=,args="], capture_output=True, text=True, check=True).stdout
    return [line.strip() for line in listing.splitlines()
            if marker in line and "ps -ewwo" not in line and int(line.split()[0]) != os.getpid()]


def end_what_outlived(marker: str) -> None:
    """Kill every process whose command line holds marker: what outlived a run is its test's to end."""
    for line in processes_with(marker):
        os.kill(int(line.split()[0]), signal.SIGKILL)


def end_run(run: subprocess.Popen, marker: str | None = None) -> None:
    """A test's run ended: its process group killed if it is still there, its output read, and
    what outlived it (by marker) killed."""
    if run.poll() is None:
        os.killpg(run.pid, signal.SIGKILL)
    run.communicate()
    if marker:
        end_what_outlived(marker)


def gone_within(marker: str, seconds: float) -> list[str]:
    """What is still there (by `ps`) `seconds` after now, or [] as soon as nothing is."""
    deadline = time.monotonic() + seconds
    while (left := processes_with(marker)) and time.monotonic() < deadline:
        time.sleep(0.05)
    return left


# ---- the ranks' environment and what they compute together -----------------------------------------

def test_each_rank_gets_its_rank_size_node_map_and_the_servers(app, probe, tmp_path):
    done = launch("--map", "paper-4w", "--threads", "6", "--policy", "cyclic", "--sum", "TOTAL", "--", sys.executable,
                  app, "env")
    assert done.returncode == 0, done.stderr
    found: dict[int, dict[str, str]] = {}
    for line in done.stdout.splitlines():
        tag, _, variable = line.partition(" ")
        name, _, value = variable.partition("=")
        found.setdefault(int(tag.strip("[]")), {})[name] = value
    assert sorted(found) == list(range(6))
    nodes = ["n0", "n1", "n2", "n3", "n4", "n5"]  # cyclic: one rank per node
    for rank, variables in found.items():
        servers = variables.pop("PATHS_SERVERS")
        assert variables == {"PATHS_RANK": str(rank), "PATHS_SIZE": "6", "PATHS_NODE": nodes[rank],
                             "PATHS_MAP": "paper-4w", "PATHS_POLICY": "cyclic", "PATHS_SUM": "TOTAL"}
        endpoints = json.loads(servers)["endpoints"]
        assert sorted(endpoints) == nodes  # one server a node, on loopback
        assert all(e.startswith("tcp://127.0.0.1:") for e in endpoints.values())
    assert sorted(probe.started().values()) == nodes  # one node process each, all reaped
    assert probe.alive() == []


@pytest.mark.parametrize("the_map, threads, policy, nodes", [
    ("local", 3, "block", {"localhost"}),
    ("paper-4w", 7, "block", {"n0", "n1"}),         # four ranks share n0's server, three n1's
    ("paper-2w", 5, "cyclic", {"n0", "n1", "n2", "n3", "n4"}),
    ("multicluster", 6, "cyclic", {"w2n00", "w2n01", "w2n02", "w2n03", "w2n04", "w2n05"}),
])
def test_a_sum_across_ranks_is_exact_on_every_map(app, the_map, threads, policy, nodes):
    done = launch("--map", the_map, "--threads", str(threads), "--policy", policy, "--sum", "TOTAL", "--",
                  sys.executable, app, "sum")
    assert done.returncode == 0, done.stderr
    total = threads * (threads + 1) // 2
    lines = sorted(done.stdout.splitlines(), key=lambda line: int(line.split("]")[0][1:]))
    assert len(lines) == threads
    seen_nodes = set()
    for rank, line in enumerate(lines):
        prefix = f"[{rank}] rank {rank} of {threads} on "
        assert line.startswith(prefix), line
        node, by = line[len(prefix):].split(" by ", 1)
        seen_nodes.add(node)
        assert by == f"paths launch total {total} rendezvous the node servers paths launch started"
    assert seen_nodes == nodes


def test_ranks_of_nodes_started_over_ssh_reach_them_with_the_runs_key(app, probe, tmp_path):
    """Nodes started through a fake ssh on their own loopback addresses: servers off this
    machine's view, so CURVE; each rank's PATHS_SERVERS carries the run's public key."""
    ssh = tmp_path / "fake-ssh"
    ssh.write_text(FAKE_SSH)
    ssh.chmod(0o755)
    the_map = tmp_path / "ssh.yaml"
    the_map.write_text(LOOPBACK_MAP.format(ssh=str(ssh)))
    done = launch("--map", str(the_map), "--threads", "5", "--sum", "TOTAL", "--", sys.executable, app, "sum")
    assert done.returncode == 0, done.stderr
    assert sorted(line.split(" by ")[0] for line in done.stdout.splitlines()) == [
        f"[{r}] rank {r} of 5 on n{r // 2}" for r in range(5)]
    assert all(line.endswith(" total 15 rendezvous the node servers paths launch started")
               for line in done.stdout.splitlines())
    done = launch("--map", str(the_map), "--threads", "5", "--", sys.executable, app, "env")
    servers = json.loads(next(line for line in done.stdout.splitlines() if "PATHS_SERVERS=" in line).split("=", 1)[1])
    assert sorted(servers["endpoints"]) == ["n0", "n1", "n2"]
    assert servers["endpoints"]["n1"].startswith("tcp://127.0.0.3:")
    assert len(set(servers["keys"].values())) == 1 and len(servers["keys"]["n0"]) == 40
    assert probe.alive() == []


@pytest.mark.parametrize("count", [["-n", "2"], ["--ntasks", "2"], ["-np", "2"], ["-n2"], ["-np2"], ["--ntasks=2"],
                                   ["--ntask=2"], ["-n=2"]], ids=" ".join)
def test_ranks_are_counted_as_srun_and_mpirun_count_them(count):
    done = launch(*count, "--", sys.executable, "-c", "import os; print(os.environ['PATHS_RANK'])")
    assert (done.returncode, sorted(done.stdout.splitlines())) == (0, ["[0] 0", "[1] 1"]), done.stderr


@pytest.mark.parametrize("command, count", [(["show", "--map", "paper-2w"], ["-n", "3"]),
                                            (["show", "--map", "paper-2w"], ["-np3"]),
                                            (["run", "gsum", "--repeat", "1", "--rounds", "5"], ["--ntasks", "1,3"])])
def test_paths_run_and_show_take_srun_and_mpirun_names_for_their_thread_counts(command, count):
    done = subprocess.run([sys.executable, "-m", "paths", *command, *count], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    assert ("3 threads on 2 nodes" if command[0] == "show" else "\n       3  ") in done.stdout, done.stdout
    twice = subprocess.run([sys.executable, "-m", "paths", *command, *count, "--threads", "2"], capture_output=True,
                           text=True, timeout=60)
    assert twice.returncode == 2 and twice.stderr.splitlines()[-1] == (
        f"paths {command[0]}: error: the thread count is given more than once (--threads, -n, --ntasks, -np): "
        "give it once")


@pytest.mark.parametrize("counts", [["--threads", "2", "-n", "3"], ["-n2", "-np", "2"], ["--ntasks=2", "--thr", "2"]],
                         ids=" ".join)
@pytest.mark.parametrize("command", ["launch", "sbatch"])
def test_a_rank_count_given_twice_is_refused(command, counts):
    """srun's, mpirun's and our names for one count: a second is a mistake, not an override."""
    done = subprocess.run([sys.executable, "-m", "paths", command, *counts, "--", "true"], capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.splitlines()[-1] == (f"paths {command}: error: the rank count is given more than once "
                                            "(--threads, -n, --ntasks, -np): give it once")


@pytest.mark.parametrize("count, value", [("-n2=3", "2=3"), ("-np1=foo", "1=foo"), ("--ntasks=1=2", "1=2")])
def test_a_malformed_rank_count_is_refused_whole(count, value):
    done = subprocess.run([sys.executable, "-m", "paths", "launch", count, "--", "true"], capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.splitlines()[-1] == f"paths launch: error: argument --threads: expected a positive integer, got '{value}'"


def test_the_shells_own_paths_variables_do_not_reach_the_ranks(app):
    """PATHS_POLICY and PATHS_ACQUIRE left in the shell (from a run under srun, say) are not the
    run's: the ranks place themselves as the launcher did, with the default hook."""
    env = dict(os.environ, PATHS_POLICY="cyclic", PATHS_ACQUIRE="no_such_module:hook")
    done = subprocess.run([sys.executable, "-m", "paths", "launch", "--map", "paper-4w", "--threads", "6", "--sum",
                           "TOTAL", "--", sys.executable, app, "sum"], capture_output=True, text=True, timeout=120,
                          env=env)
    assert done.returncode == 0, done.stderr
    assert sorted(line.split(" by ")[0] for line in done.stdout.splitlines()) == [
        f"[{r}] rank {r} of 6 on n{r // 4}" for r in range(6)]  # block, the map's policy


def test_a_program_alone_with_paths_map(app, tmp_path):
    env = dict(os.environ, PATHS_MAP="paper-4w", PATHS_SUM="TOTAL")
    done = subprocess.run([sys.executable, app, "sum"], capture_output=True, text=True, timeout=60, env=env)
    assert done.returncode == 0, done.stderr
    assert done.stdout == "rank 0 of 1 on n0 by  total 1 rendezvous none: one rank\n"


def test_a_map_that_cannot_be_read_names_what_gave_it(app, tmp_path):
    """PATHS_MAP (a launcher's or the user's) or --paths-map naming no file: the error says which."""
    missing = tmp_path / "nowhere.yaml"
    done = subprocess.run([sys.executable, app, "sum"], capture_output=True, text=True, timeout=60,
                          env=dict(os.environ, PATHS_MAP=str(missing)))
    assert (done.returncode, done.stderr) == (
        1, f"paths: PATHS_MAP: {missing}: cannot read the cluster map: No such file or directory\n")


# ---- output ----------------------------------------------------------------------------------------

def test_every_line_is_tagged_with_its_rank_on_its_stream(app):
    done = launch("--threads", "3", "--", sys.executable, app, "lines", "400")
    assert done.returncode == 0, done.stderr
    for stream, parity in ((done.stdout, 0), (done.stderr, 1)):
        for rank in range(3):
            mine = [line for line in stream.splitlines() if line.startswith(f"[{rank}] ")]
            assert mine == [f"[{rank}] line {i}" for i in range(400) if i % 2 == parity]  # all, in order
        assert len([line for line in stream.splitlines() if line.startswith("[")]) == 3 * 200


def test_more_ranks_than_cpus_is_said_once_in_one_line(app, tmp_path):
    """Three ranks that sum on a map of two CPUs: the launcher says so in one line, no rank again;
    a rank 0 under another launcher (mpirun, its variables set here) says it, the others not."""
    the_map = tmp_path / "two.yaml"
    the_map.write_text("name: two\nclusters: {c: {nodes: h0, cpus: 2}}\nroot: h0\n")
    done = launch("--map", str(the_map), "--threads", "3", "--sum", "S", "--", sys.executable, app, "sum", "S", "1")
    assert done.returncode == 0, done.stderr
    assert done.stderr.splitlines() == ["paths launch: warning: 3 threads on map 'two' with 2 CPUs: placement wraps "
                                        "around, nodes are oversubscribed"]
    code = "import paths; paths.runtime_info()"
    for rank, says in ((0, True), (1, False)):
        env = {**{k: v for k, v in os.environ.items() if not k.startswith(("PATHS_", "OMPI_", "PMI", "SLURM_"))},
               "PATHS_MAP": str(the_map), "OMPI_COMM_WORLD_RANK": str(rank), "OMPI_COMM_WORLD_SIZE": "3",
               "OMPI_COMM_WORLD_LOCAL_SIZE": "3", "PATHS_RENDEZVOUS_DIR": str(tmp_path), "PATHS_RENDEZVOUS_TIMEOUT": "1"}
        ran = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
        warned = [line for line in ran.stderr.splitlines() if "oversubscribed" in line]
        assert warned == (["paths: rank 0 of 3: warning: 3 threads on map 'two' with 2 CPUs: placement wraps around, "
                           "nodes are oversubscribed"] if says else []), ran.stderr


TRACED_HOOK = """
    import paths
    from paths import make_path, stage

    @paths.acquire_hook
    def traced(request):   # the README's
        return make_path(stage("trace", file=f"{request.node}.{request.element}.{request.tag}.bin", node=request.node),
                         request.default())
"""


def test_ranks_whose_hook_traces_write_their_traces_in_the_trace_dir(app, user_module, tmp_path):
    """The README's acquire hook, which puts a trace first on every path, under paths launch: the
    ranks' own-node stages are built by their node's server, which writes the traces into
    --trace-dir (without it, it refuses them, saying how to give one)."""
    hook = user_module("launch_traced", TRACED_HOOK)
    run = ("--map", "paper-2w", "--threads", "4", "--sum", "TOTAL", "--acquire", f"{hook}:traced")
    refused = launch(*run, "--", sys.executable, app, "sum")
    assert refused.returncode == 1
    assert "this server writes no trace files: name a folder for them (paths serve --trace-dir DIR, paths launch " \
           "--trace-dir DIR, paths run --trace DIR; servers the ranks host under srun or mpirun: PATHS_TRACE_DIR)" \
           in refused.stderr
    traces = tmp_path / "traces"
    done = launch(*run, "--trace-dir", str(traces), "--", sys.executable, app, "sum")
    assert done.returncode == 0, done.stderr
    assert sorted(line.split(" total ")[1].split()[0] for line in done.stdout.splitlines()) == ["10"] * 4
    assert sorted(p.name for p in traces.iterdir()) == ["n0.TOTAL.None.bin", "n1.TOTAL.None.bin"]  # one a node
    assert all(p.stat().st_size > 0 for p in traces.iterdir())


def test_ranks_under_mpirun_write_the_traces_of_their_hook_in_paths_trace_dir(app, user_module, tmp_path):
    """As above, for ranks that host their node's server themselves (here under mpirun's
    variables): PATHS_TRACE_DIR names the folder, for the paths the server builds and for those
    of the rank that hosts it (not its working folder), whose trace stage they share."""
    hook = user_module("mpirun_traced", TRACED_HOOK)
    traces, work = tmp_path / "traces", tmp_path / "work"  # the ranks make the folder
    work.mkdir()
    env = {**{k: v for k, v in os.environ.items() if not k.startswith(("PATHS_", "OMPI_", "PMI", "SLURM_"))},
           "PATHS_MAP": "local", "PATHS_SUM": "TOTAL", "PATHS_ACQUIRE": f"{hook}:traced", "PATHS_TRACE_DIR": str(traces),
           "OMPI_COMM_WORLD_SIZE": "2", "OMPI_COMM_WORLD_LOCAL_SIZE": "2", "PATHS_RENDEZVOUS_DIR": str(tmp_path)}
    ranks = [subprocess.Popen([sys.executable, app, "sum"], env={**env, "OMPI_COMM_WORLD_RANK": str(r)}, cwd=work,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for r in range(2)]
    try:
        done = [rank.communicate(timeout=60) for rank in ranks]
    finally:
        for rank in ranks:
            rank.kill()
    assert [rank.returncode for rank in ranks] == [0, 0], done
    assert [out.split(" total ")[1].split()[0] for out, _ in done] == ["3", "3"]
    assert [p.name for p in traces.iterdir()] == ["localhost.TOTAL.None.bin"]
    assert list(work.iterdir()) == []


def test_the_sbatch_script_gives_the_ranks_servers_their_trace_dir(tmp_path):
    script = subprocess.run([sys.executable, "-m", "paths", "sbatch", "--threads", "2", "--trace-dir", "traces", "--",
                             "./a"], capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert script.returncode == 0, script.stderr
    assert f"\nexport PATHS_TRACE_DIR={tmp_path / 'traces'}\n" in script.stdout
    assert f"\nmkdir -p -- {tmp_path / 'traces'} || exit 1\n" in script.stdout
    bare = subprocess.run([sys.executable, "-m", "paths", "sbatch", "--threads", "2", "--", "./a"], capture_output=True,
                          text=True, timeout=60)
    assert "unset PATHS_SUM PATHS_ACQUIRE PATHS_RELEASE PATHS_TRACE_DIR\n" in bare.stdout


def test_output_dir_keeps_one_file_per_rank(app, tmp_path):
    out = tmp_path / "out"
    done = launch("--map", "paper-4w", "--threads", "5", "--policy", "cyclic", "--output-dir", str(out), "--",
                  sys.executable, app, "lines", "10")
    assert (done.returncode, done.stdout, done.stderr) == (0, "", "")
    assert sorted(p.name for p in out.iterdir()) == [f"rank.{r}.log" for r in range(5)]
    for r in range(5):
        lines = (out / f"rank.{r}.log").read_text().splitlines()
        assert sorted(lines, key=lambda line: int(line.split()[1])) == [f"line {i}" for i in range(10)]


@pytest.mark.parametrize("where", ["--output-dir", "standard output"])
def test_output_that_cannot_be_written_is_one_line_and_the_run_ends(app, tmp_path, where):
    """A full disk (/dev/full) under a rank's --output-dir file, or as the launcher's standard
    output: one line, exit 1, and nothing of the run left."""
    out = tmp_path / "out"
    out.mkdir()
    (out / "rank.1.log").symlink_to("/dev/full")
    options = ["--output-dir", str(out)] if where == "--output-dir" else []
    with open("/dev/full", "w") if where == "standard output" else open(os.devnull, "w") as stdout:
        done = subprocess.run([sys.executable, "-m", "paths", "launch", "--map", "paper-2w", "--threads", "3", *options,
                               "--", sys.executable, app, "lines", "3"], stdout=stdout, stderr=subprocess.PIPE,
                              text=True, timeout=120)
    line = (f"paths launch: --output-dir {out}: cannot write {out}/rank.1.log: No space left on device"
            if where == "--output-dir" else "paths launch: cannot write the ranks' output to standard output: No space "
                                            "left on device")
    assert (done.returncode, done.stderr) == (1, line + "\n")
    assert gone_within(app, REAPED_WITHIN) == []


def test_a_slurm_host_list_that_cannot_be_read_is_one_line(app):
    done = subprocess.run([sys.executable, "-m", "paths", "launch", "--map", "paper-2w", "--threads", "2", "--launch",
                           "slurm", "--", sys.executable, app, "lines", "1"], capture_output=True, text=True, timeout=60,
                          env={**os.environ, "SLURM_JOB_NODELIST": "h[1-2"})
    assert (done.returncode, done.stdout) == (1, "")
    assert done.stderr.startswith("paths launch: slurm: SLURM_JOB_NODELIST: bad host list 'h[1-2': a '[' is never "
                                  "closed"), done.stderr
    assert len(done.stderr.splitlines()) == 1


def test_output_dir_files_are_this_runs_even_for_a_silent_rank(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "rank.1.log").write_text("an earlier run's line\n")
    done = launch("--threads", "2", "--output-dir", str(out), "--", "sh", "-c", 'test "$PATHS_RANK" = 1 || echo hi')
    assert (done.returncode, done.stderr) == (0, "")
    assert [(out / f"rank.{r}.log").read_text() for r in range(2)] == ["hi\n", ""]


def test_an_output_dir_file_that_cannot_be_written_is_one_line_and_exit_2(tmp_path, probe):
    out = tmp_path / "out"
    (out / "rank.1.log").mkdir(parents=True)
    done = launch("--threads", "2", "--output-dir", str(out), "--", "echo", "hi")
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr == f"paths launch: --output-dir {out}: cannot write {out}/rank.1.log: Is a directory\n"
    assert probe.started() == {}


def test_a_ranks_bytes_come_out_as_it_wrote_them_even_when_not_text(tmp_path):
    data = bytes(range(256)).replace(b"\n", b"") + b"\n" + "é\n".encode("latin-1") + b"no line break at the end"
    (tmp_path / "data").write_bytes(data)
    out = tmp_path / "out"
    done = subprocess.run([sys.executable, "-m", "paths", "launch", "--threads", "2", "--output-dir", str(out), "--",
                           "cat", str(tmp_path / "data")], capture_output=True, timeout=120)
    assert (done.returncode, done.stderr) == (0, b"")
    assert [(out / f"rank.{r}.log").read_bytes() for r in range(2)] == [data, data]
    done = subprocess.run([sys.executable, "-m", "paths", "launch", "--threads", "1", "--", "cat", str(tmp_path / "data")],
                          capture_output=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout == b"".join(b"[0] " + line + b"\n" for line in data.split(b"\n"))  # the last line ended


def test_a_long_line_comes_out_whole_and_is_never_held_whole(app):
    """64 MiB in one line: out byte for byte, while no process of the run (launcher, node, rank)
    ever holds much more than a piece of it (held whole, the launcher and the node each took
    about four times the line)."""
    code = ("import resource, subprocess, sys; run = subprocess.run(sys.argv[1:], stdout=subprocess.PIPE); "
            "sys.stdout.buffer.write(run.stdout); print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, "
            "run.returncode, file=sys.stderr)")
    done = subprocess.run([sys.executable, "-c", code, sys.executable, "-m", "paths", "launch", "--threads", "1",
                           "--", sys.executable, app, "long", "64"], capture_output=True, timeout=120)
    peak_kb, status = map(int, done.stderr.split()[-2:])
    assert status == 0, done.stderr
    assert done.stdout == b"[0] " + b"x" * (64 << 20) + b"\n[0] end\n"
    assert peak_kb < 100_000, f"a process of the run peaked at {peak_kb} kB"


def test_a_long_line_another_rank_comes_between_goes_on_led_by_its_rank(app, tmp_path):
    """Rank 0's line of 3 MiB is half out (a piece of it passed on) when rank 1 prints its lines:
    they break it there, and it goes on led by its rank again; in a file of its own it is whole."""
    done = launch("--threads", "2", "--", sys.executable, app, "long", "3", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert [line[:5] for line in lines] == ["[0] x"] + ["[1] s"] * 20 + ["[0] x", "[0] e"], [l[:20] for l in lines]
    assert lines[1:21] == [f"[1] short {i}" for i in range(20)]
    assert len(lines[0]) - 4 >= 1 << 20  # a piece of a MiB or more
    assert lines[0][4:] + lines[21][4:] == "x" * (3 << 20) and lines[22] == "[0] end"
    out = tmp_path / "out"
    for made in ("half", "done"):
        (tmp_path / made).unlink()
    done = launch("--threads", "2", "--output-dir", str(out), "--", sys.executable, app, "long", "3", cwd=tmp_path)
    assert (done.returncode, done.stdout, done.stderr) == (0, "", "")
    assert (out / "rank.0.log").read_text() == "x" * (3 << 20) + "\nend\n"  # byte for byte, in a file
    assert (out / "rank.1.log").read_text() == "".join(f"short {i}\n" for i in range(20))


# ---- exit statuses and reaping ---------------------------------------------------------------------

def test_the_first_failing_rank_gives_the_exit_status_and_the_others_are_stopped(app, probe):
    begin = time.monotonic()
    done = launch("--map", "paper-4w", "--threads", "6", "--", sys.executable, app, "sleep", "4", "7")
    took = time.monotonic() - begin
    assert done.returncode == 7, done.stderr
    assert "[4] failing" in done.stderr
    assert done.stderr.rstrip().endswith("paths launch: rank 4 on node n1 exited with status 7; "
                                         "the other ranks were stopped")
    assert took < 10, f"{took:.1f} s: the others were not stopped at once"
    assert gone_within(app, REAPED_WITHIN) == []
    assert probe.alive() == []


def test_a_rank_killed_by_a_signal_exits_128_plus_it(app):
    done = launch("--threads", "2", "--", "sh", "-c", 'test "$PATHS_RANK" = 1 && kill -9 $$; sleep 60')
    assert done.returncode == 128 + signal.SIGKILL, done.stderr
    assert "rank 1 on node localhost exited with status 137 (killed by SIGKILL)" in done.stderr


def test_a_rank_that_exits_with_a_status_past_128_is_not_said_to_be_killed(app):
    done = launch("--threads", "2", "--", "sh", "-c", 'test "$PATHS_RANK" = 1 && exit 139; sleep 60')
    assert done.returncode == 139, done.stderr
    assert "rank 1 on node localhost exited with status 139; the other ranks were stopped" in done.stderr


def test_a_run_past_its_timeout_is_stopped(app, probe):
    begin = time.monotonic()
    done = launch("--map", "paper-4w", "--threads", "5", "--policy", "cyclic", "--timeout", "1.5", "--",
                  sys.executable, app, "sleep")
    assert done.returncode == 1
    assert done.stderr.endswith("paths launch: nodes n0, n1, n2, n3, n4 did not answer within 1.5 s "
                                "(for the ranks to end): the run's time limit (--timeout, --time) passed; its ranks "
                                "were stopped\n"), \
        done.stderr
    assert time.monotonic() - begin < 10
    assert gone_within(app, REAPED_WITHIN) == []
    assert probe.alive() == []


GOODBYE = """import os, pathlib, signal, sys, time
rank, folder = os.environ["PATHS_RANK"], pathlib.Path(sys.argv[1])
def bye(*_):
    print("bye from", rank, flush=True)
    sys.stdout.write("no line break")
    sys.exit(0)
signal.signal(signal.SIGTERM, bye)
print("ready", flush=True)
(folder / f"ready.{rank}").touch()
if rank == "2" and sys.argv[2] == "fail":  # once the others can say goodbye
    deadline = time.monotonic() + 60
    while not all((folder / f"ready.{r}").exists() for r in "01") and time.monotonic() < deadline:
        time.sleep(0.01)
    sys.exit(5)
time.sleep(60)
"""


@pytest.mark.parametrize("stop", ["fail", "timeout"])
@pytest.mark.parametrize("output_dir", [False, True])
def test_what_stopped_ranks_print_as_they_end_is_passed_on(tmp_path, stop, output_dir):
    """A rank stopped because another failed, or by --timeout, on its own node or another: the
    lines it prints on SIGTERM, and a last one it did not end, come out as any other."""
    script = tmp_path / "goodbye.py"
    script.write_text(GOODBYE)
    out = tmp_path / "out"
    done = launch("--map", "paper-2w", "--threads", "3", *(["--timeout", "3"] if stop == "timeout" else []),
                  *(["--output-dir", str(out)] if output_dir else []), "--", sys.executable, str(script),
                  str(tmp_path), stop)
    assert done.returncode == (5 if stop == "fail" else 1), done.stderr
    for rank in (0, 1) if stop == "fail" else (0, 1, 2):
        if output_dir:
            assert (out / f"rank.{rank}.log").read_text() == f"ready\nbye from {rank}\nno line break"
        else:
            assert f"[{rank}] ready\n" in done.stdout and f"[{rank}] bye from {rank}\n" in done.stdout
            assert f"[{rank}] no line break\n" in done.stdout or done.stdout.endswith(f"[{rank}] no line break")


@pytest.mark.parametrize("args, problem", [
    (["--threads", "2"], "expected -- CMD [ARGS...] after the options"),
    (["--threads", "2", "--"], "expected -- CMD [ARGS...] after the options"),
    (["--threads", "0", "--", "true"], "--threads: expected a positive integer, got '0'"),
    (["--threads", "2000000", "--", "true"], "--threads: expected at most 1048576, got '2000000'"),
    (["--map", "nowhere", "--threads", "2", "--", "true"], "no built-in map 'nowhere'"),
    (["--threads", "2", "--policy", "spread", "--", "true"], "unknown policy 'spread'"),
    (["--threads", "1", "--timeout", "0", "--", "true"], "--timeout: expected a positive number of seconds, got '0'"),
    (["--threads", "1", "--timeout", "-1", "--", "true"], "--timeout: expected a positive number of seconds, got '-1'"),
    (["--threads", "1", "--timeout", "nan", "--", "true"], "--timeout: expected a positive number of seconds, got "
                                                           "'nan'"),
    (["--threads", "1", "--sum", "a,b", "--", "true"], "--sum: expected an element name without commas (PATHS_SUM "
                                                      "separates names by them) or spaces around it, got 'a,b'"),
    (["--threads", "1", "--sum", " ", "--", "true"], "--sum: expected an element name without commas (PATHS_SUM "
                                                    "separates names by them) or spaces around it, got ' '"),
    (["--threads", "1", "--sum", "paths.barrier", "--", "true"], "--sum: 'paths.barrier' is the run's own barrier "
                                                                "(paths_barrier): name the sum otherwise"),
    (["-N", "2", "--", "true"], "paths launch: error: -N: the map's nodes are the nodes here (--map, whose placement "
                                "puts the threads on them): give the rank count with --threads (-n)"),
], ids=["no command", "empty command", "no threads", "too many threads", "unknown map", "unknown policy",
        "zero timeout", "negative timeout", "NaN timeout", "a sum name with a comma", "a sum name of a space",
        "the barrier's name", "srun's node count"])
def test_bad_usage_is_one_line_and_exit_2(args, problem):
    done = launch(*args)
    assert done.returncode == 2
    assert problem in done.stderr and "Traceback" not in done.stderr


def test_an_output_dir_that_cannot_be_a_folder_is_one_line_and_exit_2(tmp_path, probe):
    taken = tmp_path / "taken"
    taken.write_text("a file, not a folder\n")
    done = launch("--threads", "1", "--output-dir", str(taken), "--", "true")
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr == (f"paths launch: --output-dir {taken}: expected a folder, and cannot make one there: "
                           "File exists\n")
    assert probe.started() == {}


def test_a_command_that_does_not_exist_fails_the_run(probe):
    done = launch("--map", "paper-4w", "--threads", "2", "--", "/no/such/program")
    assert done.returncode == 1
    assert "paths launch: node n0: cannot start '/no/such/program': No such file or directory" \
        in done.stderr
    assert probe.alive() == []


def _start_sleepers(app: str, threads: int = 6) -> subprocess.Popen:
    run = subprocess.Popen([sys.executable, "-m", "paths", "launch", "--map", "paper-4w", "--threads", str(threads),
                            "--", sys.executable, app, "sleep"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           text=True, start_new_session=True)
    up = [run.stdout.readline() for _ in range(threads)]
    assert all(" up " in line for line in up), up
    return run


@pytest.mark.parametrize("how, to", [("SIGINT", "launcher"), ("SIGINT", "process group"), ("SIGKILL", "launcher")],
                         ids=["SIGINT", "Ctrl-C", "SIGKILL"])
def test_nothing_of_the_run_is_left_after_the_launcher_is_interrupted_or_killed(app, probe, how, to):
    """SIGINT to the launcher, Ctrl-C (SIGINT to the whole process group, ranks included), or
    SIGKILL to the launcher, while six ranks sleep on two nodes."""
    run = _start_sleepers(app)
    try:
        ranks = [line for line in processes_with(app) if "paths launch" not in line]
        assert len(ranks) == 6, ranks
        if to == "launcher":
            os.kill(run.pid, getattr(signal, how))
        else:
            os.killpg(run.pid, getattr(signal, how))
        code = run.wait(timeout=30)
        left = gone_within(app, REAPED_WITHIN)
        assert left == [], f"left {REAPED_WITHIN} s after {how}: {left}"
        assert probe.alive_within(REAPED_WITHIN) == []  # the nodes too (they stop their ranks first)
        assert code == (130 if how == "SIGINT" else -signal.SIGKILL)
    finally:
        end_run(run)
    assert probe.alive() == []


def test_a_second_ctrl_c_while_the_run_stops_kills_what_is_left_at_once(tmp_path, probe):
    """Ctrl-C, and again while the nodes stop ranks that ignore SIGTERM and SIGINT (a node kills
    them a second after its SIGTERM) and that each started a daemon in a session of its own: the
    launcher then kills the nodes, the ranks' process groups and what they left itself, so that
    nothing of the run is there once it has exited, 130 in one line."""
    stubborn = tmp_path / "stubborn.py"
    stubborn.write_text("import signal, subprocess, sys, time\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
                        "signal.signal(signal.SIGINT, signal.SIG_IGN)\n"
                        "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)', __file__], "
                        "start_new_session=True)\nprint('up', flush=True)\ntime.sleep(60)\n")
    run = subprocess.Popen([sys.executable, "-m", "paths", "launch", "--map", "paper-4w", "--threads", "4", "--",
                            sys.executable, str(stubborn)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           text=True, start_new_session=True)
    try:
        assert [run.stdout.readline().split()[-1] for _ in range(4)] == ["up"] * 4
        os.killpg(run.pid, signal.SIGINT)
        time.sleep(0.1)
        os.killpg(run.pid, signal.SIGINT)
        out, err = run.communicate(timeout=30)
        assert processes_with(str(stubborn)) == [], "ranks outlived the launcher"
    finally:
        end_run(run, str(stubborn))
    assert (run.returncode, err) == (130, "paths: interrupted\n"), err
    assert probe.alive_within(REAPED_WITHIN) == []


@pytest.mark.parametrize("command", ["launch", "run"])
def test_ctrl_c_in_a_forks_hook_as_the_nodes_start_is_not_lost(app, probe, command):
    """A Ctrl-C that comes while the launcher forks a node: Python raises it in whatever runs then,
    here the parent's at-fork hook (as in logging's, which swallows it). The launcher still stops,
    130 in one line, and leaves no node."""
    what = ["launch", "--map", "paper-4w", "--threads", "4", "--", sys.executable, app, "sleep"] if command == "launch" \
        else ["run", "gsum", "--map", "paper-4w", "--threads", "4"]
    script = ("import os, signal, sys\n"
              "os.register_at_fork(after_in_parent=lambda: os.kill(os.getpid(), signal.SIGINT))\n"
              "from paths.cli.main import main\n"
              f"sys.exit(main({what!r}))\n")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert (done.returncode, done.stderr) == (130, "paths: interrupted\n"), done.stderr
    assert probe.alive_within(REAPED_WITHIN) == []


@pytest.mark.parametrize("command", ["launch", "run"])
def test_ctrl_c_while_the_nodes_start_says_one_line(app, probe, command):
    """Ctrl-C (SIGINT to the whole process group, local nodes included) as the node processes
    start up: the launcher says it was interrupted, and no node prints a traceback for it."""
    what = ["launch", "--map", "paper-4w", "--threads", "6", "--", sys.executable, app, "sleep"] if command == "launch" \
        else ["run", "gsum", "--map", "paper-4w", "--threads", "6"]
    run = subprocess.Popen([sys.executable, "-m", "paths", *what], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           text=True, start_new_session=True, env={**os.environ, **probe.env})
    try:
        probe.wait_for("start", 2)  # both nodes' interpreters are up, importing paths
        os.killpg(run.pid, signal.SIGINT)
        out, err = run.communicate(timeout=30)
    finally:
        end_run(run)
    assert (run.returncode, err) == (130, "paths: interrupted\n"), err
    assert probe.alive_within(REAPED_WITHIN) == []


@pytest.mark.parametrize("after", [0.03, 0.06, 0.1, 0.2, 0.4])
def test_ctrl_c_as_the_command_starts_gives_no_traceback(app, after):
    """Ctrl-C while `paths launch` itself starts (importing what it needs), `after` seconds once
    the C core is in (-X importtime says when): the command says it was interrupted, never a
    traceback."""
    run = subprocess.Popen([sys.executable, "-X", "importtime", "-m", "paths", "launch", "--threads", "2", "--",
                            sys.executable, app, "sleep"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           text=True, start_new_session=True)
    try:
        for line in run.stderr:
            if line.split("|")[-1].strip() == "paths._native":
                break
        else:
            pytest.fail(f"no sign of the C core loading: {run.communicate()}")
        time.sleep(after)
        os.killpg(run.pid, signal.SIGINT)
        out, err = run.communicate(timeout=30)
        assert gone_within(app, REAPED_WITHIN) == []
    finally:
        end_run(run, app)
    said = [line for line in err.splitlines() if not line.startswith("import time:")]
    assert (run.returncode, said) == (130, ["paths: interrupted"]), err


def test_ctrl_c_that_python_would_lose_while_the_command_loads_still_stops_it(tmp_path):
    """Ctrl-C whose KeyboardInterrupt lands in a callback as the command's modules load (as in
    an import's module lock): Python prints it as ignored and goes on, so the command would run
    to its end. It stops, exit 130."""
    program = tmp_path / "lost_ctrl_c.py"
    program.write_text(
        "import importlib, os, signal, sys\n"
        "from paths.cli.main import main\n"
        "class LosesIt:\n"
        "    def __del__(self):\n"
        "        os.kill(os.getpid(), signal.SIGINT)\n"
        "        sum(range(1000))  # the handler runs here, in the callback\n"
        "load = importlib.import_module\n"
        "def loading(name, package=None):\n"
        "    LosesIt()\n"
        "    return load(name, package)\n"
        "importlib.import_module = loading\n"
        "sys.exit(main(['launch', '--threads', '1', '--', sys.executable, '-c', 'print(\"ran\")']))\n")
    run = subprocess.run([sys.executable, str(program)], capture_output=True, text=True, timeout=60)
    assert (run.returncode, run.stdout, run.stderr.splitlines()[-1:]) == (130, "", ["paths: interrupted"]), run


def test_a_command_started_with_ctrl_c_ignored_keeps_ignoring_it_as_it_loads(tmp_path):
    """A background job of a script starts with SIGINT ignored: a Ctrl-C to its process group as
    the command's modules load stops it no more than one later would."""
    program = tmp_path / "ignoring.py"
    program.write_text(
        "import importlib, os, signal, sys\n"
        "signal.signal(signal.SIGINT, signal.SIG_IGN)\n"
        "from paths.cli.main import main\n"
        "load = importlib.import_module\n"
        "def loading(name, package=None):\n"
        "    os.kill(os.getpid(), signal.SIGINT)\n"
        "    return load(name, package)\n"
        "importlib.import_module = loading\n"
        "sys.exit(main(['config', '--cflags']))\n")
    run = subprocess.run([sys.executable, str(program)], capture_output=True, text=True, timeout=60)
    assert (run.returncode, run.stderr) == (0, ""), run
    assert "-I" in run.stdout


@pytest.mark.parametrize("how", ["a rank fails", "timeout", "SIGINT", "SIGKILL", "SIGHUP to the group",
                                 "SIGKILL to the group", "SIGKILL to the node"])
def test_what_a_rank_started_is_stopped_with_it(app, probe, how):
    """Each rank a shell that runs the program (as a wrapper script does): when the ranks are
    stopped (another rank failed, --timeout, SIGINT to the launcher, SIGKILL to the launcher, a
    closed terminal: SIGHUP to the launcher's process group; SIGKILL to that group; the node
    killed, as the OOM killer would), the programs the shells started go too, not only the
    shells."""
    late = 'test "$PATHS_RANK" != 1 || sleep 2; '  # the failing rank: once the others are up
    command = ["sh", "-c", late + '"$0" "$@"; exit $?', sys.executable, app, "sleep",
               *(["1", "3"] if how == "a rank fails" else [])]
    run = subprocess.Popen([sys.executable, "-m", "paths", "launch", "--threads", "3",
                            *(["--timeout", "8"] if how == "timeout" else []), "--", *command],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        up = [run.stdout.readline() for _ in range(3)]
        assert all(" up " in line for line in up), up
        if how.endswith("node"):
            [node] = probe.started()
            os.kill(node, signal.SIGKILL)
        elif how.startswith("SIG"):
            number = getattr(signal, how.split()[0])
            os.killpg(run.pid, number) if how.endswith("group") else os.kill(run.pid, number)
        _, err = run.communicate(timeout=60)
        left = gone_within(app, REAPED_WITHIN)
        assert left == [], f"left {REAPED_WITHIN} s after the run ended ({how}): {left}"
        assert probe.alive_within(REAPED_WITHIN) == []
        assert run.returncode == {"a rank fails": 3, "timeout": 1, "SIGINT": 130, "SIGKILL": -signal.SIGKILL,
                                  "SIGHUP to the group": -signal.SIGHUP, "SIGKILL to the group": -signal.SIGKILL,
                                  "SIGKILL to the node": 1}[how], err
    finally:
        end_run(run, app)
    assert probe.alive() == []


@pytest.mark.parametrize("script, status", [
    ("import os, time\n"  # forks, leaves its session and process group, forks again and exits
     "if os.fork() == 0:\n"
     "    os.setsid()\n"
     "    if os.fork() == 0:\n"
     "        time.sleep(120)\n"
     "    os._exit(0)\n"
     "os.wait()\n"
     "print('started', flush=True)\n", 0),
    ("import subprocess, sys\n"  # a child in the rank's process group, then the rank fails
     "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(120)', sys.argv[0]])\n"
     "print('started', flush=True)\n"
     "sys.exit(5)\n", 5),
], ids=["a daemon forked off", "a child of a failed rank"])
def test_what_ranks_leave_as_they_end_goes_with_the_run(tmp_path, probe, script, status):
    """Each of two ranks leaves a process behind as it ends, as a daemon does, or in its own
    process group as it fails: the run ends with the ranks' status and those processes with it."""
    rank = tmp_path / "leaving.py"
    rank.write_text(script)
    try:
        done = launch("--threads", "2", "--", sys.executable, str(rank), timeout=60)
        assert done.returncode == status and done.stdout.count("started") == 2, done.stderr
        left = gone_within(str(rank), REAPED_WITHIN)
        assert left == [], f"left {REAPED_WITHIN} s after the run: {left}"
    finally:
        end_what_outlived(str(rank))
    assert probe.alive() == []


@pytest.mark.parametrize("how", ["SIGINT", "SIGTERM", "SIGKILL", "SIGKILL to the node"])
def test_a_daemon_of_a_running_rank_goes_when_the_launcher_is_stopped(tmp_path, probe, how):
    """A rank starts a child in a session of its own (setsid) and runs on; the launcher is then
    stopped, or the node killed. The rank's child becomes its node's as the rank is stopped (or,
    the node killed, the launcher's), and is stopped too."""
    rank = tmp_path / "daemon_parent.py"
    rank.write_text("import os, subprocess, sys, time\n"
                    "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(120)', sys.argv[0]],\n"
                    "                 start_new_session=True)\n"
                    "print('up', flush=True)\n"
                    "time.sleep(120)\n")
    run = subprocess.Popen([sys.executable, "-m", "paths", "launch", "--threads", "2", "--", sys.executable, str(rank)],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        assert [run.stdout.readline().split()[-1] for _ in range(2)] == ["up", "up"]
        if how.endswith("node"):
            [node] = probe.started()
            os.kill(node, signal.SIGKILL)
        else:
            os.kill(run.pid, getattr(signal, how))
        run.wait(timeout=30)
        if how in ("SIGINT", "SIGTERM"):  # stopped as on Ctrl-C, each with its own exit status
            assert run.returncode == {"SIGINT": 130, "SIGTERM": 143}[how]
        left = gone_within(str(rank), REAPED_WITHIN)
        assert left == [], f"left {REAPED_WITHIN} s after {how}: {left}"
        assert probe.alive_within(REAPED_WITHIN) == []
    finally:
        end_run(run, str(rank))
    assert probe.alive() == []


def test_paths_run_nodes_go_when_their_launcher_is_killed(probe):
    run = subprocess.Popen([sys.executable, "-m", "paths", "run", "gsum", "--map", "paper-4w", "--threads", "12",
                            "--rounds", "2000000", "--repeat", "1", "--timeout", "600"],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        probe.wait_for("gsum", 3, timeout=60)  # every node busy in GSum
        run.kill()
        run.wait(timeout=30)
        assert probe.alive_within(REAPED_WITHIN) == [], "node processes outlived their killed launcher"
    finally:
        end_run(run)


@pytest.mark.parametrize("how", ["the kernel returns", "Ctrl-C", "SIGTERM to the launcher", "SIGKILL to the launcher",
                                 "SIGKILL to a node"])
def test_what_a_kernel_started_goes_with_its_run(probe, user_module, tmp_path, how):
    """Each thread of a Python kernel starts two processes that ignore SIGTERM, one of them in a
    session of its own (a daemon), and returns or waits: the kernel returns, `paths run` is
    interrupted or killed, or one node is killed; the kernels' processes go with the run."""
    marker = str(tmp_path / "kernel-child")
    user_module("spawning", f"""
        import subprocess, sys, time

        def spawn(ctx):
            for session in (False, True):
                subprocess.Popen([sys.executable, "-c", "import signal, time; signal.signal(signal.SIGTERM, "
                                  "signal.SIG_IGN); print(flush=True); time.sleep(120)", {marker!r}],
                                 start_new_session=session, stdout=subprocess.PIPE).stdout.readline()
            if ctx.arg("wait") == "1":
                time.sleep(120)
    """)
    run = subprocess.Popen([sys.executable, "-m", "paths", "run", "spawning:spawn", "--map", "paper-4w", "--threads",
                            "6", "--repeat", "1", "--timeout", "600", "--arg", f"wait={int(how != 'the kernel returns')}"],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        deadline = time.monotonic() + 60
        while how != "the kernel returns" and len(processes_with(marker)) < 12 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert how == "the kernel returns" or len(processes_with(marker)) == 12
        if how == "the kernel returns":
            pass
        elif how == "SIGTERM to the launcher":
            run.terminate()
        elif how == "Ctrl-C":
            os.killpg(run.pid, signal.SIGINT)
        elif how.endswith("launcher"):
            run.kill()
        else:
            os.kill(next(pid for pid, name in probe.started().items() if name == "n1"), signal.SIGKILL)
        run.communicate(timeout=60)
        left = gone_within(marker, REAPED_WITHIN)
        assert left == [], f"left {REAPED_WITHIN} s after {how}: {left}"
        assert probe.alive_within(REAPED_WITHIN) == []
    finally:
        end_run(run, marker)


# ---- paths sbatch ----------------------------------------------------------------------------------

def sbatch_fields(script: str) -> dict[str, str]:
    return dict(line[len("#SBATCH --"):].split("=", 1) for line in script.splitlines() if line.startswith("#SBATCH"))


def rank_environment(script: str) -> list[str]:
    return [line for line in script.splitlines() if line.startswith(("export PATHS_", "unset PATHS_"))]


@pytest.mark.parametrize("policy, threads, fields", [
    ("block", 6, {"nodes": "2", "ntasks": "8", "ntasks-per-node": "4", "distribution": "block"}),  # 4 + 2: room for 4
    ("bucket", 16, {"nodes": "4", "ntasks": "16", "ntasks-per-node": "4", "distribution": "block"}),
    ("cyclic", 6, {"nodes": "6", "ntasks": "6", "ntasks-per-node": "1", "distribution": "cyclic"}),
    ("even", 10, {"nodes": "8", "ntasks": "16", "ntasks-per-node": "2", "distribution": "cyclic"}),
])
def test_the_sbatch_script_asks_for_room_for_the_placement(policy, threads, fields):
    script = batch_script("paper-4w", threads, policy, ["python", "app.py", "--rounds", "5"])
    assert sbatch_fields(script) == {"job-name": "paths-paper-4w", **fields}
    assert script.startswith("#!/bin/bash\n")
    assert rank_environment(script) == ["export PATHS_MAP=paper-4w", f"export PATHS_POLICY={fields['distribution']}",
                                        "unset PATHS_SUM PATHS_ACQUIRE PATHS_RELEASE PATHS_TRACE_DIR"]
    assert script.endswith(f"\nsrun --distribution=arbitrary --ntasks={threads} python app.py --rounds 5\n")


FAKE_SCONTROL = """#!/bin/sh
# scontrol show hostnames LIST, for a LIST of host names separated by commas
[ "$1 $2" = "show hostnames" ] || exit 2
echo "$3" | tr , '\\n'
"""
FAKE_SRUN = """#!/bin/sh
echo "srun$(printf ' [%s]' "$@")"
echo "$SLURM_HOSTFILE"
cat "$SLURM_HOSTFILE"
"""


@pytest.fixture
def run_batch_script(tmp_path):
    """Runs a batch script as in an allocation of the hosts `nodelist` (comma-separated) and
    checks that it leaves no file in its TMPDIR: scontrol lists the hosts, srun prints its
    arguments, the host file's path and its lines."""
    stand_ins, temporary = tmp_path / "bin", tmp_path / "tmp"
    stand_ins.mkdir()
    temporary.mkdir()
    for name, text in (("scontrol", FAKE_SCONTROL), ("srun", FAKE_SRUN)):
        (stand_ins / name).write_text(text)
        (stand_ins / name).chmod(0o755)

    def run(script: str, nodelist: str) -> subprocess.CompletedProcess:
        (tmp_path / "job.sh").write_text(script)
        done = subprocess.run(["bash", str(tmp_path / "job.sh")], capture_output=True, text=True, timeout=60,
                              env={**os.environ, "PATH": f"{stand_ins}:{os.environ['PATH']}",
                                   "TMPDIR": str(temporary), "SLURM_JOB_NODELIST": nodelist})
        assert list(temporary.iterdir()) == []
        return done
    return run


@pytest.mark.parametrize("policy, threads, nodelist, hosts", [
    # n0 x4, n1 x2 (Slurm's own block layout may put 3 + 3); the hosts in the allocation's order
    ("block", 6, "hb,ha,hc", ["hb"] * 4 + ["ha"] * 2),
    ("cyclic", 10, ",".join(f"h{i}" for i in range(8)), [f"h{i}" for i in range(8)] + ["h0", "h1"]),
])
def test_the_sbatch_script_runs_each_rank_on_the_host_of_its_node(run_batch_script, tmp_path, policy, threads,
                                                                   nodelist, hosts):
    done = run_batch_script(batch_script("paper-4w", threads, policy, ["./prog", "a b"]), nodelist)
    assert (done.returncode, done.stderr) == (0, "")
    srun, host_file, *lines = done.stdout.splitlines()
    assert srun == f"srun [--distribution=arbitrary] [--ntasks={threads}] [./prog] [a b]"
    assert Path(host_file).parent == tmp_path / "tmp"
    assert lines == hosts


def test_the_sbatch_script_stops_before_srun_on_an_allocation_of_too_few_hosts(run_batch_script):
    done = run_batch_script(batch_script("paper-4w", 6, "block", ["./prog"]), "ha")
    assert (done.returncode, done.stdout) == (1, "")
    assert done.stderr == ("paths sbatch: the allocation's hosts (ha) are fewer than the nodes map paper-4w "
                           "places its ranks on (n0, n1)\n")


def test_the_sbatch_script_gives_the_ranks_their_sums_and_hooks_as_paths_launch_does(user_module):
    user_module("rank_hooks", PASS_THROUGH_HOOKS)
    done = subprocess.run([sys.executable, "-m", "paths", "sbatch", "--map", "paper-4w", "--threads", "8", "--policy",
                           "cyclic", "--sum", "TOTAL", "--sum", "my count", "--acquire", "rank_hooks:acquire", "--",
                           "python", "app.py"], capture_output=True, text=True, timeout=60)
    assert (done.returncode, done.stderr) == (0, "")
    assert rank_environment(done.stdout) == ["export PATHS_MAP=paper-4w", "export PATHS_POLICY=cyclic",
                                             "export PATHS_SUM='TOTAL,my count'",
                                             "export PATHS_ACQUIRE=rank_hooks:acquire", "unset PATHS_RELEASE PATHS_TRACE_DIR"]
    script = batch_script("paper-4w", 2, "block", ["./prog"], release="rank_hooks:release")
    assert rank_environment(script)[-2:] == ["export PATHS_RELEASE=rank_hooks:release",
                                             "unset PATHS_SUM PATHS_ACQUIRE PATHS_TRACE_DIR"]


@pytest.mark.parametrize("command", ["launch", "sbatch"])
@pytest.mark.parametrize("option, name, problem", [
    ("--acquire", "no_such_module:hook", "acquire hook 'no_such_module:hook': cannot import module 'no_such_module'"),
    ("--acquire", "not_a_name", "acquire hook 'not_a_name': expected a function named 'pkg.mod:func' or "
                                "'pkg.mod.func'"),
    ("--release", "unmarked_hooks:note", "release hook 'unmarked_hooks:note': note is not marked as one: decorate it "
                                         "with @paths.release_hook"),
], ids=["no module", "not a name", "not marked"])
def test_a_hook_launch_and_sbatch_cannot_use_is_one_line_and_exit_2(user_module, probe, command, option, name,
                                                                    problem):
    user_module("unmarked_hooks", "def note(request, handle):\n    pass\n")
    done = subprocess.run([sys.executable, "-m", "paths", command, "--map", "paper-4w", "--threads", "4", option, name,
                           "--sum", "TOTAL", "--", "./prog"], capture_output=True, text=True, timeout=60)
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr.startswith(f"paths {command}: ") and done.stderr.count("\n") == 1, done.stderr
    assert problem in done.stderr, done.stderr
    assert probe.started() == {}


def test_the_sbatch_options_survive_a_command_of_several_lines_and_a_map_name_of_several_words(tmp_path):
    the_map = tmp_path / "spaced.yaml"
    the_map.write_text("name: 'my map #1'\nclusters: {c: {nodes: 'h[0-1]', cpus: 2}}\nroot: h0\n")
    script = batch_script(str(the_map), 2, None, ["python", "-c", "import sys\nprint(1)"])
    lines = script.splitlines()
    header = lines[:next(i for i, line in enumerate(lines) if not line.startswith("#"))]
    assert sbatch_fields("\n".join(header)) == {"job-name": "paths-my_map__1", "nodes": "1", "ntasks": "2",
                                                "ntasks-per-node": "2", "distribution": "block"}
    assert header[1] == "# 2 ranks of python -c 'import sys\\nprint(1)' on map my map #1, policy block:"
    assert script.endswith("srun --distribution=arbitrary --ntasks=2 python -c 'import sys\nprint(1)'\n")


def test_paths_sbatch_prints_the_script(tmp_path):
    the_map = tmp_path / "two.yaml"
    the_map.write_text("name: two\nclusters: {c: {nodes: 'h[0-1]', cpus: 3}}\nroot: h0\npolicy: cyclic\n")
    done = subprocess.run([sys.executable, "-m", "paths", "sbatch", "--map", str(the_map), "--threads", "5", "--",
                           "./prog", "a b"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert sbatch_fields(done.stdout) == {"job-name": "paths-two", "nodes": "2", "ntasks": "6",
                                          "ntasks-per-node": "3", "distribution": "cyclic"}
    assert f"export PATHS_MAP={the_map}\n" in done.stdout
    assert done.stdout.endswith("\nsrun --distribution=arbitrary --ntasks=5 ./prog 'a b'\n")


@pytest.mark.parametrize("written, seconds", [
    ("5", 300), ("5:30", 330), ("1:02:03", 3723), ("2-3", 183600), ("2-3:04", 183840), ("2-3:04:05", 183845),
    ("0", math.inf), ("UNLIMITED", math.inf), ("infinite", math.inf)])
def test_a_time_limit_reads_as_slurm_writes_it(written, seconds):
    from paths.cli.run import slurm_time

    assert slurm_time(written) == seconds


def test_launch_time_is_srun_time_in_minutes_and_sbatch_passes_it_on(app, probe):
    """`-t`/`--time` as srun and sbatch read it: `paths launch -t 0:01` stops the ranks after 1 s
    (as `--timeout 1`), `paths sbatch --time 1-00` asks Slurm for a day. (`--time` was taken as an
    abbreviation of `--timeout`: `--time 5` was 5 seconds, where Slurm means 5 minutes.)"""
    begin = time.monotonic()
    done = launch("--threads", "1", "-t", "0:01", "--", sys.executable, app, "sleep")
    assert done.returncode == 1 and "the run's time limit (--timeout, --time) passed" in done.stderr, done.stderr
    assert time.monotonic() - begin < 10
    assert gone_within(app, REAPED_WITHIN) == []
    script = subprocess.run([sys.executable, "-m", "paths", "sbatch", "--threads", "2", "--time", "1-00", "--", "./a"],
                            capture_output=True, text=True, timeout=60)
    assert script.returncode == 0, script.stderr
    assert sbatch_fields(script.stdout)["time"] == "1-00"


@pytest.mark.parametrize("command, args, problem", [
    ("launch", ["--threads", "1", "--time", "5:", "--", "true"],
     "argument -t/--time: expected a time limit as Slurm writes it (MINUTES, MINUTES:SECONDS, "),
    ("launch", ["--threads", "1", "--time", "1", "--timeout", "3", "--", "true"],
     "argument --timeout: not allowed with argument -t/--time"),
    ("launch", ["--threads", "1", "--tim", "1", "--", "true"], "ambiguous option: --tim could match --timeout, --time"),
    ("sbatch", ["--threads", "1", "-t", "-1", "--", "true"], "argument -t/--time: expected a time limit as Slurm"),
    ("sbatch", ["--threads", "1", "-t", "\u0665", "--", "true"], "argument -t/--time: expected a time limit as Slurm"),
    ("run", ["--time", "5"], "argument -t/--time: paths run has no job time limit (srun's --time, in minutes): "
                             "--timeout SECONDS bounds each step"),
    ("run", ["-t", "5"], "argument -t/--time: paths run has no job time limit"),
    ("launch", ["--threads", "1", "--trace-dir", "", "--", "true"], "argument --trace-dir: expected a folder's path, "
                                                                   "got ''"),
    ("sbatch", ["--threads", "1", "--trace-dir", " ", "--", "true"], "argument --trace-dir: expected a folder's path"),
], ids=["launch malformed", "launch both", "launch ambiguous", "sbatch malformed", "sbatch digits Slurm cannot read",
        "run", "run -t", "launch empty trace folder", "sbatch empty trace folder"])
def test_a_time_limit_or_trace_folder_that_cannot_be_is_one_line_and_exit_2(command, args, problem):
    done = subprocess.run([sys.executable, "-m", "paths", command, *args], capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    assert problem in done.stderr and "Traceback" not in done.stderr, done.stderr


def test_paths_sbatch_refuses_an_empty_policy_as_launch_does():
    done = subprocess.run([sys.executable, "-m", "paths", "sbatch", "--threads", "2", "--policy", "", "--", "true"],
                          capture_output=True, text=True, timeout=60)
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr.startswith("paths sbatch: unknown policy '': expected 'block'"), done.stderr


def test_the_sbatch_script_places_the_ranks_by_a_policy_of_ones_own(run_batch_script, user_module):
    user_module("backwards", """
        def placement(cluster_map, n_threads):
            return [cluster_map.nodes[-1 - t % 8].name for t in range(n_threads)]
    """)
    done = subprocess.run([sys.executable, "-m", "paths", "sbatch", "--map", "paper-4w", "--threads", "5", "--policy",
                           "backwards:placement", "--", "./prog"], capture_output=True, text=True, timeout=60)
    assert (done.returncode, done.stderr) == (0, "")
    assert sbatch_fields(done.stdout) == {"job-name": "paths-paper-4w", "nodes": "5", "ntasks": "5",
                                          "ntasks-per-node": "1"}
    assert "export PATHS_POLICY=backwards:placement\n" in done.stdout
    ran = run_batch_script(done.stdout, "h0,h1,h2,h3,h4")
    assert (ran.returncode, ran.stderr) == (0, "")
    # ranks 0..4 on n7..n3, and the used nodes n3..n7 on the hosts h0..h4
    assert ran.stdout.splitlines()[2:] == ["h4", "h3", "h2", "h1", "h0"]
