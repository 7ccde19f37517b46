"""Cluster maps: the clusters and nodes, their CPUs and addresses, the root and home nodes, the
placement policy, the reduction tree's fan-in, emulated slow links and the moves batched across
them, the transport of the hops between nodes, how to launch, the elements (sums, homes) and the
acquire and release hooks.

`load_map(path)` and `load_map_text(text)` turn YAML into frozen dataclasses; every problem is a
`MapError` naming the file, the line, the field path and what was expected.  `builtin_map(name)`
loads one of the maps shipped in the repository's `maps/` folder.  The schema is in docs/maps.md.

A map is plain YAML (mappings, lists, strings, numbers): tags, merge keys and anchors that
contain themselves are refused, and a map is read with limits on its size, its nodes and its
CPUs, so that no file (`/dev/zero` included) can keep a reader busy.
"""

from __future__ import annotations

import ipaddress
import math
import os
import re
import shlex
import socket
import string
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NoReturn, Optional, Union

import yaml

from .hostlist import MAX_HOSTS, expand_hostlist
from .named_function import import_function
from .placement import canonical_policy, resolve_policy
from .shown import cut, shown
from .stage_kinds import kinds

MAPS_DIR = Path(__file__).resolve().parents[2] / "maps"
DEFAULT_POLICY = "block"
DEFAULT_MAX_FANIN = 4
MAX_FANIN = kinds()["reduce-sum"].params["num_threads"].max  # the most contributors a sum stage takes
# How the node partial sums of a run meet (docs/maps.md, "Reduction tree"): reduce-sum stages joined
# by remote hops; or one allreduce stage whose members send their partials to each other directly,
# by recursive doubling or up and down a tree of fan-in max_fanin.
TREE_FORMS = ("sums", "allreduce", "allreduce-tree")
DEFAULT_SSH = "ssh {host} {command}"
LAUNCH_MODES = ("local", "ssh", "slurm")
# How the hops between a map's nodes may travel (the remote stage's `proto`): `inproc` reaches
# only a server in the same process, and a map's nodes are processes of their own.
MAP_PROTOS = ("tcp", "ipc", "zmq")
MAX_MAP_BYTES = 1 << 20    # a map is a short text; /dev/zero is not one
MAX_MAP_NODES = MAX_HOSTS  # nodes in all the map's clusters together
MAX_NODE_CPUS = 1 << 16    # cpus of one node
MAX_MAP_CPUS = 1 << 20     # cpus of all the map's nodes together (placement deals them out one by one)

_LABEL = r"[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?"  # one label of a host name (RFC 1123)
_HOST_NAME = re.compile(rf"(?=.{{1,253}}$){_LABEL}(\.{_LABEL})*")
_EXPONENT_ONLY = re.compile(r"[-+]?[0-9]+[eE][-+]?[0-9]+")  # a number in YAML 1.2, text in YAML 1.1
NESTED_TOO_DEEPLY = "lists and mappings nested too deeply (a map is plain YAML: mappings, lists, strings and numbers)"



class MapError(ValueError):
    """A cluster map that does not validate: `file:line: field.path: what was expected`."""


@dataclass(frozen=True)
class Node:
    name: str
    cluster: str
    cpus: int  # 0: the node hosts stages (sums, the element) but runs no threads
    address: Optional[str] = None  # None: the launcher chooses (loopback when emulated)


@dataclass(frozen=True)
class Cluster:
    name: str
    nodes: tuple[Node, ...]
    head: Optional[str] = None  # node hosting the cluster's sum; None: first node with threads
    proto: Optional[str] = None  # transport of the hops inside the cluster; None: remote's default


@dataclass(frozen=True)
class Link:
    """A link between two clusters, the same both ways: an emulated delay, a transport, moves
    batched across it, or any of them together."""

    clusters: tuple[str, str]
    delay_ms: Optional[float]  # None: no delay stage
    jitter_ms: float = 0.0
    proto: Optional[str] = None  # transport of the hops across it; None: remote's default
    batch: Optional[int] = None  # moves sent across it together (a batch stage's max_moves); None: no batch
    flush_us: int = 0  # the batch's timer: moves wait at most this long (0: until full or another operation)


@dataclass(frozen=True)
class Element:
    """An element the map says something about: a sum (its paths form a reduction tree), and
    where it lives (None: the map's home)."""

    name: str
    reduce: Optional[str] = None  # "sum", or None: reached at its home
    home: Optional[str] = None


