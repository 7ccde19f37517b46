"""The acquire hook's default and the map fields it reads: a sum gets the planned reduction tree
with its element at the element's home; any other element lives at its home (the map's
`elements: NAME: {home: node}`, the node of thread T for `NAME@T`, else the map's home) and is
reached there directly and through `remote` (after the link's `delay`) from elsewhere. The map's
`elements:`, `acquire:` and `release:` are checked, naming file, line and field; `--sum` and the
map both declare sums; each run of `paths run` works on fresh elements."""

import csv
import re
import subprocess
import sys

import pytest
from hook_modules import PASS_THROUGH_HOOKS

from paths import BuildContext, make_path, stage
from paths.model.cluster_map import MapError, builtin_map, load_map_text
from paths.model.reduction_tree import plan_reduction
from paths.runtime.process_context import make_runtime

MAP = """\
name: two-clusters
clusters:
  a:
    nodes: a[0-1]
    cpus: 2
  b:
    nodes: b0
    cpus: 2
root: a0
links:
  - between: [a, b]
    delay_ms: 0.5
"""


def test_the_default_path_of_each_kind_of_element(user_module):
    user_module("map_hooks", PASS_THROUGH_HOOKS)
    text = MAP + "elements:\n  S: {reduce: sum}\n  T: {reduce: sum, home: b0}\n  H: {home: a1}\n" \
                 "acquire: map_hooks:acquire\nrelease: map_hooks:release\n"
    cluster_map = load_map_text(text, source="two.yaml")
    runtime = make_runtime(cluster_map, 6)  # bucket: a0 a0 a1 a1 b0 b0
    assert runtime.placements == ("a0", "a0", "a1", "a1", "b0", "b0")
    assert runtime.hook_names == ("map_hooks:acquire", "map_hooks:release")

    def path(element, thread):
        return runtime.acquire_hook(runtime.request(element, "q", thread))

    # Sums: the planned tree, its element at the map's home (a0) or the element's own (b0).
    assert path("S", 5) == plan_reduction(cluster_map, 6, ("S", "q")).paths[5]
    at_b0 = load_map_text(text.replace("root: a0", "root: a0\nhome: b0"), source="two.yaml")
    assert path("T", 0) == plan_reduction(at_b0, 6, ("T", "q")).paths[0]
    assert path("T", 0).stages[-2:] == (stage("remote", host="b0"), stage("core", name="T", format="q"))
    delay = stage("delay", ms=0.5, jitter_ms=0.0)
    # Others: at their home, directly there, through remote (and the link's delay) elsewhere.
    assert path("P", 0) == make_path(stage("core", name="P", format="q"))  # the map's home, a0
    assert path("P", 4) == make_path(delay, stage("remote", host="a0"), stage("core", name="P", format="q"))
    assert path("H", 1) == make_path(stage("remote", host="a1"), stage("core", name="H", format="q"))
    assert path("halo@4", 5) == make_path(stage("core", name="halo@4", format="q"))  # thread 4's node: b0
    assert path("halo@4", 0) == make_path(delay, stage("remote", host="b0"), stage("core", name="halo@4", format="q"))
    with pytest.raises(ValueError, match=r"^element 'halo@6': homed with thread 6, but the run has 6 threads$"):
        runtime.request("halo@6", "q", 0)
    assert runtime.request("S", "q", 0).sum and not runtime.request("H", "q", 0).sum
    assert make_runtime(cluster_map, 2, sums=["H"]).request("H", "q", 0).sum  # --sum


def test_a_run_names_its_elements_and_an_element_has_one_format(space):
    runtime = make_runtime(builtin_map("local"), 2).for_run(("localhost", "localhost"), "2.1")
    runtime.context = BuildContext(space)
    handle = runtime.acquire("X", "qd", 0)
    handle.move((1, 2.5))
    assert space.elements() == [("X.2.1", "qd")]
    with pytest.raises(ValueError, match=r"^paths_acquire\('X', 'q'\) by thread 1: element 'X' was acquired with "
                                         r"format 'qd' by thread 0: an element has one format$"):
        runtime.acquire("X", "q", 1)


BAD_FIELDS = {  # what follows the map, the field, what the message says
    "not a mapping": ("elements: [S]\n", "elements",
                      "expected a mapping of element names to {reduce: sum, home: node}"),
    "another reduction": ("elements:\n  S: {reduce: max}\n", "elements.S.reduce", "expected 'sum', got 'max'"),
    "a home the map lacks": ("elements:\n  S: {home: z9}\n", "elements.S.home",
                             "expected a node listed under clusters, got 'z9'"),
    "an unknown field": ("elements:\n  S: {where: a0}\n", "elements.S.where",
                         "unknown field (valid: reduce, home)"),
    "a hook that is no name": ("acquire: 7\n", "acquire", "expected the acquire hook, a function named 'pkg.mod:func'"),
    "a hook nobody has": ("release: no_such_hooks:release\n", "release",
                          "release hook 'no_such_hooks:release': cannot import module 'no_such_hooks'"),
}


