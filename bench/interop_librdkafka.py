"""librdkafka's own test suite (tests/test-runner) against Shoal: one broker, and three brokers on
a real three-member etcd.

    python bench/interop_librdkafka.py                          # whole suite, 1 broker then 3
    python bench/interop_librdkafka.py --targets cluster --tests 0001,0090,0101
    python bench/interop_librdkafka.py --report                 # the table of the last results

What it does (no network but the npm registry and Debian's packages):

1. **Source.** librdkafka's source tree with its ``tests/`` directory ships inside the npm
   package ``@confluentinc/kafka-javascript`` (``deps/librdkafka``; 1.10.1 carries librdkafka
   2.15.1, the closest to the 2.16.0 that confluent-kafka uses here; Debian bookworm's source
   package is 2.0.2). ``npm pack`` fetches it into the cache directory (``~/.cache/shoal-interop``,
   ``--cache``); it is unpacked, configured (``--no-download --disable-gssapi --disable-curl``,
   builtin LZ4, the system's OpenSSL, zlib and zstd, and RapidJSON, without which four tests skip
   themselves: ``apt-get install libssl-dev zlib1g-dev libzstd-dev rapidjson-dev``) and built
   with ``make -j2 libs`` and ``make -C tests build`` (a few minutes on two cores; once;
   ``--rebuild`` builds again, e.g. after installing RapidJSON).
2. **Brokers.** bench/interop_brokers.py: ``single`` (one broker, embedded store, RF 1) or
   ``cluster`` (three brokers on etcd, ``default.replication.factor=3``,
   ``offsets.topic.replication.factor=3``, ``min.insync.replicas=2``), both with librdkafka's
   default test scenario's 4 partitions and auto-created topics, and Kafka's default
   ``group.initial.rebalance.delay.ms=3000``, which librdkafka's test brokers keep. Several
   tests create their own topics with replication factor 1: with ``min.insync.replicas=2``
   their acks=all produce is refused with NOT_ENOUGH_REPLICAS (as Kafka refuses it) and they
   time out;
   ``--min-insync-replicas 1`` (Kafka's default, and librdkafka's own test clusters') runs them
   on the cluster too, filed as ``cluster-misr1``.
3. **Tests.** The test list is read from ``tests/test.c``; tests needing no broker (``TEST_F_LOCAL``:
   unit tests and librdkafka's mock cluster) and manual ones are left out (``-L``). Tests are run
   by number (``TESTS=0045`` runs every 0045 variant), each number in its own ``test-runner -Q -L``
   process (quick mode), ``--jobs`` numbers at a time, with ``TEST_KAFKA_VERSION``
   (``--kafka-version``, 3.7.0: tests gate features on it) and a ``test.conf`` holding
   ``bootstrap.servers`` and ``test.timeout.multiplier`` (``--timeout-multiplier``: the brokers
   and the suite share two loaded cores). A number whose process outlives ``--group-timeout`` is
   killed and its tests count as failed (``TIMEOUT``). A failed number is run once more alone
   (``--retries``); a test that passes then is reported ``PASSED (retry)``.
4. **Results.** Each test's state and reason come from test-runner's own summary table (its
   ``failstr``: the failing assertion or the skip reason). They are merged into
   ``<cache>/librdkafka-results.json`` (a later run of a few tests updates those) and printed as
   one table: test, 1 broker, 3 brokers, reason; then the counts, the tests that pass on one
   broker and fail on three, and the replication-sensitive ones (``SENSITIVE``) on their own.
   Each process's output is kept under ``<cache>/runs/``.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tarfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from interop_brokers import Target, describe_machine  # noqa: E402

DEFAULT_CACHE = Path(os.environ.get("SHOAL_INTEROP_CACHE", Path.home() / ".cache" / "shoal-interop"))
NPM_PACKAGE = "@confluentinc/kafka-javascript"
NPM_VERSION = "1.10.1"  # carries librdkafka 2.15.1

# The replication-sensitive tests (issue 12): leader changes, metadata, acks, idempotence,
# offsets, consumer groups, fetch-from-follower. Everything else is reported too.
SENSITIVE = {
    "0001": "many producers and consumers, acks",
    "0002": "unknown partition: metadata",
    "0005": "ordering per partition",
    "0007": "auto-created topics: metadata",
    "0008": "request.required.acks 0/1/-1",
    "0011": "produce batches, acks",
    "0012": "produce then consume",
    "0014": "reconsume",
    "0015": "offsets, seek",
    "0018": "consumer group termination",
    "0019": "ListGroups",
    "0026": "pause/resume",
    "0029": "assign with offsets",
    "0030": "offset commit and fetch",
    "0031": "ListOffsets",
    "0033": "regex subscription: metadata",
    "0034": "offset reset",
    "0036": "partial fetch",
    "0040": "consumer events",
    "0041": "fetch.max.bytes",
    "0044": "partition count change: metadata",
    "0045": "subscription updates: metadata",
    "0048": "partitioner",
    "0050": "subscribe adds",
    "0051": "assign adds",
    "0054": "offsets for times",
    "0056": "balanced group, several consumers",
    "0059": "ListOffsets bsearch",
    "0061": "consumer lag (high watermark)",
    "0069": "partitions added, consumer",
    "0081": "admin: topics, partitions, configs, replicas",
    "0089": "max.poll.interval.ms, groups",
    "0090": "idempotent producer",
    "0091": "max.poll.interval.ms timeout",
    "0093": "head-of-line blocking across partitions",
    "0099": "commit metadata",
    "0101": "fetch from follower (KIP-392)",
    "0102": "static group membership",
    "0107": "topic re-created",
    "0112": "assign unknown partition",
    "0113": "cooperative rebalance",
    "0118": "commit during rebalance",
    "0122": "buffer cleaning after rebalance",
    "0127": "fetch queue backoff",
    "0130": "store offsets",
    "0132": "assignor ordering",
    "0137": "batch consume with barrier",
    "0139": "offset validation (leader epochs)",
    "0140": "commit metadata",
}

RF1_NOTE = "topic created with RF 1 < min.insync.replicas: acks=all is refused (NOT_ENOUGH_REPLICAS), as Kafka does"
STOP = threading.Event()  # set on SIGINT/SIGTERM: no new test-runner starts
RUNNING: set[subprocess.Popen] = set()  # the test-runners running now
BROKER_ERRORS: dict[str, list[str]] = {}  # target -> exceptions in its brokers' logs
ANSI = re.compile(r"\x1b\[[0-9;]*m|\x1b\(B")
ROW = re.compile(r"^\|\s*(\S+)\s+\|\s+(\w+)\s+\|\s*([\d.]+)s\s*\|(.*)$")


# -- source and build -------------------------------------------------------------------------------


def build(cache: Path, rebuild: bool = False) -> Path:
    """The built ``tests`` directory of librdkafka (fetched and built once)."""
    src = cache / "librdkafka-src"
    runner = src / "tests" / "test-runner"
    if runner.exists() and not rebuild:
        return runner.parent
    cache.mkdir(parents=True, exist_ok=True)
    tgz = next(iter(sorted(cache.glob("confluentinc-kafka-javascript-*.tgz"))), None)
    if tgz is None:
        subprocess.run(["npm", "pack", f"{NPM_PACKAGE}@{NPM_VERSION}"], cwd=cache, check=True)
        tgz = next(iter(sorted(cache.glob("confluentinc-kafka-javascript-*.tgz"))))
    shutil.rmtree(src, ignore_errors=True)
    src.mkdir()
    prefix = "package/deps/librdkafka/"
    with tarfile.open(tgz) as tf:
        members = []
        for m in tf.getmembers():
            if m.name.startswith(prefix) and len(m.name) > len(prefix):
                m.name = m.name[len(prefix):]
                members.append(m)
        tf.extractall(src, members=members, filter="data")
    missing = [h for h in ("openssl/ssl.h", "zlib.h", "zstd.h") if not Path("/usr/include", h).exists()]
    if missing or not shutil.which("gcc") or not shutil.which("make"):
        raise SystemExit(f"missing build tools or headers {missing}: apt-get install gcc g++ make libssl-dev "
                         "zlib1g-dev libzstd-dev rapidjson-dev")
    if not Path("/usr/include/rapidjson/document.h").exists():
        print("warning: no rapidjson (apt-get install rapidjson-dev): tests 0053, 0098, 0101 and 0110 will "
              "skip themselves", flush=True)
    log = cache / "build.log"  # not in src: mklove's configure loads every configure.* file in its cwd
    with open(log, "wb") as out:
        for cmd, cwd in ((["./configure", "--no-download", "--disable-gssapi", "--disable-curl"], src),
                         (["make", "-j2", "libs"], src), (["make", "-j2", "build"], src / "tests")):
            print(f"build: {' '.join(cmd)} (in {cwd}; output in {log})", flush=True)
            subprocess.run(cmd, cwd=cwd, stdout=out, stderr=subprocess.STDOUT, check=True)
    return runner.parent


def version_of(tests_dir: Path) -> str:
    text = (tests_dir.parent / "src" / "rdkafka.h").read_text(errors="replace")
    v = int(re.search(r"#define RD_KAFKA_VERSION\s+0x([0-9a-fA-F]+)", text).group(1), 16)
    return f"{v >> 24 & 0xff}.{v >> 16 & 0xff}.{v >> 8 & 0xff}"


def test_groups(tests_dir: Path) -> dict[str, list[str]]:
    """Test numbers -> the names of their tests that need a broker, from test.c's tests[] table."""
    text = (tests_dir / "test.c").read_text(errors="replace")
    table = text[text.index("struct test tests[]"):]
    table = table[:table.index("\n};")]
    groups: dict[str, list[str]] = {}
    for name, flags in re.findall(r"_TEST\((\w+),\s*([^,)]*)", table):
        if "TEST_F_LOCAL" in flags or "TEST_F_MANUAL" in flags:
            continue
        groups.setdefault(name[:4], []).append(name)
    return groups


