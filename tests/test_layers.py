"""The rules of the house in code (issue 26, part 6): the layer table of ``../shared/DESIGN.md``
("Layers, lowest first: a layer imports only layers above it in this table; only the composition
root (broker.py, startup.py, cli/) sees everything"), only the composition root imports
``shoal.broker``, and no import cycles among Shoal's modules.

Every module under ``shoal/`` is read with ``ast``, without importing it: top-level and
function-level imports, imports under ``if TYPE_CHECKING:`` (a type is a dependency too; they
count for the layers, not for cycles, which are about what runs), and string literals given to
``importlib.import_module``, ``__import__`` or ``sys.modules[...]``.

What breaks a rule today and waits for a bigger part of issue 26 is in an allowlist below, each
entry naming the part that removes it. A new violation fails, and so does an allowlisted one that
no longer occurs (remove its entry): the lists only shrink.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

SHOAL = Path(__file__).resolve().parent.parent / "shoal"

# The layer table of ../shared/DESIGN.md ("Layers (one package, shoal), lowest first"), in its
# order, each row with the top-level names (packages, or flat modules) it holds. Three rows are
# not in DESIGN.md's table and are marked as such: base, config and the composition root.
LAYERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    # not in DESIGN.md: helpers with no Shoal imports that every layer may use
    ("base", ("_native", "clock", "asyncutil", "logutil")),
    ("protocol", ("protocol",)),
    ("placement", ("placement",)),
    ("storage", ("storage",)),
    ("etcd", ("etcd",)),
    # not in DESIGN.md: broker and topic configs (config.py, Kafka's KafkaConfig and LogConfig
    # definitions). Read by metadata (topic-config validation) and everything above; it checks
    # values with the parsers of the layers below it (placement JSON, LogConfig, etcd URLs).
    ("config", ("config",)),
    ("metadata", ("metadata",)),
    ("quotas", ("quotas",)),
    ("net", ("net",)),
    ("cluster", ("cluster",)),
    ("replica", ("replica",)),
    ("tenancy, auth", ("tenancy", "auth")),
    ("groups, txn", ("groups", "txn")),
    ("handlers (+ services)", ("handlers", "services")),
    ("server", ("server",)),
    ("observability, metering, admin", ("observability", "metering", "admin")),
    ("spark", ("spark",)),
    # cli: the package shoal/cli/, or the flat shoal/cli.py and shoal/cli_*.py before it; client:
    # shoal/client/ or the flat shoal/client.py (which also holds what becomes shoal/net/)
    ("client, cli", ("client", "cli")),
    # not in DESIGN.md's table as a row of its own (it names the console beside the admin API): the
    # console acts for its logged-in user over the Kafka protocol through shoal.client, authenticated
    # as that user, so it sits above the client; the composition root mounts it on the admin listener
    ("console", ("console",)),
    # not in DESIGN.md: the composition root's own modules (`shoal serve`'s start-up, its error
    # messages and --quickstart; python -m shoal)
    ("composition root", ("broker", "startup", "startup_errors", "quickstart", "__main__")),
)

# The composition root (DESIGN.md: broker.py, startup.py, cli/) sees everything.
COMPOSITION_ROOT = frozenset({"broker", "startup", "cli"})

# Imports that point up a layer today: (importing module, imported module) -> the part of issue 26
# that removes it. Imports of shoal.broker are the next list's.
UPWARD_ALLOWED: dict[tuple[str, str], str] = {
}

# Modules other than the composition root that import shoal.broker today (all for its type) ->
# the part of issue 26 that removes it.
BROKER_IMPORT_ALLOWED: dict[str, str] = {
}

# Import cycles today (the modules of one strongly connected component of the runtime imports)
# -> the part of issue 26 that removes it.
CYCLES_ALLOWED: dict[frozenset[str], str] = {
}


@dataclass(frozen=True)
class Import:
    target: str  # the module imported (for ``from m import name``, m.name when that is a module)
    line: int
    type_only: bool  # under ``if TYPE_CHECKING:``


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(SHOAL.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


MODULES: dict[str, Path] = {_module_name(p): p for p in sorted(SHOAL.rglob("*.py"))}


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _literal(node: ast.AST) -> str | None:
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None


def imports_of(module: str, source: str, *, package: bool, modules=MODULES) -> list[Import]:
    """Every import of a ``shoal`` module in ``source`` (the text of ``module``), at any depth."""
    found: list[Import] = []

    def add(target: str | None, node: ast.AST, type_only: bool) -> None:
        if target is not None and (target == "shoal" or target.startswith("shoal.")):
            found.append(Import(target, node.lineno, type_only))

    def visit(node: ast.AST, type_only: bool) -> None:
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            for child in node.body:
                visit(child, True)
            for child in node.orelse:
                visit(child, type_only)
            return
        if isinstance(node, ast.Import):
            for alias in node.names:
                add(alias.name, node, type_only)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = module.split(".") if package else module.split(".")[:-1]
                base = base[:len(base) - node.level + 1]
                source_module = ".".join(base + ([node.module] if node.module else []))
            else:
                source_module = node.module or ""
            for alias in node.names:
                submodule = f"{source_module}.{alias.name}"
                add(submodule if submodule in modules else source_module, node, type_only)
        elif isinstance(node, ast.Call) and node.args:
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
            if name in ("import_module", "__import__"):
                add(_literal(node.args[0]), node, type_only)
        elif isinstance(node, ast.Subscript):
            value = node.value
            if isinstance(value, ast.Attribute) and value.attr == "modules" and getattr(value.value, "id", "") == "sys":
                add(_literal(node.slice), node, type_only)
        for child in ast.iter_child_nodes(node):
            visit(child, type_only)

    visit(ast.parse(source), False)
    return found


def _all_imports() -> dict[str, list[Import]]:
    return {m: imports_of(m, p.read_text(), package=p.name == "__init__.py") for m, p in MODULES.items()}


IMPORTS = _all_imports()


def top_name(module: str) -> str | None:
    """The name a module's layer is looked up by: shoal/<name>/... or shoal/<name>.py, with the flat
    shoal/cli_*.py as ``cli``; None for ``shoal`` itself."""
    parts = module.split(".")
    if len(parts) < 2:
        return None
    name = parts[1]
    return "cli" if name.startswith("cli_") else name


LAYER_OF: dict[str, int] = {name: i for i, (_, names) in enumerate(LAYERS) for name in names}


def layer_of(module: str) -> int | None:
    name = top_name(module)
    return None if name is None else LAYER_OF.get(name, -1)


def upward_imports() -> dict[tuple[str, str], list[int]]:
    """(importer, imported) -> lines, for every import that points up a layer."""
    out: dict[tuple[str, str], list[int]] = defaultdict(list)
    for module, found in IMPORTS.items():
        if top_name(module) in COMPOSITION_ROOT:
            continue
        here = layer_of(module)
        for imp in found:
            if imp.target == "shoal.broker" or imp.target.startswith("shoal.broker."):
                continue  # the next rule's
            there = layer_of(imp.target)
            if here is not None and there is not None and there > here and imp.line not in out[(module, imp.target)]:
                out[(module, imp.target)].append(imp.line)
    return out


def broker_importers() -> dict[str, list[int]]:
    out: dict[str, list[int]] = defaultdict(list)
    for module, found in IMPORTS.items():
        if top_name(module) in COMPOSITION_ROOT:
            continue
        for imp in found:
            if imp.target == "shoal.broker" or imp.target.startswith("shoal.broker."):
                out[module].append(imp.line)
    return out


def runtime_cycles(imports: dict[str, list[Import]] = IMPORTS) -> list[frozenset[str]]:
    """The strongly connected components (of two or more modules) of the runtime imports: Tarjan's
    algorithm, iterative."""
    graph = {m: sorted({i.target for i in found if not i.type_only and i.target in imports and i.target != m})
             for m, found in imports.items()}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[frozenset[str]] = []
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(graph[root]))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, edges = work[-1]
            for nxt in edges:
                if nxt not in index:
                    index[nxt] = low[nxt] = len(index)
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, iter(graph[nxt])))
                    break
                if nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = set()
                    while True:
                        m = stack.pop()
                        on_stack.discard(m)
                        component.add(m)
                        if m == node:
                            break
                    if len(component) > 1:
                        out.append(frozenset(component))
    return out


def etcd_speech(source: str) -> list[int]:
    """The lines of ``source`` that speak etcd's RPC themselves (issue 26, part 3: only
    ``shoal/etcd/`` does): an import of ``aetcd`` or ``grpc`` (at any depth), or the generated
    messages reached through a client's ``.rpc``."""
    lines = []
    for node in ast.walk(ast.parse(source)):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and not node.level:
            names = [node.module or ""]
        if any(n.split(".")[0] in ("aetcd", "grpc") for n in names):
            lines.append(node.lineno)
        elif isinstance(node, ast.Attribute) and node.attr == "rpc":
            lines.append(node.lineno)
    return sorted(set(lines))


