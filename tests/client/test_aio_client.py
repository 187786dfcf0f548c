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
                           queueId="0", queueOffset="0", maxMsgNums="1", sysFlag="2",
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
            ([Message("%RETRY%cg", b"a")], MQClientError, "retry topic %RETRY%cg"),
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


async def test_a_broker_back_at_a_new_address_is_reached_despite_a_vanished_topic(
    tmp_path: Path,
) -> None:
    """A deleted topic keeps its cached route (as RocketMQ's client does), with the broker's
    address from before; the routes fetched since must win, or the moved broker is never
    reached again."""
    async with cluster(tmp_path, brokers=("broker-a",)) as c:
        await c.create_topic("Doomed", 2)
        async with Producer("pg", c.namesrv) as producer:
            await producer.send(Message(TOPIC, b"first"))
            await producer.send(Message("Doomed", b"first"))  # cached after TOPIC's route
            old = c.brokers["broker-a"]
            async with RemotingClient() as rc:
                for addr, code in ((old, RequestCode.DELETE_TOPIC_IN_BROKER),
                                   (c.namesrv, RequestCode.DELETE_TOPIC_IN_NAMESRV)):  # fmt: skip
                    resp = await rc.invoke(addr, req(code, topic="Doomed"))
                    assert resp.code == ResponseCode.SUCCESS, resp.remark
            await c.stop_broker("broker-a")
            async with trio.open_nursery() as nursery:
                await nursery.start(c.run_broker, tmp_path, "broker-a", None)
                assert c.brokers["broker-a"] != old
                await producer.instance.refresh_routes()
                assert producer.instance.broker_addr("broker-a") == c.brokers["broker-a"]
                result = await producer.send(Message(TOPIC, b"after"))
                assert result.status is SendStatus.SEND_OK
                nursery.cancel_scope.cancel()


async def test_send_async_calls_back_for_every_message_accepted_before_the_close(
    tmp_path: Path,
) -> None:
    """Leaving the producer waits for the sends it accepted: every callback runs, every
    message is stored."""
    async with cluster(tmp_path) as c:
        outcomes: list[BaseException | None] = []
        async with Producer("pg", c.namesrv) as producer:
            await producer.send(Message(TOPIC, b"warm"))
            for i in range(50):
                producer.send_async(Message(TOPIC, b"a%d" % i), lambda r, e: outcomes.append(e))
        assert outcomes == [None] * 50
        async with first_offset_consumer(c.namesrv) as consumer:
            consumer.assign(await consumer.fetch_queues(TOPIC))
            got = await read_all(consumer, 51)
        assert sorted(m.body for m in got if m.body != b"warm") == sorted(
            b"a%d" % i for i in range(50)
        )


async def test_a_bad_character_is_a_validation_error_and_send_async_survives_it() -> None:
    """A lone surrogate cannot be encoded: a MessageInvalidError, never an exception that
    escapes a background send into the instance (and the caller's) task tree."""
    config = ClientConfig(namesrv_addrs=("127.0.0.1:1",), client_ip="127.0.0.1")
    errors: list[BaseException | None] = []
    async with ClientInstance(config) as instance, Producer("pg", instance=instance) as p:
        for msg in (
            Message(TOPIC, b"x", tags="bad\ud800"),
            Message(TOPIC, b"x", properties={"k\ud800": "v"}),
            Message(TOPIC, b"x", keys=["\udcff"]),
        ):
            with pytest.raises(MessageInvalidError):
                await p.send(msg)
            with pytest.raises(MessageInvalidError):  # checked when called, as send's are
                p.send_async(msg, lambda r, e: errors.append(e))
    assert errors == []  # refused at the call: no background send, no callback


async def test_a_queue_of_another_topic_is_refused() -> None:
    config = ClientConfig(namesrv_addrs=("127.0.0.1:1",), client_ip="127.0.0.1")
    async with ClientInstance(config) as instance, Producer("pg", instance=instance) as p:
        with pytest.raises(MQClientError, match="topic"):
            await p.send(Message(TOPIC, b"x"), queue=MessageQueue("Other", "broker-a", 0))


async def test_properties_that_fit_only_without_the_unique_key_are_refused_by_the_client() -> None:
    """The producer adds UNIQ_KEY before the broker checks the properties' size: the client
    must count it too, and refuse before any network call."""
    config = ClientConfig(namesrv_addrs=("127.0.0.1:1",), client_ip="127.0.0.1")
    async with ClientInstance(config) as instance, Producer("pg", instance=instance) as p:
        # "k\x01" + value + "\x02" = 32767 bytes: the limit, before UNIQ_KEY is added
        msg = Message(TOPIC, b"x", properties={"k": "v" * (32767 - 3)})
        with pytest.raises(MessageInvalidError, match="propert"):
            await p.send(msg)


async def test_only_the_last_producer_of_a_group_unregisters_it() -> None:
    """Closing one of two producers of a group in one instance must not send UNREGISTER_CLIENT
    for the group: the brokers would forget the other until its next heartbeat."""
    config = ClientConfig(namesrv_addrs=("127.0.0.1:1",), client_ip="127.0.0.1")
    async with ClientInstance(config) as instance:
        async with Producer("pg", instance=instance), Producer("pg", instance=instance):
            assert instance.heartbeat_data().producer_groups == ("pg",)
        assert instance.heartbeat_data().producer_groups == ()
        instance.register_producer("pg")
        instance.register_producer("pg")
        assert instance.unregister_producer("pg") is False
        assert instance.unregister_producer("pg") is True


async def test_an_auto_created_topic_gets_the_producers_queue_count(tmp_path: Path) -> None:
    """RocketMQ's rule: min(the producer's defaultTopicQueueNums, TBW102's write queues)."""
    async with cluster(tmp_path, brokers=("broker-a",)) as c:
        async with Producer("pg", c.namesrv, default_topic_queue_nums=3) as producer:
            results = [await producer.send(Message("BrandNew", b"%d" % i)) for i in range(6)]
        topics = c.controllers["broker-a"].topics
        assert topics is not None
        config = topics.select("BrandNew")
        assert config is not None
        assert (config.read_queue_nums, config.write_queue_nums) == (3, 3)
        assert {r.queue.queue_id for r in results} <= {0, 1, 2}
