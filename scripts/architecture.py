"""The package's layout, read from its imports: its rooms (the sub-packages and the modules at the
root), the arrows between them, and the layers they stand in.

``docs/images/architecture.dot`` is written from it (``scripts/render_diagrams.py``), and
``tests/test_architecture.py`` holds the picture and the layering rules against the code, so
neither can drift from the imports.

    .venv/bin/python scripts/architecture.py     # print the rooms, each with the rooms it imports
"""

from __future__ import annotations

import ast
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "lance_iceberg_ns"
NAME = PACKAGE.name

# The layers, top down: a room may import rooms of its own layer or of layers below, never above.
LAYERS: tuple[tuple[str, str, tuple[str, ...]], ...] = (
    ("entry", "entry points", ("cli", "server", "spark", "ray", "demo", "jobs")),
    ("facade", "the namespace: one line per operation", ("namespace", "operation")),
    ("operations", "operations, one owner per concern", ("tables", "versions", "data")),
    ("halves", "the catalog half (pyiceberg) and the storage half (files and objects)", ("catalog", "storage")),
    ("shared", "shared by all (arrows into it are not drawn)", (
        "config", "errors", "identifiers", "limits", "request_rules", "paging", "cache", "registry",
    )),
)  # fmt: skip
LOCAL_CATALOG = "testing"  # the local Iceberg REST catalog: a product of its own, imported by no room

# What must never be: (room, room it may not reach, why).
NEVER: tuple[tuple[str, str, str], ...] = (
    ("catalog", "storage", "the catalog half speaks pyiceberg only"),
    ("catalog", "data", "the catalog half speaks pyiceberg only"),
    ("storage", "catalog", "the storage half never speaks pyiceberg"),
    ("data", "catalog", "the data plane never speaks pyiceberg"),
    ("server", "cli", "the command line builds on the server, never the reverse"),
)


def rooms() -> list[str]:
    """Every room: a sub-package, or a module at the package's root."""
    found = [path.name for path in PACKAGE.iterdir() if path.is_dir() and (path / "__init__.py").exists()]
    found += [path.stem for path in PACKAGE.glob("*.py") if path.stem != "__init__"]
    return sorted(found)


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imported_names(tree: ast.AST) -> Iterator[str]:
    """Every module named by an import, at any depth (inside functions too), but for imports made
    only for type checking."""
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, ast.If) and _is_type_checking(node):
            for branch in node.orelse:
                yield from _imported_names(ast.Module(body=[branch], type_ignores=[]))
            continue
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            yield node.module
            yield from (f"{node.module}.{alias.name}" for alias in node.names)
        yield from _imported_names(node)


def _modules() -> dict[str, Path]:
    return {
        ".".join((NAME, *path.relative_to(PACKAGE).with_suffix("").parts)).removesuffix(".__init__"): path
        for path in PACKAGE.rglob("*.py")
    }


def module_imports() -> dict[str, set[str]]:
    """Each module of the package (dotted), with the modules of the package it imports."""
    modules = _modules()
    graph: dict[str, set[str]] = {}
    for module, path in modules.items():
        targets = {name for name in _imported_names(ast.parse(path.read_text())) if name in modules}
        graph[module] = targets - {module}
    return graph


def libraries_reached(room: str) -> set[str]:
    """The top-level names of the libraries a room imports, itself or through the modules of the
    package it imports (``lance``, ``pyiceberg``, ...)."""
    modules, graph = _modules(), module_imports()
    pending = [module for module in modules if room_of(module) == room]
    seen = set(pending)
    found: set[str] = set()
    while pending:
        module = pending.pop()
        for name in _imported_names(ast.parse(modules[module].read_text())):
            if not name.startswith(NAME):
                found.add(name.split(".")[0])
        for target in graph[module] - seen:
            seen.add(target)
            pending.append(target)
    return found


