"""``shoal metering run``: the usage pipeline (``shoal.metering.pipeline``) on a local PySpark.

    $ shoal metering run --bootstrap-server 127.0.0.1:9092 --output usage/ --rate-card rates.json --once

Reads ``__shoal_usage`` (an operator's connection: the physical view; ``--command-config`` holds
Kafka client properties for SASL/TLS listeners, passed to the ``shoal`` source as ``kafka.*``)
and writes Parquet tables under ``--output`` (docs/metering.md). Without ``--once`` it runs until
interrupted (Ctrl-C stops the query after its current batch). Spark runs ``local[2]`` unless
``SPARK_MASTER`` says otherwise (then ``spark-submit`` settings apply).
Exit status: 0, 1 when the query failed, 2 for bad arguments (a bad rate card among them).
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path
from typing import Any

from shoal.cli.common import EXIT_ERROR, EXIT_USAGE, client_props


def add_parser(subparsers: Any) -> None:
    metering = subparsers.add_parser("metering", help="aggregate per-tenant usage on Spark (billing, utilization)")
    sub = metering.add_subparsers(dest="metering_command", required=True)
    p = sub.add_parser(
        "run", help="run the usage pipeline (PySpark Structured Streaming)",
        description="Read __shoal_usage through format('shoal') and keep Parquet tables under --output: "
                    "usage_raw, hourly_usage (per tenant and hour), billing (per tenant and month, priced by "
                    "--rate-card), broker_usage (per broker and window) and tenant_usage. Restarts from "
                    "--output/_checkpoint without counting twice.")
    p.add_argument("--bootstrap-server", required=True, metavar="HOST:PORT", help="a broker (the physical view)")
    p.add_argument("--output", required=True, metavar="DIR", help="where the tables and the checkpoint go")
    p.add_argument("--rate-card", metavar="FILE",
                   help='prices, JSON: {"gb_in": 0.05, "gb_out": 0.09, "partition_hour": 0.0015, '
                        '"gb_month_stored": 0.10, "currency": "USD"} (default: all 0)')
    p.add_argument("--once", action="store_true", help="process what is in the topic now, then stop (AvailableNow)")
    p.add_argument("--command-config", metavar="FILE", help="Kafka client properties (SASL, TLS) of the connection")
    p.add_argument("--watermark", default="2 hours", metavar="DELAY",
                   help="how late a usage record may arrive and still be de-duplicated (default '2 hours')")
    p.add_argument("--trigger-interval", default="10 seconds", metavar="INTERVAL",
                   help="micro-batch interval without --once (default '10 seconds')")
    p.add_argument("--max-offsets-per-trigger", type=int, metavar="N", help="records per micro-batch at most")
    p.set_defaults(func=cmd_metering)


def cmd_metering(args: argparse.Namespace) -> int:
    from shoal.metering.pipeline import PipelineOptions, RateCard, RateCardError, run

    name = "shoal metering run"
    try:
        card = RateCard.load(args.rate_card)
        props = client_props(args.command_config)
    except (RateCardError, OSError, ValueError) as e:
        print(f"{name}: {e}", file=sys.stderr)
        return EXIT_USAGE
    if args.max_offsets_per_trigger is not None and args.max_offsets_per_trigger < 1:
        print(f"{name}: --max-offsets-per-trigger must be at least 1", file=sys.stderr)
        return EXIT_USAGE
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    opts = PipelineOptions(
        bootstrap=args.bootstrap_server, output=Path(args.output), rate_card=card, once=args.once,
        client_options={f"kafka.{k}": v for k, v in props.items()}, watermark=args.watermark,
        trigger_interval=args.trigger_interval, max_offsets_per_trigger=args.max_offsets_per_trigger)
    from shoal.spark import spark_session

    spark = spark_session()
    try:
        p = run(spark, opts)
    except KeyboardInterrupt:
        print(f"{name}: interrupted", file=sys.stderr)
        return 0
    except Exception as e:  # noqa: BLE001 - Spark's errors: one line, the status says it failed
        print(f"{name}: {str(e).splitlines()[0] if str(e) else type(e).__name__}", file=sys.stderr)
        return EXIT_ERROR
    finally:
        spark.stop()
    print(f"{p.batches} batches, {p.records} usage records; tables in {opts.output}")
    return 0
