"""Cluster maps: the shipped maps, the full schema, and errors that name file, line and field."""

import os
import subprocess
import sys

import pytest

from paths.model.cluster_map import MAPS_DIR, Launch, Link, MapError, builtin_map, load_map, load_map_text
from paths.model.placement import PlacementWarning, place
from paths.model.reduction_tree import plan_reduction

SHIPPED = ["local", "paper-2w", "paper-4w", "paper-8w", "multicluster"]

# Line numbers matter below: name 1, clusters 2, 4w 3, nodes 4, cpus 5, root 6.
BASE = """\
name: t
clusters:
  4w:
    nodes: n[0-7]
    cpus: 4
root: n0
"""


def test_every_shipped_map_loads():
    assert sorted(path.stem for path in MAPS_DIR.glob("*.yaml")) == sorted(SHIPPED)
    for name in SHIPPED:
        cluster_map = builtin_map(name)
        assert cluster_map.name == name
        assert cluster_map.policy == "block"
        assert cluster_map.source.endswith(f"{name}.yaml")
        assert load_map(cluster_map.source) == cluster_map


def test_local_map_is_this_machine():
    local = builtin_map("local")
    assert [node.name for node in local.nodes] == ["localhost"]
    assert local.nodes[0].cpus == os.cpu_count()
    assert local.root == local.home == "localhost"


@pytest.mark.parametrize(
    "name, nodes, cpus", [("paper-2w", 16, 2), ("paper-4w", 8, 4), ("paper-8w", 4, 8)]
)
def test_paper_maps(name, nodes, cpus):
    cluster_map = builtin_map(name)
    assert [node.name for node in cluster_map.nodes] == [f"n{i}" for i in range(nodes)]
    assert {node.cpus for node in cluster_map.nodes} == {cpus}
    assert cluster_map.root == cluster_map.home == "n0"
    assert cluster_map.max_fanin == 4


def test_multicluster_map():
    multi = builtin_map("multicluster")
    assert [cluster.name for cluster in multi.clusters] == ["2w", "4w", "8w", "root"]
    assert [len(cluster.nodes) for cluster in multi.clusters] == [16, 8, 4, 1]
    assert sum(node.cpus for node in multi.nodes) == 96
    assert multi.root == multi.home == "root0"
    assert multi.node("root0").cpus == 0
    prefixes = {
        cluster.name: {node.name[:3] for node in cluster.nodes} for cluster in multi.clusters
    }
    assert prefixes == {"2w": {"w2n"}, "4w": {"w4n"}, "8w": {"w8n"}, "root": {"roo"}}
    assert multi.link_between("root", "8w") == Link(("8w", "root"), 1.0, 0.0)
    assert multi.link_between("2w", "4w") is None


def test_builtin_map_unknown_name_lists_the_known_ones():
    with pytest.raises(
        MapError, match="no built-in map 'paper-3w': expected one of local, multicluster"
    ):
        builtin_map("paper-3w")


def test_long_names_and_values_are_cut_in_messages():
    """A map's long name, policy or a long built-in name a user typed: each message stays one short line."""
    cut = "'" + "x" * 27 + "..." + "x" * 28 + "'"
    with pytest.raises(MapError, match=f"^no built-in map {cut}: expected one of local"):
        builtin_map("x" * 100_000)
    with pytest.raises(MapError, match=f"^<string>:2: policy: unknown policy {cut}: expected 'block'") as failed:
        load_map_text("name: m\npolicy: " + "x" * 5000 + "\nclusters:\n  a:\n    nodes: a0\n    cpus: 1\nroot: a0\n")
    assert len(str(failed.value)) < 300
    named = load_map_text("name: " + "x" * 100_000 + "\nclusters:\n  a:\n    nodes: a0\n    cpus: 1\nroot: a0\n")
    with pytest.warns(PlacementWarning, match=f"^2 threads on map {cut} with 1 CPUs"):
        place(named, 2)