def _path(module: str) -> str:
    return str(MODULES[module].relative_to(SHOAL.parent))


# -- the reader itself ------------------------------------------------------------------------

def test_the_reader_finds_every_kind_of_import():
    source = '''
import shoal.a
from shoal.b import thing
from . import c
from .d import other
import json
from typing import TYPE_CHECKING
if TYPE_CHECKING:
    from shoal.e import Type
else:
    import shoal.f
def g():
    from shoal.h import late
    importlib.import_module("shoal.i")
    __import__("shoal.j").j
    return sys.modules["shoal.k"]
class K:
    def m(self):
        import shoal.l.m as lm
'''
    modules = {"shoal.x.c": None, "shoal.x.d": None}
    found = imports_of("shoal.x.y", source, package=False, modules=modules)
    assert [(i.target, i.type_only) for i in found] == [
        ("shoal.a", False), ("shoal.b", False), ("shoal.x.c", False), ("shoal.x.d", False), ("shoal.e", True),
        ("shoal.f", False), ("shoal.h", False), ("shoal.i", False), ("shoal.j", False), ("shoal.k", False),
        ("shoal.l.m", False)]
    # In a package's __init__, "." is the package itself.
    assert [i.target for i in imports_of("shoal.x", "from .c import z", package=True, modules=modules)] == ["shoal.x.c"]


