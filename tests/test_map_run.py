"""Map runs: GSum and MCPi on cluster maps, each node a local process with its own server on
loopback. Exact totals on the multi-cluster map (checked by the kernel and again from the
element's history on the home node), one round trip per global sum across each cluster's link
to the root, pi through a map, both placement policies, `paths run` output (table, CSV, plot),
broken maps refused before any node process starts, and oversubscription allowed with a warning.

Node processes carry a probe (tests/node_probe.py): the tests wait for its events, never sleep,
and check that every node process started was reaped.
"""

import csv
import json
import math
import os
import re
import stat
import subprocess
import sys

import pytest
from run_progress import progress, without_progress

import paths
from paths import build_path, make_path, stage
from paths.model.cluster_map import builtin_map, load_map_text
from paths.experiments.experiment import Measurement, RunSettings, plans_for, run_experiment
from paths.model.placement import PlacementWarning
from paths.model.reduction_tree import plan_reduction
from paths.cli.run import results_table
from paths.runtime.trace_file import read_trace

RUN_TIMEOUT = 60.0  # seconds any one step of a run may take; the runs below take far less


def element_history(endpoint: str, name: str) -> list[int]:
    """Every tuple of element (name, "q") on the node serving `endpoint`, read through a remote
    stage from this process: independent of the kernel's own check of each total."""
    handle = build_path(make_path(stage("remote", host=endpoint), stage("core", name=name, format="q")),
                        pastset=paths.PastSet())
    try:
        return [handle.observe(i, timeout=10)[0] for i in range(handle.last())]
    finally:
        del handle


def paths_run(*args: str) -> subprocess.CompletedProcess:
    """`paths run`, its stderr without the progress lines (what it says besides them)."""
    done = subprocess.run([sys.executable, "-m", "paths", "run", *args], capture_output=True, text=True,
                          timeout=120)
    done.stderr = without_progress(done.stderr)
    return done


# ---- the multi-cluster emulation -------------------------------------------------------------

MULTI_COUNTS = [3, 12, 96]
MULTI_ROUNDS, MULTI_REPEAT = 10, 2
CLUSTERS_WITH_THREADS = {3: {"2w"}, 12: {"2w"}, 96: {"2w", "4w", "8w"}}  # bucket: 2w holds 32 threads


def test_counters_after_a_thread_count_are_of_its_runs_alone(probe):
    """The stages of the runs before may still be going (the links that hold them end as their
    clients let go): they are not listed under the next thread count."""
    cluster_map = load_map_text("name: headmap\nclusters:\n  a: {nodes: 'a[0-3]', cpus: 1, head: a3}\n"
                                "  r: {nodes: r0, cpus: 0}\nroot: r0\npolicy: even\ntree: {max_fanin: 2}\n")
    report = run_experiment(cluster_map, RunSettings("gsum", [3, 4, 1], repeat=2, rounds=100, timeout=RUN_TIMEOUT,
                                                     collect_counters=True))
    for n, found in report.counters.items():
        names = {re.search(r"name='([^']*)'\)$", s["stage"])[1] for stages in found.values() for s in stages}
        assert {".".join(name.split(".")[-2:]) for name in names} == {f"{n}.0", f"{n}.1"}, (n, names)


def test_an_element_homed_on_a_sum_that_goes_on_to_the_root_is_reached_every_run(probe):
    """Cluster a's sum lives on a1, its head, and goes on to the root on r0, which goes back to the
    element on a1. a1 runs no thread, so clients build its sum; the root is built by whichever of
    its two callers comes first. Every run works: a sum's link names the servers from the sum on
    (when cluster a's came first, the path came back into a1's server and was refused, in about
    one run of three)."""
    cluster_map = load_map_text("name: homed\nclusters:\n  b: {nodes: b1, cpus: 1}\n"
                                "  a: {nodes: [a2, a3, a1], cpus: 1, head: a1}\n  r: {nodes: r0, cpus: 0}\n"
                                "root: r0\nhome: a1\n")
    plan = plan_reduction(cluster_map, 3, ("GSUM", "q"))
    assert plan.placements == ("b1", "a2", "a3")
    assert {spec.param("id"): node for node, keys in plan.stages_by_node().items() for key in keys
            for spec in key[:1] if spec.kind == "reduce-sum"} == {"cluster:a": "a1", "root": "r0"}
    report = run_experiment(cluster_map, RunSettings("gsum", [3], repeat=8, rounds=50, timeout=RUN_TIMEOUT))
    assert [(m.threads, m.nodes) for m in report.measurements] == [(3, 3)] * 8
    assert all(m.value > 0 for m in report.measurements)
    assert probe.unreaped() == []


