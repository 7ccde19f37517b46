"""The launcher of map runs: every node process is reaped on success, on a node's failure and on
Ctrl-C; the commands of the ssh and slurm modes; a real run through a fake ssh on loopback
addresses, with the run's CURVE key; a node that exits by itself when its standard input closes.

Node processes carry a probe (tests/node_probe.py): the tests wait for its events, never sleep,
and check that no node process is left, running or unreaped.
"""

import json
import os
import re
import shlex
import signal
import socket
import subprocess
import sys
import threading
import time

import pytest
from node_probe import NodeProbe

import paths
from paths import build_path, make_path, stage
from paths.experiments import experiment
from paths.experiments import launcher
from paths.runtime.build import BuildContext
from paths.model.cluster_map import builtin_map, load_map_text
from paths.model.cpu_sets import cpu_shares, format_cpu_list
from paths.experiments.experiment import RunSettings, run_experiment
from paths.experiments.launcher import LaunchError, NodeProcesses, node_commands

RUN_TIMEOUT = 60.0  # seconds any one step may wait; a failure must be reported long before
PROMPT = 5.0        # the longest a failed or interrupted run may take to report and reap


def assert_all_reaped(probe: NodeProbe, nodes: list[str]) -> None:
    assert sorted(probe.started().values()) == sorted(nodes)
    assert probe.unreaped() == [], "node processes still there (running, or zombies nobody waited for)"
    assert probe.alive() == []


# ---- reaped on success and on a node's failure --------------------------------------------------

def test_every_node_is_reaped_after_a_run(probe, launched):
    report = run_experiment(builtin_map("paper-4w"), RunSettings("gsum", [2, 9], repeat=1, rounds=20,
                                                                 timeout=RUN_TIMEOUT))
    assert [m.nodes for m in report.measurements] == [1, 3]
    assert launched[0].nodes == {}
    assert_all_reaped(probe, ["n0", "n1", "n2"])


def test_a_path_that_fails_to_build_on_one_node_names_it_and_every_node_is_reaped(probe, user_module):
    """Thread 8, alone on n2, gets a path with a stage kind nobody has from the acquire hook; the
    threads of n0 and n1 wait for it in the barrier. The run must name n2 at once and stop all."""
    user_module("bad_path_hook", """
        import paths
        from paths import make_path, stage

        @paths.acquire_hook
        def acquire(request):
            path = request.default()
            return make_path(stage("no-such-kind"), path) if request.thread == 8 else path
    """)
    begin = time.monotonic()
    with pytest.raises(LaunchError) as failed:
        run_experiment(builtin_map("paper-4w"), RunSettings("gsum", [9], repeat=1, rounds=20, timeout=RUN_TIMEOUT,
                                                            acquire="bad_path_hook:acquire"))
    assert time.monotonic() - begin < PROMPT
    assert str(failed.value) == (
        "node n2: KernelError: kernel gsum: thread 8 on node n2 returned PATHS_EFAILED: the kernel's own failure: "
        "paths_acquire('GSUM', 'q') by thread 8: its path no-such-kind() -> remote(host='n0', window=2) -> "
        "reduce-sum(id='cluster:4w', num_threads=3) -> core(format='q', name='GSUM.9.0'): unknown stage kind "
        "'no-such-kind' in stage no-such-kind() (valid kinds: allreduce, batch, cache, core, delay, reduce-sum, remote, "
        "trace; a kind written in Python is known where its module was imported, at a server with paths serve "
        "--allow-kinds MODULE:NAME)")
    assert_all_reaped(probe, ["n0", "n1", "n2"])


