"""The executor's range puller against a broker whose retention deleted commitlog files the
consume queue still points at (between a pass's deletions and the queue's minimum following):
the offsets are data loss with or without a tag filter, never silently skipped."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest
import trio

from client.aio import ClientInstance, Producer
from client.config import ClientConfig
from client.message import Message, MessageQueue
from client.spark.pulling import DataLossError, QueueRange, RangePuller
from store import retention
from tests.client.inproc_cluster import LIMIT, cluster

TOPIC = "SparkRemoving"
SMALL_LOG = {"mappedFileSizeCommitLog": "65536"}


async def read(instance: ClientInstance, qr: QueueRange, **kw: object) -> list[int]:
    """The queue offsets ``RangePuller`` yields for ``qr`` (run in this loop)."""
    puller = RangePuller(None, qr, **kw)  # type: ignore[arg-type]  # only batches() uses it
    send, receive = trio.open_memory_channel[pa.RecordBatch](100)
    async with send:
        await puller.produce(instance, send)
    async with receive:
        batches = [b async for b in receive]
    return pa.Table.from_batches(batches).column("queue_offset").to_pylist() if batches else []


async def test_offsets_whose_data_retention_deleted_are_lost_with_a_tag_filter_too(
    tmp_path: Path,
) -> None:
    with trio.fail_after(4 * LIMIT):
        async with cluster(tmp_path, brokers=("broker-a",), queues=1, overrides=SMALL_LOG) as c:
            config = ClientConfig(namesrv_addrs=(c.namesrv,), client_ip="127.0.0.1")
            async with ClientInstance(config) as instance:
                async with Producer("pg", instance=instance) as p:
                    mq = MessageQueue(TOPIC, "broker-a", 0)
                    await c.create_topic(TOPIC, queues=1)
                    for i in range(150):  # about 65 a commitlog file
                        await p.send(Message(TOPIC, b"x" * 900, tags=f"T{i % 2}"), queue=mq)
                store = c.controllers["broker-a"].store
                assert store is not None
                assert retention.delete_commitlog_files(store, lambda mf: True) == 2
                assert store.get_min_offset_in_queue(TOPIC, 0) == 0  # not followed yet
                cq = store.find_consume_queue(TOPIC, 0)
                assert cq is not None
                kept = next(o for o in range(150) if cq.unit_at(o)[0] >= store.commitlog.min_offset)
                qr = QueueRange(TOPIC, "broker-a", 0, 0, 150)
                for tags in ("*", "T0"):
                    with pytest.raises(DataLossError, match=r"deleted by retention"):
                        await read(instance, qr, expression=tags)
                everything = await read(instance, qr, fail_on_data_loss=False)
                assert everything == list(range(kept, 150))
                evens = await read(instance, qr, expression="T0", fail_on_data_loss=False)
                assert evens == list(range(kept + kept % 2, 150, 2))
