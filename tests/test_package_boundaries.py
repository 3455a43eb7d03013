"""The boundaries issue 26 (part 4) drew, checked on the source: the ``shoal`` command's modules
import the shared module (``shoal.cli.common``, and its hints) and never each other, and brokers
talk to each other through ``shoal.net``, never through the admin client (``shoal.client``). The
console (``shoal.console``) is no broker code: it is a Kafka client acting for its logged-in user,
and uses the admin client as the ``shoal`` command does."""

import ast
from pathlib import Path

SHOAL = Path(__file__).resolve().parent.parent / "shoal"
# the modules that are not commands: the shared helpers, and serve's process supervisor (issue 29)
SHARED = {"shoal.cli.common", "shoal.cli.hints", "shoal.cli.supervisor"}


def _imports(path: Path) -> list[tuple[str, list[str]]]:
    """(module, names) of every import in ``path``, at any depth (function-level imports too)."""
    out = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out.append((node.module, [a.name for a in node.names]))
        elif isinstance(node, ast.Import):
            out.extend((a.name, []) for a in node.names)
    return out


def test_command_modules_import_only_the_shared_module():
    commands = [p for p in (SHOAL / "cli").glob("*.py") if p.name != "__init__.py" and f"shoal.cli.{p.stem}" not in SHARED]
    assert len(commands) >= 14
    for path in commands:
        for module, names in _imports(path):
            if module == "shoal.cli":
                raise AssertionError(f"{path.name} imports from the cli package: {names}")
            if module.startswith("shoal.cli.") and module not in SHARED:
                raise AssertionError(f"{path.name} imports another command module, {module}: put it in shoal.cli.common")


def test_no_flat_cli_or_client_modules_are_left():
    assert not list(SHOAL.glob("cli*.py")) and not (SHOAL / "client.py").exists()


def test_broker_modules_use_net_not_the_admin_client():
    for path in SHOAL.rglob("*.py"):
        rel = path.relative_to(SHOAL).parts
        if rel[0] in ("cli", "client", "console"):  # the clients: the command, the admin client, the console
            continue
        for module, names in _imports(path):
            assert not (module == "shoal.client" or module.startswith("shoal.client.")), f"{path}: {module}"
            if module.startswith("shoal.net"):
                assert not [n for n in names if n.startswith("_")], f"{path} imports private names of {module}: {names}"
        assert "__import__(" not in path.read_text(), f"{path}: import it by name"


def test_only_the_replica_layer_reaches_a_partitions_log():
    """Issue 26 (part 1): the log is private to ``Partition``; handlers and the other layers read
    it through ``Partition.view`` and flush through ``Partition.flush_if_due``."""
    import re

    reach = re.compile(r"\b(?:part|p|partition|leader)\.log\b(?!_)")
    checked = 0
    for path in SHOAL.rglob("*.py"):
        if path.relative_to(SHOAL).parts[0] in ("replica", "storage"):
            continue
        for n, line in enumerate(path.read_text().splitlines(), 1):
            assert not reach.search(line), f"{path}:{n}: use Partition.view (read-only) or a Partition method: {line.strip()}"
        checked += 1
    assert checked > 100
