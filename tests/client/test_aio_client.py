"""The trio-native Producer and PullConsumer against an in-process name server and two brokers."""

from __future__ import annotations

import zlib
from functools import partial
from pathlib import Path

import pytest
import trio

from client.aio import ClientInstance, ConsumeFromWhere, Producer, PullConsumer
from client.config import ClientConfig
from client.errors import MessageInvalidError, MQClientError
from client.message import Message, MessageQueue, ReceivedMessage, SendStatus
from common.message import MessageConst, MessageSysFlag
from remoting.client import RemotingClient
from remoting.codes import RequestCode, ResponseCode
from tests.broker.inprocess import req, running_broker, running_namesrv, wait_until
from tests.client.inproc_cluster import LIMIT, TOPIC, cluster


async def read_all(consumer: PullConsumer, count: int) -> list[ReceivedMessage]:
    got: list[ReceivedMessage] = []
    while len(got) < count:
        got += await consumer.poll()
    return got


def first_offset_consumer(namesrv: str, group: str = "cg", **kw: object) -> PullConsumer:
    return PullConsumer(
        group,
        namesrv,
        consume_from=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET,
        **kw,  # type: ignore[arg-type]
    )


async def test_send_and_pull_back_every_field(tmp_path: Path) -> None:
    big = bytes(range(256)) * 40  # 10 KiB: compressed on the wire, transparent to the consumer
    async with cluster(tmp_path) as c:
        async with Producer("pg", c.namesrv) as producer:
            results = []
            for i in range(40):
                body = big if i == 7 else b"body-%d" % i
                msg = Message(TOPIC, body, tags=f"T{i % 3}", keys=[f"k{i}", "common"])
                msg.properties["n"] = str(i)
                results.append(await producer.send(msg))
        assert {r.status for r in results} == {SendStatus.SEND_OK}
        assert {r.queue.broker_name for r in results} == {"broker-a", "broker-b"}
        assert len({r.msg_id for r in results}) == 40
        async with first_offset_consumer(c.namesrv) as consumer:
            queues = await consumer.fetch_queues(TOPIC)
            assert len(queues) == 8
            consumer.assign(queues)
            got = await read_all(consumer, 40)
    by_n = {int(m.properties["n"]): m for m in got}
    assert sorted(by_n) == list(range(40))
    for i, m in by_n.items():
        assert m.body == (big if i == 7 else b"body-%d" % i)
        assert m.tags == f"T{i % 3}"
        assert m.keys == [f"k{i}", "common"]
        assert m.msg_id == results[i].msg_id
        assert m.offset_msg_id == results[i].offset_msg_id
        assert m.queue == results[i].queue
        assert m.queue_offset == results[i].queue_offset
    assert by_n[7].sys_flag & MessageSysFlag.COMPRESSED_FLAG
    assert zlib.compress(big, 5) != big  # the test would be vacuous otherwise


async def test_batch_oneway_async_and_orderly(tmp_path: Path) -> None:
    async with cluster(tmp_path) as c:
        callbacks: list[tuple[object, object]] = []
        done = trio.Event()

        def callback(result: object, error: object) -> None:
            callbacks.append((result, error))
            done.set()

        async with Producer("pg", c.namesrv) as producer:
            batch = await producer.send_batch([Message(TOPIC, b"b%d" % i) for i in range(10)])
            assert batch.status is SendStatus.SEND_OK
            assert len(batch.msg_id.split(",")) == 10
            await producer.send_oneway(Message(TOPIC, b"oneway"))
            producer.send_async(Message(TOPIC, b"async"), callback)
            await done.wait()
            orderly = [
                await producer.send_orderly(Message(TOPIC, b"o%d" % i), sharding_key="order-42")
                for i in range(5)
            ]
        ((result, error),) = callbacks
        assert error is None
        assert result is not None
        assert len({r.queue for r in orderly}) == 1
        assert [r.queue_offset for r in orderly] == sorted(r.queue_offset for r in orderly)
        async with first_offset_consumer(c.namesrv) as consumer:
            consumer.assign(await consumer.fetch_queues(TOPIC))
            got = await read_all(consumer, 17)
        bodies = [m.body for m in got]
        assert sorted(bodies) == sorted(
            [b"b%d" % i for i in range(10)] + [b"oneway", b"async"] + [b"o%d" % i for i in range(5)]
        )
        orderly_bodies = {b"o%d" % i for i in range(5)}
        in_queue = [m.body for m in got if m.body in orderly_bodies]
        assert {m.queue for m in got if m.body in orderly_bodies} == {orderly[0].queue}
        assert in_queue == [b"o%d" % i for i in range(5)]


