"""``shoal serve``: run a broker (flags, --config, --override, --quickstart), print how to connect,
stop on SIGINT/SIGTERM. A failure is one line on stderr: exit status 2 for a config that cannot be used,
1 for a broker that cannot start, 130 for Ctrl-C while starting."""

from __future__ import annotations

import argparse
import asyncio
import gc
import logging
import os
import signal
import sys

from shoal import __version__


def add_parser(sub) -> None:
    p = sub.add_parser(
        "serve", help="run a broker",
        description="Run a Shoal broker. Flags set the broker configs named in their help; any other "
                    "config goes in --config or --override (Kafka's names, e.g. num.partitions).",
    )
    p.add_argument("--config", metavar="FILE", help="a Kafka-style server.properties file (flags win over it)")
    p.add_argument("--listeners", metavar="NAME://HOST:PORT,...",
                   help="listeners: where the broker listens (default PLAINTEXT://127.0.0.1:9092)")
    p.add_argument("--advertised-listeners", metavar="NAME://HOST:PORT,...",
                   help="advertised.listeners: what clients are told to connect to (default: the listeners)")
    p.add_argument("--log-dirs", "--data-dir", dest="log_dirs", metavar="DIR[,DIR...]",
                   help="log.dirs: where partition logs and metadata live (default ./data)")
    p.add_argument("--node-id", type=int, metavar="N", help="node.id: this broker's id in the cluster (default 1)")
    p.add_argument("--rack", metavar="RACK", help="broker.rack: the broker's rack, for rack-aware placement")
    p.add_argument("--processes", type=int, metavar="N",
                   help="run N brokers on this host under a supervisor that restarts them: nodes node.id..node.id+N-1, "
                        "each listener port + i, log dirs <dir>/p<i>, one broker.host (N > 1 needs "
                        "shoal.metadata.store=etcd://; docs/processes.md). Default: one broker, no supervisor")
    p.add_argument(
        "--override", "-o", action="append", default=[], metavar="KEY=VALUE",
        help="any broker config, as in server.properties (repeatable; wins over --config)",
    )
    p.add_argument(
        "--log-level", type=_log_level, default=os.environ.get("SHOAL_LOG_LEVEL", "INFO"),
        metavar="{" + ",".join(LOG_LEVELS) + "}",
        help="how much the broker logs (default $SHOAL_LOG_LEVEL or INFO); DEBUG also prints the traceback of a failed start",
    )
    p.add_argument(
        "--quickstart", action="store_true",
        help="everything a newcomer needs on one machine, on loopback only (what `make serve` runs): "
             "PLAINTEXT on 127.0.0.1:9092, a SASL listener for tenants on 127.0.0.1:9093, the HTTP admin "
             "API on 127.0.0.1:9644, metrics on 127.0.0.1:9645, ACLs, and a super user 'admin' whose "
             "password is generated on first start into <log dir>/admin.properties (mode 0600); prints the "
             "commands to create a tenant and a user and to produce and consume as that user. Flags, "
             "--override and --config win over each of these settings",
    )
    p.set_defaults(func=cmd_serve)


LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")


def _log_level(value: str) -> str:
    level = value.strip().upper()
    if level not in LOG_LEVELS:
        raise argparse.ArgumentTypeError(
            f"invalid choice: {value!r} (choose from {', '.join(LOG_LEVELS)}, in any case)"
        )
    return level


def _overrides(args) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in args.override:
        if "=" not in item:
            raise SystemExit(f"--override wants KEY=VALUE, got {item!r}")
        k, v = item.split("=", 1)
        out[k.strip()] = v.strip()
    for flag, key in (
        ("listeners", "listeners"),
        ("advertised_listeners", "advertised.listeners"),
        ("log_dirs", "log.dirs"),
        ("node_id", "node.id"),
        ("rack", "broker.rack"),
    ):
        value = getattr(args, flag)
        if value is not None:
            out[key] = str(value)
    return out


