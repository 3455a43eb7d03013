"""A streaming query through the exactly-once sink, run as its own Spark driver process so that
tests/spark/test_spark_exactly_once.py can kill -9 it in the middle of a micro-batch.

    python spark_eo_job.py BOOTSTRAP SOURCE_TOPIC OUT_TOPIC CHECKPOINT [HANG_VALUE HANG_FLAG [raise]]

Reads SOURCE_TOPIC from the earliest offset, 400 records a trigger (Trigger.AvailableNow), passes
the values through a Python UDF and writes key and value to OUT_TOPIC with ``exactlyOnce=true``.
With HANG_VALUE, the task that meets a record whose value starts with ``HANG_VALUE|`` writes
HANG_FLAG and sleeps until killed: its transaction open, with the rows of the UDF's earlier
chunks already produced in it (Spark evaluates Python UDFs in chunks of rows, through 64 KiB
buffers: the test's values are 2 KB, so the rows before the hang get through). With ``raise``,
it sleeps 3 s (the rows before are sent meanwhile) and raises instead: the task fails, and in
local mode (no task retries) so does the query.
Prints one JSON line ``{"id": query id, "batches": [[batch id, input rows], ...]}`` when done.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path


def main(argv: list[str]) -> None:
    bootstrap, src, out, ckpt = argv[:4]
    hang_value = argv[4].encode() if len(argv) > 4 else None
    hang_flag = argv[5] if len(argv) > 5 else None
    fail = len(argv) > 6 and argv[6] == "raise"
    here = Path(__file__).resolve().parent
    sys.path[:0] = [str(here.parents[1]), str(here)]  # this checkout's shoal, spark_helpers
    from spark_helpers import local_spark

    spark = local_spark("shoal-spark-eo-job", **{"spark.sql.execution.arrow.maxRecordsPerBatch": "2"})

    def passthrough(value):
        if hang_value is not None and value.split(b"|")[0] == hang_value:
            Path(hang_flag).write_text(str(os.getpid()))
            if fail:
                time.sleep(3)
                raise RuntimeError(f"failing on {hang_value!r} as asked")
            time.sleep(3600)
        return value

    from pyspark.sql import functions as F
    from pyspark.sql.types import BinaryType

    udf = F.udf(passthrough, BinaryType())
    df = (spark.readStream.format("shoal").option("kafka.bootstrap.servers", bootstrap)
          .option("subscribe", src).option("startingOffsets", "earliest").option("maxOffsetsPerTrigger", "400")
          .load().select("key", udf("value").alias("value")))
    q = (df.writeStream.format("shoal").option("kafka.bootstrap.servers", bootstrap).option("topic", out)
         .option("exactlyOnce", "true").option("checkpointLocation", ckpt)
         .trigger(availableNow=True).start())
    q.awaitTermination()
    print(json.dumps({"id": q.id, "batches": [[p["batchId"], p["numInputRows"]] for p in q.recentProgress]}),
          flush=True)
    spark.stop()


if __name__ == "__main__":
    main(sys.argv[1:])
