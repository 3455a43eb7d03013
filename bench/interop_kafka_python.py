"""kafka-python's own integration tests against Shoal: one broker, or three brokers on etcd.

    python bench/interop_kafka_python.py                       # the admin tests, 1 broker then 3
    python bench/interop_kafka_python.py --targets cluster -k "elect or log_dirs or reassign"
    python bench/interop_kafka_python.py --files admin,producer,consumer --targets single,cluster

What it does (no network but PyPI):

1. ``pip download kafka-python==VERSION --no-binary :all: --no-deps`` into the cache directory
   (``~/.cache/shoal-interop``, ``--cache``) and unpacks it. The sdist carries ``test/`` (the
   unit tests and ``test/integration/``) but not ``test/service.py``, the module that spawns
   Kafka's JVM and that ``test/integration/fixtures.py`` imports; this script writes a small one
   of its own there (``ExternalService`` only: with ``KAFKA_URI`` set the fixtures use no other),
   and a pytest plugin (``shoal_interop_plugin.py``, also its own) that makes every topic the
   fixtures create have the ``--replicas`` replication factor (the fixtures' default is 1; on
   the cluster 3, so elections and reassignments have followers to work with). It also writes an
   empty ``test/__init__.py``, without which ``import test`` finds Python's own regression tests.
2. Starts the target (bench/interop_brokers.py) with the settings kafka-python's own fixture gives
   its broker (an ACL authorizer, ``allow.everyone.if.no.acl.found=true``, ``advertised.listeners``
   in its configuration, ``group.min.session.timeout.ms=1000`` for the 3 s sessions of
   ``test_group``; node ids from 0, as ``test_create_partitions`` assigns partitions to broker 0),
   and runs ``python -m pytest FILES`` in the
   unpacked sdist with ``KAFKA_VERSION`` (``--kafka-version``, the broker version the tests gate
   features on) and ``KAFKA_URI=PLAINTEXT://<first broker>``: kafka-python's own fixtures then
   take the running broker instead of starting Kafka. Their ``--timeout=300`` (pytest-timeout)
   holds, with the signal method (theirs, thread, ends the whole run at the first hung test).
3. Reads pytest's JUnit XML and prints one line per test and target (passed, failed with the
   assertion's first line, skipped with the reason), and the totals. ``--json`` writes them.

The tests are kafka-python's as published; none is edited. Their results are in docs/interop.md.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tarfile
import time
import xml.etree.ElementTree as ET
from functools import partial
from pathlib import Path
from typing import Callable

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from interop_brokers import Target, describe_machine  # noqa: E402

DEFAULT_CACHE = Path(os.environ.get("SHOAL_INTEROP_CACHE", Path.home() / ".cache" / "shoal-interop"))
FILES = {
    "admin": "test/integration/test_admin_integration.py",
    "producer": "test/integration/test_producer_integration.py",
    "consumer": "test/integration/test_consumer_integration.py",
}

# Written into the unpacked sdist: the sdist lacks test/service.py. Only what the fixtures use with
# an external broker (KAFKA_URI); spawning a JVM is refused.
SERVICE_PY = '''"""Written by Shoal's bench/interop_kafka_python.py: the sdist lacks test/service.py."""


class ExternalService:
    def __init__(self, host, port):
        self.host, self.port = host, port

    def open(self):
        pass

    def close(self):
        pass

    def stop(self):
        pass

    def dump_logs(self):
        pass


class SpawnedService:
    def __init__(self, *args, **kwargs):
        raise RuntimeError("this run uses an external broker (KAFKA_URI); it never spawns Kafka")
'''

# A pytest plugin (-p shoal_interop_plugin): topics the fixtures create get SHOAL_INTEROP_REPLICAS.
PLUGIN_PY = '''"""Written by Shoal's bench/interop_kafka_python.py: fixtures' topics get the cluster's RF."""
import os


def pytest_configure(config):
    from test.integration import fixtures

    replicas = int(os.environ.get("SHOAL_INTEROP_REPLICAS", "1"))
    original = fixtures.KafkaFixture.instance.__func__

    def instance(cls, broker_id, *args, **kwargs):
        kwargs.setdefault("replicas", replicas)
        return original(cls, broker_id, *args, **kwargs)

    fixtures.KafkaFixture.instance = classmethod(instance)