def cmd_serve(args) -> int:
    from shoal.broker import Broker
    from shoal.config import BrokerConfig, ConfigError

    logging.basicConfig(
        level=args.log_level,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    from shoal.startup_errors import describe

    quick = None
    try:
        config = BrokerConfig.load(args.config, _serve_settings(args))
        if args.quickstart:
            config, quick = _quickstart(config)
    except ConfigError as e:
        _explain_failure(args, e, f"shoal serve: {describe(e, None)}")
        return 2
    except OSError as e:
        _explain_failure(args, e, f"shoal serve: cannot read the config file {args.config}: {e.strerror}: check the --config path")
        return 2
    except ValueError as e:  # shoal.quickstart.QuickstartError, a bad admin or metrics listener
        _explain_failure(args, e, f"shoal serve --quickstart: {e}")
        return 2
    if args.processes is not None:  # several brokers on this host (shoal.cli.supervisor)
        from shoal.cli.supervisor import SupervisorError, supervise

        if args.quickstart:
            print("shoal serve: --processes and --quickstart cannot be combined (the quick start is one broker "
                  "on an embedded store)", file=sys.stderr)
            return 2
        try:
            return supervise(args, _serve_settings(args), config)
        except SupervisorError as e:
            print(f"shoal serve: {e}", file=sys.stderr)
            return 2
    try:
        import uvloop

        uvloop.install()
    except ImportError:
        pass
    from shoal.server.allocator import tune

    tune()  # a request's buffers reuse the last one's pages (shoal.server.allocator)

    async def run() -> None:
        try:
            broker = Broker(config)
            await broker.start()
        except Exception as e:
            # A directory in use or unwritable, a metadata file that is not Shoal's, a port in use,
            # an unreadable certificate, a bad listener, a node.id held by a live broker (cluster):
            # one line that says what to do (shoal.startup_errors), no traceback but at DEBUG.
            raise _StartFailed(f"shoal serve: cannot start: {describe(e, config)}") from e
        # The ~50,000 objects of a started broker (modules, protocol schemas, the metadata image)
        # live as long as it: out of the collector's reach, a full collection takes ~5 ms
        # instead of 15-19 ms, a stall every request on the loop would wait out.
        gc.collect()
        gc.freeze()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, lambda: asyncio.ensure_future(broker.stop()))
        image = broker.metadata.image
        for l in broker.listeners:
            if quick is not None and broker.config.listener_security_protocols.get(l.name, "").startswith("SASL"):
                continue  # the quickstart's banner shows how to use it
            print(
                f"Shoal broker {broker.node_id} is up: {l.name}://{l.host}:{l.port} "
                f"(shoal {__version__}, cluster {image.cluster_id}, data in {broker.data_dir})\n"
                f"  connect with: --bootstrap-server {l.host}:{l.port}   e.g.\n"
                f"  kcat -b {l.host}:{l.port} -L\n"
                f"  shoal topics create demo --partitions 3 --bootstrap-server {l.host}:{l.port}",
                flush=True,
            )
        # -- what an operator must know: exposed secrets, and durability on one node (shoal.startup)
        from shoal.startup import durability_note, exposure_warnings

        for line in exposure_warnings(broker.config):
            logging.getLogger("shoal.broker").warning("%s", line)
        note = durability_note(broker.config, image)
        if note:
            print(f"  {note}", flush=True)
        if quick is not None:
            print(_quickstart_banner(broker, *quick), flush=True)
        await broker.wait_stopped()

    try:
        asyncio.run(run())
    except _StartFailed as e:
        _explain_failure(args, e.__cause__, str(e))
        return 1
    except KeyboardInterrupt:
        # Ctrl-C before the broker's own handler is in place (it waits for etcd, for its old
        # lease, for a directory): asyncio.run has cancelled the start and re-raised; what was
        # started is closed with the process. One line, as an interrupted command says it, no
        # traceback; 130, the shell's status for a SIGINT.
        print("shoal serve: stopped (interrupted while starting)", file=sys.stderr, flush=True)
        return 128 + signal.SIGINT
    return 0


def _serve_settings(args) -> dict[str, str]:
    """The flags and --override settings; with --quickstart, its defaults under them and the file."""
    given = _overrides(args)
    if not args.quickstart:
        return given
    from shoal import quickstart
    from shoal.config import parse_properties

    file_keys: set[str] = set()
    if args.config is not None:
        with open(args.config, encoding="utf-8") as f:
            file_keys = set(parse_properties(f.read()))
    return quickstart.overrides(given, file_keys)


def _quickstart(config):
    """(the config with the quickstart admin as a bootstrap user, (credentials file, the password
    to write there once the broker holds its directories or None))."""
    from shoal import quickstart
    from shoal.config import BrokerConfig

    quickstart.check(config)
    path = quickstart.credentials_path(config)
    password = quickstart.read_password(path)
    pending = None
    if password is None:
        password = pending = quickstart.new_password()
    elif quickstart.loose_permissions(path):
        logging.getLogger("shoal.quickstart").warning(
            "%s holds the admin password and others may read it: chmod 600 %s", path, path)
    static = dict(config.static_configs)
    static["shoal.sasl.bootstrap.users"] = quickstart.with_admin(static.get("shoal.sasl.bootstrap.users"), password)
    return BrokerConfig(static), (path, pending)


def _quickstart_banner(broker, path, pending: str | None) -> str:
    """Write the generated credentials (the broker now holds the directory), then the banner."""
    from shoal import quickstart

    protocols = broker.config.listener_security_protocols
    plain = next((f"{l.host}:{l.port}" for l in broker.listeners if protocols.get(l.name) == "PLAINTEXT"), "")
    sasl = next(f"{l.host}:{l.port}" for l in broker.listeners if protocols.get(l.name) in quickstart.SASL_PROTOCOLS)
    extra = ""
    if pending is not None:
        try:
            quickstart.write_credentials(path, pending)
        except OSError as e:
            logging.getLogger("shoal.quickstart").warning("cannot write %s: %s", path, e.strerror or e)
            extra = f"\n  (not written: {e.strerror or e}; the admin password, shown once: {pending})"
    admin = broker.admin_http
    metrics = getattr(broker, "metrics_http", None)
    return quickstart.banner(
        plaintext=plain, sasl=sasl,
        sasl_mechanisms=broker.config.get("sasl.enabled.mechanisms"),
        admin_url=f"http://{admin.host}:{admin.port}",
        metrics_url=f"http://{metrics.host}:{metrics.port}" if metrics is not None else None,
        credentials=path,
    ) + extra


def _explain_failure(args, error: BaseException | None, line: str) -> None:
    """The one line on stderr; at --log-level DEBUG the traceback first."""
    if args.log_level == "DEBUG" and error is not None:
        import traceback

        traceback.print_exception(error, file=sys.stderr)
    print(line, file=sys.stderr)


class _StartFailed(Exception):
    pass
