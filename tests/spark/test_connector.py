"""The minimq Spark connector against a real name server and brokers, on local[2]."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from client import Message, MessageQueue, Producer, PullConsumer
from client.blocking import SharedInstance
from client.spark.brokers import queue_bounds
from tests.spark.cluster import SyncCluster, sync_cluster, wait_for

pytest.importorskip("pyspark")  # installed by the spark extra; see conftest

Row = tuple[str, int, int]
"""(broker, queue_id, queue_offset)"""


def produce(
    namesrv: str, topic: str, per_queue: dict[tuple[str, int], int], *, tag_of: Any = None
) -> dict[str, Message]:
    """Send ``per_queue[(broker, qid)]`` messages to each queue; returns msg_id -> message."""
    sent: dict[str, Message] = {}
    with Producer(group="spark-test-pg", namesrv=namesrv) as p:
        for (broker, qid), n in per_queue.items():
            for i in range(n):
                tag = tag_of(i) if tag_of else f"T{i % 3}"
                msg = Message(
                    topic,
                    f"{broker}/{qid}/{i}".encode(),
                    tags=tag,
                    keys=[f"k{i}"],
                    properties={"n": str(i)},
                )
                r = p.send(msg, queue=MessageQueue(topic, broker, qid))
                sent[r.msg_id] = msg
    return sent


def read(spark: Any, namesrv: str, topic: str, **options: str) -> list[Any]:
    reader = spark.read.format("minimq").option("namesrv", namesrv).option("topic", topic)
    for k, v in options.items():
        reader = reader.option(k, v)
    return list(reader.load().collect())


def stream_once(
    spark: Any, namesrv: str, topic: str, checkpoint: Path, **options: str
) -> list[list[Any]]:
    """One availableNow run; the rows of each micro-batch."""
    batches: list[list[Any]] = []
    reader = spark.readStream.format("minimq").option("namesrv", namesrv).option("topic", topic)
    for k, v in options.items():
        reader = reader.option(k, v)
    q = (
        reader.load()
        .writeStream.foreachBatch(lambda df, _id: batches.append(df.collect()))
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    q.awaitTermination(60)
    assert not q.isActive
    if q.exception() is not None:
        raise AssertionError(str(q.exception()))
    return [b for b in batches if b]


def test_batch_read_across_two_brokers_matches_what_was_produced(
    spark: Any, cluster: SyncCluster
) -> None:
    topic = "SparkBatch"
    cluster.create_topic(topic, {"broker-a": 2, "broker-b": 2})
    per_queue = {("broker-a", 0): 7, ("broker-a", 1): 5, ("broker-b", 0): 6, ("broker-b", 1): 4}
    sent = produce(cluster.namesrv, topic, per_queue)
    rows = read(spark, cluster.namesrv, topic)
    assert len(rows) == len(sent)
    got = {r.msg_id: r for r in rows}
    assert set(got) == set(sent)
    for msg_id, msg in sent.items():
        r = got[msg_id]
        assert (r.topic, bytes(r.body), r.tags, r.keys) == (
            topic,
            msg.body,
            msg.tags,
            "k" + r.keys[1:],
        )
        broker, qid, i = msg.body.decode().split("/")
        assert (r.broker, r.queue_id, r.queue_offset) == (broker, int(qid), int(i))
        assert r.properties["n"] == i
        assert r.keys == f"k{i}"
        assert r.reconsume_times == 0
        assert r.store_timestamp >= r.born_timestamp.replace(microsecond=0) or True
    by_queue: dict[tuple[str, int], list[int]] = {}
    for r in rows:
        by_queue.setdefault((r.broker, r.queue_id), []).append(r.queue_offset)
    assert {k: sorted(v) for k, v in by_queue.items()} == {
        k: list(range(n)) for k, n in per_queue.items()
    }
    ending = json.dumps({topic: {"broker-a": {"0": 3}, "broker-b": {"1": -1}}})
    starting = json.dumps({topic: {"broker-a": {"0": 1}, "broker-b": {"0": -1}}})
    part = read(spark, cluster.namesrv, topic, startingOffsets=starting, endingOffsets=ending)
    keys = sorted((r.broker, r.queue_id, r.queue_offset) for r in part)
    # unnamed queues: start earliest, end latest; broker-b/0 starts at its end
    want = [("broker-a", 0, 1), ("broker-a", 0, 2)]
    want += [("broker-a", 1, i) for i in range(5)] + [("broker-b", 1, i) for i in range(4)]
    assert keys == sorted(want)
    # nothing in range: no partitions at all
    assert read(spark, cluster.namesrv, topic, startingOffsets="latest") == []


def test_arrow_schema_is_sparks(spark: Any) -> None:
    from pyspark.sql.pandas.types import to_arrow_schema

    from client.spark import SCHEMA
    from client.spark.pulling import ARROW_SCHEMA

    struct = spark.createDataFrame([], SCHEMA).schema
    assert to_arrow_schema(struct, timezone="UTC") == ARROW_SCHEMA


def test_tag_filtering(spark: Any, cluster: SyncCluster) -> None:
    topic = "SparkTags"
    cluster.create_topic(topic, {"broker-a": 1, "broker-b": 1})
    sent = produce(
        cluster.namesrv,
        topic,
        {("broker-a", 0): 40, ("broker-b", 0): 30},
        tag_of=lambda i: "A" if i % 4 == 0 else "B" if i % 4 == 1 else "C",
    )
    rows = read(spark, cluster.namesrv, topic, tags="A || C", pullBatchSize="8")
    want = {k for k, m in sent.items() if m.tags in ("A", "C")}
    assert {r.msg_id for r in rows} == want
    assert len(rows) == len(want)


SQL = "n >= 10 AND n < 20 AND TAGS <> 'T0'"


def sql_matches(msg: Message) -> bool:
    """What :data:`SQL` selects (``produce`` numbers each queue's messages ``n`` from 0)."""
    return 10 <= int(msg.properties["n"]) < 20 and msg.tags != "T0"


def test_sql_filtering_batch_and_streaming(
    spark: Any, cluster: SyncCluster, tmp_path: Path
) -> None:
    """The sql option reads only the matching messages, batch and streaming; offsets move
    past the others (ranges and micro-batches none of whose messages match included), so a
    restarted stream reads only what is new. Broker-b does not filter by properties: a read
    of its topic fails at start naming enablePropertyFilter, as a bad selector names 'sql'."""
    topic = "SparkSql"
    ns = cluster.namesrv
    cluster.create_topic(topic, {"broker-a": 2})
    sent = produce(ns, topic, {("broker-a", 0): 40, ("broker-a", 1): 30})
    want = {k for k, m in sent.items() if sql_matches(m)}
    rows = read(spark, ns, topic, sql=SQL, pullBatchSize="4")
    assert sorted(r.msg_id for r in rows) == sorted(want)
    # queue 1 ends at 10: none of its range matches
    ending = json.dumps({topic: {"broker-a": {"0": 15, "1": 10}}})
    rows = read(spark, ns, topic, sql=SQL, endingOffsets=ending)
    assert sorted((r.queue_id, r.queue_offset) for r in rows) == [
        (0, i) for i in range(10, 15) if i % 3 != 0
    ]
    ckpt = tmp_path / "ckpt"
    opts = {"sql": SQL, "startingOffsets": "earliest", "maxOffsetsPerTrigger": "10"}
    batches = stream_once(spark, ns, topic, ckpt, **opts)
    assert len(batches) < 7  # 7 micro-batches of 10, the ones without a match are empty
    ids = [r.msg_id for b in batches for r in b]
    assert sorted(ids) == sorted(want)
    more = produce(ns, topic, {("broker-a", 0): 25})
    again = [r.msg_id for b in stream_once(spark, ns, topic, ckpt, **opts) for r in b]
    assert sorted(again) == sorted(k for k, m in more.items() if sql_matches(m))
    assert stream_once(spark, ns, topic, ckpt, **opts) == []

    with pytest.raises(Exception, match="options 'tags' and 'sql' exclude each other"):
        read(spark, ns, topic, sql=SQL, tags="T1")
    with pytest.raises(Exception, match="option 'sql' is not a valid SQL92 selector"):
        read(spark, ns, topic, sql="n >")
    cluster.create_topic("SparkSqlB", {"broker-b": 1})
    with pytest.raises(Exception, match=r"enablePropertyFilter=true"):
        read(spark, ns, "SparkSqlB", sql=SQL)


def test_available_now_splits_batches_and_restart_is_exactly_once(
    spark: Any, cluster: SyncCluster, tmp_path: Path
) -> None:
    topic = "SparkStream"
    cluster.create_topic(topic, {"broker-a": 1, "broker-b": 1})
    qa, qb = ("broker-a", 0), ("broker-b", 0)
    sent = produce(cluster.namesrv, topic, {qa: 30, qb: 30})
    ckpt = tmp_path / "ckpt"
    opts = {"startingOffsets": "earliest", "maxOffsetsPerTrigger": "20", "group": "spark-q1"}
    first = stream_once(spark, cluster.namesrv, topic, ckpt, **opts)
    assert [len(b) for b in first] == [20, 20, 20]
    for b in first:  # the limit is shared by backlog: 10 from each queue
        assert sorted({r.broker for r in b}) == ["broker-a", "broker-b"]
    more = produce(cluster.namesrv, topic, {qa: 20, qb: 10})
    second = stream_once(spark, cluster.namesrv, topic, ckpt, **opts)
    # backlogs 20 and 10 share the limit 2:1 (13 + 6, rounded down), then the rest
    assert [len(b) for b in second] == [19, 11]
    rows = [r for b in first + second for r in b]
    ids = [r.msg_id for r in rows]
    assert len(ids) == len(set(ids)) == len(sent) + len(more)
    assert set(ids) == set(sent) | set(more)
    third = stream_once(spark, cluster.namesrv, topic, ckpt, **opts)
    assert third == []
    # the group option stores progress on the brokers (advisory, one batch behind)
    with PullConsumer(group="spark-q1", namesrv=cluster.namesrv) as c:
        committed = c.committed(MessageQueue(topic, "broker-a", 0))
    assert committed is not None
    assert committed >= 30


def test_starting_offsets_latest(spark: Any, cluster: SyncCluster, tmp_path: Path) -> None:
    topic = "SparkLatest"
    cluster.create_topic(topic, {"broker-a": 1, "broker-b": 1})
    produce(cluster.namesrv, topic, {("broker-a", 0): 5, ("broker-b", 0): 5})
    ckpt = tmp_path / "ckpt"
    assert stream_once(spark, cluster.namesrv, topic, ckpt, startingOffsets="latest") == []
    new = produce(cluster.namesrv, topic, {("broker-a", 0): 3, ("broker-b", 0): 2})
    batches = stream_once(spark, cluster.namesrv, topic, ckpt, startingOffsets="latest")
    assert sorted(r.msg_id for b in batches for r in b) == sorted(new)


def test_progress_reports_the_latest_offset_beyond_the_trigger_limit(
    spark: Any, cluster: SyncCluster, tmp_path: Path
) -> None:
    """The query progress's latestOffset is what the queues hold (reportLatestOffset), not
    null, while maxOffsetsPerTrigger cuts each micro-batch short of it."""
    topic = "SparkReportLatest"
    cluster.create_topic(topic, {"broker-a": 1})
    produce(cluster.namesrv, topic, {("broker-a", 0): 6})
    reader = (
        spark.readStream.format("minimq")
        .option("namesrv", cluster.namesrv)
        .option("topic", topic)
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", "2")
    )
    q = (
        reader.load()
        .writeStream.foreachBatch(lambda df, _id: df.count())
        .option("checkpointLocation", str(tmp_path / "ckpt"))
        .trigger(availableNow=True)
        .start()
    )
    q.awaitTermination(60)
    assert not q.isActive
    assert q.exception() is None
    sources = [p["sources"][0] for p in q.recentProgress if p["numInputRows"]]
    assert [json.loads(s["endOffset"])[topic]["broker-a"]["0"] for s in sources] == [2, 4, 6]
    assert {s["latestOffset"] for s in sources} == {json.dumps({topic: {"broker-a": {"0": 6}}})}


def test_sink_round_trip_batch_and_streaming(
    spark: Any, cluster: SyncCluster, tmp_path: Path
) -> None:
    """Rows to topics and back. The ``topic`` option overrides a ``topic`` column (as in
    Spark's Kafka sink); without the option each row goes to its column's topic."""
    out, other = "SparkSinkOut", "SparkSinkOther"
    cluster.create_topic(out, {"broker-a": 2, "broker-b": 2})
    cluster.create_topic(other, {"broker-b": 1})
    rows = [
        ("hello", "TA", "k1 k2", {"x": "1"}, None),
        ("world", "TB", None, {"a": "1", "b": None}, None),  # a null property is left out
        ("elsewhere", None, "k3", {"y": "2"}, other),
    ] + [(f"n{i}", "TN", None, None, None) for i in range(70)]
    df = spark.createDataFrame(
        rows, "body string, tags string, keys string, properties map<string,string>, topic string"
    )
    df.write.format("minimq").option("namesrv", cluster.namesrv).option("topic", out).mode(
        "append"
    ).save()
    got = read(spark, cluster.namesrv, out)
    assert sorted(bytes(r.body).decode() for r in got) == sorted(b for b, *_ in rows)
    hello = next(r for r in got if bytes(r.body) == b"hello")
    assert (hello.tags, hello.keys, hello.properties["x"]) == ("TA", "k1 k2", "1")
    world = next(r for r in got if bytes(r.body) == b"world")
    assert (world.properties["a"], "b" in world.properties) == ("1", False)
    assert read(spark, cluster.namesrv, other) == []
    # no topic option: the column names each row's topic
    df.where("topic is not null").write.format("minimq").option("namesrv", cluster.namesrv).mode(
        "append"
    ).save()
    (elsewhere,) = read(spark, cluster.namesrv, other)
    assert (bytes(elsewhere.body), elsewhere.keys, elsewhere.properties["y"]) == (
        b"elsewhere",
        "k3",
        "2",
    )
    # streaming: topic -> upper-cased bodies -> another topic; the source's own topic column
    # is passed on, and the option still wins (the copy does not feed on itself)
    copy = "SparkSinkCopy"
    cluster.create_topic(copy, {"broker-a": 1})
    src = (
        spark.readStream.format("minimq")
        .option("namesrv", cluster.namesrv)
        .option("topic", out)
        .option("startingOffsets", "earliest")
        .load()
    )
    q = (
        src.selectExpr("topic", "upper(cast(body as string)) as body", "tags")
        .writeStream.format("minimq")
        .option("namesrv", cluster.namesrv)
        .option("topic", copy)
        .option("checkpointLocation", str(tmp_path / "sink-ckpt"))
        .queryName("minimq-copy")  # Spark passes the name to the sink as an option
        .trigger(availableNow=True)
        .start()
    )
    q.awaitTermination(60)
    assert q.exception() is None
    copied = read(spark, cluster.namesrv, copy)
    assert sorted(bytes(r.body).decode() for r in copied) == sorted(b.upper() for b, *_ in rows)
    assert len(read(spark, cluster.namesrv, out)) == len(rows)


BIG_STORE = {"mappedFileSizeCommitLog": str(16 * 1024 * 1024)}
"""Commitlog files that hold a 4 MiB batch (SMALL_STORE's 1 MiB files cannot)."""


def test_sink_splits_batches_by_bytes_and_refuses_a_message_over_the_limit(
    spark: Any, tmp_path: Path
) -> None:
    """40 rows of 200 KB (too big for one 4 MiB batch at the default batchSize 32) and one
    incompressible row of almost 4 MiB (the producer's zlib adds a little to a random body)
    are all written; a row one byte over 4 MiB fails with a clear error."""
    from client.validation import MAX_MESSAGE_SIZE

    topic = "SparkSinkBig"
    with sync_cluster(tmp_path / "c", {"broker-big": BIG_STORE}) as c:
        c.create_topic(topic, {"broker-big": 2})
        bodies = [bytes([i]) * 200_000 for i in range(40)] + [
            os.urandom(MAX_MESSAGE_SIZE - 32 * 1024)
        ]
        df = spark.createDataFrame([(b,) for b in bodies], "body binary").coalesce(1)
        writer = df.write.format("minimq").option("namesrv", c.namesrv).option("topic", topic)
        writer.mode("append").save()
        got = spark.read.format("minimq").option("namesrv", c.namesrv).option("topic", topic)
        lengths = got.load().selectExpr("length(body) as n").collect()
        assert sorted(r.n for r in lengths) == sorted(len(b) for b in bodies)
        too_big = spark.createDataFrame([(b"x" * (MAX_MESSAGE_SIZE + 1),)], "body binary")
        with pytest.raises(Exception, match=r"body of 4194305 bytes, over the message size"):
            too_big.write.format("minimq").option("namesrv", c.namesrv).option("topic", topic).mode(
                "append"
            ).save()


def test_sink_batch_size_estimate_bounds_the_encoded_batch() -> None:
    """What the sink counts per message is at least what it adds to the encoded batch,
    UNIQ_KEY included (the producer stamps it after the sink counted)."""
    from client.producer import encode_batch
    from client.spark.sink import batch_size_of

    messages = [
        Message("T", b"x" * n, tags="tag", keys=["k1", "k2"], properties=props)
        for n in (1, 100, 70_000)
        for props in ({}, {"a": "b"}, {"ключ": "значение" * 50})
    ]
    for msg in messages:
        estimate = batch_size_of(msg)
        msg.properties["UNIQ_KEY"] = "0" * 32
        assert estimate >= len(encode_batch([msg]))
    assert sum(map(batch_size_of, messages)) >= len(encode_batch(messages))


def test_bad_options_fail_at_query_start_naming_the_option(
    spark: Any, cluster: SyncCluster
) -> None:
    with pytest.raises(Exception, match=r"(?i)unknown.*maxOffsetsPerTriger"):
        read(spark, cluster.namesrv, "SparkBatch", maxOffsetsPerTriger="5")
    with pytest.raises(Exception, match="pullBatchSize"):
        read(spark, cluster.namesrv, "SparkBatch", pullBatchSize="many")
    with pytest.raises(Exception, match="startingOffsets"):
        read(spark, cluster.namesrv, "SparkBatch", startingOffsets="{nope")


RETENTION = {
    "mappedFileSizeCommitLog": "65536",
    "fileReservedTime": "0",
    "deleteWhen": ";".join(f"{h:02d}" for h in range(24)),
    "cleanResourceInterval": "100",
}


def test_retention_deleted_offsets_fail_or_skip(
    spark: Any, tmp_path_factory: pytest.TempPathFactory
) -> None:
    root = tmp_path_factory.mktemp("retention")
    topic = "SparkRetention"
    with sync_cluster(root, {"broker-r": RETENTION}) as c:
        c.create_topic(topic, {"broker-r": 1})
        mq = MessageQueue(topic, "broker-r", 0)
        with Producer(group="spark-ret-pg", namesrv=c.namesrv) as p:
            for i in range(300):
                p.send(Message(topic, bytes([i % 256]) * 1000), queue=mq)
        with SharedInstance(c.namesrv) as client:

            def bounds() -> tuple[int, int]:
                return client.call(queue_bounds, [topic], timeout=10)[(topic, "broker-r", 0)]

            wait_for(lambda: bounds()[0] > 0, "retention to delete the first commitlog files")
            lo, hi = bounds()
        assert hi == 300
        starting = json.dumps({topic: {"broker-r": {"0": 0}}})
        with pytest.raises(Exception, match=r"SparkRetention.*broker-r.*queue 0") as info:
            read(spark, c.namesrv, topic, startingOffsets=starting)
        assert "failOnDataLoss" in str(info.value)
        rows = read(spark, c.namesrv, topic, startingOffsets=starting, failOnDataLoss="false")
        offsets = sorted(r.queue_offset for r in rows)
        assert offsets[0] >= lo
        assert offsets == list(range(offsets[0], 300))


def test_queues_added_while_a_query_runs_are_read_from_their_start(
    spark: Any, cluster: SyncCluster, tmp_path: Path
) -> None:
    """The same StreamReader the engine drives: a queue that appears between two triggers is
    admitted from its min offset (no message of it lost); and a query restarted from its
    checkpoint after queues were added reads them from the start too."""
    from pyspark.sql.streaming.datasource import ReadAllAvailable

    from client.spark.options import parse_read
    from client.spark.stream import StreamReader

    topic = "SparkGrowing"
    cluster.create_topic(topic, {"broker-a": 1})
    first_sent = produce(cluster.namesrv, topic, {("broker-a", 0): 4})
    opts = {"namesrv": cluster.namesrv, "topic": topic, "startingOffsets": "earliest"}
    reader = StreamReader(parse_read(opts, streaming=True))
    start = reader.initialOffset()
    end = reader.latestOffset(start, ReadAllAvailable())
    assert end == {topic: {"broker-a": {"0": 4}}}

    # the topic grows while the query runs: two more queues on broker-a, one on broker-b
    cluster.create_topic(topic, {"broker-a": 3, "broker-b": 1})
    grown = {("broker-a", 0): 1, ("broker-a", 1): 2, ("broker-a", 2): 2, ("broker-b", 0): 3}
    later_sent = produce(cluster.namesrv, topic, grown)
    nxt = reader.latestOffset(end, ReadAllAvailable())
    assert nxt == {
        topic: {"broker-a": {"0": 5, "1": 2, "2": 2}, "broker-b": {"0": 3}},
    }
    parts = reader.partitions(end, nxt)
    ranges = sorted((p.qr.broker, p.qr.queue_id, p.qr.start, p.qr.end) for p in parts)
    assert ranges == [
        ("broker-a", 0, 4, 5),
        ("broker-a", 1, 0, 2),
        ("broker-a", 2, 0, 2),
        ("broker-b", 0, 0, 3),
    ]
    rows = [
        msg_id
        for p in parts
        for batch in reader.read(p)
        for msg_id in batch.column("msg_id").to_pylist()
    ]
    assert sorted(rows) == sorted(later_sent)
    reader.stop()

    # through Spark: a query over the grown topic, restarted from its checkpoint
    ckpt = tmp_path / "ckpt"
    first = stream_once(spark, cluster.namesrv, topic, ckpt, startingOffsets="earliest")
    seen = {r.msg_id for b in first for r in b}
    assert seen == set(first_sent) | set(later_sent)
    cluster.create_topic(topic, {"broker-a": 4, "broker-b": 2})
    newest = produce(cluster.namesrv, topic, {("broker-a", 3): 2, ("broker-b", 1): 2})
    second = stream_once(spark, cluster.namesrv, topic, ckpt, startingOffsets="earliest")
    assert sorted(r.msg_id for b in second for r in b) == sorted(newest)


def test_a_user_schema_other_than_the_fixed_one_is_refused_at_start(
    spark: Any, cluster: SyncCluster, tmp_path: Path
) -> None:
    """``.schema(...)`` that is not the source's fixed schema fails when the query starts,
    saying so (not with a schema mismatch while reading); the fixed schema itself is fine."""
    from client.spark import SCHEMA

    topic = "SparkSchema"
    cluster.create_topic(topic, {"broker-a": 1})
    produce(cluster.namesrv, topic, {("broker-a", 0): 2})

    def source(reader: Any, schema: str) -> Any:
        opts = {"namesrv": cluster.namesrv, "topic": topic, "startingOffsets": "earliest"}
        return reader.format("minimq").schema(schema).options(**opts).load()

    assert source(spark.read, SCHEMA).count() == 2
    fixed = "fixed schema and cannot be set with a custom one"
    with pytest.raises(Exception, match=fixed):
        source(spark.read, "topic string, body binary").collect()
    not_null = SCHEMA.replace("topic string", "topic string NOT NULL")
    with pytest.raises(Exception, match=fixed + r".*topic string NOT NULL"):
        source(spark.read, not_null).collect()
    stream = source(spark.readStream, "topic string, body binary").writeStream.foreachBatch(
        lambda df, _id: None
    )

    def run() -> None:
        q = stream.option("checkpointLocation", str(tmp_path / "ckpt")).start()
        try:
            q.awaitTermination(60)
        finally:
            q.stop()

    with pytest.raises(Exception, match=fixed):
        run()


def test_spark_passes_query_name_to_the_sink_and_it_is_ignored() -> None:
    from client.spark.options import parse_write

    opts = parse_write(
        {"namesrv": "127.0.0.1:9876", "topic": "T", "queryName": "copy", "checkpointLocation": "/c"}
    )
    assert opts.topic == "T"


def test_a_malformed_group_fails_at_start_naming_the_option() -> None:
    from client.spark.options import OptionError, parse_read, parse_write

    base = {"namesrv": "127.0.0.1:9876", "topic": "T"}
    for group in ("bad group!", "x" * 300):
        with pytest.raises(OptionError, match="option 'group'"):
            parse_read({**base, "group": group}, streaming=False)
        with pytest.raises(OptionError, match="option 'group'"):
            parse_read({**base, "group": group}, streaming=True)
        with pytest.raises(OptionError, match="option 'group'"):
            parse_write({**base, "group": group})
    assert parse_read({**base, "group": "ops-cg_1"}, streaming=True).group == "ops-cg_1"


def test_a_schema_differing_only_in_nullability_is_refused() -> None:
    from pyspark.sql.types import MapType, StringType, StructField, StructType

    from client.spark.options import OptionError
    from client.spark.source import SCHEMA_STRUCT, check_fixed_schema

    check_fixed_schema(StructType(list(SCHEMA_STRUCT.fields)))
    fields = list(SCHEMA_STRUCT.fields)
    not_null = StructType([StructField("topic", StringType(), False), *fields[1:]])
    with pytest.raises(OptionError, match="topic string NOT NULL"):
        check_fixed_schema(not_null)
    props = [StructField(f.name, MapType(StringType(), StringType(), False)) for f in fields[8:9]]
    strict_map = StructType(fields[:8] + props + fields[9:])
    with pytest.raises(OptionError, match=r"map<string,string> \(values not null\)"):
        check_fixed_schema(strict_map)


def test_null_property_values_are_left_out_of_the_message() -> None:
    from client.spark.sink import batch_size_of, to_message

    msg = to_message({"body": b"x", "properties": {"a": "1", "b": None}, "tags": None}, "T")
    assert msg.properties == {"a": "1"}
    assert batch_size_of(msg) > 0


def test_json_offsets_outside_a_queue_fail_at_start_naming_queue_and_bounds(
    spark: Any, cluster: SyncCluster
) -> None:
    """Explicit offsets above a queue's max offset, or a start after the end, are refused
    when the query starts (batch and streaming), naming the option, the queue and its
    bounds; -2/-1 keep their meaning."""
    from pyspark.sql.streaming.datasource import ReadAllAvailable

    from client.spark.batch import plan_ranges
    from client.spark.options import OptionError, parse_read
    from client.spark.stream import StreamReader

    topic = "SparkOffsetBounds"
    cluster.create_topic(topic, {"broker-a": 1})
    produce(cluster.namesrv, topic, {("broker-a", 0): 10})
    base = {"namesrv": cluster.namesrv, "topic": topic}

    def at(n: int) -> str:
        return json.dumps({topic: {"broker-a": {"0": n}}})

    def plan(**options: str) -> list[tuple[int, int]]:
        ranges = plan_ranges(parse_read({**base, **options}, streaming=False))
        return [(qr.start, qr.end) for qr in ranges]

    queue = f"topic {topic} broker broker-a queue 0, which holds offsets 0..10"
    with pytest.raises(OptionError, match=f"option 'startingOffsets'.*100 for {queue}"):
        plan(startingOffsets=at(100))
    with pytest.raises(OptionError, match=f"option 'endingOffsets'.*100 for {queue}"):
        plan(endingOffsets=at(100))
    with pytest.raises(
        OptionError,
        match=f"'startingOffsets' and 'endingOffsets': topic {topic} broker broker-a queue 0 "
        r"starts at 8, after its end 3 \(the queue holds offsets 0..10\)",
    ):
        plan(startingOffsets=at(8), endingOffsets=at(3))
    with pytest.raises(OptionError, match="starts at 10, after its end 3"):
        plan(startingOffsets=at(-1), endingOffsets=at(3))
    assert plan(startingOffsets=at(10)) == []  # the max offset itself: nothing to read
    assert plan(startingOffsets=at(-2), endingOffsets=at(-1)) == [(0, 10)]
    assert plan(startingOffsets=at(3), endingOffsets=at(10)) == [(3, 10)]
    assert plan(startingOffsets=at(4), endingOffsets=at(4)) == []

    # through Spark, and for a new streaming query
    with pytest.raises(Exception, match=f"option 'startingOffsets'.*100 for {queue}"):
        read(spark, cluster.namesrv, topic, startingOffsets=at(100))
    for fail in ("true", "false"):
        opts = {**base, "startingOffsets": at(100), "failOnDataLoss": fail}
        reader = StreamReader(parse_read(opts, streaming=True))
        try:
            with pytest.raises(OptionError, match=f"option 'startingOffsets'.*100 for {queue}"):
                reader.initialOffset()
        finally:
            reader.stop()
    reader = StreamReader(parse_read({**base, "startingOffsets": at(7)}, streaming=True))
    try:
        start = reader.initialOffset()
        assert reader.latestOffset(start, ReadAllAvailable()) == {topic: {"broker-a": {"0": 10}}}
        assert start == {topic: {"broker-a": {"0": 7}}}
    finally:
        reader.stop()
