"""Looking at a built tree: `show(h)` prints it, `to_dot(h)` returns Graphviz DOT.

The tree is drawn from the element (the root) up to the callers (the leaves): each stage with
its parameters, how many callers it has out of its fan-in, and its counters on request. Stages
past one whose rest is built elsewhere (a remote stage) live there; they are drawn too, marked
with where they live (the remote stage's host).
"""

from __future__ import annotations

from .build import BuildContext, StageKey, handle_tree
from ..model.stage_kinds import kinds


def _children(table: BuildContext) -> tuple[dict, dict]:
    """Stages below -> the stages above them, and stage -> the labels of its callers."""
    stages_above: dict[StageKey, set[StageKey]] = {}
    for built in table.stages():
        key = built.key
        while len(key) > 1:  # stages past a remote are not here, but they are in the tree
            stages_above.setdefault(key[1:], set()).add(key)
            key = key[1:]
    callers: dict[StageKey, list[str]] = {}
    for label, key in table.handles():
        callers.setdefault(key, []).append(label)
    return stages_above, callers


def _built_at(table: BuildContext, key: StageKey) -> str:
    """Where a stage not built here lives: what the nearest stage above it whose rest is built
    elsewhere names (a remote stage's host)."""
    known = kinds()
    for built in table.stages():
        above = built.key
        if len(above) > len(key) and above[len(above) - len(key):] == key:
            for spec in reversed(above[:len(above) - len(key)]):
                if known[spec.kind].rest_at is not None:
                    return str(spec.param(known[spec.kind].rest_at))
    return "another process"


def _stage_line(table: BuildContext, key: StageKey, counters: bool) -> str:
    text = str(key[0])
    built = table.live(key)
    if built is None:  # past a stage whose rest is built elsewhere
        return f"{text}  (on {_built_at(table, key)})"
    native = built.native
    if native.max_links:
        text += f"  [{native.link_count}/{native.max_links} callers]"
    if counters:
        values = ", ".join(f"{k}={v}" for k, v in native.counters().items())
        text += f"  {{{values}}}"
    return text


def render_tree(handle, counters: bool = False) -> str:
    """The text drawing of the tree `handle` belongs to, element first."""
    table, top = handle_tree(handle)
    stages_above, callers = _children(table)
    lines = [_stage_line(table, top[-1:], counters)]

    def walk(key: StageKey, indent: str) -> None:
        items = [("stage", k) for k in sorted(stages_above.get(key, []), key=str)]
        items += [("caller", label) for label in callers.get(key, [])]
        for n, (kind, item) in enumerate(items):
            last = n == len(items) - 1
            branch, extend = ("└── ", "    ") if last else ("├── ", "│   ")
            if kind == "stage":
                lines.append(indent + branch + _stage_line(table, item, counters))
                walk(item, indent + extend)
            else:
                lines.append(indent + branch + item)

    walk(top[-1:], "")
    return "\n".join(lines)


def show(handle, counters: bool = False) -> None:
    """Print the built tree of `handle`: element, stages, callers."""
    print(render_tree(handle, counters))


def _quoted(text: str) -> str:
    """Text inside a DOT string: its backslashes and quotes escaped."""
    return text.replace("\\", "\\\\").replace('"', '\\"')


def to_dot(handle) -> str:
    """Graphviz DOT of the tree of `handle`; edges point from callers toward the element."""
    table, top = handle_tree(handle)
    stages_above, callers = _children(table)
    names: dict[StageKey, str] = {}
    lines = ["digraph path {", "  rankdir=BT;", "  node [shape=box];"]

    def name(key: StageKey) -> str:
        if key not in names:
            names[key] = f"s{len(names)}"
            lines.append(f'  {names[key]} [label="{_quoted(str(key[0]))}"];')
        return names[key]

    def walk(key: StageKey) -> None:
        for above in sorted(stages_above.get(key, []), key=str):
            lines.append(f"  {name(above)} -> {name(key)};")
            walk(above)
        for n, label in enumerate(callers.get(key, [])):
            caller = f"{name(key)}_c{n}"
            lines.append(f'  {caller} [shape=ellipse, label="{_quoted(label)}"];')
            lines.append(f"  {caller} -> {name(key)};")

    name(top[-1:])
    walk(top[-1:])
    lines.append("}")
    return "\n".join(lines)