def test_a_node_failing_in_the_kernel_is_reported_at_once_not_at_the_others_timeout(probe, monkeypatch):
    """n2's GSum fails at once; n0 and n1 wait for n2's partial sums. The run must say so and stop
    them, not wait for their timeout (20 s, and twice that for their answers) first."""

    class OneBadNode(NodeProcesses):
        def request_all(self, requests, timeout=600.0, **messages):
            if requests.get("n2", {}).get("op") == "run":
                requests = dict(requests, n2=dict(requests["n2"], args=dict(requests["n2"]["args"], rounds="0")))
            return super().request_all(requests, timeout, **messages)

    monkeypatch.setattr(experiment, "NodeProcesses", OneBadNode)
    begin = time.monotonic()
    with pytest.raises(LaunchError) as failed:
        run_experiment(builtin_map("paper-4w"), RunSettings("gsum", [12], repeat=1, rounds=20, timeout=20))
    assert time.monotonic() - begin < PROMPT
    assert re.fullmatch(r"node n2: KernelError: kernel gsum: thread (8|9|10|11) on node n2 returned PATHS_EINVAL: "
                        r"a bad argument: gsum: expected rounds > 0, got 0", str(failed.value)), failed.value
    assert_all_reaped(probe, ["n0", "n1", "n2"])


def test_a_node_killed_mid_run_is_named_and_the_others_are_reaped(probe):
    """n2 is killed while every node is in GSum (the others then wait for it): the run names n2
    and stops the others at once."""

    def kill_n2_once_all_run():
        running = dict(probe.wait_for("gsum", 3, timeout=RUN_TIMEOUT))
        [pid] = [pid for pid, name in running.items() if name == "n2"]
        os.kill(pid, signal.SIGKILL)

    killer = threading.Thread(target=kill_n2_once_all_run)
    killer.start()
    begin = time.monotonic()
    try:
        with pytest.raises(LaunchError) as failed:
            run_experiment(builtin_map("paper-4w"),
                           RunSettings("gsum", [12], repeat=1, rounds=1_000_000, timeout=RUN_TIMEOUT))
    finally:
        killer.join()
    assert time.monotonic() - begin < PROMPT
    assert str(failed.value).startswith(f"node n2 exited while waiting for kernel gsum to end "
                                        "(killed by SIGKILL)"), failed.value
    assert_all_reaped(probe, ["n0", "n1", "n2"])


# ---- Ctrl-C -------------------------------------------------------------------------------------

