"""``mqbench spark-read``: batch-read a topic into Spark and count it, against the plain client.

Fills the topic (untimed), pulls it once with the plain pull consumer (``mqbench consume``'s
worker) for the reference rate, then reads it with ``spark.read.format("minimq")...count()`` on
``local[<cores>]`` after one small untimed warm-up query, ``--reads`` times in the same
session (the first of them still pays for the JVM compiling its Arrow and count paths). Like
the plain pull, Spark reads only the offsets the fill wrote (``startingOffsets`` and
``endingOffsets``), so a topic that already held messages (``--namesrv``) counts right.
Needs the ``spark`` extra and Java. Imported only when the command runs (pyspark is
optional).
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Mapping
from typing import Any

import click

from client.bench import stats
from client.bench.account import Account
from client.bench.cli import Session, _bench_errors, _config, _consume_run, _fill, common_options
from client.bench.protocol import QueueRanges
from client.spark.offsets import QueueKey, to_nested

WARMUP_PER_QUEUE = 1000


def _session(master: str) -> Any:
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    try:
        from pyspark.sql import SparkSession
    except ImportError as exc:
        raise click.ClickException(
            "pyspark is missing: pip install '.[spark]' in the minimq checkout"
        ) from exc
    from client.spark import register

    spark = (
        SparkSession.builder.master(master)
        .appName("mqbench-spark-read")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.log.level", "ERROR")
        .getOrCreate()
    )
    register(spark)
    return spark


def fill_offsets(
    topic: str,
    filled: QueueRanges,
    bounds: Mapping[QueueKey, tuple[int, int]],
    per_queue: int | None = None,
) -> tuple[str, str]:
    """``startingOffsets`` and ``endingOffsets`` (JSON) that read what the fill wrote and nothing
    else (at most ``per_queue`` messages of each queue when given): messages the topic held
    before, on a ``--namesrv`` cluster, are not read, and a queue the fill did not write is read
    from its max offset to itself. Every end lies within its queue, however few messages it
    got."""
    start: dict[QueueKey, int] = {}
    end: dict[QueueKey, int] = {}
    for key, (_, max_offset) in bounds.items():
        if key[0] != topic:
            continue
        first, stop = filled.get((key[1], key[2]), (max_offset, max_offset))
        start[key] = first
        end[key] = stop if per_queue is None else min(stop, first + per_queue)
    return json.dumps(to_nested(start)), json.dumps(to_nested(end))


def _spark_count(
    spark: Any, namesrv: str, topic: str, offsets: tuple[str, str], account: Account
) -> tuple[int, float]:
    reader = spark.read.format("minimq").option("namesrv", namesrv).option("topic", topic)
    if account.access_key:
        reader = reader.option("accessKey", account.access_key)
        reader = reader.option("secretKey", account.secret_key)
    reader = reader.option("startingOffsets", offsets[0]).option("endingOffsets", offsets[1])
    t0 = time.perf_counter()
    n = int(reader.load().count())
    return n, time.perf_counter() - t0


@click.command("spark-read")
@common_options
@click.option("--count", type=click.IntRange(1), default=1_000_000, show_default=True)
@click.option("--master", default="local[2]", show_default=True, help="Spark master.")
@click.option(
    "--reads",
    type=click.IntRange(1),
    default=2,
    show_default=True,
    help="Timed full reads in one SparkSession (best reported; each listed).",
)
def spark_read_command(**kw: Any) -> None:
    """Fill the topic, then: plain client pull rate vs Spark batch read + count rate."""
    s = Session(kw)
    kw.update(clients=1, pull_batch=32)
    config = _config(s, kw, count=kw["count"], master=kw["master"])
    with _bench_errors(), s.cluster() as (namesrv, _cluster):
        ranges = _fill(s, namesrv, kw)[0]
        results, _ = _consume_run(s, namesrv, kw, ranges)
        plain = stats.aggregate(results, body_size=kw["body_size"])
        spark = _session(kw["master"])
        try:
            from client.spark import brokers
            from client.spark.options import SecurityOptions
            from client.spark.pulling import open_shared_instance

            topic = kw["topic"]
            security = SecurityOptions(s.account.access_key, s.account.secret_key)
            with open_shared_instance(namesrv, security) as client:
                bounds = client.call(brokers.queue_bounds, [topic], timeout=30)
            warm = fill_offsets(topic, ranges, bounds, WARMUP_PER_QUEUE)
            _spark_count(spark, namesrv, topic, warm, s.account)
            full = fill_offsets(topic, ranges, bounds)
            reads = [
                _spark_count(spark, namesrv, topic, full, s.account) for _ in range(kw["reads"])
            ]
        finally:
            spark.stop()
    total = sum(e - b for b, e in ranges.values())
    for rows, _ in reads:
        if rows != total:
            raise click.ClickException(f"spark counted {rows} rows, the topic holds {total}")
    rates = [rows / seconds for rows, seconds in reads]
    rate = max(rates)
    obj = {
        "workload": "spark-read",
        "config": config,
        "rows": total,
        "expected_rows": total,
        "spark_seconds": [round(seconds, 3) for _, seconds in reads],
        "spark_rows_per_s_each": [round(r, 1) for r in rates],
        "spark_rows_per_s": round(rate, 1),
        "plain_pull_msgs_per_s": plain["msgs_per_s"],
        "ratio_to_plain": round(rate / plain["msgs_per_s"], 3),
    }
    if s.json:
        click.echo(stats.to_json(obj))
        return
    s.out.print(stats.machine_line(s.machine), style="dim")
    each = ", ".join(f"{r:,.0f}" for r in rates)
    s.out.print(
        f"spark-read: {total:,} rows; best of {len(rates)} reads {rate:,.0f} rows/s (each: "
        f"{each}; the first read also warms the JVM's JIT) vs plain client pull "
        f"{plain['msgs_per_s']:,.0f} msgs/s; ratio {obj['ratio_to_plain']:.2f}"
    )