def test_the_cycle_finder_finds_cycles():
    imports = {"a": [Import("b", 1, False)], "b": [Import("c", 1, False), Import("x", 1, False)],
               "c": [Import("a", 1, False)], "d": [Import("e", 1, True)], "e": [Import("d", 1, False)],
               "f": [Import("a", 1, False)]}
    assert runtime_cycles(imports) == [frozenset("abc")]  # d <-> e only through a type-only import


# -- the rules --------------------------------------------------------------------------------

def test_every_module_has_a_layer():
    lost = sorted(_path(m) for m in MODULES if layer_of(m) == -1)
    assert not lost, f"in no row of LAYERS (tests/test_layers.py, after ../shared/DESIGN.md): {lost}"


def test_no_import_points_up_a_layer():
    new = {k: v for k, v in upward_imports().items() if k not in UPWARD_ALLOWED}
    assert not new, "imports that point up a layer (../shared/DESIGN.md, 'Layers'):\n" + "\n".join(
        f"  {_path(m)}:{','.join(map(str, lines))} imports {t} "
        f"({LAYERS[layer_of(m)][0]} -> {LAYERS[layer_of(t)][0]})"
        for (m, t), lines in sorted(new.items()))


def test_the_upward_allowlist_only_shrinks():
    gone = sorted(set(UPWARD_ALLOWED) - set(upward_imports()))
    assert not gone, f"no longer imported: remove these from UPWARD_ALLOWED: {gone}"


def test_only_the_composition_root_imports_the_broker():
    found = broker_importers()
    new = {m: lines for m, lines in found.items() if m not in BROKER_IMPORT_ALLOWED}
    assert not new, "only cli/, broker.py and startup.py import shoal.broker; also:\n" + "\n".join(
        f"  {_path(m)}:{','.join(map(str, lines))}" for m, lines in sorted(new.items()))
    gone = sorted(set(BROKER_IMPORT_ALLOWED) - set(found))
    assert not gone, f"no longer import shoal.broker: remove these from BROKER_IMPORT_ALLOWED: {gone}"


def test_no_import_cycles():
    found = runtime_cycles()
    new = [c for c in found if c not in CYCLES_ALLOWED]
    assert not new, "import cycles (runtime imports, at any depth):\n" + "\n".join(
        f"  {sorted(c)}" for c in new)
    gone = [sorted(c) for c in CYCLES_ALLOWED if c not in found]
    assert not gone, f"no longer cycles: remove these from CYCLES_ALLOWED: {gone}"


def test_the_etcd_speech_finder_finds_it():
    source = """
import grpc
def f(client):
    from aetcd import rpc
    return client.rpc.PutRequest(key=b"k")
def g(x):
    return x.rpcs, x.client.txn
"""
    assert etcd_speech(source) == [2, 4, 5]


def test_only_the_etcd_package_speaks_etcd():
    found = {m: etcd_speech(p.read_text()) for m, p in MODULES.items() if top_name(m) != "etcd"}
    speakers = {m: lines for m, lines in found.items() if lines}
    assert not speakers, "etcd's RPC messages are built in shoal/etcd/ only; also:\n" + "\n".join(
        f"  {_path(m)}:{','.join(map(str, lines))}" for m, lines in sorted(speakers.items()))