@pytest.mark.parametrize("target", ["process group", "launcher"])
def test_ctrl_c_exits_130_and_reaps_every_node(probe, target):
    """SIGINT to the whole process group (Ctrl-C in a terminal) or to `paths run` alone, while
    every node is busy in a long GSum."""
    run = subprocess.Popen([sys.executable, "-m", "paths", "run", "gsum", "--map", "paper-4w", "--threads", "12",
                            "--rounds", "2000000", "--repeat", "1", "--timeout", "600"],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        busy = probe.wait_for("gsum", 3, timeout=RUN_TIMEOUT)
        assert sorted(name for _, name in busy) == ["n0", "n1", "n2"]
        interrupted = time.monotonic()
        if target == "launcher":
            run.send_signal(signal.SIGINT)
        else:
            os.killpg(run.pid, signal.SIGINT)
        out, err = run.communicate(timeout=60)
        took = time.monotonic() - interrupted
    finally:
        if run.poll() is None:
            os.killpg(run.pid, signal.SIGKILL)
            run.communicate()
    assert run.returncode == 130, err
    assert "paths: interrupted" in err
    assert out == ""
    assert probe.alive() == []  # `paths run` reaped its nodes before it exited
    assert took < 4.0, f"{took:.1f} s from Ctrl-C to the end of `paths run`"
    assert sorted(probe.started().values()) == ["n0", "n1", "n2"]


def threads_of(pid: int) -> int:
    with open(f"/proc/{pid}/status") as status:
        return int(next(line for line in status if line.startswith("Threads:")).split()[1])


def test_sigterm_to_paths_run_while_five_thousand_kernel_threads_build_their_paths_ends_the_node_at_once(probe):
    """As `timeout` ends a run: the node, told by its launcher's death, stops at once, though five
    thousand kernel threads want the GIL to build their paths, the main thread (which sees the
    signal) and the thread reading its standard input among them."""
    run = subprocess.Popen([sys.executable, "-m", "paths", "run", "gsum", "--threads", "5000", "--rounds", "1000000",
                            "--repeat", "1", "--timeout", "600"],
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        [(node, _)] = probe.wait_for("gsum", 1, timeout=RUN_TIMEOUT)
        started = time.monotonic()
        while threads_of(node) < 5000 and time.monotonic() - started < RUN_TIMEOUT:
            time.sleep(0.05)  # its kernel threads start, and build their paths
        run.send_signal(signal.SIGTERM)
        run.wait(timeout=RUN_TIMEOUT)
        ended = time.monotonic()
        while probe.alive() and time.monotonic() - ended < RUN_TIMEOUT:
            time.sleep(0.05)
        took = time.monotonic() - ended
    finally:
        if run.poll() is None:
            os.killpg(run.pid, signal.SIGKILL)
            run.wait()
    assert probe.alive() == []
    assert took < PROMPT, f"the node outlived `paths run` by {took:.1f} s"


# ---- ssh -------------------------------------------------------------------------------------------

SSH_MAP = """\
name: remote-pair
clusters:
  a:
    nodes: a[0-1]
    cpus: 2
    address: {a0: "tcp://10.0.0.1:7000", a1: "tcp://10.0.0.2:*"}
  b:
    nodes: b0
    cpus: 2
root: a0
launch:
  mode: ssh
  ssh: "ssh -x {host} {command}"
"""


def test_ssh_commands_follow_the_template():
    commands = node_commands(load_map_text(SSH_MAP), ["a0", "a1", "b0"])
    assert [c.node for c in commands] == ["a0", "a1", "b0"]
    node = [sys.executable, "-m", "paths.experiments.node", "--name"]
    for command, host, bind in zip(commands, ["a0", "a1", "b0"], [
            ["--bind", "tcp://10.0.0.1:7000"],
            ["--bind", "tcp://10.0.0.2:*"],
            ["--bind", "tcp://0.0.0.0:*", "--advertise", "b0"]]):  # no address: any interface, by name
        assert command.argv[:3] == ["ssh", "-x", host]
        assert len(command.argv) == 4  # the remote command is one argument, quoted for the remote shell
        assert shlex.split(command.argv[3]) == node + [host] + bind


def test_local_nodes_get_their_own_share_of_the_cpus_when_pinning():
    cluster_map = builtin_map("paper-4w")
    allowed = sorted(os.sched_getaffinity(0))
    plain = node_commands(cluster_map, ["n0", "n1"], "local")
    assert all("--cpus" not in c.argv for c in plain)
    shared = node_commands(cluster_map, ["n0", "n1", "n2"], "local", share_cpus=True)
    given = [c.argv[c.argv.index("--cpus") + 1] for c in shared]
    assert given == [format_cpu_list(share) for share in cpu_shares(3, allowed)]


EMULATED_ADDRESSES = """
name: addressed
clusters:
  c:
    nodes: h[0-3]
    cpus: 1
    address: {h0: "tcp://127.0.0.1:%d", h1: "tcp://127.0.0.2:*", h2: "tcp://[::1]:7002", h3: "tcp://h3.example:7003"}
root: h0
"""


def test_emulated_nodes_bind_their_loopback_addresses_as_given_and_others_a_free_port(probe):
    """`launch: local` runs the map on this machine: a loopback address of the map is bound as
    given (so a port in use is said, not passed over); another machine's is not this one's."""
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    port = taken.getsockname()[1]
    cluster_map = load_map_text(EMULATED_ADDRESSES % port, source="addressed.yaml")
    binds = [c.argv[c.argv.index("--bind") + 1] for c in node_commands(cluster_map, ["h0", "h1", "h2", "h3"])]
    assert binds == [f"tcp://127.0.0.1:{port}", "tcp://127.0.0.2:*", "tcp://[::1]:7002", "tcp://127.0.0.1:*"]
    with pytest.raises(LaunchError, match=rf"node h0: --bind: cannot bind 'tcp://127\.0\.0\.1:{port}': Address "
                                          r"already in use"):
        run_experiment(cluster_map, RunSettings("gsum", [1], repeat=1, rounds=5, timeout=RUN_TIMEOUT))
    taken.close()
    assert_all_reaped(probe, ["h0"])


FAKE_SSH = """\
#!/bin/sh
# A fake ssh for tests: drops the host and runs the command here, as sshd would run it there.
shift
exec sh -c "$1"
"""

LOOPBACK_MAP = """\
name: loopback-ssh
clusters:
  a:
    nodes: n[0-2]
    cpus: 2
    address: {{n0: "tcp://127.0.0.2:*", n1: "tcp://127.0.0.3:*", n2: "tcp://127.0.0.4:*"}}
root: n0
launch:
  mode: ssh
  ssh: "{ssh} {{host}} {{command}}"
"""


def test_a_node_that_cannot_bind_its_address_says_so_in_one_line(probe, tmp_path, capfd):
    """192.0.2.1 (an address for documentation) is on no interface here: binding it sends nothing.
    The node's line ends the error, or was passed on already, led by its name, when the launcher
    read it before it saw the node end."""
    ssh = tmp_path / "fake-ssh"
    ssh.write_text(FAKE_SSH)
    ssh.chmod(0o755)
    text = LOOPBACK_MAP.format(ssh=shlex.quote(str(ssh))).replace("tcp://127.0.0.2:*", "tcp://192.0.2.1:7000")
    with pytest.raises(LaunchError) as failed:
        run_experiment(load_map_text(text, source="unbindable.yaml"),
                       RunSettings("gsum", [1], repeat=1, rounds=5, timeout=RUN_TIMEOUT))
    line = "node n0: --bind: cannot bind 'tcp://192.0.2.1:7000': Cannot assign requested address"
    passed_on = capfd.readouterr().err
    assert str(failed.value) in (f"node n0 exited while waiting to be READY (exit 2): {line}",
                                 "node n0 exited while waiting to be READY (exit 2)"), failed.value
    assert (line in str(failed.value)) != (f"[n0] {line}\n" in passed_on), (failed.value, passed_on)  # once
    assert_all_reaped(probe, ["n0"])


def test_a_run_through_fake_ssh_on_loopback_addresses(probe, launched, tmp_path, monkeypatch):
    ssh = tmp_path / "fake ssh"  # a space in the path: the template must quote it
    ssh.write_text(FAKE_SSH)
    ssh.chmod(0o755)
    cluster_map = load_map_text(LOOPBACK_MAP.format(ssh=shlex.quote(str(ssh))), source="loopback-ssh.yaml")
    keys = []
    keypair = launcher._native.curve_keypair

    def recorded_keypair():
        keys.append(keypair())
        return keys[-1]

    monkeypatch.setattr(launcher._native, "curve_keypair", recorded_keypair)
    checked = {}

    def check_the_servers(threads, repeat):  # while the nodes are up
        if checked:
            return
        addresses = launched[-1].addresses()
        checked["addresses"] = addresses
        (public, _), *clients = keys  # the servers' pair, then each node's client pair
        assert len(clients) == 3
        element = stage("core", name=f"GSUM.{threads}.{repeat}", format="q")
        as_n1 = BuildContext(curve_client=clients[1])  # a client the servers admit: node n1
        with_key = build_path(make_path(stage("remote", host=addresses["n0"], curve_server_key=public), element),
                              context=as_n1)
        checked["history"] = [with_key.observe(i, timeout=10)[0] for i in range(with_key.last())]
        del with_key
        with pytest.raises((ConnectionError, TimeoutError)) as refused:  # without the run's key: no answer
            build_path(make_path(stage("remote", host=addresses["n0"], timeout_ms=300), element),
                       pastset=paths.PastSet())
        checked["refused"] = refused.value
        with pytest.raises(ConnectionError) as stranger:  # the servers' key, but no client key of the run
            build_path(make_path(stage("remote", host=addresses["n0"], curve_server_key=public, timeout_ms=300),
                                 element), pastset=paths.PastSet())
        checked["stranger"] = stranger.value

    report = run_experiment(cluster_map, RunSettings("gsum", [6, 1, 3], repeat=1, rounds=20, timeout=RUN_TIMEOUT),
                            check_the_servers)
    assert [(m.threads, m.nodes) for m in report.measurements] == [(6, 3), (1, 1), (3, 2)]
    assert sorted(checked["addresses"]) == ["n0", "n1", "n2"]
    for node, host in [("n0", "127.0.0.2"), ("n1", "127.0.0.3"), ("n2", "127.0.0.4")]:
        assert checked["addresses"][node].startswith(f"tcp://{host}:"), checked["addresses"]
    assert checked["history"] == [6 * i for i in range(20)]
    assert "BUILD" in str(checked["refused"]), checked["refused"]
    assert "no answer to BUILD" in str(checked["stranger"]), checked["stranger"]
    assert_all_reaped(probe, ["n0", "n1", "n2"])


UNREACHABLE_SSH = """\
#!/bin/sh
# A fake ssh that cannot reach its host: like ssh, it ends its output before it exits.
echo "ssh: connect to host $1 port 22: No route to host" >&2
exec >&-
sleep 0.3
exit 255
"""


def test_a_node_that_cannot_start_is_named_with_its_exit_status_and_stderr(probe, tmp_path):
    ssh = tmp_path / "unreachable-ssh"
    ssh.write_text(UNREACHABLE_SSH)
    ssh.chmod(0o755)
    cluster_map = load_map_text(LOOPBACK_MAP.format(ssh=shlex.quote(str(ssh))))
    processes = NodeProcesses(cluster_map, ["n0", "n1"])
    with pytest.raises(LaunchError) as failed:
        with processes:
            pass
    assert str(failed.value) in [
        f"node {node} exited while waiting to be READY (exit 255): ssh: connect to host {node} port 22: No route "
        "to host" for node in ("n0", "n1")]
    assert processes.nodes == {}
    # The other node's fake ssh was stopped while in its `sleep 0.3`, which then ends by itself.
    assert probe.alive_within(2.0) == []


SILENT_SSH = """\
#!/bin/sh
# A fake ssh whose host never answers: the node never says READY.
exec sleep 600
"""


@pytest.mark.parametrize("command", ["run", "launch"])
def test_nodes_that_never_start_are_given_up_within_timeout(tmp_path, command):
    """--timeout bounds the wait for the nodes to say READY too, not only the later steps."""
    ssh = tmp_path / "silent-ssh"
    ssh.write_text(SILENT_SSH)
    ssh.chmod(0o755)
    cluster = tmp_path / "silent.yaml"
    cluster.write_text(LOOPBACK_MAP.format(ssh=shlex.quote(str(ssh))))
    options = ["--map", str(cluster), "--threads", "3", "--timeout", "2"]
    what = ["run", "gsum", *options, "--repeat", "1"] if command == "run" else ["launch", *options, "--", "true"]
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "paths", *what], capture_output=True, text=True, timeout=60)
    assert done.returncode == 1, done.stderr
    assert "did not answer within 2 s (to be READY)" in done.stderr
    assert time.monotonic() - started < 2 + PROMPT + 5  # the interpreter's start, then the reaping


