"""aiokafka's own integration tests against Shoal: one broker, or three brokers on etcd.

    python bench/interop_aiokafka.py --targets single -k "transaction or txn or isolation or read_committed"
    python bench/interop_aiokafka.py --files transactional,producer,consumer --targets single,cluster
    python bench/interop_aiokafka.py --files all --json /tmp/aiokafka.json

What it does (no network at all):

1. aiokafka's published sdist has no tests (its MANIFEST.in says ``exclude tests/**``), so the
   tests come from a clone of aiokafka's repository (``--source``, a git directory or a work tree;
   by default ``$AIOKAFKA_SOURCE``): ``git archive v<VERSION> tests pyproject.toml`` is unpacked
   into the cache directory (``~/.cache/shoal-interop/aiokafka-<VERSION>-tests``, ``--cache``).
   They test the aiokafka installed here (the C extensions included; its conftest checks), which
   must be that version. ``pyproject.toml`` is aiokafka's own: its pytest settings hold
   (``asyncio_mode=auto``, warnings are errors).
2. aiokafka's ``tests/conftest.py`` starts Kafka in docker (``--docker-image``) and reads the
   broker's version from the image tag. A pytest plugin of this script's own
   (``shoal_aiokafka_plugin.py``, written there) replaces six of its fixtures as the conftest is
   registered: ``kafka_server`` answers the running broker (``SHOAL_KAFKA_BOOTSTRAP``),
   ``setup_test_class`` sets what the original sets with ``kafka_version`` = ``--kafka-version``
   (the tests gate features on it; 2.8.1 is the newest their CI runs), and what needs the
   container (SSL certificates, ``kafka-acls.sh``, ``kafka-configs.sh``, a Kerberos KDC) skips
   the test that touches it, with the reason. No test is edited.
3. Starts the target (bench/interop_brokers.py) configured as aiokafka's docker broker is
   (``docker/scripts/start-kafka.sh`` in aiokafka's repository and Kafka's shipped
   server.properties: broker 0, ``num.partitions=2``, auto-created topics, ``advertised.listeners``,
   ``group.initial.rebalance.delay.ms=0``; on three brokers the transaction log gets Kafka's
   default replication factor 3), runs ``python -m pytest FILES`` and reads pytest's JUnit XML
   into one line per test and target, and the totals. ``--json`` writes them.

Results are in docs/interop.md.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import subprocess
import sys
import tarfile
import time
from functools import partial
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from interop_brokers import Target, describe_machine  # noqa: E402
from interop_kafka_python import DEFAULT_CACHE, exit_code, parse_junit, print_table, run_target  # noqa: E402

# aiokafka's test files that need a broker (KafkaIntegrationTestCase); "sasl" needs the container's
# SASL/Kerberos set-up and skips itself here.
FILES = {
    "transactional": ["tests/test_transactional_producer.py", "tests/test_transactional_consumer.py"],
    "producer": ["tests/test_producer.py"],
    "consumer": ["tests/test_consumer.py"],
    "admin": ["tests/test_admin.py"],
    "client": ["tests/test_client.py", "tests/test_conn.py"],
    "coordinator": ["tests/test_coordinator.py"],
    "fetcher": ["tests/test_fetcher.py"],
    "sender": ["tests/test_sender.py", "tests/test_message_accumulator.py"],
    "pep492": ["tests/test_pep492.py"],
    "sasl": ["tests/test_sasl.py"],
}
ALL = ["transactional", "producer", "consumer", "admin", "client", "coordinator", "fetcher", "sender", "pep492"]

# Written into the unpacked tests: replaces the conftest's docker fixtures as it is registered
# (a plugin's own fixtures cannot override a conftest's: the conftest's are nearer the tests).
PLUGIN_PY = '''"""Written by Shoal's bench/interop_aiokafka.py: aiokafka's fixtures take a running broker."""
import os

import pytest

HOST, PORT = os.environ["SHOAL_KAFKA_BOOTSTRAP"].rsplit(":", 1)
VERSION = os.environ["SHOAL_KAFKA_VERSION"]


class Unavailable:
    """What needs Kafka's docker container: a test that touches it is skipped, with the reason."""

    def __init__(self, why):
        self._why = why

    def __getattr__(self, name):
        pytest.skip(self._why)

    def __truediv__(self, other):
        pytest.skip(self._why)