def test_multicluster_gsum_exact_and_one_round_trip_per_sum_across_each_link(probe, launched):
    cluster_map = builtin_map("multicluster")
    settings = RunSettings("gsum", MULTI_COUNTS, repeat=MULTI_REPEAT, rounds=MULTI_ROUNDS,
                           timeout=RUN_TIMEOUT, collect_counters=True)
    plans = plans_for(cluster_map, settings)
    histories = {}

    def after_each_run(threads, repeat):  # the nodes are still up: read the element on the home node
        endpoint = launched[-1].addresses()[cluster_map.home]
        histories[threads, repeat] = element_history(endpoint, f"GSUM.{threads}.{repeat}")

    report = run_experiment(cluster_map, settings, after_each_run)  # a node raises on a wrong total

    assert [(m.threads, m.repeat) for m in report.measurements] == [
        (n, r) for n in MULTI_COUNTS for r in range(MULTI_REPEAT)]
    for m in report.measurements:
        assert m.kernel == "gsum" and m.value > 0 and list(m.columns) == ["us_per_global_sum"]
        assert m.nodes == len(set(plans[m.threads].placements))
    # Independently of the kernel: each run moved round i's total, i * threads, into its own element.
    assert histories == {(n, r): [n * i for i in range(MULTI_ROUNDS)] for n in MULTI_COUNTS
                         for r in range(MULTI_REPEAT)}

    crossing = str(stage("remote", host=cluster_map.root))
    root_cluster = cluster_map.node(cluster_map.root).cluster
    assert set(report.counters) == set(MULTI_COUNTS)
    for n, r in ((n, r) for n in MULTI_COUNTS for r in range(MULTI_REPEAT)):
        element = str(stage("core", name=f"GSUM.{n}.{r}", format="q"))
        plan = plan_reduction(cluster_map, n, (f"GSUM.{n}.{r}", "q"))  # the default hook's paths
        stages = [(node, s) for node, found in report.counters[n].items() for s in found
                  if s["stage"].endswith(element)]  # this run's tree
        remotes = [(node, s) for node, s in stages if s["kind"] == "remote"]
        assert remotes, n
        # A remote stage under a sum makes one round trip per global sum (the sum's move and its
        # observe travel as one request); the remote of a thread alone on its node is that thread's
        # own link, a move and an observe: two. Plus, for each, the BUILD of its server side.
        thread_tops = {(node, str(path)) for node, path in zip(plan.placements, plan.paths)}
        for node, s in remotes:
            trips = 2 if (node, s["stage"]) in thread_tops else 1
            assert s["counters"]["operations"] == trips * MULTI_ROUNDS, (n, node, s)
            assert s["counters"]["requests"] == trips * MULTI_ROUNDS + 1, (n, node, s)
            assert s["counters"]["answers"] == trips * MULTI_ROUNDS + 1, (n, node, s)
            assert s["counters"]["failures"] == 0, (n, node, s)
        # Exactly one remote per cluster with threads crosses from that cluster to the root node.
        crossings = [cluster_map.node(node).cluster for node, s in remotes
                     if s["stage"].split(" -> ")[0] == crossing and cluster_map.node(node).cluster != root_cluster]
        assert sorted(crossings) == sorted(CLUSTERS_WITH_THREADS[n]), n
        for node, s in remotes:  # ... and each crossing is one round trip per global sum
            if s["stage"].split(" -> ")[0] == crossing:
                assert s["counters"]["requests"] == MULTI_ROUNDS + 1, (n, node, s)
        assert {cluster_map.node(p).cluster for p in plan.placements} == CLUSTERS_WITH_THREADS[n]
        # The element on the home node took one move per global sum.
        [core] = [s for node, s in stages if node == cluster_map.home and s["kind"] == "core"]
        assert core["counters"]["element_moves"] == MULTI_ROUNDS, n

    started = probe.started()
    assert sorted(started.values()) == sorted(node.name for node in cluster_map.nodes)  # every node, once
    assert probe.unreaped() == []


# ---- MCPi and GSum on the 4W map ---------------------------------------------------------------