# ---- slurm ----------------------------------------------------------------------------------------

SLURM_MAP = """\
name: allocation
clusters:
  left:
    nodes: l[0-1]
    cpus: 4
  right:
    nodes: r[0-1]
    cpus: 4
    address: "tcp://{node}:7100"
root: l0
launch:
  mode: slurm
"""


def test_slurm_commands_give_the_nodes_the_run_uses_the_allocation_hosts_in_map_order():
    cluster_map = load_map_text(SLURM_MAP)
    environ = {"SLURM_JOB_NODELIST": "c[1-4]"}
    commands = node_commands(cluster_map, ["l0", "l1", "r0", "r1"], environ=environ)
    hosts = {"l0": "c1", "l1": "c2", "r0": "c3", "r1": "c4"}
    node = [sys.executable, "-m", "paths.experiments.node", "--name"]
    for command in commands:
        host = hosts[command.node]
        assert command.argv[:6] == ["srun", "--nodes=1", "--ntasks=1", "--overlap", "-w", host]
        bind = (["--bind", "tcp://0.0.0.0:7100", "--advertise", command.node] if command.node.startswith("r")
                else ["--bind", "tcp://0.0.0.0:*", "--advertise", host])  # a host name is advertised, not bound
        assert command.argv[6:] == node + [command.node] + bind
    # A run that needs only some nodes takes as many hosts (as paths sbatch asks for), in map order.
    assert [(c.node, c.argv[5]) for c in node_commands(cluster_map, ["r1", "l0"], environ=environ)] == [
        ("r1", "c2"), ("l0", "c1")]
    assert [c.argv[5] for c in node_commands(cluster_map, ["l0"], environ={"SLURM_NODELIST": "x[7-9],y"})] == ["x7"]