SSL = Unavailable("no SSL listener (aiokafka's certificates are made in its Kafka container)")
ACLS = Unavailable("kafka-acls.sh runs in aiokafka's Kafka container")
CONFIGS = Unavailable("kafka-configs.sh runs in aiokafka's Kafka container")
KERBEROS = Unavailable("no Kerberos KDC (aiokafka's runs in its Kafka container)")


class Server:
    host, port = HOST, int(PORT)
    ssl_port = sasl_plain_port = sasl_ssl_port = container = None
    hosts = [f"{HOST}:{PORT}"]


@pytest.fixture(scope="session")
def kafka_server():
    return Server()


@pytest.fixture(scope="session")
def ssl_folder():
    return SSL


@pytest.fixture(scope="class")
def acl_manager():
    return ACLS


@pytest.fixture(scope="class")
def kafka_config():
    return CONFIGS


@pytest.fixture(scope="class")
def kerberos_utils():
    return KERBEROS


@pytest.fixture(scope="class")
def setup_test_class(request, loop, kafka_server):
    cls = request.cls
    cls.loop = loop
    cls.kafka_host, cls.kafka_port = kafka_server.host, kafka_server.port
    cls.kafka_ssl_port = cls.kafka_sasl_plain_port = cls.kafka_sasl_ssl_port = None
    cls.ssl_folder, cls.acl_manager, cls.kerberos_utils, cls.kafka_config = SSL, ACLS, KERBEROS, CONFIGS
    cls.hosts = kafka_server.hosts
    cls.kafka_version = VERSION


REPLACED = {f.__name__: f for f in (kafka_server, ssl_folder, acl_manager, kafka_config, kerberos_utils,
                                    setup_test_class)}


@pytest.hookimpl(tryfirst=True)
def pytest_plugin_registered(plugin, plugin_name):
    if plugin_name and plugin_name.replace(os.sep, "/").endswith("/tests/conftest.py"):
        for name, fixture in REPLACED.items():
            setattr(plugin, name, fixture)
