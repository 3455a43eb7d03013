"""The type checker's rules that mypy itself does not state (issue 26, part 6). ``make typecheck``
(run by ``make test``) runs mypy over the packages of ``[tool.mypy]`` in pyproject.toml; these
tests keep what it cannot see:

- no ``Any`` in the public signatures of those packages (public: a module-level function or a
  method of a public class, neither named with a leading underscore), and every parameter and
  return of them annotated (an unannotated one is an ``Any`` too); ``Any`` may stay inside
  function bodies and private helpers;
- every handler entry point (``@api``) is ``(ctx: RequestContext, <req>: XRequest) -> XResponse``,
  with the unions of ``shoal.handlers.messages`` for its own API;
- ``shoal.handlers.messages`` is what its handlers' version ranges make: each union lists exactly
  the versions its handler declares (``python tests/test_typing.py`` writes the file).

Modules are read with ``ast`` (the unions are under ``TYPE_CHECKING``); the handlers are imported
for their ``@api`` marks.
"""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

from kio.index import api_key_map, schema_name_map
from kio.static.constants import EntityType

SHOAL = Path(__file__).resolve().parent.parent / "shoal"
TYPED_PACKAGES = ("replica", "metadata", "cluster", "handlers", "etcd")


def _public(name: str) -> bool:
    return not name.startswith("_") or (name.startswith("__") and name.endswith("__"))


def _names(node: ast.expr | None) -> set[str]:
    """The names an annotation uses (a string annotation parsed first)."""
    if node is None:
        return set()
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        node = ast.parse(node.value, mode="eval").body
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name)} | {
        n.attr for n in ast.walk(node) if isinstance(n, ast.Attribute)}


def _public_functions(tree: ast.Module):
    """(class name or None, function) for each public function and public class's method."""
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and _public(node.name):
            yield None, node
        elif isinstance(node, ast.ClassDef) and _public(node.name):
            for item in node.body:
                if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)) and _public(item.name):
                    yield node.name, item


def _parameters(cls: str | None, fn: ast.FunctionDef | ast.AsyncFunctionDef) -> list[ast.arg]:
    a = fn.args
    params = [*a.posonlyargs, *a.args, *a.kwonlyargs, *(p for p in (a.vararg, a.kwarg) if p is not None)]
    static = any(isinstance(d, ast.Name) and d.id == "staticmethod" for d in fn.decorator_list)
    if cls is not None and not static and params and params[0].arg in ("self", "cls"):
        params = params[1:]
    return params


def public_signature_problems() -> list[str]:
    """``path:line function: what`` for each public signature with an ``Any`` or a missing
    annotation in the typed packages."""
    problems = []
    for package in TYPED_PACKAGES:
        for path in sorted((SHOAL / package).rglob("*.py")):
            tree = ast.parse(path.read_text(), str(path))
            for cls, fn in _public_functions(tree):
                where = f"{path.relative_to(SHOAL.parent)}:{fn.lineno} {cls + '.' if cls else ''}{fn.name}"
                for p in _parameters(cls, fn):
                    if p.annotation is None:
                        problems.append(f"{where}: {p.arg} is not annotated")
                    elif "Any" in _names(p.annotation):
                        problems.append(f"{where}: {p.arg} is Any")
                if fn.returns is None and fn.name != "__init__":
                    problems.append(f"{where}: the return is not annotated")
                elif "Any" in _names(fn.returns):
                    problems.append(f"{where}: returns Any")
    return problems


def test_no_any_in_public_signatures():
    assert public_signature_problems() == []


def _handlers() -> dict[int, tuple[int, int, str, str]]:
    """api key -> (min, max, module name, function name) of every ``@api`` handler."""
    out = {}
    for path in sorted((SHOAL / "handlers").glob("*.py")):
        module = importlib.import_module(f"shoal.handlers.{path.stem}")
        for obj in vars(module).values():
            mark = getattr(obj, "__shoal_api__", None)
            if mark is not None and callable(obj) and obj.__module__ == module.__name__:
                key, lo, hi = mark
                out[key] = (lo, hi, path.stem, obj.__name__)
    return out


MESSAGES = SHOAL / "handlers" / "messages.py"
GUARD = "if TYPE_CHECKING:\n"  # what is above it in messages.py is kept as it is


def _expected(key: int, lo: int, hi: int, kind: EntityType) -> tuple[str, list[str]]:
    """The alias of an API's requests (or responses) and the dotted classes of its union."""
    versions = schema_name_map[api_key_map[key]]
    paths = [versions[v][kind].replace(":", ".") for v in range(lo, hi + 1)]
    return paths[0].rsplit(".", 1)[1], paths


def messages_source() -> str:
    """What shoal/handlers/messages.py holds for the handlers as they are."""
    imports, aliases = [], []
    for key, (lo, hi, _module, _name) in sorted(_handlers().items()):
        for kind in (EntityType.request, EntityType.response):
            alias, paths = _expected(key, lo, hi, kind)
            imports += [f"    import {p.rsplit('.', 1)[0]}" for p in paths]
            one = f"    {alias} = {paths[0]}"
            if len(paths) == 1 and len(one) <= 116:
                aliases.append(one)
            else:
                aliases.append(f"    {alias} = (\n        " + "\n        | ".join(paths) + "\n    )")
    header = MESSAGES.read_text().partition(GUARD)[0] + GUARD
    return header + "\n".join(imports) + "\n\n" + "\n".join(aliases) + "\n"


def test_message_unions_cover_each_handlers_versions():
    assert MESSAGES.read_text() == messages_source(), (
        "shoal/handlers/messages.py is not current: python tests/test_typing.py writes it")


def test_every_handler_entry_point_is_annotated():
    functions = {}
    for path in sorted((SHOAL / "handlers").glob("*.py")):
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, ast.AsyncFunctionDef):
                functions[(path.stem, node.name)] = node
    for key, (lo, hi, module, name) in sorted(_handlers().items()):
        fn = functions[(module, name)]
        request, _ = _expected(key, lo, hi, EntityType.request)
        response, _ = _expected(key, lo, hi, EntityType.response)
        params = fn.args.args
        assert len(params) == 2, f"{module}.{name}"
        assert ast.unparse(params[0].annotation) == "RequestContext", f"{module}.{name}"
        assert ast.unparse(params[1].annotation) == request, f"{module}.{name}"
        assert fn.returns is not None and ast.unparse(fn.returns) in (response, f"{response} | None"), f"{module}.{name}"


if __name__ == "__main__":  # write shoal/handlers/messages.py for the handlers' version ranges
    MESSAGES.write_text(messages_source())
