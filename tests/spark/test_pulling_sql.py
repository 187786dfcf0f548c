"""The executor's range puller with an SQL92 selector (the ``sql`` option) against real
in-process brokers: only matching records, offsets always moving past the skipped ones (a
range none of whose records match is crossed in a few pulls, never re-read), data deleted by
retention still data loss, and a broker that does not filter by properties refused with an
error naming ``enablePropertyFilter``, at the query's start and in the executors."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pyarrow as pa
import pytest
import trio

from client.aio import ClientInstance, Producer
from client.config import ClientConfig
from client.message import Message, MessageQueue
from client.spark.pulling import (
    DataLossError,
    PropertyFilterRefusedError,
    QueueRange,
    RangePuller,
    _sql_refusal,
    check_pull_group,
)
from common.subscription import (
    MessageSelector,
    SubscriptionData,
    SubscriptionExpression,
    build_subscription,
)
from remoting.codes import ResponseCode
from store import retention
from tests.client.inproc_cluster import LIMIT, Cluster, cluster

TOPIC = "SparkSql"
BROKER = "broker-a"
FILTERING = {"enablePropertyFilter": "true"}
COUNT = 200


async def read(
    instance: ClientInstance, qr: QueueRange, expression: SubscriptionExpression, **kw: object
) -> tuple[list[int], RangePuller]:
    """The queue offsets the puller yields for ``qr`` (run in this loop), and the puller."""
    puller = RangePuller(None, qr, expression=expression, **kw)  # type: ignore[arg-type]
    send, receive = trio.open_memory_channel[pa.RecordBatch](100)
    async with send:
        await puller.produce(instance, send)
    async with receive:
        batches = [b async for b in receive]
    offsets = pa.Table.from_batches(batches).column("queue_offset").to_pylist() if batches else []
    return offsets, puller


async def fill(c: Cluster, instance: ClientInstance, count: int, body: bytes = b"x") -> None:
    """``count`` messages into queue 0, message ``i`` with property ``a=i`` and tag ``T<i%2>``."""
    await c.create_topic(TOPIC, queues=1)
    mq = MessageQueue(TOPIC, BROKER, 0)
    async with Producer("pg", instance=instance) as producer:
        for i in range(count):
            msg = Message(TOPIC, body, tags=f"T{i % 2}", properties={"a": str(i)})
            await producer.send(msg, queue=mq)


@asynccontextmanager
async def broker_and_client(
    tmp_path: Path, overrides: dict[str, str] | None = None
) -> AsyncIterator[tuple[Cluster, ClientInstance]]:
    """A name server, ``broker-a`` with ``overrides``, and a client instance of them."""
    async with cluster(tmp_path, brokers=(BROKER,), queues=1, overrides=overrides) as c:
        config = ClientConfig(namesrv_addrs=(c.namesrv,), client_ip="127.0.0.1")
        async with ClientInstance(config) as instance:
            yield c, instance


SELECTOR = MessageSelector.by_sql("a BETWEEN 40 AND 49 OR a >= 190")


async def test_only_matching_records_and_offsets_move_past_the_others(tmp_path: Path) -> None:
    with trio.fail_after(4 * LIMIT):
        async with broker_and_client(tmp_path, FILTERING) as (c, instance):
            await fill(c, instance, COUNT)
            whole = QueueRange(TOPIC, BROKER, 0, 0, COUNT)
            got, puller = await read(instance, whole, SELECTOR, pull_batch_size=8)
            assert got == [*range(40, 50), *range(190, 200)]
            assert puller.cur == COUNT
            # a range cut by endingOffsets: nothing of it after its end
            got, puller = await read(instance, QueueRange(TOPIC, BROKER, 0, 45, 195), SELECTOR)
            assert got == [*range(45, 50), *range(190, 195)]
            assert puller.cur >= 195
            # a range none of whose records match: crossed (each pull scans past its 8), no rows
            empty = QueueRange(TOPIC, BROKER, 0, 50, 190)
            got, puller = await read(instance, empty, SELECTOR, pull_batch_size=8)
            assert got == []
            assert puller.cur >= 190
            # the exact tag through the selector, as the tags option would
            got, _ = await read(instance, whole, MessageSelector.by_sql("TAGS = 'T1'"))
            assert got == list(range(1, COUNT, 2))


async def test_a_broker_without_property_filtering_is_refused_naming_the_setting(
    tmp_path: Path,
) -> None:
    with trio.fail_after(4 * LIMIT):
        async with broker_and_client(tmp_path) as (c, instance):
            await fill(c, instance, 4)
            bounds = {(TOPIC, BROKER, 0): (0, 4)}
            with pytest.raises(PropertyFilterRefusedError) as at_start:
                await check_pull_group(instance, bounds, None, SELECTOR)
            with pytest.raises(PropertyFilterRefusedError) as in_executor:
                await read(instance, QueueRange(TOPIC, BROKER, 0, 0, 4), SELECTOR)
            for refused in (at_start.value, in_executor.value):
                assert refused.code == ResponseCode.SYSTEM_ERROR
                assert "enablePropertyFilter=true" in str(refused)
                assert "'sql' option" in str(refused)
            # tags still work there, and the check passes for them
            await check_pull_group(instance, bounds, None, "T0")
            got, _ = await read(instance, QueueRange(TOPIC, BROKER, 0, 0, 4), "T0")
            assert got == [0, 2]


SMALL_LOG = {**FILTERING, "mappedFileSizeCommitLog": "65536"}


async def test_offsets_whose_data_retention_deleted_are_lost_with_a_selector_too(
    tmp_path: Path,
) -> None:
    """The SQL92 read loop answers deleted records apart (MESSAGE_WAS_REMOVING), so the puller
    reports them as data loss, or skips them with failOnDataLoss=false: never as records the
    selector merely did not match."""
    with trio.fail_after(4 * LIMIT):
        async with broker_and_client(tmp_path, SMALL_LOG) as (c, instance):
            await fill(c, instance, 150, body=b"x" * 900)  # about 65 a commitlog file
            store = c.controllers[BROKER].store
            assert store is not None
            assert retention.delete_commitlog_files(store, lambda mf: True) == 2
            assert store.get_min_offset_in_queue(TOPIC, 0) == 0  # not followed yet
            cq = store.find_consume_queue(TOPIC, 0)
            assert cq is not None
            kept = next(o for o in range(150) if cq.unit_at(o)[0] >= store.commitlog.min_offset)
            qr = QueueRange(TOPIC, BROKER, 0, 0, 150)
            odd = MessageSelector.by_sql("TAGS = 'T1'")
            none = MessageSelector.by_sql("a > 1000")
            for selector in (odd, none):
                with pytest.raises(
                    DataLossError, match=r"offsets \[0, \d+\) .*deleted by retention"
                ):
                    await read(instance, qr, selector)
            got, _ = await read(instance, qr, odd, fail_on_data_loss=False)
            assert got == list(range(kept + 1 - kept % 2, 150, 2))
            got, puller = await read(instance, qr, none, fail_on_data_loss=False)
            assert got == []
            assert puller.cur == 150


_MQ = MessageQueue(TOPIC, BROKER, 0)
_SQL_SUB = build_subscription(TOPIC, SELECTOR)
_TAG_SUB = build_subscription(TOPIC, "T0")
_NO_SQL = "The broker does not support consumer to filter message by SQL92"


@pytest.mark.parametrize(
    ("code", "remark", "subscription", "names"),
    [
        (ResponseCode.SYSTEM_ERROR, _NO_SQL, _SQL_SUB, "enablePropertyFilter=true"),
        (ResponseCode.SUBSCRIPTION_PARSE_FAILED, "parse failed: x", _SQL_SUB, "could not parse"),
        (ResponseCode.SYSTEM_ERROR, "queueId[3] is illegal", _SQL_SUB, None),
        (ResponseCode.NO_PERMISSION, _NO_SQL, _SQL_SUB, None),
        (ResponseCode.SYSTEM_ERROR, _NO_SQL, _TAG_SUB, None),
    ],
)
def test_which_refusals_are_the_brokers_refusal_of_sql92(
    code: ResponseCode, remark: str, subscription: SubscriptionData, names: str | None
) -> None:
    refused = _sql_refusal(code, remark, subscription, _MQ, "127.0.0.1:1")
    if names is None:
        assert refused is None
    else:
        assert refused is not None
        assert refused.code == code
        assert names in str(refused)
        assert remark in str(refused)  # the broker's own words too
