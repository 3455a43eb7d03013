"""``shoal serve --processes N``: N full brokers on one host under one supervisor.

One Shoal broker is one Python process with one event loop, so one broker uses one core. To use a
machine's cores, the supervisor runs N brokers side by side, each its own process (``shoal
serve`` with the settings below), and keeps them running:

- Process ``i`` (0 … N-1) is node ``node.id + i``; each port of ``listeners`` and
  ``advertised.listeners`` is the configured one + i (port 0, "any free port", stays 0), and so
  are the ports of ``shoal.admin.listener`` and ``shoal.metrics.listener``; each directory of
  ``log.dirs`` gets a subdirectory ``p<i>`` (``/var/lib/shoal`` → ``/var/lib/shoal/p0``, ``p1``…).
- Every process gets the same ``broker.host`` (the configured one, else the host of the first
  advertised listener, a wildcard meaning this machine's name), so placement never puts two
  replicas of a partition on this machine while other hosts are free.
- They share one etcd metadata store (``shoal.metadata.store=etcd://…``): N > 1 with the
  embedded store (one process's file) is refused.
- A process that dies is started again after a back-off (1 s, doubled up to 60 s, back to 1 s
  once a process has run for 60 s), with one line saying why: its exit status or the signal
  that killed it, and (when it exited) its last line on stderr, where ``shoal serve`` says why
  it could not start.
- SIGTERM or SIGINT is passed to every process, each does its controlled shutdown; a second
  one kills them (SIGKILL). The supervisor exits 0 when every process stopped cleanly, 1 when
  any did not (each named in the log).
- Each process's output is the supervisor's, each line prefixed ``[p<i> node <id>]``; each labels
  its metrics with its ``node_id`` (``shoal.metrics.node.label``).
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import socket
import sys
import time
from dataclasses import dataclass, field
from typing import Any

log = logging.getLogger("shoal.supervisor")

BACKOFF_INITIAL_S = 1.0
BACKOFF_MAX_S = 60.0
STABLE_AFTER_S = 60.0  # a process up this long starts its back-off anew when it dies


class SupervisorError(Exception):
    """A configuration the supervisor cannot run (one line)."""


def shift_listeners(value: str | None, i: int) -> str | None:
    """``NAME://host:port,...`` with every non-zero port + ``i``."""
    from shoal.config import parse_listeners

    if value is None:
        return None
    out = []
    for name, host, port in parse_listeners("listeners", value):
        h = f"[{host}]" if ":" in host else host
        out.append(f"{name}://{h}:{port + i if port else 0}")
    return ",".join(out)


def shift_http(key: str, value: str | None, i: int) -> str | None:
    """The admin or metrics endpoint ``value`` (``http://host:port``; the metrics one may leave the
    host out) with the port + ``i`` (0 stays 0)."""
    if not value:
        return value
    from shoal.admin.http_listener import parse_listener
    from shoal.admin.metrics import parse_metrics_listener

    host, port = parse_metrics_listener(value) if key == "shoal.metrics.listener" else parse_listener(value)
    h = f"[{host}]" if ":" in host else host
    return f"http://{h}:{port + i if port else 0}"


def default_host(config: Any) -> str:
    """``broker.host`` when set, else the host of the first advertised listener (this machine's
    name when that is a wildcard)."""
    given = config.get("broker.host")
    if given:
        return str(given)
    advertised = config.advertised_listeners
    host = advertised[0][1] if advertised else ""
    return host if host not in ("", "0.0.0.0", "::") else socket.gethostname()


def process_settings(settings: dict[str, str], config: Any, i: int) -> dict[str, str]:
    """The settings of process ``i``: ``settings`` (the supervisor's flags and overrides) with the
    node id, ports and log dirs of that process and the shared ``broker.host``."""
    out = dict(settings)
    out["node.id"] = str(config.node_id + i)
    if config.get("broker.id") is not None:  # (from --config: it must equal node.id)
        out["broker.id"] = out["node.id"]
    out["listeners"] = shift_listeners(config.get("listeners"), i) or ""
    if config.get("advertised.listeners") is not None:
        out["advertised.listeners"] = shift_listeners(config.get("advertised.listeners"), i) or ""
    for key in ("shoal.admin.listener", "shoal.metrics.listener"):
        shifted = shift_http(key, config.get(key), i)
        if shifted:
            out[key] = shifted
    out["log.dirs"] = ",".join(os.path.join(d, f"p{i}") for d in config.log_dirs)
    out["broker.host"] = default_host(config)
    out.setdefault("shoal.metrics.node.label", "true")  # several brokers' series side by side
    return out


def check(config: Any, processes: int) -> None:
    if processes < 1:
        raise SupervisorError("--processes must be at least 1")
    store = str(config.get("shoal.metadata.store") or "")
    if processes > 1 and not store.startswith("etcd://"):
        raise SupervisorError(
            f"--processes {processes} needs a shared metadata store: set shoal.metadata.store=etcd://HOST:PORT "
            f"(the embedded store, {store or 'embedded'}, is one process's file; docs/processes.md)")


def describe_exit(status: int) -> str:
    if status < 0:
        try:
            name = signal.Signals(-status).name
        except ValueError:
            name = f"signal {-status}"
        return f"killed by {name}"
    return f"exited with status {status}"