@dataclass(frozen=True)
class Launch:
    mode: str = "local"  # local: each node a process on this machine; ssh; slurm
    ssh: str = DEFAULT_SSH  # command template with {host} and {command}


@dataclass(frozen=True)
class ClusterMap:
    name: str
    source: str
    clusters: tuple[Cluster, ...]
    root: str  # node holding the top-level sum
    home: str  # node holding the element
    policy: str = DEFAULT_POLICY
    max_fanin: int = DEFAULT_MAX_FANIN
    tree_form: str = TREE_FORMS[0]
    links: tuple[Link, ...] = ()
    launch: Launch = Launch()
    elements: tuple[Element, ...] = ()
    acquire: Optional[str] = None  # the acquire hook, pkg.mod:func (None: the default)
    release: Optional[str] = None  # the release hook
    text: str = field(default="", repr=False, compare=False)  # the YAML it was read from

    @property
    def nodes(self) -> tuple[Node, ...]:
        """Every node, in map order."""
        return tuple(node for cluster in self.clusters for node in cluster.nodes)

    def node(self, name: str) -> Node:
        for node in self.nodes:
            if node.name == name:
                return node
        raise KeyError(f"map {shown(self.name)} ({self.source}) has no node {shown(name)}")

    def element(self, name: str) -> Optional[Element]:
        """What the map says about element `name`, if anything."""
        return next((element for element in self.elements if element.name == name), None)

    def home_of(self, name: str) -> str:
        """The node element `name` lives on as the map says: its own `home`, else the map's."""
        declared = self.element(name)
        return declared.home if declared is not None and declared.home else self.home

    def link_between(self, cluster_a: str, cluster_b: str) -> Optional[Link]:
        """The link between two clusters, if the map lists one."""
        ends = {cluster_a, cluster_b}
        return next((link for link in self.links if set(link.clusters) == ends), None)

    def line_of(self, *path: Union[str, int]) -> Optional[int]:
        """The line of the map's text where the field at `path` (keys and list indexes, e.g.
        ("links", 0)) is written, for messages about it; None where the text does not say it."""
        try:
            node = _compose(self.text, self.source)
        except MapError:  # a map made from text of its own
            return None
        line = None
        for step in path:
            if isinstance(node, yaml.MappingNode):
                found = next(((key, value) for key, value in node.value if key.value == step), None)
                if found is None:
                    return None
                line, node = found[0].start_mark.line + 1, found[1]
            elif isinstance(node, yaml.SequenceNode) and isinstance(step, int) and 0 <= step < len(node.value):
                node = node.value[step]
                line = node.start_mark.line + 1
            else:
                return None
        return line

    def proto_between(self, cluster_a: str, cluster_b: str) -> Optional[str]:
        """The transport of a hop between two clusters' nodes: the link's if it names one, else,
        inside one cluster, the cluster's; None leaves it to the remote stage (direct tcp, or zmq
        where the run protects its links with CURVE)."""
        link = self.link_between(cluster_a, cluster_b)
        if link is not None and link.proto is not None:
            return link.proto
        if cluster_a == cluster_b:
            return next(cluster.proto for cluster in self.clusters if cluster.name == cluster_a)
        return None


def checked_map(cluster_map, function: str) -> ClusterMap:
    """`cluster_map` if it is a ClusterMap, else TypeError naming `function`'s argument."""
    if not isinstance(cluster_map, ClusterMap):
        raise TypeError(f"{function}: cluster_map: expected a ClusterMap (paths.load_map, paths.builtin_map), got "
                        f"{cluster_map!r:.100}")
    return cluster_map


def load_map(path: Union[str, os.PathLike]) -> ClusterMap:
    """Read and validate the cluster map in a YAML file (UTF-8, at most MAX_MAP_BYTES)."""
    if not isinstance(path, (str, os.PathLike)):
        raise TypeError(f"load_map: path: expected a file's path (str or os.PathLike), got {path!r:.100}")
    try:  # opened without waiting: a FIFO that nothing writes is then an empty map, not a hang
        descriptor = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
        os.set_blocking(descriptor, True)
        with os.fdopen(descriptor, "rb") as f:
            data = f.read(MAX_MAP_BYTES + 1)
    except OSError as error:
        raise MapError(f"{cut(os.fspath(path))}: cannot read the cluster map: {error.strerror}") from None
    if len(data) > MAX_MAP_BYTES:
        raise MapError(f"{path}: expected a cluster map of at most {MAX_MAP_BYTES} bytes, got more")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as error:
        line = data[: error.start].count(b"\n") + 1
        raise MapError(f"{path}:{line}: expected UTF-8 text, got byte 0x{data[error.start]:02x}") from None
    return load_map_text(text, source=str(path))