def test_slurm_allocation_with_too_few_hosts():
    with pytest.raises(LaunchError) as failed:
        node_commands(load_map_text(SLURM_MAP), ["r1", "l0", "l1", "r0"], environ={"SLURM_JOB_NODELIST": "c[1-3]"})
    assert str(failed.value) == ("slurm: the allocation has 3 hosts (c1, c2, c3) but the run uses 4 nodes of map "
                                 "allocation (l0, l1, r0, r1)")
    assert len(node_commands(load_map_text(SLURM_MAP), ["l0", "r1"], environ={"SLURM_JOB_NODELIST": "c[1-2]"})) == 2


def test_slurm_outside_an_allocation(probe, tmp_path, monkeypatch):
    with pytest.raises(LaunchError, match="slurm: no SLURM_JOB_NODELIST: run inside an allocation"):
        node_commands(load_map_text(SLURM_MAP), ["l0"], environ={})
    # `paths run` says so and starts nothing (srun is never run).
    for variable in ("SLURM_JOB_NODELIST", "SLURM_NODELIST"):
        monkeypatch.delenv(variable, raising=False)
    path = tmp_path / "allocation.yaml"
    path.write_text(SLURM_MAP)
    done = subprocess.run([sys.executable, "-m", "paths", "run", "gsum", "--map", str(path), "--threads", "2",
                           "--repeat", "1", "--rounds", "5"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 1, done.stderr
    assert "paths run: slurm: no SLURM_JOB_NODELIST" in done.stderr
    assert probe.started() == {} and probe.alive() == []


# ---- a node alone ---------------------------------------------------------------------------------

@pytest.mark.parametrize("holding", ["nothing", "handles", "a running kernel"])
def test_a_node_exits_when_its_standard_input_closes(probe, holding):
    """Idle, the node stops as after "quit" (exit 0), even holding a run's handles. Busy in a
    kernel that waits for a thread that never comes (as when its ssh or srun died with the
    launcher), it cannot answer, and the end of its input ends it at once (exit 1)."""
    node = subprocess.Popen([sys.executable, "-m", "paths.experiments.node", "--name", "alone"], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    busy = holding == "a running kernel"
    try:
        node.stdin.write("-\n")  # no CURVE keys
        node.stdin.flush()
        assert node.stdout.readline().startswith("READY tcp://127.0.0.1:")
        if holding != "nothing":  # a run's handles stay until "release"
            local = builtin_map("local")
            for request in ({"op": "context", "map": local.text, "source": local.source, "kernel": "gsum",
                             "kernel_name": "gsum", "sums": ["GSUM"], "policy": None, "max_fanin": None,
                             "tree_form": None, "acquire": None, "release": None, "tracing": None},
                            {"op": "run", "threads": [0] if busy else [0, 1], "placements": ["alone", "alone"],
                             "tag": "2.0", "args": {"rounds": "10", "timeout": "600"}, "pin": False,
                             "spans_processes": busy}):
                node.stdin.write(json.dumps(request) + "\n")
                node.stdin.flush()
                if busy and request["op"] == "run":  # it waits for thread 1, in a process that never comes
                    probe.wait_for("gsum", 1)
                else:
                    assert json.loads(node.stdout.readline())["ok"] is True
        closed = time.monotonic()
        node.stdin.close()  # as when the launcher is gone
        assert node.wait(timeout=30) == (1 if busy else 0)
        assert time.monotonic() - closed < 2.0
        assert node.stdout.read() == ""
    finally:
        if node.poll() is None:
            node.kill()
            node.wait()
        node.stdout.close()
        node.stderr.close()
    assert list(probe.started().values()) == ["alone"] and probe.unreaped() == []