# -- running ----------------------------------------------------------------------------------------


def parse_summary(output: str) -> dict[str, dict[str, str]]:
    """test-runner's summary rows: name -> state, seconds, reason (failstr)."""
    rows: dict[str, dict[str, str]] = {}
    for line in ANSI.sub("", output).splitlines():
        m = ROW.match(line.strip())
        if m and m.group(1) != "<MAIN>":
            rows[m.group(1)] = {"state": m.group(2), "seconds": m.group(3), "reason": m.group(4).strip()[:300]}
    return rows


FAILED_AT = re.compile(r'^### Test "([^"]+)" failed at (\S+) at .*###$')


def failures(output: str) -> dict[str, str]:
    """test name -> its first failure, "file:line:function(): message" (test-runner aborts on a
    failure before its summary table; these lines come first)."""
    found: dict[str, str] = {}
    lines = [ANSI.sub("", line).strip() for line in output.splitlines()]
    for i, line in enumerate(lines):
        m = FAILED_AT.match(line)
        if m:
            name = m.group(1).split(" ")[0]
            message = next((x for x in lines[i + 1:i + 4] if x and not x.startswith("[")), "")
            sub = m.group(1)[len(name):].strip()
            found.setdefault(name, f"{m.group(2)} {sub} {message}".replace("  ", " ").strip()[:300])
    return found