def builtin_map(name: str) -> ClusterMap:
    """A map shipped in maps/: "local", "paper-2w", "paper-4w", "paper-8w", "multicluster"."""
    known = sorted(path.stem for path in MAPS_DIR.glob("*.yaml"))
    if name not in known:
        raise MapError(f"no built-in map {shown(name)}: expected one of {', '.join(known)}")
    return load_map(MAPS_DIR / f"{name}.yaml")


def open_map(name: Optional[str]) -> ClusterMap:
    """A map by what a user types: a YAML file (a path, or a name ending in .yaml/.yml), a
    shipped map's name, or None for this machine's map, "local"."""
    if name is None:
        return builtin_map("local")
    if _names_a_file(name):
        return load_map(name)
    return builtin_map(name)


def map_reference(name: Optional[str]) -> str:
    """What names the same map as `name` (as open_map takes it) in another process, in another
    folder: a file's absolute path, or a shipped map's name."""
    if name is None:
        return "local"
    return os.path.abspath(name) if _names_a_file(name) else name


def _names_a_file(name: str) -> bool:
    return name.endswith((".yaml", ".yml")) or "/" in name


def load_map_text(text: str, source: str = "<string>") -> ClusterMap:
    """Validate a cluster map given as YAML text; `source` names it in error messages."""
    fields = _Field(_compose(text, source), "", source).fields(
        required=("name", "clusters", "root"),
        optional=("home", "policy", "tree", "links", "launch", "elements", "acquire", "release"),
    )
    clusters = _clusters(fields["clusters"])
    node_names = [node.name for cluster in clusters for node in cluster.nodes]
    root = fields["root"].member(node_names, "a node listed under clusters")
    home, policy, tree, links, launch = (
        fields.get(key) for key in ("home", "policy", "tree", "links", "launch")
    )
    fanin, form = _tree(tree) if tree else (DEFAULT_MAX_FANIN, TREE_FORMS[0])
    return ClusterMap(
        name=fields["name"].string("a map name"),
        source=source,
        clusters=clusters,
        root=root,
        home=home.member(node_names, "a node listed under clusters") if home else root,
        policy=_policy(policy) if policy else DEFAULT_POLICY,
        max_fanin=fanin,
        tree_form=form,
        links=_links(links, [cluster.name for cluster in clusters]) if links else (),
        launch=_launch(launch) if launch else Launch(),
        elements=_elements(fields["elements"], node_names) if "elements" in fields else (),
        acquire=_hook(fields["acquire"], "acquire") if "acquire" in fields else None,
        release=_hook(fields["release"], "release") if "release" in fields else None,
        text=text,
    )


# The tags of a plain mapping and a plain list (YAML gives them to untagged ones), and what they are.
_PLAIN_TAGS = {yaml.MappingNode: ("tag:yaml.org,2002:map", "mapping"),
               yaml.SequenceNode: ("tag:yaml.org,2002:seq", "list")}


def _tag_name(tag: str) -> str:
    """A YAML tag as a map would write it: tag:yaml.org,2002:int is !!int."""
    return "!!" + tag.rsplit(":", 1)[1] if tag.startswith("tag:yaml.org,2002:") else tag