def test_full_schema():
    cluster_map = load_map_text("""\
name: full
clusters:
  a:
    nodes: ["a[1-2]", login]  # brackets inside a flow list need quotes
    cpus: 2
    address: "tcp://{node}.example.org:7000"
    head: a2
  b:
    nodes: b0
    cpus: 1
    address: {b0: "tcp://10.1.0.9:7000"}
  top:
    nodes: hub
    cpus: 0
root: hub
home: b0
policy: paths.model.placement:even
tree: {max_fanin: 3}
links:
  - {between: [a, top], delay_ms: 2.5, jitter_ms: 0.5}
  - {between: [top, b], delay_ms: 0}
launch:
  mode: ssh
  ssh: "ssh -o BatchMode=yes {host} {command}"
""")
    assert [node.name for node in cluster_map.nodes] == ["a1", "a2", "login", "b0", "hub"]
    assert cluster_map.node("login").address == "tcp://login.example.org:7000"
    assert cluster_map.node("b0").address == "tcp://10.1.0.9:7000"
    assert cluster_map.clusters[0].head == "a2"
    assert cluster_map.clusters[1].head is None
    assert (cluster_map.root, cluster_map.home) == ("hub", "b0")
    assert (cluster_map.policy, cluster_map.max_fanin) == ("paths.model.placement:even", 3)
    assert cluster_map.links == (Link(("a", "top"), 2.5, 0.5), Link(("top", "b"), 0.0, 0.0))
    assert cluster_map.launch == Launch("ssh", "ssh -o BatchMode=yes {host} {command}")
    assert cluster_map.source == "<string>"


def test_a_delay_written_with_an_exponent_and_no_dot_is_a_number():
    """YAML 1.1 reads 1e-3 as text (1.0e-3 as a number); a map takes it as the number it is, and
    only unquoted: '1e-3' in quotes is text."""
    links = "links:\n  - between: [4w, 9w]\n    delay_ms: {}\n"
    text = BASE.replace("clusters:", "clusters:\n  9w: {nodes: 'm[0-1]', cpus: 2}", 1)
    assert load_map_text(text + links.format("1e-3")).links[0].delay_ms == 0.001
    assert load_map_text(text + links.format("2E+1")).links[0].delay_ms == 20.0
    with pytest.raises(MapError, match=r"delay_ms: expected a number of milliseconds from 0 to 60000, got '1e-3'"):
        load_map_text(text + links.format("'1e-3'"))


def test_defaults():
    cluster_map = load_map_text(BASE)
    assert cluster_map.home == "n0"
    assert (cluster_map.policy, cluster_map.max_fanin, cluster_map.links) == ("block", 4, ())
    assert cluster_map.launch == Launch("local", "ssh {host} {command}")
    assert cluster_map.node("n3").address is None


def edited(*changes):
    text = BASE
    for old, new in changes:
        assert old in text
        text = text.replace(old, new)
    return text


