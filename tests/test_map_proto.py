"""How a map chooses each hop's transport (`proto`, docs/maps.md "Transports"): per cluster for
the hops inside it, per link for the hops across it, nothing written otherwise; the checks of the
field; and runs: an emulated map's hops are direct with no change to the map, a cluster can keep
them on ZeroMQ, and a run whose nodes have the run's CURVE key keeps its hops on encrypted zmq
unless the map asks for direct ones."""

from __future__ import annotations

import shlex

import pytest
from test_launcher import FAKE_SSH

from paths import stage
from paths.model.cluster_map import Link, MapError, load_map_text
from paths.experiments.experiment import RunSettings, run_experiment
from paths.model.reduction_tree import plan_reduction

ELEMENT = ("GSUM", "q")
RUN_TIMEOUT = 60.0

TWO_CLUSTERS = """\
name: two
clusters:
  a: {nodes: "a[0-1]", cpus: 1, proto: ipc}
  b: {nodes: "b[0-1]", cpus: 1}
root: a0
links:
  - {between: [a, b], proto: zmq}
"""


def remotes(plan):
    """Every remote stage of the plan, with the node it is built on."""
    found = {}
    for node, instances in plan.stages_by_node().items():
        for specs in instances:
            if specs[0].kind == "remote":
                found[(node, specs[0].param("host"))] = specs[0]
    return found


def test_cluster_and_link_protos_reach_the_remote_stages():
    cluster_map = load_map_text(TWO_CLUSTERS)
    assert [c.proto for c in cluster_map.clusters] == ["ipc", None]
    assert cluster_map.links == (Link(("a", "b"), None, 0.0, "zmq"),)
    assert cluster_map.proto_between("a", "a") == "ipc"
    assert cluster_map.proto_between("b", "a") == "zmq"
    assert cluster_map.proto_between("b", "b") is None
    plan = plan_reduction(cluster_map, 4, ELEMENT, max_fanin=2)
    hops = {hop: (spec.param("proto"), spec.param("window")) for hop, spec in remotes(plan).items()}
    assert hops == {
        ("a1", "a0"): ("ipc", 2),   # inside a: the cluster's proto; a lone thread's hop pipelines
        ("b1", "b0"): (None, 2),    # inside b: nothing written, the remote stage decides
        ("b0", "a0"): ("zmq", None),  # across the link: the link's, below b's sum
    }
    assert all(spec.kind != "delay" for path in plan.paths for spec in path)  # the link has no delay


def test_a_link_with_a_delay_and_a_proto():
    text = TWO_CLUSTERS.replace("{between: [a, b], proto: zmq}", "{between: [a, b], delay_ms: 2, proto: tcp}")
    plan = plan_reduction(load_map_text(text), 4, ELEMENT, max_fanin=2)
    crossings = [(path.stages[i - 1], spec) for path in plan.paths for i, spec in enumerate(path.stages)
                 if spec.kind == "remote" and spec.param("host") == "a0" and spec.param("proto") == "tcp"]
    assert crossings and all(before == stage("delay", ms=2.0, jitter_ms=0.0) for before, _ in crossings)


@pytest.mark.parametrize("text, line, where, expected", [
    (TWO_CLUSTERS.replace("proto: ipc", "proto: udp"), 3, "clusters.a.proto",
     "expected one of tcp, ipc, zmq (inproc reaches only a server in the same process, and a map's nodes are "
     "processes of their own), got 'udp'"),
    (TWO_CLUSTERS.replace("proto: zmq}", "proto: inproc}"), 7, "links[0].proto", "got 'inproc'"),
    (TWO_CLUSTERS.replace("{between: [a, b], proto: zmq}", "{between: [a, b]}"), 7, "links[0]",
     "missing field 'delay_ms' (a link needs delay_ms, proto, batch or several of them)"),
    (TWO_CLUSTERS.replace("proto: zmq}", "proto: zmq, jitter_ms: 1}"), 7, "links[0].jitter_ms",
     "jitter_ms needs delay_ms on the same link"),
    (TWO_CLUSTERS.replace("proto: ipc", "proto: 3"), 3, "clusters.a.proto", "got 3"),
])
def test_a_bad_proto_names_the_file_line_and_field(text, line, where, expected):
    with pytest.raises(MapError) as error:
        load_map_text(text, source="protos.yaml")
    message = str(error.value)
    assert message.startswith(f"protos.yaml:{line}: {where}: "), message
    assert expected in message, message


