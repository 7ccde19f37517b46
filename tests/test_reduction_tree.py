"""Reduction plans: tree shape, fan-ins checked against the merged tree, cross-cluster hops."""

import warnings
from collections import defaultdict

import pytest

from paths.model.cluster_map import builtin_map, load_map_text
from paths.model.path_spec import make_path, stage
from paths.model.placement import PlacementWarning
from paths.model.reduction_tree import BATCH_BYTES_MOST, hop, plan_reduction
from paths.model.stage_kinds import check_spec

ELEMENT = ("PI-SUM1", "q")
CORE = stage("core", name="PI-SUM1", format="q")
MULTI = builtin_map("multicluster")


def cluster_round_robin(cluster_map, n_threads):
    """Deal threads over the clusters in turn, filling each cluster's nodes in order."""
    slots = [
        [node.name for node in cluster.nodes for _ in range(node.cpus)]
        for cluster in cluster_map.clusters
        if any(node.cpus for node in cluster.nodes)
    ]
    return [slots[thread % len(slots)][thread // len(slots)] for thread in range(n_threads)]


def merged_tree(plan):
    """Children of each stage instance (node, specs to the element), built from the specs alone.

    A stage lives on its thread's node until a remote(host=X); the stages after it live on X.
    A child is either another stage instance or ("thread", index).
    """
    children = defaultdict(set)
    for thread, (node, path) in enumerate(zip(plan.placements, plan.paths)):
        below = ("thread", thread)
        for index, spec in enumerate(path):
            instance = (node, path.stages[index:])
            children[instance].add(below)
            below = instance
            if spec.kind == "remote":
                node = spec.param("host")
    return children


def sums(children):
    return {key: kids for key, kids in children.items() if key[1][0].kind == "reduce-sum"}


def check_tree(plan):
    """Invariants that hold for every plan."""
    children = merged_tree(plan)
    tops = {key for key in children if len(key[1]) == 1}
    assert tops == {(plan.cluster_map.home, (CORE,))}  # one element, on the home node
    for (node, specs), kids in sums(children).items():
        assert specs[0].param("num_threads") == len(kids), specs[0]
        assert len(kids) >= 2  # no fan-in-1 sums
        if specs[0].param("id") != "root":
            assert len(kids) <= plan.max_fanin
    for node, specs in children:
        if specs[0].kind == "remote":
            assert specs[0].param("host") != node  # no hop to one's own node
    return children


def cross_cluster_remotes(plan, children):
    cluster = {node.name: node.cluster for node in plan.cluster_map.nodes}
    return [
        (node, specs)
        for node, specs in children
        if specs[0].kind == "remote" and cluster[specs[0].param("host")] != cluster[node]
    ]


@pytest.mark.filterwarnings("ignore::UserWarning")
@pytest.mark.parametrize("map_name", ["local", "paper-2w", "paper-4w", "paper-8w", "multicluster"])
@pytest.mark.parametrize("policy", ["bucket", "even"])
@pytest.mark.parametrize("n_threads", [1, 2, 3, 5, 7, 12, 17, 31, 32, 33, 64, 96, 100])
def test_fan_in_equals_distinct_children(map_name, policy, n_threads):
    check_tree(plan_reduction(builtin_map(map_name), n_threads, ELEMENT, policy=policy))


@pytest.mark.parametrize("n_threads", [3, 12, 96])
@pytest.mark.parametrize("policy", ["bucket", "even", cluster_round_robin])
def test_multicluster_crosses_each_link_once(n_threads, policy):
    plan = plan_reduction(MULTI, n_threads, ELEMENT, policy=policy)
    children = check_tree(plan)
    clusters_with_threads = {MULTI.node(node).cluster for node in plan.placements}
    crossings = cross_cluster_remotes(plan, children)
    assert sorted(MULTI.node(node).cluster for node, _ in crossings) == sorted(
        clusters_with_threads
    )
    for node, specs in crossings:
        assert specs[0].param("host") == "root0"
        assert specs[1].param("id") in ("root", None)  # the root sum, or the element when alone
    delays = [(node, specs) for node, specs in children if specs[0].kind == "delay"]
    assert sorted(node for node, _ in delays) == sorted(node for node, _ in crossings)
    # A thread alone on its node crosses on its own hop, whose delay is a wire: its move and the
    # observe after it cross together, once each way, as a sum's exchange does.
    own = {path.stages for path in plan.paths}  # a thread's whole path starts with its own hop
    assert all(specs[0] == stage("delay", ms=1.0, jitter_ms=0.0, **({"pipelined": 1} if specs in own else {}))
               for node, specs in delays), delays


def test_cluster_round_robin_reaches_all_three_clusters():
    plan = plan_reduction(MULTI, 3, ELEMENT, policy=cluster_round_robin)
    assert plan.placements == ("w2n00", "w4n0", "w8n0")
    root_sum = stage("reduce-sum", num_threads=3, id="root")
    hop = [stage("delay", ms=1.0, jitter_ms=0.0, pipelined=1), stage("remote", host="root0", window=2)]
    assert all(path == make_path(hop, root_sum, CORE) for path in plan.paths)


def test_small_plan_explicit_paths():
    plan = plan_reduction(builtin_map("paper-4w"), 6, ELEMENT)
    node_n0 = stage("reduce-sum", num_threads=4, id="node:n0")
    node_n1 = stage("reduce-sum", num_threads=2, id="node:n1")
    cluster = stage("reduce-sum", num_threads=2, id="cluster:4w")
    assert plan.placements == ("n0",) * 4 + ("n1",) * 2
    assert plan.paths[:4] == (make_path(node_n0, cluster, CORE),) * 4
    assert plan.paths[4:] == (make_path(node_n1, stage("remote", host="n0"), cluster, CORE),) * 2
    assert plan.stages_by_node() == {
        "n0": [(node_n0, cluster, CORE), (cluster, CORE), (CORE,)],
        "n1": [
            (node_n1, stage("remote", host="n0"), cluster, CORE),
            (stage("remote", host="n0"), cluster, CORE),
        ],
    }


def test_one_thread_goes_straight_to_the_element():
    plan = plan_reduction(builtin_map("paper-4w"), 1, ELEMENT)
    assert plan.paths == (make_path(CORE),)


def cluster_sum_hosts(plan) -> dict[tuple, list[str]]:
    """The nodes of the partial sums of a plan's clusters, by level (() for a cluster's own sum)."""
    hosts = defaultdict(list)
    for node, instances in plan.stages_by_node().items():
        for specs in instances:
            if specs[0].kind == "reduce-sum" and specs[0].param("id").startswith("cluster:"):
                hosts[tuple(specs[0].param("id").split(":")[2:3])].append(node)
    return hosts


def test_no_node_holds_two_partial_sums():
    """16 node sums -> 4 groups -> 1 on the root n0: the first group's sum goes to n1, its first
    node that holds none. So with every map, thread count, policy and fan-in tried: besides its
    own node sum, a node holds at most one partial sum of its cluster."""
    assert cluster_sum_hosts(plan_reduction(builtin_map("paper-2w"), 32, ELEMENT)) == {
        ("1",): ["n1", "n4", "n8", "n12"], (): ["n0"]}
    for name in ("paper-2w", "paper-4w", "paper-8w", "multicluster"):
        for threads in (2, 5, 8, 12, 16, 33):
            for policy in ("block", "cyclic"):
                for fanin in (2, 3, 4):
                    with warnings.catch_warnings():
                        warnings.simplefilter("ignore", PlacementWarning)  # more threads than CPUs: fine here
                        plan = plan_reduction(builtin_map(name), threads, ELEMENT, policy=policy, max_fanin=fanin)
                    hosts = [node for nodes in cluster_sum_hosts(plan).values() for node in nodes]
                    assert len(hosts) == len(set(hosts)), (name, threads, policy, fanin, cluster_sum_hosts(plan))
                    check_tree(plan)


def test_a_head_is_grouped_where_its_node_stands_in_map_order():
    """Groups are consecutive nodes in map order, the head's among them: b4 holds the cluster's
    sum, and its own node sum goes up with b3's, not ahead of b0's and b1's."""
    seven = load_map_text("name: h\nclusters: {b: {nodes: 'b[0-6]', cpus: 1, head: b4}}\nroot: b4\n")
    plan = plan_reduction(seven, 7, ELEMENT, max_fanin=3)
    groups = defaultdict(list)  # the nodes whose threads each first-level sum of the cluster adds
    for node, path in zip(plan.placements, plan.paths):
        ids = [spec.param("id") for spec in path if spec.kind == "reduce-sum"]
        groups[next(i for i in ids if i.startswith("cluster:b:1:"))].append(node)
    assert groups == {"cluster:b:1:0": ["b0", "b1", "b2"], "cluster:b:1:1": ["b3", "b4"],
                      "cluster:b:1:2": ["b5", "b6"]}
    check_tree(plan)
    # The head's node sum, alone in the last group, goes straight into the cluster's sum on it: no hop.
    three = load_map_text("name: h\nclusters: {a: {nodes: 'a[0-2]', cpus: 1, head: a2}}\nroot: a2\n")
    assert plan_reduction(three, 3, ELEMENT, max_fanin=2).paths[2] == make_path(
        stage("reduce-sum", num_threads=2, id="cluster:a"), CORE)


def test_node_sub_tree_when_a_node_has_more_threads_than_max_fanin():
    big = load_map_text("name: big\nclusters: {c: {nodes: fat, cpus: 10}}\nroot: fat\n")
    plan = plan_reduction(big, 10, ELEMENT)
    top = stage("reduce-sum", num_threads=3, id="node:fat")
    firsts = [
        stage("reduce-sum", num_threads=size, id=f"node:fat:1:{i}")
        for i, size in enumerate([4, 3, 3])
    ]
    assert plan.paths == tuple(make_path(firsts[i], top, CORE) for i in [0] * 4 + [1] * 3 + [2] * 3)
    check_tree(plan)


def test_max_fanin_override():
    plan = plan_reduction(builtin_map("paper-4w"), 32, ELEMENT, max_fanin=8)
    assert plan.max_fanin == 8
    assert plan.paths[-1] == make_path(
        stage("reduce-sum", num_threads=4, id="node:n7"),
        stage("remote", host="n0"),
        stage("reduce-sum", num_threads=8, id="cluster:4w"),
        CORE,
    )
    check_tree(plan)


@pytest.mark.parametrize("bad", [1, 0, 2.0, True, "4", 4097])
def test_bad_max_fanin(bad):
    with pytest.raises(ValueError, match="max_fanin: expected an integer from 2 to 4096, got"):
        plan_reduction(builtin_map("paper-4w"), 4, ELEMENT, max_fanin=bad)


def test_the_largest_max_fanin_plans_sums_a_reduce_sum_stage_takes():
    one_node = load_map_text("name: one\nclusters: {c: {nodes: n0, cpus: 8192}}\nroot: n0\n")
    plan = plan_reduction(one_node, 8192, ELEMENT, max_fanin=4096)
    assert {len(path) for path in plan.paths} == {3}  # two sums of 4096 threads, one of the two
    for path in set(plan.paths):
        for spec in path:
            check_spec(spec)


def test_a_root_sum_of_more_clusters_than_a_sum_stage_takes_is_refused():
    text = "name: many\nclusters:\n" + "".join(f"  c{i}: {{nodes: h{i}, cpus: 1}}\n" for i in range(4097)) + "root: h0\n"
    many = load_map_text(text)
    assert plan_reduction(many, 4096, ELEMENT).paths[1][1] == stage("reduce-sum", num_threads=4096, id="root")
    with pytest.raises(ValueError, match=r"^<string>: map 'many': threads on 4097 clusters, and the root sum adds at most 4096 "):
        plan_reduction(many, 4097, ELEMENT)


def test_explicit_head_and_separate_home():
    text = """\
name: heads
clusters:
  a: {nodes: "a[0-3]", cpus: 2, head: a2}
  b: {nodes: "b[0-1]", cpus: 2}
  top: {nodes: hub, cpus: 0}
  archive: {nodes: store, cpus: 0}
root: hub
home: store
links:
  - {between: [a, top], delay_ms: 3}
"""
    cluster_map = load_map_text(text)
    plan = plan_reduction(cluster_map, 12, ELEMENT, policy="even")
    children = check_tree(plan)
    cluster_sum_hosts = {
        specs[0].param("id"): node
        for node, specs in sums(children)
        if specs[0].param("id").startswith("cluster:")
    }
    assert cluster_sum_hosts["cluster:a"] == "a2"
    assert cluster_sum_hosts["cluster:b"] == "b0"
    root_sum = stage("reduce-sum", num_threads=2, id="root")
    assert ("hub", (root_sum, stage("remote", host="store"), CORE)) in children
    crossings = sorted(node for node, _ in cross_cluster_remotes(plan, children))
    assert crossings == ["a2", "b0", "hub"]  # the two clusters, then root -> home
    assert plan.paths[2][:3] == make_path(  # thread 2 runs on a2, the head of cluster a
        stage("reduce-sum", num_threads=2, id="node:a2"),
        stage("reduce-sum", num_threads=4, id="cluster:a"),
        stage("delay", ms=3.0, jitter_ms=0.0),
    )


def test_a_batching_link_batches_the_hops_across_it_and_none_inside_a_cluster():
    """ARMI's mixed mode from a map: moves are batched on the slow link, not inside a node or a cluster."""
    text = """\
name: mixed
clusters:
  a: {nodes: "a[0-1]", cpus: 2}
  b: {nodes: "b[0-1]", cpus: 2}
root: a0
links:
  - {between: [a, b], delay_ms: 0.2, batch: 256, flush_us: 500}
"""
    cluster_map = load_map_text(text)
    assert cluster_map.links[0].batch == 256 and cluster_map.links[0].flush_us == 500
    across = hop(cluster_map, "b0", "a0")
    # the link's sends are asynchronous: a wire for the delay, a window of 16,384 moves for the remote
    assert across == (stage("batch", max_moves=256, max_bytes=BATCH_BYTES_MOST, flush_us=500),
                      stage("delay", ms=0.2, jitter_ms=0.0, pipelined=1), stage("remote", host="a0", window=64))
    assert hop(cluster_map, "a1", "a0") == (stage("remote", host="a0"),)
    assert hop(cluster_map, "b0", "a1", pipelined=True)[-1] == stage("remote", host="a1", window=64)
    plan = plan_reduction(cluster_map, 8, ELEMENT)
    batches = [(node, specs) for node, specs in check_tree(plan) if specs[0].kind == "batch"]
    assert [node for node, _ in batches] == ["b0"]  # cluster b's one crossing to the root
    only_batch = load_map_text(text.replace("delay_ms: 0.2, ", "").replace(", flush_us: 500", ""))
    assert hop(only_batch, "b1", "a1") == (stage("batch", max_moves=256, max_bytes=BATCH_BYTES_MOST),
                                                stage("remote", host="a1", window=64))
    large = load_map_text(text.replace("batch: 256", "batch: 65536"))
    assert hop(large, "b1", "a1")[-1] == stage("remote", host="a1", window=2)  # two sends on their way, at least


def test_plan_with_oversubscription_warns():
    with pytest.warns(PlacementWarning):
        plan = plan_reduction(builtin_map("paper-8w"), 40, ELEMENT)
    check_tree(plan)


def test_render_shows_threads_stages_and_element():
    text = plan_reduction(builtin_map("paper-4w"), 6, ELEMENT).render()
    assert text == "\n".join(
        [
            "map paper-4w: 6 threads on 2 nodes, policy block, max_fanin 4",
            "core(format='q', name='PI-SUM1')  on n0",
            "└── reduce-sum(id='cluster:4w', num_threads=2)  on n0",
            "    ├── reduce-sum(id='node:n0', num_threads=4)  on n0",
            "    │   └── threads 0-3",
            "    └── remote(host='n0')  on n1",
            "        └── reduce-sum(id='node:n1', num_threads=2)  on n1",
            "            └── threads 4-5",
        ]
    )


def test_render_names_a_callable_policy():
    text = plan_reduction(MULTI, 3, ELEMENT, policy=cluster_round_robin).render()
    assert (
        text.splitlines()[0]
        == "map multicluster: 3 threads on 3 nodes, policy cluster_round_robin, max_fanin 4"
    )
    assert plan_reduction(MULTI, 1, ELEMENT).render().splitlines()[0] == (
        "map multicluster: 1 thread on 1 node, policy block, max_fanin 4")
    assert "delay(jitter_ms=0.0, ms=1.0, pipelined=1)  on w8n0" in text