BROKEN = {
    "a control character in the name": (edited(("name: t\n", 'name: "t\\n#SBATCH --x"\n')), 1, "name",
                                         "expected a map name without control characters, got"),
    "missing name": (
        edited(("name: t\n", "")),
        1,
        "(top level)",
        "missing field 'name' (required: name, clusters, root)",
    ),
    "missing root": (edited(("root: n0\n", "")), 1, "(top level)", "missing field 'root'"),
    "missing cpus": (
        edited(("    cpus: 4\n", "")),
        4,
        "clusters.4w",
        "missing field 'cpus' (required: nodes, cpus)",
    ),
    "missing nodes": (
        edited(("    nodes: n[0-7]\n", "")),
        4,
        "clusters.4w",
        "missing field 'nodes'",
    ),
    "unknown top field": (
        BASE + "polcy: even\n",
        7,
        "polcy",
        "unknown field (valid: name, clusters, root, home, policy, tree, links, launch, elements, acquire, release)",
    ),
    "unknown cluster field": (
        edited(("cpus: 4", "cpus: 4\n    cpu: 4")),
        6,
        "clusters.4w.cpu",
        "unknown field (valid: nodes, cpus, address, head, proto)",
    ),
    "unknown policy": (
        BASE + "policy: random\n",
        7,
        "policy",
        "unknown policy 'random': expected 'block', 'cyclic' (or their aliases 'bucket', 'even')",
    ),
    "unimportable policy": (
        BASE + "policy: no_such_module_here:spread\n",
        7,
        "policy",
        "cannot import module 'no_such_module_here'",
    ),
    "policy names no function": (
        BASE + "policy: paths.model.placement:scatter\n",
        7,
        "policy",
        "has no function 'scatter'",
    ),
    "negative cpus": (
        edited(("cpus: 4", "cpus: -2")),
        5,
        "clusters.4w.cpus",
        "expected an integer from 0 to 65536 or 'auto' (0: the node hosts stages but runs no threads), "
        "got -2",
    ),
    "cpus not a number": (edited(("cpus: 4", "cpus: four")), 5, "clusters.4w.cpus", "got 'four'"),
    "no cpus at all": (
        edited(("cpus: 4", "cpus: 0")),
        3,
        "clusters",
        "at least one cluster with cpus > 0",
    ),
    "no clusters": (
        edited(("clusters:\n  4w:\n    nodes: n[0-7]\n    cpus: 4\n", "clusters: {}\n")),
        2,
        "clusters",
        "expected at least one cluster",
    ),
    "root the map lacks": (
        edited(("root: n0", "root: n9")),
        6,
        "root",
        "expected a node listed under clusters, got 'n9'",
    ),
    "home the map lacks": (
        BASE + "home: m0\n",
        7,
        "home",
        "expected a node listed under clusters, got 'm0'",
    ),
    "head outside its cluster": (
        edited(("cpus: 4", "cpus: 4\n    head: m0")),
        6,
        "clusters.4w.head",
        "expected a node of cluster 4w, got 'm0'",
    ),
    "bad host list": (
        edited(("n[0-7]", "n[0-7")),
        4,
        "clusters.4w.nodes",
        "bad host list 'n[0-7': a '[' is never closed",
    ),
    "host list not a string": (
        edited(("n[0-7]", "7")),
        4,
        "clusters.4w.nodes",
        "expected a host list like 'n[0-7]' or a list of them, got 7",
    ),
    "empty node list": (
        edited(("n[0-7]", "[]")),
        4,
        "clusters.4w.nodes",
        "a cluster needs at least one node: expected a host list like 'n[0-7]' or a list of them, got an empty list",
    ),
    "empty node list beside a cluster with nodes": (
        edited(("root: n0", "  x: {nodes: [], cpus: 1}\nroot: n0")),
        6,
        "clusters.x.nodes",
        "a cluster needs at least one node",
    ),
    "duplicate node within a cluster": (
        edited(("n[0-7]", "n[0-7],n3")),
        4,
        "clusters.4w.nodes",
        "node 'n3' is already in cluster '4w'",
    ),
    "duplicate node across clusters": (
        edited(("root: n0", "  8w:\n    nodes: [m0, n5]\n    cpus: 8\nroot: n0")),
        7,
        "clusters.8w.nodes",
        "node 'n5' is already in cluster '4w'",
    ),
    "max_fanin below 2": (
        BASE + "tree:\n  max_fanin: 1\n",
        8,
        "tree.max_fanin",
        "expected an integer from 2 to 4096, got 1",
    ),
    "max_fanin above what a sum stage takes": (
        BASE + "tree:\n  max_fanin: 4097\n",
        8,
        "tree.max_fanin",
        "expected an integer from 2 to 4096, got 4097",
    ),
    "unknown tree field": (
        BASE + "tree: {fanin: 4}\n",
        7,
        "tree.fanin",
        "unknown field (valid: max_fanin, form)",
    ),
    "unknown tree form": (
        BASE + "tree:\n  form: exchange\n",
        8,
        "tree.form",
        "expected one of sums, allreduce, allreduce-tree, got 'exchange'",
    ),
    "link to an unknown cluster": (
        BASE + "links:\n  - between: [4w, 9w]\n    delay_ms: 1\n",
        8,
        "links[0].between[1]",
        "expected a cluster of this map (4w), got '9w'",
    ),
    "link within a cluster": (
        BASE + "links:\n  - between: [4w, 4w]\n    delay_ms: 1\n",
        8,
        "links[0].between",
        "two different clusters",
    ),
    "link without delay": (
        BASE + "links:\n  - between: [4w, 4w]\n",
        8,
        "links[0]",
        "missing field 'delay_ms' (a link needs delay_ms, proto, batch or several of them)",
    ),
    "batch of 0": (
        edited(("root: n0", "  x:\n    nodes: x0\n    cpus: 1\nroot: n0"))
        + "links:\n  - {between: [4w, x], batch: 0}\n",
        11,
        "links[0].batch",
        "expected an integer from 1 to 1048576: the moves sent across together, got 0",
    ),
    "flush_us without batch": (
        edited(("root: n0", "  x:\n    nodes: x0\n    cpus: 1\nroot: n0"))
        + "links:\n  - {between: [4w, x], delay_ms: 1, flush_us: 50}\n",
        11,
        "links[0].flush_us",
        "flush_us needs batch on the same link",
    ),
    "flush_us as a link's only field": (
        edited(("root: n0", "  x:\n    nodes: x0\n    cpus: 1\nroot: n0"))
        + "links:\n  - {between: [4w, x], flush_us: 50}\n",
        11,
        "links[0].flush_us",
        "flush_us needs batch on the same link",
    ),
    "jitter_ms as a link's only field": (
        edited(("root: n0", "  x:\n    nodes: x0\n    cpus: 1\nroot: n0"))
        + "links:\n  - {between: [4w, x], jitter_ms: 1}\n",
        11,
        "links[0].jitter_ms",
        "jitter_ms needs delay_ms on the same link",
    ),
    "negative flush_us": (
        edited(("root: n0", "  x:\n    nodes: x0\n    cpus: 1\nroot: n0"))
        + "links:\n  - {between: [4w, x], batch: 8, flush_us: -1}\n",
        11,
        "links[0].flush_us",
        "expected an integer from 0 to 60000000 (microseconds; 0: no timer), got -1",
    ),
    "negative delay": (
        edited(("root: n0", "  x:\n    nodes: x0\n    cpus: 1\nroot: n0"))
        + "links:\n  - {between: [4w, x], delay_ms: -1}\n",
        11,
        "links[0].delay_ms",
        "expected a number of milliseconds from 0 to 60000, got -1",
    ),
    "delay beyond a delay stage's longest": (
        edited(("root: n0", "  x:\n    nodes: x0\n    cpus: 1\nroot: n0"))
        + "links:\n  - {between: [4w, x], delay_ms: 100000}\n",
        11,
        "links[0].delay_ms",
        "expected a number of milliseconds from 0 to 60000, got 100000",
    ),
    "jitter beyond the delay": (
        edited(("root: n0", "  x:\n    nodes: x0\n    cpus: 1\nroot: n0"))
        + "links:\n  - {between: [4w, x], delay_ms: 1, jitter_ms: 5}\n",
        11,
        "links[0].jitter_ms",
        "expected at most the link's delay_ms (1), got 5",
    ),
    "links not a list": (
        BASE + "links: {between: [4w, x]}\n",
        7,
        "links",
        "expected a list of {between",
    ),
    "bad launch mode": (
        BASE + "launch: {mode: mpirun}\n",
        7,
        "launch.mode",
        "expected one of local, ssh, slurm, got 'mpirun'",
    ),
    "ssh template without command": (
        BASE + "launch: {mode: ssh, ssh: 'ssh {host}'}\n",
        7,
        "launch.ssh",
        "with {host} and {command}",
    ),
    "address that is no endpoint": (
        edited(("n[0-7]", "n[0-1]"), ("cpus: 4", "cpus: 4\n    address: {n0: garbage, n1: 'tcp://b:1'}")),
        6,
        "clusters.4w.address.n0",
        "expected an address like 'tcp://host:7000' (tcp://HOST:PORT: HOST an IP address or a host name, PORT from "
        "1 to 65535 or *), got 'garbage'",
    ),
    "address of another scheme": (
        edited(("cpus: 4", "cpus: 4\n    address: 'http://{node}:7000'")),
        6,
        "clusters.4w.address",
        "expected an address like 'tcp://host:7000' (tcp://HOST:PORT: HOST an IP address or a host name, PORT from "
        "1 to 65535 or *), got 'http://n0:7000'",
    ),
    "address with no port": (
        edited(("cpus: 4", "cpus: 4\n    address: 'tcp://{node}'")),
        6,
        "clusters.4w.address",
        "got 'tcp://n0'",
    ),
    "address with a host that is no name": (
        edited(("cpus: 4", "cpus: 4\n    address: 'tcp://{node}_x:7000'")),
        6,
        "clusters.4w.address",
        "got 'tcp://n0_x:7000'",
    ),
    "address shared by all nodes": (
        edited(("cpus: 4", "cpus: 4\n    address: tcp://10.0.0.1:7000")),
        6,
        "clusters.4w.address",
        "expected each node its own address, got 'tcp://10.0.0.1:7000' for both 'n0' and 'n1'",
    ),
    "address mapping giving two nodes one address": (
        edited(("n[0-7]", "n[0-1]"), ("cpus: 4", "cpus: 4\n    address: {n0: tcp://a:1, n1: tcp://a:1}")),
        6,
        "clusters.4w.address",
        "expected each node its own address, got 'tcp://a:1' for both 'n0' and 'n1'",
    ),
    "an IPv4 address written as only the resolver reads it": (
        edited(("n[0-7]", "n[0-1]"),
               ("cpus: 4", "cpus: 4\n    address: {n0: 'tcp://127.0.0.1:1', n1: 'tcp://2130706433:1'}")),
        6,
        "clusters.4w.address.n1",
        "expected an IPv4 address written a.b.c.d, got '2130706433' in 'tcp://2130706433:1': write 127.0.0.1",
    ),
    "an IPv6 address written two ways for two nodes": (
        edited(("n[0-7]", "n[0-1]"),
               ("cpus: 4", "cpus: 4\n    address: {n0: 'tcp://[::1]:1', n1: 'tcp://[0:0::1]:1'}")),
        6,
        "clusters.4w.address",
        "expected each node its own address, got 'tcp://[0:0::1]:1' for both 'n0' and 'n1'",
    ),
    "address of a node in another cluster": (
        edited(("n[0-7]", "n[0-1]"), ("cpus: 4", "cpus: 4\n    address: tcp://{node}:7000\n"
                                                 "  b:\n    nodes: m0\n    cpus: 1\n    address: tcp://n1:7000")),
        10,
        "clusters.b.address",
        "expected each node its own address, got 'tcp://n1:7000' for both 'n1' and 'm0'",
    ),
    "address template with unknown field": (
        edited(("cpus: 4", "cpus: 4\n    address: tcp://{host}:7000")),
        6,
        "clusters.4w.address",
        "only {node} is replaced",
    ),
    "address template with an attribute": (
        edited(("cpus: 4", "cpus: 4\n    address: tcp://{node.x}:7000")),
        6,
        "clusters.4w.address",
        "only {node} is replaced",
    ),
    "address template with a huge width": (
        edited(("cpus: 4", "cpus: 4\n    address: tcp://{node:>99999999999}:7000")),
        6,
        "clusters.4w.address",
        "only {node} is replaced",
    ),
    "ssh template with an index": (
        BASE + "launch: {mode: ssh, ssh: 'ssh {host[x]} {command}'}\n",
        7,
        "launch.ssh",
        "with {host} and {command}",
    ),
    "ssh template whose {host} is escaped": (
        BASE + "launch: {mode: ssh, ssh: 'ssh {{host}} {command}'}\n",
        7,
        "launch.ssh",
        "with {host} and {command}",
    ),
    "ssh template with an unclosed quote": (
        BASE + "launch: {mode: ssh, ssh: \"ssh '{host} {command}\"}\n",
        7,
        "launch.ssh",
        "with {host} and {command}",
    ),
    "address mapping missing a node": (
        edited(("n[0-7]", "n[0-1]"), ("cpus: 4", "cpus: 4\n    address: {n0: tcp://a:1}")),
        6,
        "clusters.4w.address",
        "missing the address of node 'n1'",
    ),
    "name not a string": (
        edited(("name: t", "name: [t]")),
        1,
        "name",
        "expected a map name, got a list",
    ),
    "duplicate key": (BASE + "root: n1\n", 7, "root", "duplicate key (first at line 6)"),
    "top level not a mapping": (
        "- name: t\n",
        1,
        "(top level)",
        "expected a mapping with fields name, clusters, root",
    ),
    "empty document": ("# nothing\n", 1, "(top level)", "got an empty document"),
    "bad YAML syntax": (
        edited(("cpus: 4", "cpus: 4: x")),
        5,
        None,
        "invalid YAML: mapping values are not allowed here (in 'cpus: 4: x')",
    ),
    "unclosed flow list": (edited(("nodes: n[0-7]", "nodes: [n0, n1")), 5, None, "invalid YAML"),
    # YAML a map may not use
    "a tag": (edited(("name: t", "name: !secret t")), 1, "name", "could not determine a constructor for the tag "
                                                                  "'!secret'"),
    "a python tag": (edited(("cpus: 4", "cpus: !!python/object/apply:os.system ['echo hi']")), 5, "clusters.4w.cpus",
                     "could not determine a constructor for the tag 'tag:yaml.org,2002:python/object/apply:os.system'"),
    # a standard tag's value its constructor refuses
    "a bool tag on no bool": (edited(("cpus: 4", 'cpus: !!bool "x"')), 5, "clusters.4w.cpus", "'x' is not a valid !!bool"),
    "an int tag on no int": (edited(("cpus: 4", 'cpus: !!int "_"')), 5, "clusters.4w.cpus", "'_' is not a valid !!int"),
    "a binary int tag": (edited(("cpus: 4", "cpus: !!int 0b102")), 5, "clusters.4w.cpus", "'0b102' is not a valid !!int"),
    "a float tag on no float": (edited(("cpus: 4", 'cpus: !!float "."')), 5, "clusters.4w.cpus",
                                "'.' is not a valid !!float"),
    "a timestamp tag on no date": (edited(("name: t", 'name: !!timestamp "zzz"')), 1, "name",
                                   "'zzz' is not a valid !!timestamp"),
    "a timestamp tag on no day": (edited(("cpus: 4", "cpus: !!timestamp 2001-13-45")), 5, "clusters.4w.cpus",
                                  "'2001-13-45' is not a valid !!timestamp"),
    # a tag on a mapping or a list: its fields are read one by one, so no constructor sees it
    "a python tag on a cluster": (edited(("  4w:", "  4w: !!python/object:dict")), 3, "clusters.4w",
                                  "could not determine a constructor for the tag "
                                  "'tag:yaml.org,2002:python/object:dict'"),
    "a python tag on the elements": (BASE + "elements: !!python/object/apply:os.system {X: {reduce: sum}}\n", 7,
                                     "elements", "could not determine a constructor for the tag "
                                                 "'tag:yaml.org,2002:python/object/apply:os.system'"),
    "a tag of its own on a flow mapping": (BASE + "tree: !custom {max_fanin: 2}\n", 7, "tree",
                                           "could not determine a constructor for the tag '!custom'"),
    "a tag of its own on a block mapping": (edited(("clusters:", "clusters: !x")), 2, "clusters",
                                            "could not determine a constructor for the tag '!x'"),
    "a tag of its own on a list": (BASE + "links: !custom []\n", 7, "links",
                                   "could not determine a constructor for the tag '!custom'"),
    "a tag of its own on the top level": ("!top\n" + BASE, 1, "(top level)",
                                          "could not determine a constructor for the tag '!top'"),
    "a set": (BASE + "tree: !!set {max_fanin: 3}\n", 7, "tree",
              "expected a plain mapping, got one tagged !!set (a map is plain YAML"),
    "an ordered mapping": (edited(("nodes: n[0-7]", "nodes: !!omap [a: n0]")), 4, "clusters.4w.nodes",
                           "expected a plain list, got one tagged !!omap"),
    "pairs": (edited(("nodes: n[0-7]", "nodes: !!pairs [a: n0]")), 4, "clusters.4w.nodes",
              "expected a plain list, got one tagged !!pairs"),
    "a merge key": (edited(("    cpus: 4", "    <<: {cpus: 4}")), 5, "clusters.4w",
                    "merge keys (<<) are not supported: write the fields out"),
    "a recursive anchor": (edited(("nodes: n[0-7]", "nodes: &n [n0, *n]")), 4, "clusters.4w.nodes[1]",
                           "an anchor used inside itself"),
    "an anchor used inside itself as a field": (edited(("root: n0", "root: n0\nelements: &e {X: *e}")), 7,
                                                "elements.X", "an anchor used inside itself"),
    "a cluster holding its clusters": (edited(("clusters:\n", "clusters: &c\n"), ("cpus: 4", "cpus: 4\n    x: *c")), 2,
                                       "clusters.4w.x", "an anchor used inside itself"),
    "a NUL character": (edited(("name: t", "name: t\0")), 1, None, "invalid YAML: character #x0000 is not allowed"),
    # lists nested past what YAML's composer recurses to, and past what its constructor does
    "lists nested 5000 deep": (edited(("cpus: 4", "cpus: " + "[" * 5000 + "]" * 5000)), 5, None,
                               "invalid YAML: lists and mappings nested too deeply"),
    "lists nested 250 deep": (edited(("cpus: 4", "cpus: " + "[" * 250 + "]" * 250)), 5, None,
                              "lists and mappings nested too deeply"),
}