@pytest.mark.parametrize("text, field, carrier", [
    (TWO_CLUSTERS, r":\d+: links\[0\]", "the link between clusters 'a' and 'b'"),
    (TWO_CLUSTERS.replace("proto: zmq}", "proto: tcp}").replace('cpus: 1}\n', 'cpus: 1, proto: zmq}\n'),
     r":\d+: clusters\.b", "cluster 'b'"),
])
def test_allreduce_over_a_zmq_hop_names_the_cluster_or_the_link_that_says_zmq(text, field, carrier):
    cluster_map = load_map_text(text, source="protos.yaml")
    with pytest.raises(MapError, match=rf"^protos\.yaml{field}: map 'two': tree form allreduce: {carrier} is on zmq \(its "
                                       r"proto\), and allreduce's members connect directly \(tcp or ipc\): use tree "
                                       r"form sums on this map$"):
        plan_reduction(cluster_map, 4, ELEMENT, form="allreduce")


EMULATED = """\
name: emulated
clusters:
  c: {{nodes: "n[0-2]", cpus: 1{proto}}}
root: n0
"""


def server_counters(launched, cluster_map, threads):
    """After each run, while the nodes are up: every node's server counters."""
    seen = {}

    def read(count, repeat):
        answers = launched[-1].request_all({node: {"op": "counters", "tags": [f"{count}.{repeat}"]}
                                            for node in launched[-1].nodes})
        seen.update({node: answer["server"] for node, answer in answers.items()})

    report = run_experiment(cluster_map, RunSettings("gsum", [threads], repeat=1, rounds=50, timeout=RUN_TIMEOUT),
                            read)
    assert report.measurements[0].value > 0
    return seen


@pytest.mark.parametrize("proto, direct", [("", True), (", proto: tcp", True), (", proto: zmq", False)],
                         ids=["no proto", "tcp", "zmq"])
def test_an_emulated_run_is_direct_unless_the_map_says_zmq(probe, launched, proto, direct):
    cluster_map = load_map_text(EMULATED.format(proto=proto))
    seen = server_counters(launched, cluster_map, 3)
    builds = sum(c["builds"] for c in seen.values())
    assert builds >= 2  # n1 and n2 each reach n0's sum (and what else the run's kernel reaches)
    assert sum(c["direct"] for c in seen.values()) == (builds if direct else 0)


SECURE = """\
name: secure
clusters:
  a:
    nodes: n[0-1]
    cpus: 1{proto}
    address: {{n0: "tcp://127.0.0.2:*", n1: "tcp://127.0.0.3:*"}}
root: n0
launch:
  mode: ssh
  ssh: "{ssh} {{host}} {{command}}"
"""


@pytest.mark.parametrize("proto, direct", [("", False), ("\n    proto: tcp", True)], ids=["no proto", "tcp"])
def test_a_run_with_curve_keys_keeps_its_hops_on_zmq_unless_the_map_asks(probe, launched, tmp_path, proto, direct):
    ssh = tmp_path / "fake-ssh"
    ssh.write_text(FAKE_SSH)
    ssh.chmod(0o755)
    cluster_map = load_map_text(SECURE.format(proto=proto, ssh=shlex.quote(str(ssh))))
    seen = server_counters(launched, cluster_map, 2)
    builds = seen["n0"]["builds"]
    assert builds >= 1 and seen["n0"]["direct"] == (builds if direct else 0)