'''


def fetch(cache: Path, version: str) -> Path:
    """The unpacked sdist (downloaded once), with our test/service.py and plugin written in."""
    root = cache / f"kafka_python-{version}"
    if not (root / "test" / "integration").is_dir():
        cache.mkdir(parents=True, exist_ok=True)
        sdist = cache / f"kafka_python-{version}.tar.gz"
        if not sdist.exists():
            subprocess.run([sys.executable, "-m", "pip", "download", f"kafka-python=={version}", "--no-binary",
                            ":all:", "--no-deps", "-d", str(cache)], check=True)
        with tarfile.open(sdist) as tf:
            tf.extractall(cache, filter="data")
        if not (root / "test" / "integration").is_dir():
            raise SystemExit(f"the kafka-python {version} sdist carries no test/integration/")
    (root / "test" / "service.py").write_text(SERVICE_PY)
    init = root / "test" / "__init__.py"  # else `test` is Python's own regression-test package
    if not init.exists():
        init.write_text("")
    (root / "shoal_interop_plugin.py").write_text(PLUGIN_PY)
    return root


def run_pytest(root: Path, target: Target, files: list[str], kversion: str, replicas: int, keyword: str | None,
               out: Path, timeout: float) -> dict[str, dict[str, str]]:
    xml = out / "junit.xml"
    env = {**os.environ, "KAFKA_VERSION": kversion, "KAFKA_URI": f"PLAINTEXT://{target.first}",
           "SHOAL_INTEROP_REPLICAS": str(replicas), "PYTHONPATH": str(root),
           # the fixtures want Kafka's install directory to exist even for an external broker
           "KAFKA_ROOT": str(root / "no-kafka-install")}
    (root / "no-kafka-install").mkdir(exist_ok=True)
    env.pop("PYTEST_ADDOPTS", None)
    # their addopts time tests out with --timeout-method=thread, which ends the whole process (no
    # JUnit XML, every result lost); with signal only the hung test fails
    cmd = [sys.executable, "-m", "pytest", "-p", "shoal_interop_plugin", "-p", "no:cacheprovider", "-p", "no:hypothesispytest", "-rA",
           "--timeout-method=signal", "-o", "log_level=INFO", f"--junitxml={xml}", *files]
    if keyword:
        cmd += ["-k", keyword]
    with open(out / "pytest.log", "wb") as log:
        try:
            subprocess.run(cmd, cwd=root, env=env, stdout=log, stderr=subprocess.STDOUT, timeout=timeout)
        except subprocess.TimeoutExpired:
            log.write(f"\n===== pytest killed after {timeout:.0f} s =====\n".encode())
    return parse_junit(xml)


def parse_junit(xml: Path, parts: int = 1) -> dict[str, dict[str, str]]:
    """pytest's JUnit XML: {"Class::test": {state, reason, seconds}}; ``parts`` 2 keeps the module
    too ("module.Class::test"), for suites whose files share class names."""
    results: dict[str, dict[str, str]] = {}
    if not xml.exists():
        return results
    for case in ET.parse(xml).getroot().iter("testcase"):
        name = ".".join(case.get("classname", "").split(".")[-parts:]) + "::" + case.get("name", "")
        state, reason = "passed", ""
        for tag in ("failure", "error", "skipped"):
            el = case.find(tag)
            if el is not None:
                state = {"failure": "failed", "error": "error", "skipped": "skipped"}[tag]
                reason = (el.get("message") or (el.text or "")).strip().splitlines()
                reason = reason[0][:200] if reason else ""
                break
        results[name] = {"state": state, "reason": reason, "seconds": case.get("time", "")}
    return results


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--version", default="3.0.12", help="kafka-python sdist version")
    ap.add_argument("--kafka-version", default="4.0.0",
                    help="KAFKA_VERSION the tests gate features on (kafka-python itself takes Shoal for 4.0)")
    ap.add_argument("--targets", default="single,cluster", help="single, cluster or both (comma-separated)")
    ap.add_argument("--files", default="admin", help=f"comma-separated, of {sorted(FILES)} or test paths")
    ap.add_argument("-k", dest="keyword", default=None, help="pytest -k expression")
    ap.add_argument("--replicas", type=int, default=None,
                    help="replication factor of the fixtures' topics (default: 1 single, 3 cluster)")
    ap.add_argument("--cache", type=Path, default=DEFAULT_CACHE)
    ap.add_argument("--timeout", type=float, default=3600, help="wall-clock limit of one pytest run (s)")
    ap.add_argument("--json", type=Path, default=None, help="write the results here")
    args = ap.parse_args()

    root = fetch(args.cache, args.version)
    files = [FILES.get(f, f) for f in args.files.split(",")]
    targets = args.targets.split(",")
    print(f"kafka-python {args.version} tests ({', '.join(files)}), KAFKA_VERSION={args.kafka_version}; "
          f"{describe_machine()}", flush=True)
    all_results: dict[str, dict[str, dict[str, str]]] = {}
    stamp = time.strftime("%Y%m%d-%H%M%S")
    for kind in targets:
        out = args.cache / "runs" / f"kafka-python-{stamp}-{kind}"
        out.mkdir(parents=True, exist_ok=True)
        replicas = args.replicas or (3 if kind == "cluster" else 1)
        # as kafka-python's fixture configures its broker (servers/resources/*/kafka.properties in
        # kafka-python's repository; not in the sdist): node 0, advertised.listeners, short sessions
        target = Target(kind, first_node_id=0, advertise=True, extra={"group.min.session.timeout.ms": "1000"})
        all_results[kind] = run_target(target, out, f", RF {replicas}", partial(
            run_pytest, root, files=files, kversion=args.kafka_version, replicas=replicas, keyword=args.keyword,
            out=out, timeout=args.timeout))
    print_table(all_results, targets, 70)
    if args.json:
        args.json.write_text(json.dumps({"kafka_python": args.version, "kafka_version": args.kafka_version,
                                         "machine": describe_machine(), "results": all_results}, indent=1))
    return exit_code(all_results)


def run_target(target: Target, out: Path, label: str,
               run: Callable[[Target], dict[str, dict[str, str]]]) -> dict[str, dict[str, str]]:
    """Start ``target``, ``run(target)`` a suite on it and stop it (its broker logs kept in
    ``out``); print the totals, one line per test, and any broker exception or crash."""
    t0 = time.monotonic()
    res: dict[str, dict[str, str]] = {}
    crashed: list[str] = []
    try:
        target.start()
        res = run(target)
        crashed = target.crashed()
        for e in target.errors():
            print(f"  BROKER EXCEPTION ({target.kind}): {e}", flush=True)
    finally:
        target.close(keep=out)
    counts = {s: sum(1 for r in res.values() if r["state"] == s) for s in ("passed", "failed", "error", "skipped")}
    n = len(target.brokers)
    print(f"\n== {target.kind} ({n} broker{'s' if n > 1 else ''}{label}): "
          f"{counts['passed']} passed, {counts['failed'] + counts['error']} failed, {counts['skipped']} skipped "
          f"in {time.monotonic() - t0:.0f} s; logs in {out}"
          + (f"; CRASHED: {crashed}" if crashed else ""), flush=True)
    for name, r in res.items():
        print(f"  {r['state']:<8} {name}" + (f"  -- {r['reason']}" if r["reason"] else ""), flush=True)
    return res


def print_table(all_results: dict[str, dict[str, dict[str, str]]], targets: list[str], width: int) -> None:
    """One line per test, one column per target (with more than one target)."""
    if len(targets) > 1:
        names = sorted({n for r in all_results.values() for n in r})
        print("\n" + f"{'test':<{width}} " + " ".join(f"{k:<8}" for k in targets))
        for n in names:
            print(f"{n:<{width}} " + " ".join(f"{all_results[k].get(n, {}).get('state', '-'):<8}" for k in targets))


def exit_code(all_results: dict[str, dict[str, dict[str, str]]]) -> int:
    bad = sum(1 for r in all_results.values() for x in r.values() if x["state"] in ("failed", "error"))
    return 1 if bad or not any(all_results.values()) else 0


if __name__ == "__main__":
    sys.exit(main())