@pytest.mark.parametrize("case", BROKEN, ids=list(BROKEN))
def test_broken_map_names_file_line_and_field(tmp_path, case):
    text, line, field, problem = BROKEN[case]
    path = tmp_path / "broken.yaml"
    path.write_text(text)
    with pytest.raises(MapError) as info:
        load_map(path)
    message = str(info.value)
    prefix = f"{path}:{line}: " + (f"{field}: " if field else "")
    assert message.startswith(prefix), message
    assert problem in message and "\n" not in message, message


def test_error_from_text_names_the_given_source():
    with pytest.raises(
        MapError, match=r"^maps/x\.yaml:5: clusters\.4w\.cpus: expected .*, got -2$"
    ):
        load_map_text(edited(("cpus: 4", "cpus: -2")), source="maps/x.yaml")


def test_map_error_is_a_value_error():
    assert issubclass(MapError, ValueError)


def test_unreadable_file(tmp_path):
    with pytest.raises(MapError, match="cannot read the cluster map"):
        load_map(tmp_path / "absent.yaml")


def test_cpus_auto_and_zero():
    cluster_map = load_map_text(
        edited(
            ("root: n0", "  top:\n    nodes: hub\n    cpus: 0\nroot: hub"),
            ("cpus: 4", "cpus: auto"),
        )
    )
    assert cluster_map.node("n7").cpus == os.cpu_count()
    assert cluster_map.node("hub").cpus == 0
    assert cluster_map.root == "hub"