def test_mcpi_through_a_map_finds_pi(probe):
    cluster_map = builtin_map("paper-4w")
    settings = RunSettings("mcpi", [1, 6, 32], repeat=1, darts=10_000_000, timeout=RUN_TIMEOUT)
    report = run_experiment(cluster_map, settings)
    assert [m.threads for m in report.measurements] == [1, 6, 32]
    for m in report.measurements:
        assert abs(m.pi - math.pi) < 0.01, m
        assert m.value > 0
    assert [m.nodes for m in report.measurements] == [1, 2, 8]
    table = results_table(cluster_map, settings, report.measurements).splitlines()
    assert table[0] == "MCPi on map paper-4w (policy block, max fan-in 4), 10000000 darts x 1 run"
    assert table[1].split() == ["threads", "nodes"] + [f"{c}:{s}" for c in ("seconds", "pi") for s in ("min", "avg", "max")]
    assert [line.split()[:2] for line in table[2:]] == [["1", "1"], ["6", "2"], ["32", "8"]]
    for line, m in zip(table[2:], report.measurements):  # one run each: min = avg = max
        assert [float(x) for x in line.split()[5:]] == pytest.approx([m.pi] * 3, abs=1e-5)
    assert probe.unreaped() == []


def test_the_table_writes_huge_and_tiny_columns_in_scientific_notation():
    settings = RunSettings("gsum", [1], repeat=1, rounds=5)
    measured = [Measurement("gsum", 1, 0, 1, 1e300, {"us_per_global_sum": 1e300})]
    assert results_table(builtin_map("local"), settings, measured).splitlines()[2].split() == ["1", "1"] + ["1.00000e+300"] * 3


@pytest.mark.parametrize("policy, nodes", [("bucket", [1, 2, 3]), ("even", [1, 5, 8])])
def test_gsum_on_paper_4w_under_each_policy(probe, policy, nodes):
    cluster_map = builtin_map("paper-4w")
    settings = RunSettings("gsum", [1, 5, 12], policy=policy, repeat=2, rounds=20, timeout=RUN_TIMEOUT)
    report = run_experiment(cluster_map, settings)
    assert [(m.threads, m.repeat) for m in report.measurements] == [(n, r) for n in (1, 5, 12) for r in (0, 1)]
    assert [m.nodes for m in report.measurements[::2]] == nodes
    assert all(m.value > 0 for m in report.measurements)
    table = results_table(cluster_map, settings, report.measurements).splitlines()
    assert f"(policy {policy}, max fan-in 4)" in table[0]
    assert [line.split()[:2] for line in table[2:]] == [[str(n), str(k)] for n, k in zip((1, 5, 12), nodes)]
    assert probe.unreaped() == []


def test_pinned_runs_keep_exact_totals_on_one_node_and_across_nodes(probe):
    for cluster_map, threads in ((builtin_map("local"), [1, 2]), (builtin_map("paper-4w"), [6])):
        settings = RunSettings("gsum", threads, repeat=1, rounds=200, timeout=RUN_TIMEOUT, pin=True)
        report = run_experiment(cluster_map, settings)  # every total is checked in the kernel
        assert [m.threads for m in report.measurements] == threads
        assert all(m.value > 0 for m in report.measurements)
        assert ", threads pinned)" in results_table(cluster_map, settings, report.measurements).splitlines()[0]
    mcpi = run_experiment(builtin_map("paper-4w"), RunSettings("mcpi", [5], repeat=1, darts=2_000_000,
                                                               timeout=RUN_TIMEOUT, pin=True))
    assert abs(mcpi.measurements[0].pi - math.pi) < 0.01
    assert probe.unreaped() == []


def test_paths_run_prints_the_table_and_writes_csv_and_plot(probe, tmp_path):
    out_csv, out_png = tmp_path / "gsum.csv", tmp_path / "gsum.png"
    done = paths_run("gsum", "--map", "paper-4w", "--threads", "1,5", "--policy", "even", "--repeat", "2",
                     "--rounds", "20", "--csv", str(out_csv), "--plot", str(out_png))
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith("GSum on map paper-4w (policy cyclic, max fan-in 4), 20 rounds x 2 runs")
    assert lines[1].split() == ["threads", "nodes", "min", "avg", "max"]
    assert [line.split()[:2] for line in lines[2:4]] == [["1", "1"], ["5", "5"]]
    assert f"wrote {out_csv}" in lines and f"wrote {out_png}" in lines
    with open(out_csv, newline="") as f:
        rows = list(csv.DictReader(f))
    assert [(r["kernel"], r["map"], r["policy"], r["max_fanin"], r["threads"], r["nodes"], r["repeat"])
            for r in rows] == [("gsum", "paper-4w", "cyclic", "4", str(n), str(k), str(r))
                               for n, k in ((1, 1), (5, 5)) for r in (0, 1)]
    assert list(rows[0]) == ["kernel", "map", "policy", "max_fanin", "tree_form", "threads", "nodes", "repeat",
                            "us_per_global_sum", "us_per_global_sum:min", "us_per_global_sum:avg",
                            "us_per_global_sum:max"]
    assert all(float(r["us_per_global_sum"]) > 0 for r in rows)
    for n in ("1", "5"):  # each row holds its thread count's min, avg and max over the runs
        values = [float(r["us_per_global_sum"]) for r in rows if r["threads"] == n]
        for r in (r for r in rows if r["threads"] == n):
            assert [float(r[f"us_per_global_sum:{s}"]) for s in ("min", "avg", "max")] == pytest.approx(
                [min(values), sum(values) / len(values), max(values)])
    assert out_png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert sorted(probe.started().values()) == ["n0", "n1", "n2", "n3", "n4"]  # 5 threads dealt: 5 nodes


