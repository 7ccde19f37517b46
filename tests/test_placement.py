"""Placement policies: block and cyclic (Slurm's names; bucket and even, the paper's, are
aliases), user policies, wrap-around."""

import re
import warnings
from collections import Counter

import pytest

from paths.model.cluster_map import builtin_map, load_map_text
from paths.model.placement import PlacementWarning, place

FOUR_W = builtin_map("paper-4w")  # n0..n7, 4 CPUs each


def test_bucket_explicit():
    assert place(FOUR_W, 1, "bucket") == ["n0"]
    assert place(FOUR_W, 6, "bucket") == ["n0", "n0", "n0", "n0", "n1", "n1"]
    assert place(FOUR_W, 9, "bucket") == ["n0"] * 4 + ["n1"] * 4 + ["n2"]


@pytest.mark.parametrize("slurm, paper", [("block", "bucket"), ("cyclic", "even")])
def test_slurms_names_are_the_papers_policies(slurm, paper):
    for n_threads in (1, 6, 13, 32):
        assert place(FOUR_W, n_threads, slurm) == place(FOUR_W, n_threads, paper)
    assert place(FOUR_W, 6, "cyclic") == ["n0", "n1", "n2", "n3", "n4", "n5"]
    assert place(FOUR_W, 6, "block") == ["n0"] * 4 + ["n1"] * 2
    in_map = load_map_text(f"name: s\nclusters: {{c: {{nodes: 'n[0-3]', cpus: 2}}}}\nroot: n0\npolicy: {slurm}\n")
    assert place(in_map, 5) == place(in_map, 5, paper)


def test_even_explicit():
    assert place(FOUR_W, 1, "even") == ["n0"]
    assert place(FOUR_W, 6, "even") == ["n0", "n1", "n2", "n3", "n4", "n5"]
    assert place(FOUR_W, 10, "even") == ["n0", "n1", "n2", "n3", "n4", "n5", "n6", "n7", "n0", "n1"]


@pytest.mark.parametrize("n_threads", range(1, 33))
def test_four_w_bucket_fills_each_node_before_the_next(n_threads):
    placements = place(FOUR_W, n_threads, "bucket")
    assert placements == [f"n{thread // 4}" for thread in range(n_threads)]
    counts = Counter(placements)
    assert all(count <= 4 for count in counts.values())
    used = sorted(counts, key=lambda node: int(node[1:]))
    assert all(counts[node] == 4 for node in used[:-1])  # only the last node is partly filled
    assert placements == sorted(placements, key=lambda node: int(node[1:]))


@pytest.mark.parametrize("n_threads", range(1, 33))
def test_four_w_even_deals_one_per_node_in_turn(n_threads):
    placements = place(FOUR_W, n_threads, "even")
    assert placements == [f"n{thread % 8}" for thread in range(n_threads)]
    counts = Counter(placements)
    assert len(counts) == min(n_threads, 8)
    assert max(counts.values()) - min(counts.values()) <= 1
    assert max(counts.values()) <= 4


def test_default_policy_is_the_maps():
    assert place(FOUR_W, 6) == place(FOUR_W, 6, "bucket")
    even_map = load_map_text(
        "name: e\nclusters: {c: {nodes: 'n[0-3]', cpus: 2}}\nroot: n0\npolicy: even\n"
    )
    assert place(even_map, 3) == ["n0", "n1", "n2"]


def test_no_warning_when_threads_fit():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        place(FOUR_W, 32, "bucket")
        place(FOUR_W, 32, "even")


@pytest.mark.parametrize("policy", ["bucket", "even"])
def test_wrap_around_warns_once(policy):
    with pytest.warns(
        PlacementWarning, match="40 threads on map 'paper-4w' with 32 CPUs"
    ) as record:
        placements = place(FOUR_W, 40, policy)
    assert len(record) == 1
    assert placements[:32] == place(FOUR_W, 32, policy)
    assert placements[32:] == place(FOUR_W, 8, policy)


def test_bucket_wrap_starts_again_from_the_first_node():
    with pytest.warns(PlacementWarning):
        assert place(FOUR_W, 36, "bucket")[32:] == ["n0"] * 4


MIXED = builtin_map("multicluster")  # 16 x 2, 8 x 4, 4 x 8 CPUs, then root0 with cpus 0


def test_nodes_without_cpus_get_no_threads():
    for policy in ("bucket", "even"):
        counts = Counter(place(MIXED, 96, policy))
        assert "root0" not in counts
        assert counts == {node.name: node.cpus for node in MIXED.nodes if node.cpus}


def test_even_skips_full_nodes():
    runners = [node.name for node in MIXED.nodes if node.cpus]
    placements = place(MIXED, 60, "even")
    assert placements[:28] == runners  # round 1: every node once
    assert placements[28:56] == runners  # round 2: every node has 2 CPUs
    assert placements[56:60] == runners[16:20]  # round 3: only the 4W and 8W nodes are left