# ---- YAML a map may not use, sizes, limits -----------------------------------------------------

def test_a_map_file_is_read_with_a_size_limit(tmp_path):
    with pytest.raises(MapError, match=r"^/dev/zero: expected a cluster map of at most 1048576 bytes, got more$"):
        load_map("/dev/zero")
    big = tmp_path / "big.yaml"
    big.write_text(BASE + "#" * (1 << 20))
    with pytest.raises(MapError, match="at most 1048576 bytes"):
        load_map(big)


def test_a_fifo_that_nothing_writes_is_an_empty_map_not_a_hang(tmp_path):
    fifo = tmp_path / "map.yaml"
    os.mkfifo(fifo)
    done = subprocess.run([sys.executable, "-m", "paths", "show", "--map", str(fifo), "--threads", "1"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    assert done.stderr == (f"paths show: {fifo}:1: (top level): expected a mapping with fields name, clusters, root, "
                           "got an empty document\n")


def test_a_map_that_is_not_utf8_names_the_file_and_line(tmp_path):
    path = tmp_path / "latin1.yaml"
    path.write_bytes(edited(("root: n0", "root: n\xe9")).encode("latin-1"))
    with pytest.raises(MapError, match=rf"^{path}:6: expected UTF-8 text, got byte 0xe9$"):
        load_map(path)


def test_the_standard_tags_of_a_mapping_and_a_list_are_plain():
    cluster_map = load_map_text(edited(("  4w:", "  4w: !!map"), ("nodes: n[0-7]", "nodes: !!seq [n0, n1]")))
    assert [node.name for node in cluster_map.nodes] == ["n0", "n1"]


def test_paths_show_refuses_a_tagged_mapping_in_one_line(tmp_path):
    path = tmp_path / "tagged.yaml"
    path.write_text(edited(("  4w:", "  4w: !!python/object:dict")))
    done = subprocess.run([sys.executable, "-m", "paths", "show", "--map", str(path), "--threads", "1"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    assert done.stderr.startswith(f"paths show: {path}:3: clusters.4w: could not determine a constructor for the "
                                  "tag 'tag:yaml.org,2002:python/object:dict'")
    assert done.stderr.count("\n") == 1


def test_paths_show_refuses_dev_zero_at_once():
    done = subprocess.run([sys.executable, "-m", "paths", "show", "--map", "/dev/zero", "--threads", "1"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    assert done.stderr == "paths show: /dev/zero: expected a cluster map of at most 1048576 bytes, got more\n"


def clusters(*pairs):
    """A map of clusters c0, c1, ... with the given (nodes, cpus)."""
    lines = [f"  c{i}:\n    nodes: {nodes!r}\n    cpus: {cpus}" for i, (nodes, cpus) in enumerate(pairs)]
    return "name: big\nclusters:\n" + "\n".join(lines) + "\nroot: a0\n"


def test_a_map_has_at_most_65536_nodes_in_all_not_only_per_list():
    cluster_map = load_map_text(clusters(("a[0-32767]", 1), ("b[0-32767]", 1)))
    assert len(cluster_map.nodes) == 65536
    with pytest.raises(MapError, match=r"^<string>:10: clusters\.c2\.nodes: the map's clusters name more than 65536 "
                                       r"nodes in all$"):
        load_map_text(clusters(("a[0-32767]", 1), ("b[0-32767]", 1), ("c", 1)))
    aliased = ("name: big\nclusters:\n  c0:\n    nodes: &all ['n[0-65535]']\n    cpus: 1\n"
               "  c1:\n    nodes: *all\n    cpus: 1\nroot: n0\n")
    with pytest.raises(MapError, match=r"^<string>:4: clusters\.c1\.nodes\[0\]: the map's clusters name more than "
                                       r"65536 nodes in all$"):
        load_map_text(aliased)  # every list within its limit, the map not


def test_cpu_counts_have_a_limit_per_node_and_per_map():
    with pytest.raises(MapError, match=r"clusters\.c0\.cpus: expected an integer from 0 to 65536 .*got 100000000000$"):
        load_map_text(clusters(("a0", 10**11)))
    assert sum(n.cpus for n in load_map_text(clusters(("a[0-15]", 65536))).nodes) == 1 << 20
    with pytest.raises(MapError, match=r"clusters\.c1\.cpus: the map's nodes have more than 1048576 CPUs in all "
                                       r"\(1048577 up to this cluster's 1 x 1\)"):
        load_map_text(clusters(("a[0-15]", 65536), ("b0", 1)))


def test_long_values_are_cut_in_messages():
    with pytest.raises(MapError) as info:
        load_map_text(edited(("cpus: 4", f"cpus: '{'y' * 5000}'")))
    assert len(str(info.value)) < 300 and "got 'yyyy" in str(info.value)
    with pytest.raises(MapError) as info:
        load_map_text(BASE + "z" * 500 + ": 1\n")
    assert len(str(info.value)) < 300 and "unknown field" in str(info.value)


@pytest.mark.parametrize("call, line", [
    (lambda: place("paper-4w", 2),
     "place: cluster_map: expected a ClusterMap (paths.load_map, paths.builtin_map), got 'paper-4w'"),
    (lambda: plan_reduction(None, 2, ("G", "q")),
     "plan_reduction: cluster_map: expected a ClusterMap (paths.load_map, paths.builtin_map), got None"),
    (lambda: plan_reduction(builtin_map("paper-4w"), 2, "G"),
     "plan_reduction: element: expected (name, format), two strings, got 'G'"),
    (lambda: plan_reduction(builtin_map("paper-4w"), 2, ("G", 8)),
     "plan_reduction: element: expected (name, format), two strings, got ('G', 8)"),
    (lambda: load_map(None), "load_map: path: expected a file's path (str or os.PathLike), got None"),
], ids=["place a name", "plan no map", "plan a bare name", "plan a number as format", "load None"])
def test_the_map_functions_name_the_argument_that_is_no_map_or_element(call, line):
    with pytest.raises(TypeError) as refused:
        call()
    assert str(refused.value) == line