# ---- maps that are refused, maps that are allowed ----------------------------------------------

GOOD_MAP = """\
name: tiny
clusters:
  a:
    nodes: a[0-1]
    cpus: 1
root: a0
"""

BROKEN_MAPS = {  # map text, words the message must hold (besides the file's path)
    "missing root": (GOOD_MAP.replace("root: a0\n", ""), ["(top level)", "missing field 'root'"]),
    "missing cpus": (GOOD_MAP.replace("    cpus: 1\n", ""), ["clusters.a", "missing field 'cpus'"]),
    "unknown policy": (GOOD_MAP + "policy: fastest\n", ["policy:", "unknown policy 'fastest'"]),
    "negative cpus": (GOOD_MAP.replace("cpus: 1", "cpus: -2"), ["clusters.a.cpus", "got -2"]),
    "no cpus at all": (GOOD_MAP.replace("cpus: 1", "cpus: 0"), ["clusters:", "cpus > 0"]),
    "root the map lacks": (GOOD_MAP.replace("root: a0", "root: a9"),
                           ["root:", "a node listed under clusters", "'a9'"]),
    "home the map lacks": (GOOD_MAP + "home: b0\n", ["home:", "a node listed under clusters", "'b0'"]),
    "delay a link cannot have": (GOOD_MAP.replace("root: a0", "  b:\n    nodes: b0\n    cpus: 1\nroot: a0")
                                 + "links:\n  - {between: [a, b], delay_ms: 100000}\n",
                                 ["links[0].delay_ms", "from 0 to 60000", "got 100000"]),
}


@pytest.mark.parametrize("case", BROKEN_MAPS, ids=list(BROKEN_MAPS))
def test_broken_map_exits_2_naming_file_and_field_before_any_node_starts(probe, tmp_path, case):
    text, words = BROKEN_MAPS[case]
    path = tmp_path / "broken-map.yaml"
    path.write_text(text)
    before = probe.alive()
    done = paths_run("gsum", "--map", str(path), "--threads", "2", "--rounds", "5", "--repeat", "1")
    assert done.returncode == 2, (done.stdout, done.stderr)
    assert done.stderr.startswith(f"paths run: {path}:"), done.stderr
    for word in words:
        assert word in done.stderr, done.stderr
    assert done.stdout == ""
    assert before == [] and probe.alive() == []
    assert probe.started() == {}  # no node process ever started


@pytest.mark.parametrize("args, words", [
    (["--threads", "0"], ["--threads", "expected positive counts", "'0'"]),
    (["--threads", "2,-1"], ["--threads", "expected counts and ranges"]),
    (["--threads", "1,4-"], ["--threads", "expected counts and ranges", "'1,4-'"]),
    (["--threads", "2", "--policy", "fastest"], ["unknown policy 'fastest'"]),
    (["--threads", "1-100000000000"], ["--threads", "expected counts up to 1048576", "'1-100000000000'"]),
    (["--threads", "2", "--timeout", "0"], ["--timeout: expected a positive number of seconds, got '0'"]),
    (["--threads", "2", "--timeout", "-5"], ["--timeout: expected a positive number of seconds, got '-5'"]),
    (["--threads", "2", "--timeout", "nan"], ["--timeout: expected a positive number of seconds, got 'nan'"]),
    (["--threads", "2", "--max-fanin", "1"], ["--max-fanin: expected an integer from 2 to 4096, got '1'"]),
    (["--threads", "2", "--map", ""], ["no built-in map ''"]),
    (["--threads", "2", "--policy", ""], ["unknown policy ''"]),
], ids=["zero threads", "negative threads", "a range without its end", "unknown policy option", "too many threads", "zero timeout",
        "negative timeout", "NaN timeout", "a fan-in of 1", "an empty map", "an empty policy"])
def test_bad_options_exit_2_before_any_node_starts(probe, tmp_path, args, words):
    path = tmp_path / "tiny.yaml"
    path.write_text(GOOD_MAP)
    done = paths_run("gsum", "--map", str(path), "--rounds", "5", "--repeat", "1", *args)
    assert done.returncode == 2, (done.stdout, done.stderr)
    for word in words:
        assert word in done.stderr, done.stderr
    error = done.stderr.splitlines()[-1]
    assert all(error.count(a) <= 1 for a in args if a.startswith("--")), error  # each option named once
    assert probe.alive() == [] and probe.started() == {}