class _Field:
    """A YAML node and the field path that leads to it, so that errors can point at it; and the
    nodes it is inside of, so that an alias of one of them (an anchor used inside itself) is
    refused as such rather than walked into. A mapping or a list with a tag of its own is refused
    (one without, or with !!map or !!seq, is plain): its fields are read one by one, never
    constructed, so no constructor would see the tag."""

    def __init__(self, node: yaml.Node, path: str, source: str, inside: frozenset = frozenset()) -> None:
        self.node, self.path, self.source, self.inside = node, path, source, inside
        if id(node) in inside:
            self.fail("an anchor used inside itself (a map is plain YAML: mappings, lists, strings and numbers)")
        plain_tag, kind = _PLAIN_TAGS.get(type(node), (node.tag, ""))
        if node.tag != plain_tag:
            self.value()  # a tag no constructor takes fails here, named as on a scalar
            self.fail(f"expected a plain {kind}, got one tagged {_tag_name(node.tag)} "
                      "(a map is plain YAML: mappings, lists, strings and numbers)")

    def _child(self, node: yaml.Node, path: str) -> "_Field":
        return _Field(node, path, self.source, self.inside | {id(self.node)})

    def fail(self, problem: str) -> NoReturn:
        line = self.node.start_mark.line + 1
        raise MapError(f"{self.source}:{line}: {self.path or '(top level)'}: {problem}")

    def expect(self, expected: str) -> NoReturn:
        if isinstance(self.node, yaml.MappingNode):
            got = "a mapping"
        elif isinstance(self.node, yaml.SequenceNode):
            got = "a list"
        else:
            got = shown(self.value())
        self.fail(f"expected {expected}, got {got}")

    def value(self) -> Any:
        try:
            return yaml.constructor.SafeConstructor().construct_object(self.node, deep=True)
        except RecursionError:  # the constructor recurses once per level of nesting
            self.fail(NESTED_TOO_DEEPLY)
        except yaml.MarkedYAMLError as error:  # a tag, or an anchor that holds itself
            mark = error.problem_mark or self.node.start_mark
            problem = "an anchor used inside itself" if "recursive" in (error.problem or "") else error.problem
            raise MapError(f"{self.source}:{mark.line + 1}: {self.path or '(top level)'}: {problem} "
                           f"(a map is plain YAML: mappings, lists, strings and numbers)") from None
        except (ValueError, LookupError, AttributeError, TypeError, OverflowError):  # a tag's constructor refused
            self.fail(f"{shown(self.node.value)} is not a valid {_tag_name(self.node.tag)}")

    def entries(self, expected: str) -> dict[str, _Field]:
        """The values of a mapping by key; keys must be unique names."""
        if not isinstance(self.node, yaml.MappingNode):
            self.expect(expected)
        found: dict[str, _Field] = {}
        for key_node, value_node in self.node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                _Field(key_node, self.path, self.source).fail("merge keys (<<) are not supported: write the fields out")
            key = _Field(key_node, self.path, self.source).string("a name as key")
            label = cut(key, 40)
            child = self._child(value_node, f"{self.path}.{label}" if self.path else label)
            if key in found:
                child.fail(f"duplicate key (first at line {found[key].node.start_mark.line + 1})")
            found[key] = child
        return found

    def fields(self, required: tuple[str, ...], optional: tuple[str, ...]) -> dict[str, _Field]:
        valid = required + optional
        found = self.entries(f"a mapping with fields {', '.join(valid)}")
        for key, child in found.items():
            if key not in valid:
                child.fail(f"unknown field (valid: {', '.join(valid)})")
        for key in required:
            if key not in found:
                self.fail(f"missing field {key!r} (required: {', '.join(required)})")
        return found

    def items(self, expected: str) -> list[_Field]:
        if not isinstance(self.node, yaml.SequenceNode):
            self.expect(expected)
        return [self._child(node, f"{self.path}[{i}]") for i, node in enumerate(self.node.value)]

    def string(self, expected: str) -> str:
        value = self.value()
        if not isinstance(value, str) or not value:
            self.expect(expected)
        if any(ord(c) < 32 or ord(c) == 127 for c in value):  # a line break, a tab, a NUL: tables and scripts break
            self.expect(f"{expected} without control characters")
        return value

    def member(self, names: list[str], expected: str) -> str:
        value = self.string(expected)
        if value not in names:
            self.expect(expected)
        return value

    def integer(self, minimum: int, expected: str, maximum: float = math.inf) -> int:
        value = self.value()
        if isinstance(value, bool) or not isinstance(value, int) or not minimum <= value <= maximum:
            self.expect(expected)
        return value

    def milliseconds(self, maximum: float) -> float:
        value = self.value()
        if isinstance(value, str) and self.node.style is None and _EXPONENT_ONLY.fullmatch(value):
            value = float(value)  # YAML 1.1 reads 1e-3 (no dot) as text; YAML 1.2 and the user, as a number
        if (
            isinstance(value, bool)
            or not isinstance(value, (int, float))
            or not 0 <= value <= maximum
        ):
            self.expect(f"a number of milliseconds from 0 to {maximum:g}")
        return float(value)