def run_group(tests_dir: Path, conf: Path, number: str, names: list[str], args: argparse.Namespace,
              logdir: Path, attempt: int) -> dict[str, dict[str, str]]:
    env = {**os.environ, "TESTS": number, "TEST_KAFKA_VERSION": args.kafka_version, "RDKAFKA_TEST_CONF": str(conf),
           "LD_LIBRARY_PATH": f"{tests_dir.parent / 'src'}:{tests_dir.parent / 'src-cpp'}"
                              + (":" + os.environ["LD_LIBRARY_PATH"] if os.environ.get("LD_LIBRARY_PATH") else "")}
    cmd = ["./test-runner", "-Q", "-L", "-p1", "-s", args.scenario]
    log = logdir / f"{number}{'' if attempt == 0 else f'.retry{attempt}'}.log"
    t0 = time.monotonic()
    with open(log, "wb") as out:
        proc = subprocess.Popen(cmd, cwd=tests_dir, env=env, stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True)
        RUNNING.add(proc)
        try:
            proc.wait(args.group_timeout)
            timed_out = False
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, 9)
            proc.wait()
            timed_out = True
        finally:
            RUNNING.discard(proc)
    output = log.read_text(errors="replace")
    rows = parse_summary(output)
    rf1 = "replication_factor=1)" in output or "replication_factor=1," in output
    failed = failures(output)
    results: dict[str, dict[str, str]] = {}
    for name in names:
        r = rows.get(name)
        if timed_out and (r is None or r["state"] in ("RUNNING", "NOT_STARTED")):
            r = {"state": "TIMEOUT", "seconds": f"{time.monotonic() - t0:.0f}",
                 "reason": f"test-runner killed after {args.group_timeout:.0f} s {failed.get(name, '')}".strip()}
        elif r is None and name in failed:
            r = {"state": "FAILED", "seconds": "", "reason": failed[name]}
        elif r is None:
            # not run (e.g. a variant skipped by -L), or the process died before its summary
            r = {"state": "FAILED" if proc.returncode and not rows else "SKIPPED", "seconds": "",
                 "reason": f"not in test-runner's summary (exit {proc.returncode})"}
        elif r["state"] == "FAILED" and not r["reason"]:
            r["reason"] = failed.get(name, "")
        if r["state"] == "FAILED" and "KAFKA_PATH" in r["reason"]:
            r["state"] = NO_KAFKA  # runs Kafka's own scripts (kafka-topics.sh ...), not a client test
        elif r["state"] == "FAILED" and "test_run_java(" in output and "KAFKA_PATH must be set" in output:
            # 0098: its transactions are written by Kafka's Java client (tests/java/*Cli.java), which
            # needs a Kafka distribution; without one it consumes an empty topic and fails
            r["state"] = NO_KAFKA
            r["reason"] = f"its producer is Kafka's Java client (test_run_java: KAFKA_PATH must be set); {r['reason']}"
        if r["state"] in ("FAILED", "TIMEOUT") and rf1 and args.min_insync_replicas > 1 and args.kind == "cluster":
            r["reason"] = f"[{RF1_NOTE}] {r['reason']}"
        r["log"] = str(log)
        results[name] = r
    return results