@pytest.mark.parametrize("kernel, option", [("gsum", "--darts"), ("mcpi", "--rounds"), ("./libk.so:k", "--rounds")])
def test_a_built_in_kernels_option_given_to_another_kernel_is_a_usage_error(probe, kernel, option):
    owner = "mcpi" if option == "--darts" else "gsum"
    done = paths_run(kernel, option, "5")
    assert done.returncode == 2
    assert done.stderr.splitlines()[-1] == (f"paths run: error: {option}: only {owner} takes it, not {kernel} (a kernel "
                                            "of your own reads --arg KEY=VALUE)")
    assert probe.started() == {}


@pytest.mark.parametrize("kernel", ["gsum", "mcpi"])
@pytest.mark.parametrize("timeout", ["inf", "1e12"])
def test_a_timeout_longer_than_a_kernel_can_wait_is_no_limit_to_it(probe, kernel, timeout):
    """The kernels wait timeout * 1e9 ns as an int64_t: what they are given must fit."""
    done = paths_run(kernel, "--map", "paper-4w", "--threads", "3", "--repeat", "1",
                     *{"gsum": ["--rounds", "20"], "mcpi": ["--darts", "30000"]}[kernel], "--timeout", timeout)
    assert done.returncode == 0, done.stderr
    assert [line.split()[:2] for line in done.stdout.splitlines()[2:]] == [["3", "1"]]
    assert probe.unreaped() == []


def test_more_threads_than_cpus_runs_with_a_warning(probe, tmp_path):
    path = tmp_path / "tiny.yaml"
    path.write_text(GOOD_MAP)
    with pytest.warns(PlacementWarning, match="placement wraps around"):
        plan = plans_for(load_map_text(GOOD_MAP), RunSettings("gsum", [3]))[3]
    assert plan.placements == ("a0", "a1", "a0")
    done = paths_run("gsum", "--map", str(path), "--threads", "3", "--rounds", "20", "--repeat", "1")
    assert done.returncode == 0, done.stderr
    assert ("paths run: warning: 3 threads on map 'tiny' with 2 CPUs: placement wraps around, "
            "nodes are oversubscribed") in done.stderr
    rows = [line.split() for line in done.stdout.splitlines()[2:]]
    assert [row[:2] for row in rows] == [["3", "2"]]  # 3 threads on the 2 nodes
    assert sorted(probe.started().values()) == ["a0", "a1"]


def test_output_files_are_checked_before_the_run_and_written_exactly_where_asked(probe, tmp_path):
    missing = tmp_path / "no-such-folder" / "out.csv"
    done = paths_run("gsum", "--map", "paper-4w", "--threads", "2", "--rounds", "5", "--repeat", "1",
                     "--csv", str(missing))
    assert done.returncode == 2, done.stderr
    assert done.stderr == f"paths run: --csv {missing}: no folder {missing.parent} to write it in\n"
    assert probe.started() == {}  # refused before any node started

    done = paths_run("gsum", "--map", "paper-4w", "--threads", "2", "--rounds", "5", "--repeat", "1",
                     "--csv", str(tmp_path))  # a folder
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr == f"paths run: --csv {tmp_path}: expected a file to write, got a folder\n"
    assert probe.started() == {}

    done = paths_run("gsum", "--map", "paper-4w", "--threads", "2", "--rounds", "5", "--repeat", "1",
                     "--csv", str(tmp_path / "out"), "--plot", f"{tmp_path}/./out")  # one file, twice
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr == f"paths run: --plot {tmp_path}/./out: --csv writes that file too: give each its own\n"
    assert probe.started() == {}
    (tmp_path / "out").write_text("")
    os.link(tmp_path / "out", tmp_path / "hard")
    done = paths_run("gsum", "--map", "paper-4w", "--threads", "2", "--rounds", "5", "--repeat", "1",
                     "--csv", str(tmp_path / "out"), "--plot", str(tmp_path / "hard"))  # a hard link to it
    assert (done.returncode, done.stderr) == (
        2, f"paths run: --plot {tmp_path}/hard: --csv writes that file too: give each its own\n")
    assert probe.started() == {}
    (tmp_path / "out").unlink()
    (tmp_path / "hard").unlink()
    done = paths_run("gsum", "--map", "paper-4w", "--threads", "2", "--rounds", "5", "--repeat", "1",
                     "--csv", "/dev/null", "--plot", "/dev/null")  # a device takes both
    assert (done.returncode, done.stdout.splitlines()[-2:]) == (0, ["wrote /dev/null"] * 2), done.stderr

    plot = tmp_path / "plot-without-extension"
    done = paths_run("gsum", "--map", "paper-4w", "--threads", "2", "--rounds", "5", "--repeat", "1",
                     "--plot", str(plot))
    assert done.returncode == 0, done.stderr
    assert f"wrote {plot}" in done.stdout.splitlines()
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"  # that very file, not plot-without-extension.png
    assert sorted(p.name for p in tmp_path.iterdir()) == ["plot-without-extension", "probe"]