def _compose(text: str, source: str) -> yaml.Node:
    try:
        loader = yaml.SafeLoader(text)  # reads every character first (ReaderError)
        node = loader.get_single_node()
    except RecursionError:  # the composer recurses once per level of nesting
        raise MapError(f"{source}:{loader.line + 1}: invalid YAML: {NESTED_TOO_DEEPLY}") from None
    except yaml.MarkedYAMLError as error:
        mark = error.problem_mark or error.context_mark
        line = mark.line if mark else 0
        lines = text.splitlines()
        problem = f"{error.problem} (in {shown(lines[line].strip() if line < len(lines) else '')})"
        if error.context and error.context_mark:
            problem += f", {error.context} at line {error.context_mark.line + 1}"
        raise MapError(f"{source}:{line + 1}: invalid YAML: {problem}") from None
    except yaml.reader.ReaderError as error:  # a character YAML does not allow
        line = text[: error.position].count("\n") + 1
        raise MapError(f"{source}:{line}: invalid YAML: character #x{error.character:04x} is not allowed") from None
    except yaml.YAMLError as error:
        raise MapError(f"{source}: invalid YAML: {error}") from None
    if node is None:
        raise MapError(
            f"{source}:1: (top level): expected a mapping with fields name, clusters, root, "
            "got an empty document"
        )
    return node


def _clusters(field: _Field) -> tuple[Cluster, ...]:
    entries = field.entries("a mapping of cluster names to {nodes, cpus}")
    if not entries:
        field.fail("expected at least one cluster")
    clusters: list[Cluster] = []
    cluster_of_node: dict[str, str] = {}
    node_at: dict[tuple, str] = {}  # address (its host written one way, and port) -> the node it is given to first
    map_cpus = 0
    for name, cluster_field in entries.items():
        fields = cluster_field.fields(required=("nodes", "cpus"), optional=("address", "head", "proto"))
        names = _host_names(fields["nodes"], MAX_MAP_NODES - len(cluster_of_node))
        for node in names:
            if node in cluster_of_node:
                fields["nodes"].fail(
                    f"node {node!r} is already in cluster {cluster_of_node[node]!r} "
                    "(node names must be unique)"
                )
            cluster_of_node[node] = name
        cpus = _cpus(fields["cpus"])
        map_cpus += cpus * len(names)
        if map_cpus > MAX_MAP_CPUS:
            fields["cpus"].fail(f"the map's nodes have more than {MAX_MAP_CPUS} CPUs in all "
                                f"({map_cpus} up to this cluster's {len(names)} x {cpus})")
        addresses = (
            _addresses(fields["address"], names) if "address" in fields else [None] * len(names)
        )
        for node, address in zip(names, addresses):
            first = node_at.setdefault(split_address(address), node) if address is not None else node
            if first != node:
                fields["address"].fail(f"expected each node its own address, got {shown(address)} for both "
                                       f"{first!r} and {node!r}")
        head = (
            fields["head"].member(names, f"a node of cluster {name}") if "head" in fields else None
        )
        nodes = tuple(Node(node, name, cpus, address) for node, address in zip(names, addresses))
        proto = _proto(fields["proto"]) if "proto" in fields else None
        clusters.append(Cluster(name, nodes, head, proto))
    if not any(node.cpus for cluster in clusters for node in cluster.nodes):
        field.fail("expected at least one cluster with cpus > 0 to run threads on")
    return tuple(clusters)


def _host_names(field: _Field, room: int) -> list[str]:
    """The names of a host list, or a list of them; the map has room for `room` more nodes."""
    expected = "a host list like 'n[0-7]' or a list of them"
    parts = field.items(expected) if isinstance(field.node, yaml.SequenceNode) else [field]
    if not parts:
        field.fail(f"a cluster needs at least one node: expected {expected}, got an empty list")
    names: list[str] = []
    for part in parts:
        text = part.string(expected)
        try:
            names.extend(expand_hostlist(text))
        except ValueError as error:
            part.fail(str(error))
        if len(names) > room:
            part.fail(f"the map's clusters name more than {MAX_MAP_NODES} nodes in all")
    return names


def _cpus(field: _Field) -> int:
    if field.value() == "auto":
        return os.cpu_count() or 1
    return field.integer(
        0, f"an integer from 0 to {MAX_NODE_CPUS} or 'auto' (0: the node hosts stages but runs no threads)",
        MAX_NODE_CPUS,
    )


