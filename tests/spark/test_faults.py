"""The Spark source when brokers fail or a queue's offsets go back, against real processes."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest
import trio

from client import MessageQueue, PullConsumer
from client.admin.admin_client import AdminClient
from tests.spark.cluster import SyncCluster, sync_cluster, wait_for
from tests.spark.test_connector import produce, read, stream_once

pytest.importorskip("pyspark")  # installed by the spark extra; see conftest

NURSERY = "Exceptions from Trio nursery"


def test_group_commit_failures_are_logged_and_never_raised(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The ``group`` commit is advisory: a broker that went away, or a queue the brokers do
    not know, costs a warning naming it; the other queues' progress is still stored."""
    from pyspark.sql.streaming.datasource import ReadAllAvailable

    from client.spark.options import parse_read
    from client.spark.stream import StreamReader

    topic, group = "SparkCommitFail", "spark-commit-fail"
    with sync_cluster(tmp_path / "c", {"broker-a": {}, "broker-b": {}}) as c:
        c.create_topic(topic, {"broker-a": 1, "broker-b": 1})
        produce(c.namesrv, topic, {("broker-a", 0): 3, ("broker-b", 0): 2})
        opts = {"namesrv": c.namesrv, "topic": topic, "group": group}
        reader = StreamReader(parse_read({**opts, "startingOffsets": "earliest"}, streaming=True))
        try:
            end = reader.latestOffset(reader.initialOffset(), ReadAllAvailable())
            assert end == {topic: {"broker-a": {"0": 3}, "broker-b": {"0": 2}}}
            c.stop_broker("broker-b")
            end[topic]["broker-x"] = {"0": 7}  # a broker nobody knows: refused
            with caplog.at_level(logging.WARNING, logger="client.spark.stream"):
                reader.commit(end)
        finally:
            reader.stop()
        warnings = [
            r.getMessage()
            for r in caplog.records
            if r.name == "client.spark.stream" and r.levelno == logging.WARNING
        ]
        assert len(warnings) == 1, warnings
        assert group in warnings[0]
        assert "broker broker-b" in warnings[0]
        assert "broker broker-x" in warnings[0]
        with PullConsumer(group=group, namesrv=c.namesrv) as consumer:
            assert consumer.committed(MessageQueue(topic, "broker-a", 0)) == 3


def _delete_topic(c: SyncCluster, topic: str, broker: str) -> None:
    async def delete() -> None:
        async with AdminClient(c.namesrv) as admin:
            await admin.delete_topic_in_broker(c.brokers[broker], topic)
            await admin.delete_topic_in_namesrv(topic)

    trio.run(delete)


def test_offsets_going_back_are_data_loss_or_a_restart_at_earliest(
    spark: Any, cluster: SyncCluster, tmp_path: Path
) -> None:
    """A topic deleted and recreated under a running query: its queue's max offset is below
    the checkpoint. failOnDataLoss=true fails naming the queue and both offsets; false warns and
    reads the recreated queue from its first offset, so nothing new is lost."""
    topic, ckpt = "SparkOffsetsBack", tmp_path / "ckpt"
    cluster.create_topic(topic, {"broker-a": 1})
    old = produce(cluster.namesrv, topic, {("broker-a", 0): 30})
    first = stream_once(spark, cluster.namesrv, topic, ckpt, startingOffsets="earliest")
    assert sorted(r.msg_id for b in first for r in b) == sorted(old)

    _delete_topic(cluster, topic, "broker-a")
    cluster.create_topic(topic, {"broker-a": 1})
    new = produce(cluster.namesrv, topic, {("broker-a", 0): 10})
    with pytest.raises(Exception, match="went back from 30 to 10") as info:
        stream_once(spark, cluster.namesrv, topic, ckpt)
    assert f"topic {topic} broker broker-a queue 0" in str(info.value)
    assert "failOnDataLoss" in str(info.value)

    second = stream_once(spark, cluster.namesrv, topic, ckpt, failOnDataLoss="false")
    rows = [r for b in second for r in b]
    assert sorted(r.queue_offset for r in rows) == list(range(10))
    assert sorted(r.msg_id for r in rows) == sorted(new)
    newer = produce(cluster.namesrv, topic, {("broker-a", 0): 30})
    third = stream_once(spark, cluster.namesrv, topic, ckpt, failOnDataLoss="false")
    assert sorted(r.queue_offset for b in third for r in b) == list(range(10, 40))
    assert sorted(r.msg_id for b in third for r in b) == sorted(newer)


def test_a_broker_that_does_not_answer_does_not_stop_the_query_until_none_answers(
    spark: Any, tmp_path: Path
) -> None:
    """broker-b is frozen (SIGSTOP: its connections stay open, so its route stays at the name
    server, as in a partition): the query keeps reading broker-a, and broker-b's queue keeps
    its offset. A batch read fails naming broker-b. Once broker-a is frozen too, the query
    fails with a message naming both brokers."""
    topic = "SparkKilled"
    with sync_cluster(tmp_path / "c", {"broker-a": {}, "broker-b": {}}) as c:
        c.create_topic(topic, {"broker-a": 1, "broker-b": 1})
        produce(c.namesrv, topic, {("broker-a", 0): 5, ("broker-b", 0): 5})
        seen: list[Any] = []
        q = (
            spark.readStream.format("minimq")
            .option("namesrv", c.namesrv)
            .option("topic", topic)
            .option("startingOffsets", "earliest")
            .load()
            .writeStream.foreachBatch(lambda df, _id: seen.extend(df.collect()))
            .option("checkpointLocation", str(tmp_path / "ckpt"))
            .trigger(processingTime="200 milliseconds")
            .start()
        )
        try:
            wait_for(lambda: len(seen) >= 10, "the first 10 rows", 60)
            c.freeze_broker("broker-b")
            more = produce(c.namesrv, topic, {("broker-a", 0): 5})
            wait_for(lambda: len(seen) >= 15 or not q.isActive, "broker-a's 5 new rows", 60)
            assert q.exception() is None
            assert q.isActive
            assert {r.msg_id for r in seen[10:]} == set(more)
            assert len(seen) == 15

            with pytest.raises(Exception, match="broker-b") as info:
                read(spark, c.namesrv, topic)
            assert NURSERY not in str(info.value)

            c.freeze_broker("broker-a")
            wait_for(lambda: not q.isActive, "the query to fail", 60)
        finally:
            c.freeze_broker("broker-a", frozen=False)
            c.freeze_broker("broker-b", frozen=False)
            q.stop()
        message = str(q.exception())
        assert f"no broker of topic(s) {topic} answered" in message
        assert "broker broker-a" in message
        assert "broker broker-b" in message
        assert NURSERY not in message