@pytest.mark.parametrize("command", [["show", "--map", "local", "--threads", "2"], ["kinds"], ["--help"]])
def test_an_output_that_cannot_be_written_is_one_line(command):
    """stdout on a full disk (/dev/full) gave a traceback."""
    with open("/dev/full", "w") as full:
        done = subprocess.run([sys.executable, "-m", "paths", *command], stdout=full, stderr=subprocess.PIPE,
                              text=True, timeout=60)
    assert (done.returncode, done.stderr) == (1, "paths: cannot write the output: No space left on device\n")


def test_a_run_whose_output_cannot_be_written_keeps_its_files_and_says_it_in_one_line(tmp_path):
    """The full disk was taken for a failed run: its table printed again (which failed again), the
    --csv file never written."""
    out = tmp_path / "out.csv"
    with open("/dev/full", "w") as full:
        done = subprocess.run([sys.executable, "-m", "paths", "run", "gsum", "--threads", "1", "--repeat", "1",
                               "--rounds", "5", "--csv", str(out)], stdout=full, stderr=subprocess.PIPE, text=True,
                              timeout=120)
    assert done.returncode == 1, done.stderr
    assert done.stderr.splitlines()[-2:] == [f"wrote {out}", "paths: cannot write the output: No space left on device"]
    with open(out, newline="") as f:
        assert [row["threads"] for row in csv.DictReader(f)] == ["1"]