def split_address(address: str) -> tuple[str, str]:
    """A node's address, tcp://HOST:PORT, as (HOST, PORT): HOST an IP address ([...] for IPv6) or
    a host name, PORT from 1 to 65535 or * (any free one); ValueError saying what is expected.
    An IPv4 address is written a.b.c.d (not as 2130706433, 0x7f000001, 127.1 or 127.000.000.001,
    which only the resolver reads as one), so that one address is written one way."""
    scheme, _, rest = address.partition("://")
    host, _, port = rest.rpartition(":")
    if scheme != "tcp" or not (port == "*" or (port.isdigit() and 0 < int(port) < 65536)) or not (
            _HOST_NAME.fullmatch(host) or _ip_in_brackets(host)):
        raise ValueError(f"expected an address like 'tcp://host:7000' (tcp://HOST:PORT: HOST an IP address or a "
                         f"host name, PORT from 1 to 65535 or *), got {shown(address)}")
    dotted = _resolver_ipv4(host)
    if dotted:
        raise ValueError(f"expected an IPv4 address written a.b.c.d, got {shown(host)} in {shown(address)}: "
                         f"write {dotted}")
    if host.startswith("["):  # an IPv6 address, written one way
        host = f"[{ipaddress.ip_address(host[1:-1]).compressed}]"
    return host, port


def _resolver_ipv4(host: str) -> Optional[str]:
    """a.b.c.d when host is an IPv4 address written another way that the resolver reads as one
    (inet_aton's: numbers of 1 to 4 parts, octal and hex); None for anything else."""
    try:
        dotted = socket.inet_ntoa(socket.inet_aton(host))
    except OSError:
        return None
    return dotted if dotted != host else None


def _ip_in_brackets(host: str) -> bool:
    try:
        return host.startswith("[") and host.endswith("]") and bool(ipaddress.ip_address(host[1:-1]))
    except ValueError:
        return False


def _addresses(field: _Field, names: list[str]) -> list[str]:
    if isinstance(field.node, yaml.MappingNode):
        given = field.entries("a mapping of node names to addresses")
        for node, address in given.items():
            if node not in names:
                address.fail("not a node of this cluster")
        for node in names:
            if node not in given:
                field.fail(f"missing the address of node {node!r}")
        addresses = [(given[node], given[node].string("an address like 'tcp://host:7000'")) for node in names]
    else:
        template = field.string("an address template like 'tcp://{node}:7000' or a mapping node: address")
        if not _replaces_only(template, {"node"}):
            field.expect("a template where only {node} is replaced, like 'tcp://{node}:7000'")
        addresses = [(field, template.format(node=node)) for node in names]
    for where, address in addresses:
        try:
            split_address(address)
        except ValueError as error:
            where.fail(str(error))
    return [address for _, address in addresses]


def _policy(field: _Field) -> str:
    name = field.string("'block', 'cyclic' or a function named 'pkg.mod:func'")
    try:
        resolve_policy(name)
    except ValueError as error:
        field.fail(str(error))
    return canonical_policy(name)


def _tree(field: _Field) -> tuple[int, str]:
    """The tree's max_fanin and form."""
    fields = field.fields(required=(), optional=("max_fanin", "form"))
    fanin = fields["max_fanin"].integer(2, f"an integer from 2 to {MAX_FANIN}", MAX_FANIN) if "max_fanin" in fields \
        else DEFAULT_MAX_FANIN
    form = fields["form"].member(list(TREE_FORMS), f"one of {', '.join(TREE_FORMS)}") if "form" in fields \
        else TREE_FORMS[0]
    return fanin, form


def _proto(field: _Field) -> str:
    return field.member(
        list(MAP_PROTOS),
        f"one of {', '.join(MAP_PROTOS)} (inproc reaches only a server in the same process, "
        "and a map's nodes are processes of their own)",
    )


# What a link may ask of the stages it puts on the path, as their kinds declare it.
MAX_BATCH = kinds()["batch"].params["max_moves"].max
MAX_FLUSH_US = kinds()["batch"].params["flush_us"].max
MAX_DELAY_MS = kinds()["delay"].params["ms"].max  # and jitter_ms, which is at most its ms