def label_of(kind: str, args: argparse.Namespace) -> str:
    """The results' name of a target: ``single``, ``cluster`` (min.insync.replicas=2), or
    ``cluster-misrN`` for another ``--min-insync-replicas``."""
    label = kind if kind == "single" or args.min_insync_replicas == 2 else f"cluster-misr{args.min_insync_replicas}"
    return label if args.scenario == "default" else f"{label}-{args.scenario}"


def run_target(kind: str, tests_dir: Path, groups: dict[str, list[str]], args: argparse.Namespace,
               rundir: Path) -> dict[str, dict[str, str]]:
    logdir = rundir / label_of(kind, args)
    logdir.mkdir(parents=True, exist_ok=True)
    # Kafka's default initial rebalance delay, which librdkafka's test brokers keep (the cluster
    # tests' brokers set 0): 0118_commit_rebalance counts on both its consumers joining the first
    # generation, and on a loaded machine the second one can come later than 0.5 s.
    extra = {"group.initial.rebalance.delay.ms": "3000"}
    if args.scenario == "noautocreate":  # librdkafka's tests/scenarios/noautocreate.json
        extra["auto.create.topics.enable"] = "false"
    if kind == "cluster":
        extra["min.insync.replicas"] = str(args.min_insync_replicas)
    target = Target(kind, extra=extra)
    results: dict[str, dict[str, str]] = {}
    lock = threading.Lock()
    t0 = time.monotonic()
    try:
        target.start()
        conf = logdir / "test.conf"
        conf.write_text(f"bootstrap.servers={target.bootstrap}\n"
                        f"test.timeout.multiplier={args.timeout_multiplier}\n")
        print(f"\n== {label_of(kind, args)}: {len(target.brokers)} broker(s) at {target.bootstrap}; {len(groups)} test numbers, "
              f"{args.jobs} at a time", flush=True)

        def one(number: str) -> None:
            if STOP.is_set():
                return
            res = run_group(tests_dir, conf, number, groups[number], args, logdir, 0)
            with lock:
                results.update(res)
                states = ", ".join(f"{n} {r['state']}" for n, r in res.items())
                print(f"  [{time.monotonic() - t0:6.0f} s] {states}", flush=True)

        pool = ThreadPoolExecutor(args.jobs)
        try:
            for f in [pool.submit(one, n) for n in sorted(groups)]:
                f.result()
        except BaseException:  # interrupted: no new test-runner, and end the running ones now
            STOP.set()
            for proc in list(RUNNING):
                os.killpg(proc.pid, 9)
            raise
        finally:
            pool.shutdown(cancel_futures=True)
        for attempt in range(1, args.retries + 1):
            again = sorted({n[:4] for n, r in results.items()
                            if r["state"] in ("FAILED", "TIMEOUT") and not r["reason"].startswith(f"[{RF1_NOTE}]")})
            if not again:
                break
            print(f"  retrying alone: {', '.join(again)}", flush=True)
            for number in again:
                res = run_group(tests_dir, conf, number, groups[number], args, logdir, attempt)
                for name, r in res.items():
                    first = results[name]
                    if first["state"] in ("FAILED", "TIMEOUT") and r["state"] == "PASSED":
                        r["state"] = "PASSED (retry)"
                        r["reason"] = f"first run: {first['state']} {first['reason']}"[:300]
                    elif first["state"] in ("FAILED", "TIMEOUT"):
                        r["reason"] = r["reason"] or first["reason"]
                    else:
                        continue
                    results[name] = r
                print("  retry: " + ", ".join(f"{n} {r['state']}" for n, r in res.items()), flush=True)
        errors = target.errors()
        for e in errors:
            print(f"  BROKER EXCEPTION: {e}", flush=True)
        BROKER_ERRORS[label_of(kind, args)] = errors
        crashed = target.crashed()
        if crashed:
            print(f"  BROKER CRASHED: {crashed}", flush=True)
            for r in results.values():
                r.setdefault("note", f"broker(s) {crashed} died during the run")
    finally:
        target.close(keep=logdir)
    print(f"== {label_of(kind, args)}: done in {time.monotonic() - t0:.0f} s", flush=True)
    return results