def room_of(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def room_imports() -> dict[str, set[str]]:
    """Each room, with the other rooms it imports."""
    graph: dict[str, set[str]] = {room: set() for room in rooms()}
    for module, targets in module_imports().items():
        source = room_of(module)
        if source in graph:
            graph[source] |= {room_of(target) for target in targets if room_of(target) not in (source, "__init__")}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected groups of more than one node (Tarjan's algorithm), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in sorted(graph.get(node, ())):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            group = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                group.append(member)
                if member == node:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return sorted(found)


def layer_of(room: str) -> int:
    for number, (_, _, members) in enumerate(LAYERS):
        if room in members:
            return number
    raise KeyError(f"{room} stands in no layer: add it to LAYERS in scripts/architecture.py")


def upward_imports() -> list[tuple[str, str]]:
    """Imports from a room to a room of a higher layer."""
    graph = room_imports()
    return sorted(
        (source, target)
        for source, targets in graph.items()
        if source != LOCAL_CATALOG
        for target in targets
        if target != LOCAL_CATALOG and layer_of(target) < layer_of(source)
    )


def reaches(source: str, target: str) -> bool:
    """Whether ``source`` imports ``target``, directly or through other rooms."""
    graph = room_imports()
    pending, seen = [source], {source}
    while pending:
        for following in graph.get(pending.pop(), ()):
            if following == target:
                return True
            if following not in seen:
                seen.add(following)
                pending.append(following)
    return False


def _summary(room: str) -> str:
    path = PACKAGE / room / "__init__.py" if (PACKAGE / room).is_dir() else PACKAGE / f"{room}.py"
    docstring = ast.get_docstring(ast.parse(path.read_text())) or ""
    first = docstring.split("\n\n")[0].replace("\n", " ").split(". ")[0].rstrip(".")
    head, _, rest = first.partition(": ")
    # "Errors: the translation of ..." says more after its colon
    first = rest if rest and len(head.split()) <= 2 else head
    for stop in (" (", "; ", ", "):
        if len(first) > 64:
            first = first.split(stop)[0]
    return "\\n".join(textwrap.wrap(first.replace('"', "'").replace("`", ""), 30))


def dot_source() -> str:
    """The Graphviz source of the picture: rooms by layer, arrows from the imports."""
    lines = [
        "// The package's layout, written by scripts/architecture.py from the package's imports: do not edit.",
        "digraph architecture {",
        '  graph [rankdir=TB, fontname="Helvetica", fontsize=12, nodesep=0.2, ranksep=0.5, newrank=true];',
        '  node [shape=box, style="rounded,filled", fillcolor="#ffffff", fontname="Helvetica", fontsize=9];',
        '  edge [color="#555555", arrowsize=0.6];',
    ]
    colours = ("#eef3fb", "#fff6d6", "#f4f4f4", "#e7f5ea", "#fafafa")
    present = set(rooms())
    for (key, label, members), colour in zip(LAYERS, colours, strict=True):
        lines.append(f"  subgraph cluster_{key} {{")
        lines.append(f'    label="{label}"; style="rounded,filled"; fillcolor="{colour}"; color="#bbbbbb";')
        shown = [room for room in members if room in present]
        for room in shown:
            suffix = "/" if (PACKAGE / room).is_dir() else ".py"
            lines.append(f'    "{room}" [label="{room}{suffix}\\n{_summary(room)}"];')
        lines.append("    {rank=same; " + " ".join(f'"{room}";' for room in shown) + "}")
        lines.append("  }")
    firsts = [next(room for room in members if room in present) for _, _, members in LAYERS]
    for upper, lower in zip(firsts, firsts[1:], strict=False):  # the layers stand top down
        lines.append(f'  "{upper}" -> "{lower}" [style=invis];')
    shared = set(LAYERS[-1][2])
    for source, targets in sorted(room_imports().items()):
        if source == LOCAL_CATALOG:
            continue
        for target in sorted(targets - shared - {LOCAL_CATALOG}):
            lines.append(f'  "{source}" -> "{target}";')
    lines.append("}")
    return "\n".join(lines) + "\n"


def main() -> int:
    for room, targets in sorted(room_imports().items()):
        print(f"{room}: {', '.join(sorted(targets)) or '-'}")
    for group in cycles(module_imports()):
        print("circle:", " -> ".join(group))
    return 0


if __name__ == "__main__":
    sys.exit(main())