async def test_producer_fails_over_to_the_other_broker(tmp_path: Path) -> None:
    async with cluster(tmp_path) as c, Producer("pg", c.namesrv) as producer:
        await producer.send(Message(TOPIC, b"warm"))  # routes of both brokers are cached
        await c.stop_broker("broker-a")
        assert producer.instance.broker_addr("broker-a") is not None  # still routed to
        results = [await producer.send(Message(TOPIC, b"after-%d" % i)) for i in range(20)]
    assert {r.status for r in results} == {SendStatus.SEND_OK}
    assert {r.queue.broker_name for r in results} == {"broker-b"}


async def test_a_busy_broker_sends_the_producer_to_the_other_one(tmp_path: Path) -> None:
    # broker-a holds as many requests waiting for their answer as it allows (one parked
    # pull): it answers everything else SYSTEM_BUSY, which the producer retries elsewhere
    async with (
        running_namesrv() as namesrv,
        running_broker(
            tmp_path / "a",
            namesrv,
            overrides={"brokerName": "broker-a", "serverMaxPendingRequests": "1"},
        ) as (a, addr_a),
        running_broker(tmp_path / "b", namesrv, overrides={"brokerName": "broker-b"}) as (
            _,
            addr_b,
        ),
        RemotingClient() as admin,
    ):
        for addr in (addr_a, addr_b):
            create = req(RequestCode.UPDATE_AND_CREATE_TOPIC, topic=TOPIC, perm="6",
                         readQueueNums="2", writeQueueNums="2")  # fmt: skip
            assert (await admin.invoke(addr, create)).code == ResponseCode.SUCCESS
        assert a.server is not None
        limit = a.server.pending_limit
        async with Producer("pg", namesrv) as producer:
            async with RemotingClient() as parker, trio.open_nursery() as nursery:
                pull = req(RequestCode.PULL_MESSAGE, consumerGroup="cg", topic=TOPIC,
                           queueId="0", queueOffset="0", maxMsgNums="1",
                           suspendTimeoutMillis="60000", subscription="*")  # fmt: skip
                nursery.start_soon(partial(parker.invoke, addr_a, pull, timeout_s=LIMIT))
                await wait_until(lambda: limit.pending == 1, "a pull parked on broker-a")
                busy = [await producer.send(Message(TOPIC, b"busy-%d" % i)) for i in range(6)]
                nursery.cancel_scope.cancel()  # the parked pull's client goes away
            assert {r.queue.broker_name for r in busy} == {"broker-b"}
            assert limit.rejected >= 3  # every other send went to broker-a first
            await wait_until(lambda: limit.pending == 0, "broker-a free again")
            again = [await producer.send(Message(TOPIC, b"free-%d" % i)) for i in range(6)]
            assert {r.queue.broker_name for r in again} == {"broker-a", "broker-b"}


async def test_commit_and_resume_with_seek_and_tag_filter(tmp_path: Path) -> None:
    async with cluster(tmp_path) as c:
        async with Producer("pg", c.namesrv) as producer:
            mq = MessageQueue(TOPIC, "broker-a", 0)
            for i in range(10):
                await producer.send(Message(TOPIC, b"%d" % i, tags="A" if i % 2 else "B"), queue=mq)
        async with first_offset_consumer(c.namesrv, auto_commit=False) as consumer:
            consumer.assign([mq])
            got = await read_all(consumer, 4)
            assert [m.queue_offset for m in got[:4]] == [0, 1, 2, 3]
            consumer.seek(mq, 2)
            again = await consumer.poll(max_records=3)
            assert [m.queue_offset for m in again] == [2, 3, 4]
            assert consumer.position(mq) == 5
            await consumer.commit()
            assert await consumer.committed(mq) == 5
        async with first_offset_consumer(c.namesrv, auto_commit=False) as consumer:
            consumer.assign([mq], "A")
            got = await read_all(consumer, 3)
            assert [m.body for m in got] == [b"5", b"7", b"9"]
            assert all(m.tags == "A" for m in got)