# -- report -----------------------------------------------------------------------------------------

TARGETS = ("single", "cluster")
PASS = ("PASSED", "PASSED (retry)")
NO_KAFKA = "NEEDS_KAFKA_PATH"
NOT_RUN = ("SKIPPED", "NOT_STARTED", NO_KAFKA)


def report(data: dict) -> None:
    res = data["results"]
    cols = [t for t in TARGETS if t in res] + sorted(t for t in res if t not in TARGETS)
    heads = {"single": "1 broker", "cluster": "3 brokers"}
    names = sorted({n for t in cols for n in res[t]})
    print(f"\nlibrdkafka {data.get('librdkafka', '?')} test suite against Shoal (TEST_KAFKA_VERSION="
          f"{data.get('kafka_version', '?')}, quick mode)")
    print(f"{'test':<48} " + " ".join(f"{heads.get(t, t):<16}" for t in cols) + " reason (last column not passed)")
    for n in names:
        states = [res[t].get(n, {}) for t in cols]
        reason = next((r.get("reason", "") for r in reversed(states) if r and r.get("state") not in PASS), "")
        tag = "*" if n[:4] in SENSITIVE else " "
        print(f"{tag}{n:<47} " + " ".join(f"{r.get('state', '-'):<16}" for r in states) + f" {reason}")
    print("(* replication-sensitive)")
    for t in cols:
        count = {k: 0 for k in ("passed", "failed", "skipped")}
        for r in res[t].values():
            st = r["state"]
            count["passed" if st in PASS else "skipped" if st in NOT_RUN else "failed"] += 1
        ran = count["passed"] + count["failed"]
        print(f"{heads.get(t, t):<16}: {count['passed']} passed, {count['failed']} failed, {count['skipped']} skipped "
              f"or not runnable, of {len(res[t])}" + (f"; {count['passed'] / ran:.0%} of those that ran" if ran else ""))
    single = res.get("single", {})
    for t in cols[1:] if single else []:
        other = res[t]
        regress = [n for n in names if single.get(n, {}).get("state") in PASS and n in other
                   and other[n]["state"] not in PASS]
        sens = [n for n in names if n[:4] in SENSITIVE and single.get(n, {}).get("state") in PASS and n in other]
        ok = [n for n in sens if other[n]["state"] in PASS]
        print(f"{heads.get(t, t)}: pass on 1 broker, not here: {', '.join(regress) or 'none'}; "
              f"replication-sensitive tests green on 1 broker: {len(sens)}, green here too: {len(ok)}")