def test_a_closed_output_takes_nothing_and_fails_nothing():
    done = subprocess.run([sys.executable, "-m", "paths", "kinds"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                          text=True, timeout=60, preexec_fn=lambda: os.close(1))
    assert (done.returncode, done.stderr) == (0, "")


def test_paths_without_a_command_is_a_usage_error_on_stderr():
    done = subprocess.run([sys.executable, "-m", "paths"], capture_output=True, text=True, timeout=60)
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr.startswith("The `paths` command line: one sub-command per job")


def test_trace_option_traces_every_node_and_link_into_one_perfetto_file(probe, tmp_path):
    rounds = 40
    done = paths_run("gsum", "--map", "paper-4w", "--threads", "6", "--repeat", "2", "--rounds", str(rounds),
                     "--trace", str(tmp_path))
    assert done.returncode == 0, done.stderr
    traces = {p.name: read_trace(str(p)) for p in tmp_path.glob("gsum-6.*.bin")}
    for repeat in (0, 1):  # each run its own elements, so its own trees and traces
        # bucket: threads 0-3 on n0, 4-5 on n1; one callers trace per node and element (the sum and
        # the barrier), and one trace on n1's link to n0 per element
        run = {name: t for name, t in traces.items() if name.startswith(f"gsum-6.{repeat}-")}
        callers = {(name.split("-")[2], len(t.events)): t for name, t in run.items() if "-callers-" in name}
        links = sorted(len(t.events) for name, t in run.items() if "-link-" in name)
        assert sorted(callers) == [("n0", 2 * 4), ("n0", 2 * rounds * 4), ("n1", 2 * 2), ("n1", 2 * rounds * 2)]
        for (node, events), trace in callers.items():  # a move and an observe per round, per thread
            threads = 4 if node == "n0" else 2
            assert {e.thread for e in trace.events} == set(range(threads))
        assert links == [1, rounds]  # one round trip per sum: the barrier's one, the GSum's
    perfetto = json.loads((tmp_path / "gsum.json").read_text())
    assert sum(e.get("ph") == "X" for e in perfetto["traceEvents"]) == sum(len(t.events) for t in traces.values())


def test_a_traced_run_replaces_an_earlier_runs_traces(probe, tmp_path):
    first = paths_run("gsum", "--map", "paper-4w", "--threads", "6", "--repeat", "1", "--rounds", "10",
                      "--trace", str(tmp_path))
    assert first.returncode == 0, first.stderr
    earlier = sorted(p.name for p in tmp_path.glob("gsum-*.bin"))
    other = tmp_path / "mcpi-1.0-callers-n0.bin"  # another kernel's trace stays
    other.write_bytes(b"not read")
    pipe = tmp_path / "gsum-pipe.bin"  # and so does what is no trace file (a pipe, a device) of its name
    os.mkfifo(pipe)
    done = paths_run("gsum", "--map", "paper-4w", "--threads", "2", "--repeat", "1", "--rounds", "10",
                     "--trace", str(tmp_path))
    assert done.returncode == 0, done.stderr
    assert f"paths run: --trace {tmp_path}: removed {len(earlier)} trace files of an earlier run" in done.stderr
    assert stat.S_ISFIFO(pipe.stat().st_mode)
    files = sorted(p.name for p in tmp_path.glob("gsum-*.bin") if p != pipe)
    assert files and all(name.startswith("gsum-2.0-") for name in files)  # none of the 6 threads' run
    assert f"from {len(files)} trace files" in done.stdout and other.read_bytes() == b"not read"
    perfetto = json.loads((tmp_path / "gsum.json").read_text())
    events = sum(len(read_trace(str(tmp_path / name)).events) for name in files)
    assert sum(e.get("ph") == "X" for e in perfetto["traceEvents"]) == events


def test_counters_option_prints_every_nodes_stages(probe):
    done = paths_run("gsum", "--map", "multicluster", "--threads", "3", "--repeat", "1", "--rounds", "30",
                     "--counters")
    assert done.returncode == 0, done.stderr
    assert "stages after 3 threads" in done.stdout
    # the one link from the 2w cluster to the root: a BUILD, then one round trip per global sum
    assert "remote(host='root0')" in done.stdout and "requests=31, answers=31" in done.stdout
    assert "core(format='q', name='GSUM.3.0')" in done.stdout


@pytest.mark.parametrize("form", ["sums", "allreduce"])
def test_paths_show_draws_the_tree_that_runs_for_a_sum_homed_on_a_node_of_its_own(probe, tmp_path, form):
    """The map homes GSUM on a1 (elements:), not at its root a0: show puts the element there, as
    the run does."""
    homed = tmp_path / "homed.yaml"
    homed.write_text("name: homed\nclusters:\n  a: {nodes: 'a[0-1]', cpus: 1}\nroot: a0\n"
                     "elements:\n  GSUM: {reduce: sum, home: a1}\n")
    shown = subprocess.run([sys.executable, "-m", "paths", "show", "--map", str(homed), "--threads", "2",
                            "--tree-form", form], capture_output=True, text=True, timeout=60)
    assert shown.returncode == 0, shown.stderr
    assert "core(format='q', name='GSUM')  on a1" in shown.stdout
    done = paths_run("gsum", "--map", str(homed), "--threads", "2", "--tree-form", form, "--repeat", "1",
                     "--rounds", "20", "--counters")
    assert done.returncode == 0, done.stderr
    ran = {(node, spec.replace("GSUM.2.0", "GSUM"))
           for node, spec in re.findall(r"^  (\S+) +(\S.*?\)) {2,}\w+=", done.stdout, re.MULTILINE)}
    drawn = {(node, spec) for spec, node in re.findall(r"(\w[\w-]*\(.*?\))  on (\S+)$", shown.stdout, re.MULTILINE)}
    assert ("a1", "core(format='q', name='GSUM')") in drawn and drawn <= ran, (drawn, ran)  # the barrier's too ran


def test_several_maps_and_policies_in_one_run(probe, tmp_path):
    out = tmp_path / "cmp.csv"
    done = paths_run("gsum", "--map", "paper-4w,paper-8w", "--policy", "bucket,even", "--threads", "1,5",
                     "--repeat", "1", "--rounds", "20", "--csv", str(out), "--plot", str(tmp_path / "cmp.png"))
    assert done.returncode == 0, done.stderr
    assert done.stdout.count("GSum on map") == 4
    with open(out) as f:
        rows = list(csv.DictReader(f))
    assert sorted({(r["map"], r["policy"]) for r in rows}) == [
        ("paper-4w", "block"), ("paper-4w", "cyclic"), ("paper-8w", "block"), ("paper-8w", "cyclic")]
    assert len(rows) == 4 * 2
    assert (tmp_path / "cmp.png").read_bytes()[:4] == b"\x89PNG"


def test_a_batch_log_gets_a_progress_line_as_each_thread_count_is_measured(probe):
    """stderr not a terminal (sbatch's log, a pipe): no bar, a line a thread count, each map's and
    policy's in turn."""
    done = subprocess.run([sys.executable, "-m", "paths", "run", "gsum", "--map", "paper-2w,paper-4w", "--policy",
                           "block,cyclic", "--threads", "1,2", "--repeat", "2", "--rounds", "20"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    said = [(m["what"], int(m["threads"]), int(m["index"]), int(m["counts"])) for m in progress(done.stderr)]
    assert said == [(f"gsum on {name}, policy {policy}", threads, threads, 2)
                    for name in ("paper-2w", "paper-4w") for policy in ("block", "cyclic") for threads in (1, 2)]
    assert without_progress(done.stderr) == "" and "\r" not in done.stderr
    assert probe.alive() == []


def test_a_terminal_of_no_known_width_gets_the_progress_lines_not_a_bar_of_none(probe):
    """A terminal that says it has 0 columns (one `script` or a bare pty opens): a bar would be
    drawn 0 wide, so no progress would show at all; the lines do instead."""
    import pty

    leader, follower = pty.openpty()  # its size: 0 x 0
    try:
        done = subprocess.run([sys.executable, "-m", "paths", "run", "gsum", "--threads", "1,2", "--repeat", "1",
                               "--rounds", "20"], stdout=subprocess.DEVNULL, stderr=follower, timeout=120)
        os.close(follower)
        said = b""
        while chunk := _read_or_none(leader):
            said += chunk
    finally:
        os.close(leader)
    assert done.returncode == 0
    lines = said.decode().replace("\r\n", "\n")
    assert [int(m["threads"]) for m in progress(lines)] == [1, 2], lines
    assert probe.alive() == []


def _read_or_none(fd: int) -> bytes:
    """What a pty's leader has to read; b"" once its follower is closed (EIO)."""
    try:
        return os.read(fd, 4096)
    except OSError:
        return b""


@pytest.mark.parametrize("stderr", ["full", "closed"])
def test_progress_that_cannot_be_written_costs_the_run_nothing(probe, tmp_path, stderr):
    """A full disk or a reader gone on stderr: the tables, the CSV and exit 0 all the same."""
    table = tmp_path / "out.csv"
    command = [sys.executable, "-m", "paths", "run", "gsum", "--threads", "1,2", "--repeat", "2", "--rounds", "20",
               "--csv", str(table)]
    if stderr == "full":
        with open("/dev/full", "w") as full:
            done = subprocess.run(command, stdout=subprocess.PIPE, stderr=full, text=True, timeout=120)
        status, out = done.returncode, done.stdout
    else:
        run = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        run.stderr.close()
        out = run.stdout.read()
        status = run.wait(timeout=120)
    assert status == 0
    assert out.count("GSum on map local") == 1 and f"wrote {table}" in out
    with open(table, newline="") as f:
        assert len(list(csv.DictReader(f))) == 4
    assert probe.alive() == []


def test_trace_takes_one_configuration_at_a_time(probe, tmp_path):
    done = paths_run("gsum", "--map", "paper-4w,paper-8w", "--threads", "2", "--trace", str(tmp_path))
    assert done.returncode == 2 and "one map and policy at a time" in done.stderr
    assert probe.started() == {}


def test_a_trace_folder_that_cannot_be_made_is_named_with_its_option(probe, tmp_path):
    taken = tmp_path / "taken"
    taken.write_text("a file, not a folder\n")
    done = paths_run("gsum", "--map", "paper-4w", "--threads", "2", "--trace", str(taken))
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr == f"paths run: --trace {taken}: expected a folder, and cannot make one there: File exists\n"
    assert probe.started() == {}


def test_a_closed_output_ends_the_run_with_141_keeps_what_it_measured_and_reaps_its_nodes(probe, tmp_path):
    """`paths run ... | head -1`: a table meets a closed pipe (local's, or paper-2w's); that is exit 141
    (not a usage error with a message), what was measured goes to --csv and --plot, as for a
    run interrupted otherwise, and every node is reaped."""
    csv_file, plot = tmp_path / "out.csv", tmp_path / "out.png"
    run = subprocess.Popen([sys.executable, "-m", "paths", "run", "gsum", "--map", "local,paper-2w", "--threads", "1",
                            "--rounds", "5", "--repeat", "1", "--csv", str(csv_file), "--plot", str(plot)],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert run.stdout.readline().startswith("GSum on map local")
    run.stdout.close()  # before the second map's table
    err = without_progress(run.stderr.read())
    assert (run.wait(timeout=120), err) == (141, f"wrote {csv_file}\nwrote {plot}\n")  # not on the closed output
    assert probe.alive() == []
    with open(csv_file) as f:
        measured = {row["map"] for row in csv.DictReader(f)}
    assert "local" in measured <= {"local", "paper-2w"}, measured  # paper-2w too if local's table fit the pipe
    assert plot.stat().st_size > 0
