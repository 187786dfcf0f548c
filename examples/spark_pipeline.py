"""A Spark pipeline over minimq: produce events, aggregate them with Structured Streaming,
write the results to another topic and read them back.

Needs a running name server and broker, the ``spark`` extra and Java 17+::

    mqnamesrv &                      # 127.0.0.1:9876
    mqbroker -n 127.0.0.1:9876 &
    pip install -e '.[spark]'
    python examples/spark_pipeline.py --namesrv 127.0.0.1:9876 --events 2000

Each run uses fresh topic names (``SparkEvents-<run>``, ``SparkEventStats-<run>``), so runs do
not mix. The aggregation reads the events topic with ``Trigger.AvailableNow`` in micro-batches
of at most ``--batch`` messages; after each micro-batch the current totals per event kind are
written to the stats topic (newest message per kind wins when reading back).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import tempfile
import time
from collections import Counter
from typing import Any

os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from client import Message, Producer
from client.spark import register

KINDS = ("view", "click", "buy")


def produce_events(namesrv: str, topic: str, n: int) -> Counter[str]:
    """Send ``n`` JSON events (tag = kind); returns how many of each kind were sent."""
    sent: Counter[str] = Counter()
    rng = random.Random(42)
    with Producer(group="spark-example-pg", namesrv=namesrv) as producer:
        batch: list[Message] = []
        for i in range(n):
            kind = rng.choice(KINDS)
            event = {"user": f"u{rng.randrange(50)}", "kind": kind, "amount": i % 10}
            batch.append(Message(topic, json.dumps(event).encode(), tags=kind))
            sent[kind] += 1
            if len(batch) == 32:
                producer.send_batch(batch)
                batch = []
        if batch:
            producer.send_batch(batch)
    return sent


def spark_session() -> Any:
    """A local SparkSession bound to 127.0.0.1, with format("minimq") registered."""
    spark = (
        SparkSession.builder.master("local[2]")
        .appName("minimq-spark-pipeline")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.log.level", "ERROR")
        .getOrCreate()
    )
    register(spark)
    return spark


def aggregate(spark: Any, namesrv: str, events: str, stats: str, batch: int) -> None:
    """Stream ``events`` (availableNow), count and sum per kind, write totals to ``stats``."""
    schema = "user string, kind string, amount int"
    parsed = (
        spark.readStream.format("minimq")
        .option("namesrv", namesrv)
        .option("topic", events)
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", batch)
        .load()
        .select(F.from_json(F.col("body").cast("string"), schema).alias("e"))
        .select("e.*")
    )
    totals = parsed.groupBy("kind").agg(F.count("*").alias("events"), F.sum("amount").alias("sum"))

    def publish(df: Any, batch_id: int) -> None:
        out = df.select(
            F.to_json(F.struct("kind", "events", "sum")).alias("body"),
            F.col("kind").alias("tags"),
        )
        out.write.format("minimq").option("namesrv", namesrv).option("topic", stats).mode(
            "append"
        ).save()
        print(f"micro-batch {batch_id}: published {df.count()} totals")

    with tempfile.TemporaryDirectory(prefix="minimq-spark-") as ckpt:
        query = (
            totals.writeStream.outputMode("complete")
            .foreachBatch(publish)
            .option("checkpointLocation", ckpt)
            .trigger(availableNow=True)
            .start()
        )
        query.awaitTermination()


def read_back(spark: Any, namesrv: str, stats: str) -> dict[str, int]:
    """The newest total per kind in the stats topic."""
    rows = (
        spark.read.format("minimq").option("namesrv", namesrv).option("topic", stats).load()
    ).collect()
    latest: dict[str, tuple[Any, dict[str, Any]]] = {}
    for r in rows:
        total = json.loads(bytes(r.body))
        key = (r.store_timestamp, r.queue_offset)
        if total["kind"] not in latest or key > latest[total["kind"]][0]:
            latest[total["kind"]] = (key, total)
    return {kind: t["events"] for kind, (_, t) in sorted(latest.items())}


def main() -> int:
    """Run the pipeline; exit status 0 when the totals read back match what was produced."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--namesrv", default="127.0.0.1:9876")
    ap.add_argument("--events", type=int, default=2000)
    ap.add_argument("--batch", type=int, default=500, help="maxOffsetsPerTrigger")
    args = ap.parse_args()
    run = time.strftime("%Y%m%d%H%M%S")
    events, stats = f"SparkEvents-{run}", f"SparkEventStats-{run}"
    sent = produce_events(args.namesrv, events, args.events)
    print(f"produced {args.events} events to {events}: {dict(sorted(sent.items()))}")
    spark = spark_session()
    try:
        aggregate(spark, args.namesrv, events, stats, args.batch)
        got = read_back(spark, args.namesrv, stats)
    finally:
        spark.stop()
    print(f"totals read back from {stats}: {got}")
    ok = got == dict(sorted(sent.items()))
    print("OK" if ok else "MISMATCH")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
