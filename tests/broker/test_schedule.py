"""Delayed messages: delay-level parsing, the put-path redirect, ScheduleMessageService over a
real store with an injected clock, and end to end through an in-process broker (tiny levels),
including delivery progress across a broker restart."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import msgpack
import pytest
import trio

from broker.config import BrokerConfig, parse_delay_levels
from broker.controller import BrokerController
from broker.processors.send import encode_batch_body
from broker.schedule import (
    DELAY_OFFSET_FILE,
    ScheduleMessageService,
    corrected_due_ms,
    delivery_record,
    transform_delay_message,
)
from common.message import MessageConst, MessageSysFlag
from common.record import MessageRecord, encode_properties
from common.topic import SCHEDULE_TOPIC
from remoting.client import RemotingClient
from remoting.codes import RequestCode, ResponseCode
from store import MessageStore
from store.services import StoreServices
from tests.broker.inprocess import req, running_broker, wait_until
from tests.broker.pulls import pull_all, send
from tests.conftest import ManualClock

# ---------------------------------------------------------------------- pure parts


def test_delay_levels_default_and_units() -> None:
    levels = BrokerConfig(broker_ip1="127.0.0.1").delay_levels_ms
    assert len(levels) == 18
    assert levels[:4] == (1000, 5000, 10_000, 30_000)
    assert levels[-3:] == (30 * 60_000, 3_600_000, 7_200_000)
    assert parse_delay_levels("100ms 2s 3m 1h 1d") == (100, 2000, 180_000, 3_600_000, 86_400_000)
    for bad in ("", "1x", "s", "0s", "1.5s", "-1s"):
        with pytest.raises(ValueError, match="messageDelayLevel"):
            parse_delay_levels(bad)
    config = BrokerConfig.from_properties({"messageDelayLevel": "10ms 20ms"})
    assert config.delay_levels_ms == (10, 20)
    assert "messageDelayLevel=10ms 20ms" in config.to_properties()
    with pytest.raises(ValueError, match="messageDelayLevel"):
        BrokerConfig.from_properties({"messageDelayLevel": "soon"})


def test_transform_redirects_delayed_messages() -> None:
    msg = MessageRecord("T", b"x", queue_id=5, properties={"DELAY": "3", "UNIQ_KEY": "U"})
    assert transform_delay_message(msg, 18)
    assert (msg.topic, msg.queue_id) == (SCHEDULE_TOPIC, 2)
    assert msg.properties == {"DELAY": "3", "UNIQ_KEY": "U", "REAL_TOPIC": "T", "REAL_QID": "5"}
    clamped = MessageRecord("T", b"x", properties={"DELAY": "40"})
    assert transform_delay_message(clamped, 18)
    assert (clamped.queue_id, clamped.properties["DELAY"]) == (17, "18")
    for props in ({}, {"DELAY": "0"}, {"DELAY": "-2"}):
        plain = MessageRecord("T", b"x", properties=dict(props))
        assert not transform_delay_message(plain, 18)
        assert plain.topic == "T"
    prepared = MessageRecord(
        "T",
        b"x",
        properties={"DELAY": "1"},
        sys_flag=MessageSysFlag.TRANSACTION_PREPARED_TYPE,
    )
    assert not transform_delay_message(prepared, 18)
    with pytest.raises(ValueError, match="DELAY"):
        transform_delay_message(MessageRecord("T", b"x", properties={"DELAY": "soon"}), 18)


def test_delivery_record_restores_the_destination() -> None:
    scheduled = MessageRecord(
        SCHEDULE_TOPIC,
        b"body",
        queue_id=1,
        flag=7,
        properties={"DELAY": "2", "REAL_TOPIC": "T", "REAL_QID": "3", "UNIQ_KEY": "U"},
        sys_flag=MessageSysFlag.COMPRESSED_FLAG,
        born_timestamp=42,
        reconsume_times=2,
    )
    out = delivery_record(scheduled)
    assert out is not None
    assert (out.topic, out.queue_id, out.body, out.flag) == ("T", 3, b"body", 7)
    assert out.properties == {"REAL_TOPIC": "T", "REAL_QID": "3", "UNIQ_KEY": "U"}
    assert (out.sys_flag, out.born_timestamp, out.reconsume_times) == (1, 42, 2)
    broken = MessageRecord(SCHEDULE_TOPIC, b"", properties={"REAL_TOPIC": "T"})
    assert delivery_record(broken) is None


# ---------------------------------------------------------------------- the service, own clock


@asynccontextmanager
async def running_schedule(
    store: MessageStore, clock: ManualClock, cfg: Path
) -> AsyncIterator[tuple[StoreServices, ScheduleMessageService]]:
    """The store's services and a schedule service on levels 1 s and 5 s, driven by
    ``clock``; the nursery is cancelled when the block ends."""
    services = StoreServices(store)
    service = ScheduleMessageService(store, services, (1000, 5000), cfg, clock_ms=clock)
    store.arrival_listener = service.notify
    with trio.fail_after(30):
        async with trio.open_nursery() as nursery:
            await nursery.start(services.run)
            await nursery.start(service.run)
            yield services, service
            nursery.cancel_scope.cancel()


async def test_service_delivers_by_its_injected_clock(
    store: MessageStore, manual_clock: ManualClock, tmp_path: Path
) -> None:
    async with running_schedule(store, manual_clock, tmp_path / "cfg") as (services, service):
        t0 = manual_clock.now
        for body, level in ((b"a", 2), (b"b", 1), (b"c", 1)):
            msg = MessageRecord("T", body, queue_id=3, properties={"DELAY": str(level)})
            assert service.transform(msg)
            assert (await services.put_message(msg)).status.ok
            if body != b"c":
                manual_clock.advance(500)  # a at t0, b at t0 + 500, c at t0 + 1000
        await wait_until(lambda: service.next_due_ms.get(2) == t0 + 5000, "level 2 waits")
        await wait_until(lambda: service.last_check_ms.get(1) == t0 + 1000, "c seen")
        assert service.next_due_ms[1] == t0 + 1500
        assert store.get_max_offset_in_queue("T", 3) == 0

        manual_clock.now = t0 + 1500  # b is due, c (t0 + 2000) is not
        service.wakeup()
        await wait_until(lambda: service.next_due_ms.get(1) == t0 + 2000, "c waits")
        assert service.offsets == {1: 1}
        assert store.get_max_offset_in_queue("T", 3) == 1

        manual_clock.now = t0 + 4999  # a (stored at t0, level 2 = 5 s) is not due yet
        service.wakeup()
        await wait_until(lambda: service.last_check_ms.get(2) == t0 + 4999, "a rechecked")
        await wait_until(lambda: service.offsets.get(1) == 2, "c delivered")
        assert store.get_max_offset_in_queue("T", 3) == 2
        manual_clock.now = t0 + 5000
        service.wakeup()
        await wait_until(lambda: service.offsets.get(2) == 1, "a delivered")
        got = store.get_messages("T", 3, 0, 10)
        assert len(got.records) == 3
        assert service.delivered == 3
        assert service.dirty
    service.persist()
    doc = json.loads((tmp_path / "cfg" / DELAY_OFFSET_FILE).read_text())
    assert doc == {"offsetTable": {"1": 2, "2": 1}}
    again = ScheduleMessageService(store, services, (1000, 5000), tmp_path / "cfg")
    assert again.offsets == {1: 2, 2: 1}
    (tmp_path / "cfg" / DELAY_OFFSET_FILE).write_text('{"offsetTable": {"1": -1}}')
    with pytest.raises(ValueError, match="bad entry"):
        ScheduleMessageService(store, services, (1000,), tmp_path / "cfg")


def test_a_due_time_beyond_one_delay_means_the_clock_went_back() -> None:
    assert corrected_due_ms(10_000, 5000, 12_000) == 15_000  # waiting as usual
    assert corrected_due_ms(10_000, 5000, 10_000) == 15_000  # just stored
    assert corrected_due_ms(10_000, 5000, 20_000) == 15_000  # overdue: due when it was
    assert corrected_due_ms(10_000, 5000, 9_999) == 9_999  # stored "in the future": now


async def test_a_clock_stepped_back_does_not_hold_deliveries_back(
    store: MessageStore, manual_clock: ManualClock, tmp_path: Path
) -> None:
    # the reliability plan's R9: messages stored, then the clock steps back a minute; they are
    # delivered at once, not a minute (plus their level's delay) later
    async with running_schedule(store, manual_clock, tmp_path / "cfg") as (services, service):
        t0 = manual_clock.now
        for body, level in ((b"a", 1), (b"b", 2)):
            msg = MessageRecord("T", body, queue_id=0, properties={"DELAY": str(level)})
            assert service.transform(msg)
            assert (await services.put_message(msg)).status.ok
        await wait_until(lambda: service.next_due_ms.get(2) == t0 + 5000, "b waits")
        manual_clock.now = t0 - 60_000
        service.wakeup()
        await wait_until(lambda: service.offsets == {1: 1, 2: 1}, "both delivered")
        assert len(store.get_messages("T", 0, 0, 10).records) == 2


# ---------------------------------------------------------------------- through the broker

LEVELS = {"messageDelayLevel": "100ms 1h", "flushDelayOffsetInterval": "3600000"}


async def delay_offsets(client: RemotingClient, addr: str) -> dict[str, int]:
    resp = await client.invoke(addr, req(RequestCode.GET_ALL_DELAY_OFFSET))
    assert resp.code == ResponseCode.SUCCESS
    table: dict[str, int] = msgpack.unpackb(resp.body)["offsetTable"]
    return table


def queue_size(broker: BrokerController, topic: str, queue_id: int) -> int:
    assert broker.store is not None
    return broker.store.get_max_offset_in_queue(topic, queue_id)


async def test_delayed_message_arrives_no_earlier_than_its_level(tmp_path: Path) -> None:
    with trio.fail_after(30):
        async with (
            running_broker(tmp_path, overrides=LEVELS) as (broker, addr),
            RemotingClient() as client,
        ):
            await send(client, addr, "T", b"soon", queue_id=0, DELAY="1", UNIQ_KEY="U1")
            await send(client, addr, "T", b"later", queue_id=1, DELAY="5", UNIQ_KEY="U2")
            (scheduled,) = await pull_all(client, addr, SCHEDULE_TOPIC, 0)
            assert scheduled.properties["REAL_TOPIC"] == "T"
            await wait_until(lambda: queue_size(broker, "T", 0) == 1, "level 1 delivered")
            (rec,) = await pull_all(client, addr, "T", 0)
            assert rec.body == b"soon"
            assert rec.store_timestamp >= scheduled.store_timestamp + 100
            assert rec.properties[MessageConst.UNIQ_KEY] == "U1"
            assert MessageConst.DELAY not in rec.properties
            assert await delay_offsets(client, addr) == {"1": 1}
            # DELAY=5 was clamped to the last level (1 h): still waiting, not in its topic
            (waiting,) = await pull_all(client, addr, SCHEDULE_TOPIC, 1)
            assert (waiting.body, waiting.properties["DELAY"]) == (b"later", "2")
            assert await pull_all(client, addr, "T", 1) == []


async def test_illegal_delayed_sends(tmp_path: Path) -> None:
    with trio.fail_after(30):
        async with running_broker(tmp_path) as (broker, addr), RemotingClient() as client:
            props = encode_properties({"DELAY": "soon"}).decode()
            resp = await client.invoke(
                addr,
                req(
                    RequestCode.SEND_MESSAGE, b"x", producerGroup="pg", topic="T", properties=props
                ),
            )
            assert resp.code == ResponseCode.MESSAGE_ILLEGAL
            batch = encode_batch_body([{"body": b"a", "properties": {"DELAY": "1"}}])
            resp = await client.invoke(
                addr,
                req(RequestCode.SEND_BATCH_MESSAGE, batch, producerGroup="pg", topic="T"),
            )
            assert resp.code == ResponseCode.MESSAGE_ILLEGAL
            assert resp.remark == "TimeDelayLevel is not supported for batching"
            batch = encode_batch_body([{"body": b"a", "properties": {"DELAY": "x"}}])
            resp = await client.invoke(
                addr,
                req(RequestCode.SEND_BATCH_MESSAGE, batch, producerGroup="pg", topic="T"),
            )
            assert resp.code == ResponseCode.MESSAGE_ILLEGAL
            assert "'x' is not an integer" in (resp.remark or "")
            assert queue_size(broker, SCHEDULE_TOPIC, 0) == 0


async def test_a_batch_whose_delay_is_not_above_zero_is_not_delayed(tmp_path: Path) -> None:
    """As a single send, and as RocketMQ: only a level above 0 delays (and is refused in a
    batch)."""
    with trio.fail_after(30):
        async with running_broker(tmp_path) as (broker, addr), RemotingClient() as client:
            entries = [
                {"body": b"%d" % i, "properties": {"DELAY": d}}
                for i, d in enumerate(["0", "-1", ""])
            ]
            resp = await client.invoke(
                addr,
                req(
                    RequestCode.SEND_BATCH_MESSAGE,
                    encode_batch_body(entries),
                    producerGroup="pg",
                    topic="T",
                ),
            )
            assert resp.code == ResponseCode.SUCCESS, resp.remark
            assert [r.body for r in await pull_all(client, addr, "T", 0)] == [b"0", b"1", b"2"]
            assert queue_size(broker, SCHEDULE_TOPIC, 0) == 0


async def test_delay_progress_survives_a_restart(tmp_path: Path) -> None:
    saved = tmp_path / "store" / "config" / DELAY_OFFSET_FILE
    with trio.fail_after(60):
        async with (
            running_broker(tmp_path, overrides=LEVELS) as (broker, addr),
            RemotingClient() as client,
        ):
            await send(client, addr, "T", b"A", DELAY="1")
            await send(client, addr, "T", b"C", DELAY="2")  # 1 h: pending across the restart
            await wait_until(lambda: queue_size(broker, "T", 0) == 1, "A delivered")
            assert not saved.exists(), "the periodic flush is an hour away"
        # the clean shutdown persisted the progress
        assert json.loads(saved.read_text()) == {"offsetTable": {"1": 1}}

        async with (
            running_broker(tmp_path, overrides=LEVELS) as (broker, addr),
            RemotingClient() as client,
        ):
            assert await delay_offsets(client, addr) == {"1": 1}
            await send(client, addr, "T", b"B", DELAY="1")
            await wait_until(lambda: queue_size(broker, "T", 0) >= 2, "B delivered")
            # level 1 is delivered in order: had A been re-delivered it would precede B
            assert [r.body for r in await pull_all(client, addr, "T", 0)] == [b"A", b"B"]
            assert await delay_offsets(client, addr) == {"1": 2}
            assert [r.body for r in await pull_all(client, addr, SCHEDULE_TOPIC, 1)] == [b"C"]
        assert json.loads(saved.read_text()) == {"offsetTable": {"1": 2}}
