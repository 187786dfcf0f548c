"""The Spark source when brokers fail or a queue's offsets go back, against real processes."""

from __future__ import annotations

import logging
import os
import signal
from dataclasses import replace
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
import trio

from client import MessageQueue, PullConsumer
from client.admin.admin_client import AdminClient
from client.bench.cluster import stop_process
from client.instance import ClientInstance
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


def _freeze(proc: Any, *, frozen: bool = True) -> None:
    if proc.poll() is None:
        os.kill(proc.pid, signal.SIGSTOP if frozen else signal.SIGCONT)


def test_a_name_server_outage_uses_the_cached_routes_and_fails_only_after_the_tries(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A running query whose name server does not answer (frozen, then gone) while the broker
    is up goes on with the routes it holds, with a warning. A query whose topic has no route in
    the process fails only after the documented tries, with SourceUnavailableError saying why."""
    from pyspark.sql.streaming.datasource import ReadAllAvailable

    from client.spark import stream
    from client.spark.options import parse_read
    from client.spark.stream import SourceUnavailableError, StreamReader

    topic, unrouted = "SparkNamesrvDown", "SparkNamesrvDownToo"
    with sync_cluster(tmp_path / "c", {"broker-a": {}}) as c:
        c.create_topic(topic, {"broker-a": 1})
        c.create_topic(unrouted, {"broker-a": 1})
        produce(c.namesrv, topic, {("broker-a", 0): 5})
        opts = parse_read(
            {"namesrv": c.namesrv, "topic": topic, "startingOffsets": "earliest"}, streaming=True
        )
        running = StreamReader(opts)
        fresh = StreamReader(replace(opts, topics=(unrouted,)))
        namesrv = c.procs[0]
        try:
            start = running.initialOffset()
            produce(c.namesrv, topic, {("broker-a", 0): 3})
            _freeze(namesrv)  # requests to it time out
            with caplog.at_level(logging.WARNING, logger="client.spark.brokers"):
                end = running.latestOffset(start, ReadAllAvailable())
            assert end == {topic: {"broker-a": {"0": 8}}}
            warned = [r.getMessage() for r in caplog.records if r.name == "client.spark.brokers"]
            assert any(f"could not refresh the route of topic {topic}" in w for w in warned)
            _freeze(namesrv, frozen=False)
            stop_process(namesrv)  # gone: refused at once
            assert running.latestOffset(end, ReadAllAvailable()) == end

            monkeypatch.setattr(stream, "RETRY_INTERVAL_S", 0.1)
            tries: list[int] = []
            probe = fresh._probe
            monkeypatch.setattr(fresh, "_probe", lambda: tries.append(1) or probe())
            with pytest.raises(SourceUnavailableError) as info:
                fresh.latestOffset({}, ReadAllAvailable())
            assert len(tries) == stream.FETCH_ATTEMPTS
            message = str(info.value)
            assert f"could not get the routes of topic(s) {unrouted}" in message
            assert "no name server answered" in message
            assert f"{stream.FETCH_ATTEMPTS} attempts" in message
        finally:
            _freeze(namesrv, frozen=False)
            running.stop()
            fresh.stop()


async def _route_loop_pass(instance: ClientInstance) -> None:
    """What the instance's route loop does every pollNameServerInterval (30 s)."""
    await instance.refresh_routes()


async def _cached_topics(instance: ClientInstance) -> list[str]:
    return instance.cached_topics()


def test_the_routes_held_for_a_name_server_outage_survive_the_route_loop(tmp_path: Path) -> None:
    """The instance's route loop forgets the routes of topics no producer or consumer of it
    uses; the source's driver keeps its topics' routes while the query runs, and an executor
    those it pulls, so a name-server outage that starts after that loop ran (30 s after the
    last trigger) still finds them: the trigger and the pulls go on with the held routes."""
    from pyspark.sql.streaming.datasource import ReadAllAvailable

    from client.spark import pulling
    from client.spark.options import NO_SECURITY, parse_read
    from client.spark.pulling import QueueRange, read_range, shared_instance
    from client.spark.stream import StreamReader

    topic = "SparkRoutesKept"
    with sync_cluster(tmp_path / "c", {"broker-a": {}}) as c:
        c.create_topic(topic, {"broker-a": 1})
        produce(c.namesrv, topic, {("broker-a", 0): 5})
        opts = {"namesrv": c.namesrv, "topic": topic, "startingOffsets": "earliest"}
        reader = StreamReader(parse_read(opts, streaming=True))
        namesrv, instance = c.procs[0], shared_instance(c.namesrv)
        try:
            end = reader.latestOffset(reader.initialOffset(), ReadAllAvailable())
            assert end == {topic: {"broker-a": {"0": 5}}}
            produce(c.namesrv, topic, {("broker-a", 0): 3})
            instance.call(_route_loop_pass)
            assert topic in instance.call(_cached_topics)
            _freeze(namesrv)
            assert reader.latestOffset(end, ReadAllAvailable()) == {topic: {"broker-a": {"0": 8}}}
            _freeze(namesrv, frozen=False)

            [part] = reader.partitions(end, {topic: {"broker-a": {"0": 8}}})
            assert sum(b.num_rows for b in reader.read(part)) == 3  # an executor's pulls
            reader.stop()  # the driver lets its routes go; the executor's stay
            instance.call(_route_loop_pass)
            _freeze(namesrv)
            rows = list(read_range(c.namesrv, QueueRange(topic, "broker-a", 0, 0, 8)))
            assert sum(b.num_rows for b in rows) == 8
        finally:
            _freeze(namesrv, frozen=False)
            reader.stop()
            with pulling._instances_lock:
                pulling._instances.pop((c.namesrv, NO_SECURITY), None)
            instance.close()


def test_a_restarted_name_server_that_lost_the_topic_keeps_the_query_on_its_held_routes(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A name server restarted on its address knows a topic only once the brokers register
    again (registerNameServerPeriod): until then it says the topic does not exist, and the
    running query goes on with the route it holds, with a warning, as RocketMQ's client does.
    A topic really deleted shows in its broker's offsets, which went back: data loss."""
    from pyspark.sql.streaming.datasource import ReadAllAvailable

    from client.bench.cluster import NAMESRV_BOOT, _start, console_script
    from client.spark.options import parse_read
    from client.spark.pulling import DataLossError
    from client.spark.stream import StreamReader

    topic = "SparkNamesrvRestarted"
    slow_register = {"registerNameServerPeriod": "60000"}  # the name server stays ignorant
    with sync_cluster(tmp_path / "c", {"broker-a": slow_register}) as c:
        c.create_topic(topic, {"broker-a": 1})
        produce(c.namesrv, topic, {("broker-a", 0): 5})
        opts = {"namesrv": c.namesrv, "topic": topic, "startingOffsets": "earliest"}
        reader = StreamReader(parse_read(opts, streaming=True))
        try:
            end = reader.latestOffset(reader.initialOffset(), ReadAllAvailable())
            produce(c.namesrv, topic, {("broker-a", 0): 3})
            stop_process(c.procs[0])
            argv = [console_script("mqnamesrv"), "--bindAddress", "127.0.0.1"]
            argv += ["--listenPort", c.namesrv.rsplit(":", 1)[1]]
            proc, _ = _start(argv, "mqnamesrv", tmp_path / "namesrv2.log", NAMESRV_BOOT)
            c.procs.append(proc)
            with caplog.at_level(logging.WARNING, logger="client.spark.brokers"):
                end = reader.latestOffset(end, ReadAllAvailable())
            assert end == {topic: {"broker-a": {"0": 8}}}
            warned = [r.getMessage() for r in caplog.records if r.name == "client.spark.brokers"]
            assert any("No topic route info" in w and "route from before" in w for w in warned)

            _delete_topic(c, topic, "broker-a")
            with pytest.raises(DataLossError, match="went back from 8 to 0"):
                reader.latestOffset(end, ReadAllAvailable())
        finally:
            reader.stop()


def test_a_worker_pulls_from_a_broker_that_restarted_on_a_new_address(tmp_path: Path) -> None:
    """An executor whose cached route still has a broker's old address (the broker restarted
    on another port since) looks the broker up again and reads from its new address. (The
    worker is this process's shared instance; the driver's routes would refresh that same
    instance, so the driver is left out after the restart.)"""
    from client.spark import pulling
    from client.spark.options import NO_SECURITY
    from client.spark.pulling import QueueRange, read_range

    topic = "SparkMovedBroker"
    with sync_cluster(tmp_path / "c", {"broker-a": {}}) as c:
        c.create_topic(topic, {"broker-a": 1})
        produce(c.namesrv, topic, {("broker-a", 0): 10})
        qr = QueueRange(topic, "broker-a", 0, 0, 10)

        def offsets() -> list[int]:
            batches = list(read_range(c.namesrv, qr))
            return pa.Table.from_batches(batches).column("queue_offset").to_pylist()

        try:
            assert offsets() == list(range(10))
            old = c.brokers["broker-a"]
            c.stop_broker("broker-a")
            new = c.start_broker("broker-a")  # the same store, another port
            assert new != old

            async def advertised() -> str:
                async with AdminClient(c.namesrv) as admin:  # its own client instance
                    route = await admin.topic_route(topic)
                return route.broker_datas[0].broker_addrs[0]

            wait_for(lambda: trio.run(advertised) == new, "the new address at the name server")
            assert offsets() == list(range(10))
        finally:
            with pulling._instances_lock:
                instance = pulling._instances.pop((c.namesrv, NO_SECURITY), None)
            if instance is not None:
                instance.close()


def test_pulls_need_their_group_when_the_broker_does_not_create_groups(
    spark: Any, tmp_path: Path
) -> None:
    """Pulls name a consumer group (``group``, default minimq-spark). A broker that does not
    create groups refuses pulls of a group it does not have: the error names the group and
    says how to fix it. A group that exists works, for batch reads too."""
    topic = "SparkNoAutoGroup"
    with sync_cluster(tmp_path / "c", {"broker-a": {"autoCreateSubscriptionGroup": "false"}}) as c:
        c.create_topic(topic, {"broker-a": 1})
        produce(c.namesrv, topic, {("broker-a", 0): 5})
        with pytest.raises(Exception, match="does not exist there") as info:
            read(spark, c.namesrv, topic)
        message = str(info.value)
        for part in (
            "consumer group 'minimq-spark'",
            "no 'group' option given",
            "autoCreateSubscriptionGroup=false",
            "mqadmin updateSubGroup -n <namesrv> -c <cluster> -g minimq-spark",
            f"-b {c.brokers['broker-a']}",
            "set the 'group' option to a group that exists",
        ):
            assert part in message, part
        with pytest.raises(Exception, match="consumer group 'ops-cg' the pulls name"):
            read(spark, c.namesrv, topic, group="ops-cg")

        async def create() -> None:
            async with AdminClient(c.namesrv) as admin:
                await admin.update_sub_group(c.brokers["broker-a"], {"groupName": "ops-cg"})

        trio.run(create)
        assert len(read(spark, c.namesrv, topic, group="ops-cg")) == 5


def test_a_missing_pull_group_fails_when_the_query_starts(tmp_path: Path) -> None:
    """The driver checks the pulls' group as a query starts (batch planning, a new stream's
    first offsets, a restarted stream's first trigger), even with nothing to read yet, with
    the message the executors' pulls would give; not only in the executors' first pull."""
    from pyspark.sql.streaming.datasource import ReadAllAvailable

    from client.spark.batch import plan_ranges
    from client.spark.options import parse_read
    from client.spark.pulling import PullGroupError
    from client.spark.stream import StreamReader

    topic = "SparkGroupAtStart"
    options = {"namesrv": "", "topic": topic, "group": "ops-cg"}
    with sync_cluster(tmp_path / "c", {"broker-a": {"autoCreateSubscriptionGroup": "false"}}) as c:
        c.create_topic(topic, {"broker-a": 2})
        options["namesrv"] = c.namesrv
        batch, streaming = parse_read(options, streaming=False), parse_read(options, streaming=True)
        restart = {topic: {"broker-a": {"0": 0, "1": 0}}}
        with pytest.raises(PullGroupError, match="consumer group 'ops-cg' the pulls name"):
            plan_ranges(batch)
        for first_call in (
            lambda r: r.initialOffset(),
            lambda r: r.latestOffset(restart, ReadAllAvailable()),
        ):
            reader = StreamReader(streaming)
            try:
                with pytest.raises(PullGroupError, match="autoCreateSubscriptionGroup=false"):
                    first_call(reader)
            finally:
                reader.stop()

        async def create() -> None:
            async with AdminClient(c.namesrv) as admin:
                await admin.update_sub_group(c.brokers["broker-a"], {"groupName": "ops-cg"})

        trio.run(create)
        assert plan_ranges(batch) == []
        reader = StreamReader(streaming)
        try:
            assert reader.initialOffset() == restart
        finally:
            reader.stop()
