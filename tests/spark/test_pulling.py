"""The executor's range puller (client/spark/pulling.py) without Spark: a producer task in the
client's loop thread builds the Arrow batches, the reading thread takes them one per call."""

from __future__ import annotations

import multiprocessing
from collections.abc import Iterator

import pyarrow as pa
import pytest
import trio

from client import Message, Producer
from client.blocking import SharedInstance
from client.instance import ClientInstance
from client.spark import pulling
from client.spark.options import NO_SECURITY
from client.spark.pulling import DataLossError, QueueRange, RangePuller, shared_instance
from tests.spark.cluster import SyncCluster

TOPIC = "SparkPulling"
COUNT = pulling.ROWS_PER_BATCH * (pulling.BATCHES_BUFFERED + 2) + 808
"""More batches than the producer may build ahead of a reader that took one, and a short last
one: a producer can never have finished while the reader holds only its first batch."""


@pytest.fixture(scope="module")
def filled(cluster: SyncCluster) -> Iterator[SharedInstance]:
    """``COUNT`` messages in ``TOPIC`` (one queue: broker-a/0); the process's shared instance,
    closed afterwards (an executor keeps it for its life; later tests expect no loop thread)."""
    cluster.create_topic(TOPIC, {"broker-a": 1})
    with Producer(group="spark-pulling-pg", namesrv=cluster.namesrv) as p:
        for lo in range(0, COUNT, 256):
            batch = [
                Message(TOPIC, b"m%d" % i, tags=f"T{i % 2}", properties={"n": str(i)})
                for i in range(lo, min(lo + 256, COUNT))
            ]
            p.send_batch(batch)
    instance = shared_instance(cluster.namesrv)
    try:
        yield instance
    finally:
        with pulling._instances_lock:
            pulling._instances.pop((cluster.namesrv, NO_SECURITY), None)
        instance.close()


def _range(start: int = 0, end: int = COUNT) -> QueueRange:
    return QueueRange(TOPIC, "broker-a", 0, start, end)


async def _puller_tasks(_instance: ClientInstance) -> list[str]:
    """Names of the puller's coroutines still running in the loop thread."""
    names: list[str] = []
    root = trio.lowlevel.current_root_task()
    assert root is not None
    todo = [root]
    while todo:
        task = todo.pop()
        name = getattr(task.coro, "__name__", "")
        if name in ("_produce", "_pull_into"):
            names.append(name)
        todo.extend(t for n in task.child_nurseries for t in n.child_tasks)
    return names


def test_reads_every_message_in_order_in_batches(
    filled: SharedInstance,
) -> None:
    batches = list(RangePuller(filled, _range(5), pull_batch_size=100).batches())
    assert len(batches) == COUNT // pulling.ROWS_PER_BATCH + 1
    for full in batches[:-1]:
        assert pulling.ROWS_PER_BATCH <= full.num_rows < pulling.ROWS_PER_BATCH + 100
    table = pa.Table.from_batches(batches)
    assert table.schema == pulling.ARROW_SCHEMA
    assert table.column("queue_offset").to_pylist() == list(range(5, COUNT))
    assert table.column("body").to_pylist() == [b"m%d" % i for i in range(5, COUNT)]
    row = table.slice(2, 1).to_pylist()[0]
    assert (row["topic"], row["broker"], row["queue_id"], row["tags"]) == (
        TOPIC,
        "broker-a",
        0,
        "T1",
    )
    assert dict(row["properties"])["n"] == "7"
    assert row["store_timestamp"] >= row["born_timestamp"]
    assert filled.call(_puller_tasks) == []


def test_tag_filter_reads_one_pull_at_a_time(filled: SharedInstance) -> None:
    batches = list(RangePuller(filled, _range(0, 300), expression="T0").batches())
    offsets = pa.Table.from_batches(batches).column("queue_offset").to_pylist()
    assert offsets == list(range(0, 300, 2))


def test_closing_early_cancels_the_producer(filled: SharedInstance) -> None:
    gen = RangePuller(filled, _range()).batches()
    first = next(gen)
    assert first.num_rows >= pulling.ROWS_PER_BATCH
    assert filled.call(_puller_tasks)  # it is building the next batch meanwhile
    gen.close()
    assert filled.call(_puller_tasks) == []


def test_a_generator_never_started_starts_nothing(filled: SharedInstance) -> None:
    gen = RangePuller(filled, _range()).batches()
    assert filled.call(_puller_tasks) == []
    gen.close()


def test_data_loss_surfaces_from_the_generator(filled: SharedInstance) -> None:
    past_end = _range(COUNT - 10, COUNT + 50)
    gen = RangePuller(filled, past_end).batches()
    with pytest.raises(DataLossError, match=r"beyond the queue's max offset.*failOnDataLoss"):
        list(gen)
    assert filled.call(_puller_tasks) == []
    rows = RangePuller(filled, past_end, fail_on_data_loss=False).batches()
    got = pa.Table.from_batches(list(rows)).column("queue_offset").to_pylist()
    assert got == list(range(COUNT - 10, COUNT))


def _rows_of_first_ten(namesrv: str) -> int:
    """In a forked worker: the rows ``read_range`` returns for offsets 0-9."""
    return sum(batch.num_rows for batch in pulling.read_range(namesrv, _range(0, 10)))


def test_a_forked_worker_reads_through_an_instance_of_its_own(
    cluster: SyncCluster, filled: SharedInstance
) -> None:
    """The process's cached instance used to be inherited by a ``multiprocessing`` fork
    pool's workers, whose every pull then failed ("its loop thread did not follow the fork:
    make the client again", which they cannot: the cache is the module's)."""
    assert shared_instance(cluster.namesrv) is filled  # cached in this process
    with multiprocessing.get_context("fork").Pool(1) as pool:
        rows = pool.apply_async(_rows_of_first_ten, (cluster.namesrv,)).get(timeout=60)
    assert rows == 10