def markdown(data: dict) -> None:
    """The per-test table as Markdown (docs/interop.md): tests that ran somewhere, one row each;
    tests skipped or not runnable everywhere, one line with their reasons."""
    res = data["results"]
    cols = [t for t in TARGETS if t in res] + sorted(t for t in res if t not in TARGETS)
    heads = {"single": "1 broker", "cluster": "3 brokers, min ISR 2", "cluster-misr1": "3 brokers, min ISR 1"}
    names = sorted({n for t in cols for n in res[t]})
    ran = [n for n in names if any(res[t].get(n, {}).get("state") not in NOT_RUN + ("-",) for t in cols)]
    print("| test | " + " | ".join(heads.get(t, t) for t in cols) + " | why not passed |")
    print("|---|" + "---|" * len(cols) + "---|")
    for n in ran:
        states = [res[t].get(n, {}) for t in cols]
        reasons = []
        for t, r in zip(cols, states):
            if r and r.get("state") not in PASS and r.get("reason") and r["reason"] not in reasons:
                reasons.append(r["reason"].replace("|", "/"))
        tag = " (R)" if n[:4] in SENSITIVE else ""
        print(f"| `{n}`{tag} | " + " | ".join(r.get("state", "-") for r in states) + f" | {'; '.join(reasons)} |")
    rest: dict[str, list[str]] = {}
    for n in names:
        if n not in ran:
            r = next(res[t][n] for t in cols if n in res[t])
            rest.setdefault(f"{r['state']}: {r.get('reason', '')}".strip(": "), []).append(n)
    print()
    for why, ns in sorted(rest.items()):
        print(f"- {why}: {', '.join(f'`{n}`' for n in ns)}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--targets", default="single,cluster", help="single, cluster or both (comma-separated)")
    ap.add_argument("--tests", default="", help="comma-separated test numbers (default: all that need a broker)")
    ap.add_argument("--skip", default="", help="comma-separated test numbers to leave out")
    ap.add_argument("--jobs", type=int, default=3, help="test numbers run at the same time")
    ap.add_argument("--group-timeout", type=float, default=600, help="wall-clock limit of one number's run (s)")
    ap.add_argument("--timeout-multiplier", type=float, default=2.0, help="test.timeout.multiplier")
    ap.add_argument("--retries", type=int, default=1, help="failed numbers are run again alone this often")
    ap.add_argument("--kafka-version", default="3.7.0", help="TEST_KAFKA_VERSION")
    ap.add_argument("--scenario", default="default", choices=("default", "noautocreate"),
                    help="librdkafka's test scenario; noautocreate: brokers without topic auto-creation "
                         "(tests 0045, 0107, 0111 have variants for it); results under <target>-noautocreate")
    ap.add_argument("--min-insync-replicas", type=int, default=2,
                    help="the cluster's min.insync.replicas (results under cluster-misrN unless 2)")
    ap.add_argument("--cache", type=Path, default=DEFAULT_CACHE)
    ap.add_argument("--results", type=Path, default=None, help="results JSON (default <cache>/librdkafka-results.json)")
    ap.add_argument("--report", action="store_true", help="only print the table of the results file")
    ap.add_argument("--markdown", action="store_true", help="with --report: the table in Markdown")
    ap.add_argument("--rebuild", action="store_true", help="unpack, configure and build librdkafka again")
    args = ap.parse_args()
    signal.signal(signal.SIGTERM, signal.default_int_handler)  # SIGTERM stops the brokers too

    results_path = args.results or args.cache / "librdkafka-results.json"
    data = json.loads(results_path.read_text()) if results_path.exists() else {"results": {}}
    if args.report:
        markdown(data) if args.markdown else report(data)
        return 0
    tests_dir = build(args.cache, args.rebuild)
    groups = test_groups(tests_dir)
    if args.tests:
        groups = {k: v for k, v in groups.items() if k in set(args.tests.split(","))}
    for k in filter(None, args.skip.split(",")):
        groups.pop(k, None)
    data.update({"librdkafka": version_of(tests_dir), "kafka_version": args.kafka_version,
                 "machine": describe_machine(), "when": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())})
    print(f"librdkafka {data['librdkafka']} tests; {data['machine']}", flush=True)
    rundir = args.cache / "runs" / f"librdkafka-{time.strftime('%Y%m%d-%H%M%S')}"
    for kind in args.targets.split(","):
        args.kind = kind
        res = run_target(kind, tests_dir, groups, args, rundir)
        if results_path.exists():  # another run (of the other target) may have written meanwhile
            latest = json.loads(results_path.read_text())
            data["results"] = latest.get("results", {})
            data["broker_errors"] = latest.get("broker_errors", {})
        data["results"].setdefault(label_of(kind, args), {}).update(res)
        data.setdefault("broker_errors", {})[label_of(kind, args)] = BROKER_ERRORS.get(label_of(kind, args), [])
        results_path.write_text(json.dumps(data, indent=1))
    report(data)
    return 0


if __name__ == "__main__":
    sys.exit(main())