@pytest.mark.parametrize("case", BAD_FIELDS, ids=list(BAD_FIELDS))
def test_bad_elements_and_hooks_in_a_map_name_file_line_and_field(case):
    extra, field, problem = BAD_FIELDS[case]
    with pytest.raises(MapError) as failed:
        load_map_text(MAP + extra, source="bad.yaml")
    message = str(failed.value)
    assert message.startswith(f"bad.yaml:{MAP.count(chr(10)) + 1 + (field.count('.') > 0)}: {field}: "), message
    assert problem in message, message


def test_sums_declared_by_the_map_or_by_option_and_fresh_elements_each_run(probe, user_module, tmp_path):
    user_module("summing_kernel", """
        def kernel(ctx):  # declares no sums: the map or --sum must
            total = ctx.acquire("TOTAL", "q")
            log = ctx.acquire("LOG", "q")  # not a sum: one element at the map's home
            total.move(1)
            ctx.report("total", total.observe(timeout=20)[0])
            log.move(ctx.thread)
            log.last()  # answered after this link's moves are in (a remote one pipelines them)
            ctx.barrier(timeout=20)
            ctx.report("logged", log.last())  # this run's element only: never more than its threads
    """)
    map_file = tmp_path / "summing.yaml"
    map_file.write_text(builtin_map("paper-4w").text + "elements:\n  TOTAL: {reduce: sum}\n")
    for map_name, extra in ((str(map_file), []), ("paper-4w", ["--sum", "TOTAL"])):
        out = tmp_path / "out.csv"
        done = subprocess.run([sys.executable, "-m", "paths", "run", "summing_kernel:kernel", "--map", map_name,
                               "--threads", "3,6", "--repeat", "2", "--csv", str(out), *extra],
                              capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr
        with open(out, newline="") as f:
            rows = [(r["threads"], r["total"], r["logged"]) for r in csv.DictReader(f)]
        assert rows == [("3", "3", "3"), ("3", "3", "3"), ("6", "6", "6"), ("6", "6", "6")]
    assert probe.alive() == []


def test_the_default_hook_plans_a_runs_sum_once_for_all_its_threads(monkeypatch):
    """Each plan places every thread: planned per thread, a run's start-up grew with the square
    of its threads (4,000 threads did not start within 300 s)."""
    from paths.runtime import acquire_hook

    planned = []

    def counted(*args, **kwargs):
        planned.append(args[1])
        return plan_reduction(*args, **kwargs)

    monkeypatch.setattr(acquire_hook, "plan_reduction", counted)
    acquire_hook._run_plan.cache_clear()
    cluster_map = builtin_map("paper-4w")
    requests = [acquire_hook.AcquireRequest("GSUM", "q", t, 32, "n0", cluster_map, True, cluster_map.home)
                for t in range(32)]
    given = [acquire_hook.default_acquire(r) for r in requests]
    assert planned == [32]
    assert given == [plan_reduction(cluster_map, 32, ("GSUM", "q")).paths[t] for t in range(32)]
    acquire_hook.default_acquire(acquire_hook.AcquireRequest("GSUM", "q", 0, 16, "n0", cluster_map, True, "n0"))
    assert planned == [32, 16]  # another run: its own plan


def test_a_path_to_a_node_of_the_map_the_run_did_not_start_names_those_it_did(probe, user_module):
    """It said host 'n7' names no server, expected tcp://HOST:PORT ... or the name of a node of
    the map: which n7 is."""
    user_module("far_hook", """
        import paths
        from paths import make_path, stage


        @paths.acquire_hook
        def acquire(request):
            return make_path(stage("remote", host="n7"), stage("core", name=request.element, format=request.format))


        def kernel(ctx):
            ctx.acquire("X", "q")
    """)
    done = subprocess.run([sys.executable, "-m", "paths", "run", "far_hook:kernel", "--map", "paper-4w", "--threads",
                           "8", "--repeat", "1", "--acquire", "far_hook:acquire"], capture_output=True, text=True,
                          timeout=120)
    assert (done.returncode, done.stdout) == (1, ""), done.stderr
    assert re.fullmatch(r"paths run: node (n[01]): KernelError: kernel far_hook:kernel: thread \d on node \1 returned "
                        r"PATHS_EFAILED: the kernel's own failure: ValueError: paths_acquire\('X', 'q'\) by thread "
                        r"\d: its path remote\(host='n7'\) -> core\(format='q', name='X\.8\.0'\): stage 'remote': "
                        r"node n7 of map paper-4w has no server in this run, which starts only the nodes its threads "
                        r"run on, those of its sums and its elements' homes: n0, n1 \(at .*far_hook\.py:11\)\n",
                        done.stderr), done.stderr
    assert probe.alive() == []