async def test_long_poll_delivers_a_message_sent_after_the_poll_began(tmp_path: Path) -> None:
    async with cluster(tmp_path) as c:
        mq = MessageQueue(TOPIC, "broker-b", 1)
        async with (
            first_offset_consumer(c.namesrv, suspend_timeout_ms=60_000) as consumer,
            Producer("pg", c.namesrv) as producer,
        ):
            consumer.assign([mq])
            holds = c.controllers["broker-b"].holds
            await wait_until(lambda: holds.parked_count(TOPIC, 1) > 0, "the pull to be held")
            assert consumer.poll_nowait() == []
            async with trio.open_nursery() as nursery:
                got: list[ReceivedMessage] = []

                async def poll() -> None:
                    with trio.fail_after(LIMIT):  # far below the 60 s suspend
                        got.extend(await consumer.poll())

                nursery.start_soon(poll)
                await producer.send(Message(TOPIC, b"late"), queue=mq)
        assert [m.body for m in got] == [b"late"]


async def test_invalid_messages_fail_before_any_network_call() -> None:
    # the name server address is unroutable: validation must not need it
    config = ClientConfig(namesrv_addrs=("127.0.0.1:1",), client_ip="127.0.0.1")
    async with ClientInstance(config) as instance, Producer("pg", instance=instance) as p:
        with pytest.raises(MessageInvalidError):
            await p.send(Message("bad topic!", b"x"))
        with pytest.raises(MessageInvalidError):
            await p.send(Message(TOPIC, b""))
        with pytest.raises(MessageInvalidError):
            await p.send(Message(TOPIC, b"x" * (4 * 1024 * 1024 + 1)))
        with pytest.raises(MessageInvalidError):
            await p.send(Message("RMQ_SYS_TRANS_HALF_TOPIC", b"x"))
        with pytest.raises(MQClientError, match="no name server answered"):
            await p.send(Message(TOPIC, b"fine"))


async def test_invalid_batches_fail_before_any_network_call_and_stamp_nothing() -> None:
    config = ClientConfig(namesrv_addrs=("127.0.0.1:1",), client_ip="127.0.0.1")
    async with ClientInstance(config) as instance, Producer("pg", instance=instance) as p:
        good = [Message(TOPIC, b"a"), Message(TOPIC, b"b")]
        cases: list[tuple[list[Message], type[Exception], str]] = [
            ([Message("bad topic!", b"x")], MessageInvalidError, "topic"),
            ([*good, Message("Other", b"x")], MQClientError, "share a topic"),
            ([*good, Message(TOPIC, b"x", delay_level=2)], MQClientError, "delayed"),
            ([*good, Message(TOPIC, b"")], MessageInvalidError, "length is zero"),
            ([*good, Message(TOPIC, b"x", properties={"k": "v\x01"})], MessageInvalidError, "k"),
            ([], MQClientError, "at least one message"),
        ]
        for batch, error, reason in cases:
            with pytest.raises(error, match=reason):
                await p.send_batch(batch)
            assert not [m for m in batch if MessageConst.UNIQ_KEY in m.properties]
        keyed = Message(TOPIC, b"c", properties={MessageConst.UNIQ_KEY: "ABC"})
        with pytest.raises(MQClientError, match="no name server answered"):
            await p.send_batch([*good, keyed])
        keys = [m.properties[MessageConst.UNIQ_KEY] for m in good]
        assert len(set(keys)) == 2  # stamped once validated, fresh keys each
        assert keyed.properties[MessageConst.UNIQ_KEY] == "ABC"  # a key of its own is kept