def _links(field: _Field, cluster_names: list[str]) -> tuple[Link, ...]:
    links: list[Link] = []
    for item in field.items("a list of {between: [cluster, cluster], delay_ms, jitter_ms, proto, batch, flush_us}"):
        fields = item.fields(required=("between",), optional=("delay_ms", "jitter_ms", "proto", "batch", "flush_us"))
        if "jitter_ms" in fields and "delay_ms" not in fields:
            fields["jitter_ms"].fail("jitter_ms needs delay_ms on the same link")
        if "flush_us" in fields and "batch" not in fields:
            fields["flush_us"].fail("flush_us needs batch on the same link")
        if not {"delay_ms", "proto", "batch"} & set(fields):
            item.fail("missing field 'delay_ms' (a link needs delay_ms, proto, batch or several of them)")
        between = fields["between"]
        ends = between.items("a list of two cluster names")
        pair = tuple(
            end.member(cluster_names, f"a cluster of this map ({', '.join(cluster_names)})")
            for end in ends
        )
        if len(pair) != 2 or pair[0] == pair[1]:
            between.fail("expected two different clusters")
        if any(set(link.clusters) == set(pair) for link in links):
            item.fail(f"a second link between {pair[0]} and {pair[1]}")
        delay = fields["delay_ms"].milliseconds(MAX_DELAY_MS) if "delay_ms" in fields else None
        jitter = fields["jitter_ms"].milliseconds(MAX_DELAY_MS) if "jitter_ms" in fields else 0.0
        if delay is not None and jitter > delay:
            fields["jitter_ms"].fail(f"expected at most the link's delay_ms ({delay:g}), got {jitter:g}")
        proto = _proto(fields["proto"]) if "proto" in fields else None
        batch = fields["batch"].integer(1, f"an integer from 1 to {MAX_BATCH}: the moves sent across together",
                                        MAX_BATCH) if "batch" in fields else None
        flush_us = fields["flush_us"].integer(0, f"an integer from 0 to {MAX_FLUSH_US} (microseconds; 0: no timer)",
                                              MAX_FLUSH_US) if "flush_us" in fields else 0
        links.append(Link(pair, delay, jitter, proto, batch, flush_us))
    return tuple(links)


def _elements(field: _Field, node_names: list[str]) -> tuple[Element, ...]:
    elements = []
    for name, entry in field.entries("a mapping of element names to {reduce: sum, home: node}").items():
        fields = entry.fields(required=(), optional=("reduce", "home"))
        reduce = fields["reduce"].member(["sum"], "'sum'") if "reduce" in fields else None
        home = fields["home"].member(node_names, "a node listed under clusters") if "home" in fields else None
        elements.append(Element(name, reduce, home))
    return tuple(elements)


def _hook(field: _Field, kind: str) -> str:
    name = field.string(f"the {kind} hook, a function named 'pkg.mod:func'")
    try:
        import_function(name, f"{kind} hook", hook=kind)
    except ValueError as error:
        field.fail(str(error))
    return name


def _launch(field: _Field) -> Launch:
    fields = field.fields(required=(), optional=("mode", "ssh"))
    mode = (
        fields["mode"].member(list(LAUNCH_MODES), "one of " + ", ".join(LAUNCH_MODES))
        if "mode" in fields
        else "local"
    )
    if "ssh" not in fields:
        return Launch(mode)
    expected = "a command template with {host} and {command}, like 'ssh {host} {command}'"
    ssh = fields["ssh"].string(expected)
    try:
        parts = shlex.split(ssh)  # as the launcher splits it, then fills in each part
    except ValueError:
        fields["ssh"].expect(expected)
    if not all(_replaces_only(part, {"host", "command"}) for part in parts):
        fields["ssh"].expect(expected)
    named = {name for part in parts for _, name, _, _ in string.Formatter().parse(part)}
    if not {"host", "command"} <= named:  # {{host}} is the text {host}, not the host
        fields["ssh"].expect(expected)
    return Launch(mode, ssh)


def _replaces_only(template: str, names: set[str]) -> bool:
    """Whether str.format on `template` replaces nothing but {name} fields of `names`: no
    attribute, index, conversion or format spec ({node.x}, {node[0]}, {node:>9999999999}),
    which would fail, or run out of memory, when the template is filled in."""
    try:
        fields = list(string.Formatter().parse(template))
    except ValueError:  # a lone { or }
        return False
    return all(name is None or (name in names and not spec and conversion is None)
               for _, name, spec, conversion in fields)