@pytest.mark.parametrize("bad", [0, -1, 2.5, True, "4", None])
def test_thread_count_must_be_a_positive_integer(bad):
    with pytest.raises(ValueError, match="n_threads: expected a positive integer, got"):
        place(FOUR_W, bad)


def test_a_run_has_at_most_a_million_threads():
    with pytest.warns(PlacementWarning):
        assert len(place(FOUR_W, 1 << 20, "cyclic")) == 1 << 20
    with pytest.raises(ValueError, match=r"^n_threads: expected at most 1048576 threads, got 2000000$"):
        place(FOUR_W, 2_000_000)


def test_callable_policy():
    def last_node(cluster_map, n_threads):
        return [cluster_map.nodes[-1].name] * n_threads

    assert place(FOUR_W, 3, last_node) == ["n7", "n7", "n7"]


@pytest.fixture
def policy_module(tmp_path, monkeypatch):
    (tmp_path / "my_policies.py").write_text(
        "def reversed_bucket(cluster_map, n_threads):\n"
        "    nodes = reversed(cluster_map.nodes)\n"
        "    slots = [node.name for node in nodes for _ in range(node.cpus)]\n"
        "    return slots[:n_threads]\n"
        "def too_few(cluster_map, n_threads):\n"
        "    return ['n0']\n"
        "def unknown_node(cluster_map, n_threads):\n"
        "    return ['n99'] * n_threads\n"
        "def on_root(cluster_map, n_threads):\n"
        "    return ['root0'] * n_threads\n"
        "def not_a_list(cluster_map, n_threads):\n"
        "    return 'n0'\n"
        "def raising(cluster_map, n_threads):\n"
        "    raise LookupError(f'no room for {n_threads} threads')\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    return "my_policies"


@pytest.mark.parametrize("separator", [":", "."])
def test_dotted_name_policy(policy_module, separator):
    assert place(FOUR_W, 5, f"{policy_module}{separator}reversed_bucket") == ["n7"] * 4 + ["n6"]


def test_dotted_name_policy_in_a_map(policy_module):
    text = "name: r\nclusters: {c: {nodes: 'n[0-1]', cpus: 2}}\nroot: n0\n"
    text += "policy: my_policies:reversed_bucket\n"
    assert place(load_map_text(text), 3) == ["n1", "n1", "n0"]


@pytest.mark.parametrize(
    "func, cluster_map, problem",
    [
        ("too_few", FOUR_W, "expected 4 node names (one per thread), got 1"),
        ("unknown_node", FOUR_W, "thread 0 placed on 'n99', not a node of the map"),
        ("on_root", MIXED, "thread 0 placed on 'root0', which has cpus: 0"),
        ("not_a_list", FOUR_W, "expected a list of node names, got 'n0'"),
    ],
)
def test_user_policy_results_are_checked(policy_module, func, cluster_map, problem):
    with pytest.raises(ValueError) as info:
        place(cluster_map, 4, f"my_policies:{func}")
    assert f"policy 'my_policies:{func}' (map {cluster_map.source})" in str(info.value)
    assert problem in str(info.value)


def test_a_user_policy_that_raises_is_a_value_error_naming_it_and_the_line(policy_module):
    with pytest.raises(ValueError) as info:
        place(FOUR_W, 4, "my_policies:raising")
    assert str(info.value).startswith(f"policy 'my_policies:raising' (map {FOUR_W.source}): raised LookupError: "
                                      "no room for 4 threads (at ")
    assert str(info.value).endswith("my_policies.py:14)")


def test_a_maps_own_policy_that_raises_or_misplaces_names_the_maps_file_line_and_field(policy_module):
    for func, problem in (("raising", "raised LookupError: no room for 4 threads (at "), ("too_few", "expected 4")):
        text = FOUR_W.text.replace("policy: block", f"policy: my_policies:{func}")
        cluster_map = load_map_text(text, source="mine.yaml")
        line = text.splitlines().index(f"policy: my_policies:{func}") + 1
        with pytest.raises(ValueError) as info:
            place(cluster_map, 4)
        assert str(info.value).startswith(f"mine.yaml:{line}: policy: 'my_policies:{func}': {problem}"), info.value


@pytest.mark.parametrize(
    "policy, problem",
    [
        ("random", "unknown policy 'random': expected 'block', 'cyclic' (or their aliases 'bucket', 'even')"),
        ("no_such_module_xyz:spread", "cannot import module 'no_such_module_xyz'"),
        ("paths.model.placement:scatter", "module 'paths.model.placement' has no function 'scatter'"),
    ],
)
def test_unknown_policies(policy, problem):
    with pytest.raises(ValueError, match=re.escape(problem)):
        place(FOUR_W, 4, policy)


def test_the_package_offers_load_map_and_place():
    import paths

    four_w = paths.load_map(paths.model.cluster_map.MAPS_DIR / "paper-4w.yaml")
    assert paths.place(four_w, 6, policy="even") == ["n0", "n1", "n2", "n3", "n4", "n5"]
    assert paths.place(four_w, 6) == ["n0"] * 4 + ["n1"] * 2  # the map's policy: bucket
