"""The Spark connector reads a BatchCQ topic (created with the real ``mqadmin updateTopic -a``)
message by message: every message once, with its own offset, body, tags and keys."""

from __future__ import annotations

from typing import Any

import pytest

from client import Message, Producer
from tests.processes import run_cli
from tests.spark.cluster import SyncCluster

pytest.importorskip("pyspark")  # installed by the spark extra; see conftest

TOPIC = "SparkBatchCQ"
TAGS = ("A", "B", "C")


def _create(cluster: SyncCluster) -> None:
    for addr in cluster.brokers.values():
        done = run_cli(
            "client.admin.cli", "updateTopic", "-n", cluster.namesrv, "-b", addr,
            "-t", TOPIC, "-r", "2", "-w", "2", "-a", "+queue.type=BatchCQ",
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
    again = run_cli(
        "client.admin.cli", "updateTopic", "-n", cluster.namesrv, "-c", "DefaultCluster",
        "-t", TOPIC, "-r", "2", "-w", "2", "-a", "+queue.type=SimpleCQ",
    )  # fmt: skip
    assert again.returncode == 1
    assert "unchangeable attribute" in again.stderr


def _send(namesrv: str) -> dict[tuple[str, int, int], tuple[bytes, str, str]]:
    """Batches of 5 and single messages; (broker, queue, offset) -> (body, tags, keys)."""
    sent: dict[tuple[str, int, int], tuple[bytes, str, str]] = {}
    with Producer(group="spark-bcq-pg", namesrv=namesrv) as p:
        for b in range(8):
            msgs = [
                Message(TOPIC, b"b%d-%d" % (b, i), tags=TAGS[i % 3], keys=[f"k{b}-{i}"])
                for i in range(5)
            ]
            r = p.send_batch(msgs)
            for i, m in enumerate(msgs):
                key = (r.queue.broker_name, r.queue.queue_id, r.queue_offset + i)
                sent[key] = (m.body, TAGS[i % 3], f"k{b}-{i}")
            single = Message(TOPIC, b"s%d" % b, tags="A", keys=[f"s{b}"])
            r = p.send(single)
            sent[(r.queue.broker_name, r.queue.queue_id, r.queue_offset)] = (
                single.body,
                "A",
                f"s{b}",
            )
    return sent


def _rows(spark: Any, namesrv: str, **options: str) -> dict[tuple[str, int, int], Any]:
    reader = spark.read.format("minimq").option("namesrv", namesrv).option("topic", TOPIC)
    for k, v in options.items():
        reader = reader.option(k, v)
    rows = reader.load().collect()
    out = {(r.broker, r.queue_id, r.queue_offset): r for r in rows}
    assert len(out) == len(rows)  # no message twice
    return out


def test_spark_reads_every_message_of_a_batch_cq_topic(spark: Any, cluster: SyncCluster) -> None:
    _create(cluster)
    sent = _send(cluster.namesrv)
    rows = _rows(spark, cluster.namesrv, pullBatchSize="7")  # pulls start mid-batch
    assert {k: (bytes(r.body), r.tags, r.keys) for k, r in rows.items()} == sent
    assert all("INNER_NUM" not in dict(r.properties) for r in rows.values())

    tagged = _rows(spark, cluster.namesrv, tags="A || C")
    assert set(tagged) == {k for k, v in sent.items() if v[1] in ("A", "C")}

    with pytest.raises(Exception, match="SQL92 filtering is not supported"):
        _rows(spark, cluster.namesrv, sql="a IS NULL")
