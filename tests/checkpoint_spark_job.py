"""A Spark job for tests/test_checkpoint_spark.py (run as ``python -m tests.checkpoint_spark_job``):
pyspark in local mode on the machine's Java 17, a Structured Streaming query over JSON files,
one file per micro-batch, whose ``foreachBatch`` sums each batch and saves the query's progress
through the checkpoint client (`checkpoint.integrations.spark`). The query's own checkpoint
folder is on the "node's" local disk, which a test throws away between runs."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

from pyspark.sql import SparkSession, functions

from checkpoint.integrations.spark import StreamingCheckpoints
from tests.checkpoint_support import client_from_env


def main() -> int:
    client, config = client_from_env()
    progress = StreamingCheckpoints(client, Path(config["local"]) / "query-checkpoint")
    resumed = progress.restore()
    print(json.dumps({"resumed_from": resumed}), flush=True)
    spark = (
        SparkSession.builder.master("local[1]")
        .appName("spotcap-checkpoint-test")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "1")
        .config("spark.driver.memory", "512m")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    stream = spark.readStream.schema("n INT").option("maxFilesPerTrigger", 1).json(config["input"])

    def each(batch: Any, batch_id: int) -> None:
        row = batch.agg(
            functions.sum("n").alias("total"), functions.count("n").alias("rows")
        ).collect()[0]
        result = {"total": int(row["total"] or 0), "rows": int(row["rows"])}
        progress.batch_done(batch_id, result)
        print(json.dumps({"batch": batch_id, **result}), flush=True)
        time.sleep(config["batch_s"])

    query = (
        stream.writeStream.foreachBatch(each)
        .option("checkpointLocation", str(progress.folder))
        .start()
    )
    query.processAllAvailable()
    query.stop()
    spark.stop()
    print(json.dumps({"results": progress.results}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