'''


def git_dir(source: Path) -> Path:
    return source / ".git" if (source / ".git").exists() else source


def unpack(cache: Path, version: str, source: Path | None) -> Path:
    """aiokafka's tests of ``version`` (from the git repository ``source``), with our plugin."""
    root = cache / f"aiokafka-{version}-tests"
    if not (root / "tests" / "conftest.py").exists():
        if source is None:
            raise SystemExit("aiokafka's PyPI sdist carries no tests/: give a clone of "
                             "https://github.com/aio-libs/aiokafka with --source (or $AIOKAFKA_SOURCE)")
        tar = subprocess.run(["git", "--git-dir", str(git_dir(source)), "archive", f"v{version}", "tests",
                              "pyproject.toml"], check=True, capture_output=True).stdout
        root.mkdir(parents=True, exist_ok=True)
        with tarfile.open(fileobj=io.BytesIO(tar)) as tf:
            tf.extractall(root, filter="data")
    (root / "shoal_aiokafka_plugin.py").write_text(PLUGIN_PY)
    return root


def run_pytest(root: Path, target: Target, files: list[str], kversion: str, keyword: str | None, out: Path,
               timeout: float, per_test: float) -> dict[str, dict[str, str]]:
    xml = out / "junit.xml"
    env = {**os.environ, "SHOAL_KAFKA_BOOTSTRAP": target.first, "SHOAL_KAFKA_VERSION": kversion,
           "PYTHONPATH": str(root)}
    env.pop("PYTEST_ADDOPTS", None)
    cmd = [sys.executable, "-m", "pytest", "-p", "shoal_aiokafka_plugin", "-p", "no:cacheprovider",
           "-p", "no:hypothesispytest", "-rA", f"--timeout={per_test:.0f}", "-o", "log_level=INFO",
           f"--junitxml={xml}", *files]
    if keyword:
        cmd += ["-k", keyword]
    with open(out / "pytest.log", "wb") as log:
        try:
            subprocess.run(cmd, cwd=root, env=env, stdout=log, stderr=subprocess.STDOUT, timeout=timeout)
        except subprocess.TimeoutExpired:
            log.write(f"\n===== pytest killed after {timeout:.0f} s =====\n".encode())
    return parse_junit(xml, parts=2)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--version", default="0.14.0", help="aiokafka version (its git tag v<VERSION>)")
    ap.add_argument("--source", type=Path, default=os.environ.get("AIOKAFKA_SOURCE"),
                    help="a clone of aiokafka's repository (git directory or work tree)")
    ap.add_argument("--kafka-version", default="2.8.1",
                    help="the broker version the tests gate features on (2.8.1: the newest aiokafka's CI runs)")
    ap.add_argument("--targets", default="single,cluster", help="single, cluster or both (comma-separated)")
    ap.add_argument("--files", default="transactional,producer,consumer",
                    help=f"comma-separated, of {sorted(FILES)}, 'all' ({', '.join(ALL)}) or test paths")
    ap.add_argument("-k", dest="keyword", default=None, help="pytest -k expression")
    ap.add_argument("--cache", type=Path, default=DEFAULT_CACHE)
    ap.add_argument("--timeout", type=float, default=3600, help="wall-clock limit of one pytest run (s)")
    ap.add_argument("--test-timeout", type=float, default=300, help="pytest-timeout of one test (s)")
    ap.add_argument("--json", type=Path, default=None, help="write the results here")
    args = ap.parse_args()

    import aiokafka

    if aiokafka.__version__ != args.version:
        raise SystemExit(f"the installed aiokafka is {aiokafka.__version__}, the tests are {args.version}'s")
    root = unpack(args.cache, args.version, args.source)
    names = ALL if args.files == "all" else args.files.split(",")
    files = [p for f in names for p in FILES.get(f, [f])]
    targets = args.targets.split(",")
    print(f"aiokafka {args.version} tests ({', '.join(files)}), kafka_version={args.kafka_version}; "
          f"{describe_machine()}", flush=True)
    all_results: dict[str, dict[str, dict[str, str]]] = {}
    stamp = time.strftime("%Y%m%d-%H%M%S")
    for kind in targets:
        out = args.cache / "runs" / f"aiokafka-{stamp}-{kind}"
        out.mkdir(parents=True, exist_ok=True)
        # as aiokafka's docker broker (start-kafka.sh over Kafka's server.properties): broker 0, 2
        # partitions, advertised.listeners, no initial rebalance delay; Kafka's default RF 3 for
        # the transaction log where there are three brokers
        extra = {"num.partitions": "2", "group.initial.rebalance.delay.ms": "0"}
        if kind == "cluster":
            extra["transaction.state.log.replication.factor"] = "3"
        target = Target(kind, first_node_id=0, advertise=True, extra=extra)
        all_results[kind] = run_target(target, out, "", partial(
            run_pytest, root, files=files, kversion=args.kafka_version, keyword=args.keyword, out=out,
            timeout=args.timeout, per_test=args.test_timeout))
    print_table(all_results, targets, 80)
    if args.json:
        args.json.write_text(json.dumps({"aiokafka": args.version, "kafka_version": args.kafka_version,
                                         "machine": describe_machine(), "results": all_results}, indent=1))
    return exit_code(all_results)


if __name__ == "__main__":
    sys.exit(main())