@dataclass
class Child:
    index: int
    node_id: int
    argv: list[str]
    proc: asyncio.subprocess.Process | None = None
    started: float = 0.0
    backoff: float = BACKOFF_INITIAL_S
    last_err: str = ""
    restarts: int = 0
    final: int | None = None
    pumps: list[asyncio.Task[None]] = field(default_factory=list)

    @property
    def tag(self) -> str:
        return f"p{self.index} node {self.node_id}"


def _die_with_parent() -> None:
    """In the child, before exec: SIGTERM when the supervisor dies (Linux prctl PR_SET_PDEATHSIG),
    so a supervisor killed with SIGKILL leaves no broker behind."""
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)
    except Exception:
        pass


class Supervisor:
    def __init__(self, children: list[Child], env: dict[str, str] | None = None) -> None:
        self.children = children
        self.env = env
        self.stopping = False
        self.killing = False
        self._wake = asyncio.Event()

    async def _spawn(self, c: Child) -> None:
        c.proc = await asyncio.create_subprocess_exec(
            *c.argv, stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE, env=self.env, start_new_session=True, preexec_fn=_die_with_parent)
        c.started = time.monotonic()
        c.last_err = ""
        assert c.proc.stdout is not None and c.proc.stderr is not None
        c.pumps = [asyncio.create_task(self._pump(c, c.proc.stdout, sys.stdout, False)),
                   asyncio.create_task(self._pump(c, c.proc.stderr, sys.stderr, True))]

    async def _pump(self, c: Child, stream: asyncio.StreamReader, out: Any, is_err: bool) -> None:
        while True:
            line = await stream.readline()
            if not line:
                return
            text = line.decode(errors="replace").rstrip("\n")
            if is_err and text.strip():
                c.last_err = text.strip()
            try:
                out.write(f"[{c.tag}] {text}\n")
                out.flush()
            except (BrokenPipeError, ValueError):
                pass

    async def _watch(self, c: Child) -> None:
        while True:
            await self._spawn(c)
            assert c.proc is not None
            status = await c.proc.wait()
            await asyncio.gather(*c.pumps, return_exceptions=True)
            if self.stopping:
                c.final = status
                if status == 0:
                    log.info("process %s stopped cleanly", c.tag)
                else:
                    log.error("process %s %s while stopping%s", c.tag, describe_exit(status),
                              _reason(c) if status > 0 else "")
                return
            ran = time.monotonic() - c.started
            if ran >= STABLE_AFTER_S:
                c.backoff = BACKOFF_INITIAL_S
            delay = c.backoff
            c.backoff = min(c.backoff * 2, BACKOFF_MAX_S)
            c.restarts += 1
            log.error("process %s %s after %.1f s%s; restarting in %.0f s (restart %d)",
                      c.tag, describe_exit(status), ran, _reason(c) if status > 0 else "", delay, c.restarts)
            self._wake.clear()
            try:
                await asyncio.wait_for(self._wake.wait(), delay)
            except asyncio.TimeoutError:
                pass
            if self.stopping:
                c.final = status if status != 0 else 1  # it died, and was not restarted
                return

    def stop(self, sig: int) -> None:
        if self.stopping:
            if not self.killing:
                self.killing = True
                log.warning("second %s: killing the broker processes", signal.Signals(sig).name)
                self._send(signal.SIGKILL)
            return
        self.stopping = True
        log.info("%s: stopping %d broker processes (controlled shutdown each)", signal.Signals(sig).name,
                 len(self.children))
        self._wake.set()
        self._send(sig)

    def _send(self, sig: int) -> None:
        for c in self.children:
            if c.proc is not None and c.proc.returncode is None:
                try:
                    c.proc.send_signal(sig)
                except ProcessLookupError:
                    pass

    async def run(self) -> int:
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, self.stop, sig)
        await asyncio.gather(*(self._watch(c) for c in self.children))
        failed = [c for c in self.children if c.final != 0]
        if failed:
            log.error("%d of %d broker processes did not stop cleanly: %s", len(failed), len(self.children),
                      ", ".join(f"{c.tag} ({describe_exit(c.final or 0)})" for c in failed))
            return 1
        log.info("all %d broker processes stopped cleanly", len(self.children))
        return 0


def _reason(c: Child) -> str:
    return f": {c.last_err}" if c.last_err else ""


def child_argv(args: Any, settings: dict[str, str]) -> list[str]:
    argv = [sys.executable, "-m", "shoal", "serve", "--log-level", args.log_level]
    if args.config:
        argv += ["--config", args.config]
    for k, v in settings.items():
        argv += ["--override", f"{k}={v}"]
    return argv


def supervise(args: Any, settings: dict[str, str], config: Any) -> int:
    """Run ``args.processes`` brokers until a signal stops them; the exit status."""
    check(config, args.processes)
    children = [Child(i, config.node_id + i, child_argv(args, process_settings(settings, config, i)))
                for i in range(args.processes)]
    host = default_host(config)
    last = config.node_id + args.processes - 1
    log.info("supervising %d broker processes on host %s: nodes %d..%d, log dirs %s", args.processes, host,
             config.node_id, last, ", ".join(os.path.join(d, "p<i>") for d in config.log_dirs))
    return asyncio.run(Supervisor(children).run())
