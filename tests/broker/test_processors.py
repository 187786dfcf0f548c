"""Send / pull processors end to end: a real store + StoreServices behind a RemotingServer."""

from __future__ import annotations

import itertools
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest
import trio

from broker.config import BrokerConfig
from broker.consumer_offset import ConsumerOffsetManager
from broker.processors.pull import make_pull_handlers
from broker.processors.send import encode_batch_body, make_send_handlers
from broker.topic_config import TopicConfigManager
from common.message_id import decode_offset_msg_id
from common.record import decode_record, decode_records, encode_properties
from common.route import TopicConfig
from remoting.client import RemotingClient
from remoting.codes import RequestCode, ResponseCode
from remoting.command import ExtValue, RemotingCommand
from remoting.server import RemotingServer
from store import MessageStore
from store.config import FlushDiskType
from store.services import StoreServices
from tests.conftest import ManualClock, small_store_config
from tests.store.faults import break_commitlog_flush, stall_commitlog_flushes

LIMIT = 10.0
TOPIC = "TopicTest"
GROUP = "cg"
_opaque = itertools.count(1)


@dataclass
class Broker:
    store: MessageStore
    topics: TopicConfigManager
    offsets: ConsumerOffsetManager
    client: RemotingClient
    addr: str
    clock: ManualClock

    async def call(self, code: int, body: bytes = b"", **fields: ExtValue) -> RemotingCommand:
        req = RemotingCommand.request(code, fields, body, opaque=next(_opaque))
        return await self.client.invoke(self.addr, req)

    async def send(
        self, body: bytes, topic: str = TOPIC, queue_id: int = 0, **fields: ExtValue
    ) -> RemotingCommand:
        fields.setdefault("producerGroup", "pg")
        fields.setdefault("bornTimestamp", "1700000000000")
        return await self.call(
            RequestCode.SEND_MESSAGE, body, topic=topic, queueId=str(queue_id), **fields
        )

    async def pull(
        self, offset: int, topic: str = TOPIC, queue_id: int = 0, **fields: ExtValue
    ) -> RemotingCommand:
        fields.setdefault("maxMsgNums", "32")
        return await self.call(
            RequestCode.PULL_MESSAGE,
            consumerGroup=GROUP,
            topic=topic,
            queueId=str(queue_id),
            queueOffset=str(offset),
            **fields,
        )

    async def wait_dispatched(self, topic: str, queue_id: int, count: int) -> None:
        with trio.fail_after(LIMIT):
            while True:
                if self.store.get_max_offset_in_queue(topic, queue_id) >= count:
                    return
                await trio.sleep(0.005)


@asynccontextmanager
async def running_broker(
    tmp_path: Path, *, auto_create: bool = True, **store_overrides: object
) -> AsyncIterator[Broker]:
    clock = ManualClock()
    store = MessageStore(small_store_config(tmp_path / "store", **store_overrides), clock_ms=clock)
    store.open()
    try:
        services = StoreServices(store)
        topics = TopicConfigManager(tmp_path / "config", 4, auto_create)
        offsets = ConsumerOffsetManager(tmp_path / "config")
        broker_config = BrokerConfig(broker_ip1="127.0.0.1", auto_create_topic_enable=auto_create)
        handlers = {
            **make_send_handlers(store, services, topics, broker_config),
            **make_pull_handlers(store, offsets, topics),
        }
        with trio.fail_after(LIMIT):
            async with trio.open_nursery() as nursery:
                await nursery.start(services.run)
                port = await nursery.start(RemotingServer(handlers, host="127.0.0.1", port=0).run)
                async with RemotingClient() as client:
                    yield Broker(store, topics, offsets, client, f"127.0.0.1:{port}", clock)
                nursery.cancel_scope.cancel()
    finally:
        store.close()


def props(**kv: str) -> str:
    return encode_properties(kv).decode()


# --------------------------------------------------------------------------- send + pull


async def test_send_single_and_batch_then_pull_back(tmp_path: Path) -> None:
    async with running_broker(tmp_path) as b:
        sent: list[tuple[bytes, dict[str, str]]] = []
        for i in range(3):
            p = {"TAGS": "TagA", "KEYS": f"k{i}", "color": "red"}
            resp = await b.send(f"body-{i}".encode(), properties=props(**p), flag="7")
            assert resp.code == ResponseCode.SUCCESS, resp.remark
            assert resp.ext_fields["queueId"] == "0"
            assert resp.ext_fields["queueOffset"] == str(i)
            host, port, phys = decode_offset_msg_id(str(resp.ext_fields["msgId"]))
            assert (host, port) == b.store.config.store_host
            raw = b.store.lookup_message_by_offset(phys)
            assert raw is not None
            rec = decode_record(raw)
            assert rec.body == f"body-{i}".encode()
            assert rec.properties == p
            assert rec.flag == 7
            sent.append((rec.body, p))

        batch = [
            {"body": b"batch-0", "properties": {"TAGS": "TagB", "KEYS": "bk0"}},
            {"body": b"batch-1", "properties": {"TAGS": "TagB"}, "flag": 3},
        ]
        resp = await b.call(
            RequestCode.SEND_BATCH_MESSAGE,
            encode_batch_body(batch),
            producerGroup="pg",
            topic=TOPIC,
            queueId="0",
        )
        assert resp.code == ResponseCode.SUCCESS, resp.remark
        assert resp.ext_fields["queueOffset"] == "3"
        ids = str(resp.ext_fields["msgId"]).split(",")
        assert len(ids) == 2
        for msg_id, entry in zip(ids, batch, strict=True):
            raw = b.store.lookup_message_by_offset(decode_offset_msg_id(msg_id)[2])
            assert raw is not None
            assert decode_record(raw).body == entry["body"]
        sent += [(b"batch-0", {"TAGS": "TagB", "KEYS": "bk0"}), (b"batch-1", {"TAGS": "TagB"})]

        await b.wait_dispatched(TOPIC, 0, 5)
        resp = await b.pull(0)
        assert resp.code == ResponseCode.SUCCESS
        assert resp.ext_fields["nextBeginOffset"] == "5"
        assert resp.ext_fields["minOffset"] == "0"
        assert resp.ext_fields["maxOffset"] == "5"
        assert resp.ext_fields["suggestWhichBrokerId"] == "0"
        recs = decode_records(resp.body, check_crc=True)
        assert [(r.body, r.properties) for r in recs] == sent
        assert [r.queue_offset for r in recs] == [0, 1, 2, 3, 4]
        assert recs[0].tags == "TagA"
        assert recs[0].keys == ["k0"]
        assert recs[4].flag == 3
        born_host = recs[0].born_host
        assert born_host[:4] == bytes([127, 0, 0, 1])

        resp = await b.pull(2, maxMsgNums="2")
        assert resp.code == ResponseCode.SUCCESS
        assert [r.body for r in decode_records(resp.body)] == [b"body-2", b"batch-0"]
        assert resp.ext_fields["nextBeginOffset"] == "4"


async def test_pull_offsets_out_of_range(tmp_path: Path) -> None:
    async with running_broker(tmp_path) as b:
        # no such topic: refused before the store is asked
        resp = await b.pull(0)
        assert resp.code == ResponseCode.TOPIC_NOT_EXIST
        b.topics.create_or_update(TopicConfig(TOPIC, 4, 4))
        # no such queue at all
        resp = await b.pull(0)
        assert resp.code == ResponseCode.PULL_NOT_FOUND
        assert resp.ext_fields["nextBeginOffset"] == "0"
        resp = await b.pull(3)
        assert resp.code == ResponseCode.PULL_OFFSET_MOVED
        assert resp.ext_fields["nextBeginOffset"] == "0"
        for i in range(2):
            assert (await b.send(b"x%d" % i)).code == ResponseCode.SUCCESS
        await b.wait_dispatched(TOPIC, 0, 2)
        resp = await b.pull(2)  # == max: nothing new yet (no long polling: answered at once)
        assert resp.code == ResponseCode.PULL_NOT_FOUND
        assert resp.ext_fields["nextBeginOffset"] == "2"
        assert resp.body == b""
        resp = await b.pull(9)  # > max
        assert resp.code == ResponseCode.PULL_OFFSET_MOVED
        assert resp.ext_fields["nextBeginOffset"] == "2"
        resp = await b.pull(0, suspendTimeoutMillis="15000", maxMsgNums="1")
        assert resp.code == ResponseCode.SUCCESS
        assert resp.ext_fields["nextBeginOffset"] == "1"
        # malformed header: SYSTEM_ERROR naming the field, never an exception
        resp = await b.call(RequestCode.PULL_MESSAGE, consumerGroup=GROUP, topic=TOPIC)
        assert resp.code == ResponseCode.SYSTEM_ERROR
        assert "queueId" in resp.remark


async def test_pull_with_tag_filter(tmp_path: Path) -> None:
    async with running_broker(tmp_path) as b:
        for tag in ("TagA", "TagB", "TagA", "TagC"):
            resp = await b.send(tag.encode(), properties=props(TAGS=tag))
            assert resp.code == ResponseCode.SUCCESS
        await b.wait_dispatched(TOPIC, 0, 4)

        resp = await b.pull(0, subscription="TagB")
        assert resp.code == ResponseCode.SUCCESS
        assert [r.tags for r in decode_records(resp.body)] == ["TagB"]
        assert resp.ext_fields["nextBeginOffset"] == "4"

        resp = await b.pull(0, subscription="TagA || TagC")
        assert [r.tags for r in decode_records(resp.body)] == ["TagA", "TagA", "TagC"]

        resp = await b.pull(0, subscription="*")
        assert len(decode_records(resp.body)) == 4

        # nothing matches: skipped entries still advance nextBeginOffset
        resp = await b.pull(0, subscription="TagZ")
        assert resp.code == ResponseCode.PULL_RETRY_IMMEDIATELY
        assert resp.ext_fields["nextBeginOffset"] == "4"
        assert resp.body == b""
        resp = await b.pull(4, subscription="TagZ")
        assert resp.code == ResponseCode.PULL_NOT_FOUND
        assert resp.ext_fields["nextBeginOffset"] == "4"


async def test_a_sql92_pull_is_refused_and_skips_nothing(tmp_path: Path) -> None:
    """Without a property filter (``enablePropertyFilter`` off, the default) an SQL92 pull is
    refused as RocketMQ refuses it, instead of being read as a tag that matches no message
    (which answered PULL_RETRY_IMMEDIATELY with ``nextBeginOffset`` past every message: all
    skipped)."""
    async with running_broker(tmp_path) as b:
        for i in range(3):
            assert (await b.send(b"m%d" % i, properties=props(a="5"))).code == ResponseCode.SUCCESS
        await b.wait_dispatched(TOPIC, 0, 3)
        resp = await b.pull(0, subscription="a > 1", expressionType="SQL92", sysFlag="4")
        assert (resp.code, resp.remark) == (
            ResponseCode.SYSTEM_ERROR,
            "The broker does not support consumer to filter message by SQL92",
        )
        assert "nextBeginOffset" not in resp.ext_fields
        for tag_type in ("TAG", ""):
            resp = await b.pull(0, subscription="*", expressionType=tag_type)
            assert resp.code == ResponseCode.SUCCESS
            assert len(decode_records(resp.body)) == 3


# --------------------------------------------------------------------------- rejections


async def test_illegal_sends_do_not_touch_the_store(tmp_path: Path) -> None:
    async with running_broker(tmp_path, max_message_size=1024) as b:
        assert (await b.send(b"ok")).code == ResponseCode.SUCCESS
        before = b.store.commitlog.max_offset
        cases: list[tuple[RemotingCommand, ResponseCode]] = [
            (await b.send(b"x", topic="bad topic!"), ResponseCode.MESSAGE_ILLEGAL),
            (await b.send(b"x", topic="T" * 128), ResponseCode.MESSAGE_ILLEGAL),
            (await b.send(b"x", topic="SCHEDULE_TOPIC_XXXX"), ResponseCode.NO_PERMISSION),
            (await b.send(b"x" * 1025), ResponseCode.MESSAGE_ILLEGAL),
            (
                await b.send(b"x", properties="TAGS\x01a\x02novalue\x02"),
                ResponseCode.MESSAGE_ILLEGAL,
            ),
            (await b.send(b"x", properties="\x01v\x02"), ResponseCode.MESSAGE_ILLEGAL),
            (await b.send(b"x", queue_id=99), ResponseCode.SYSTEM_ERROR),
            (
                await b.call(RequestCode.SEND_BATCH_MESSAGE, b"\xc1", topic=TOPIC, queueId="0"),
                ResponseCode.MESSAGE_ILLEGAL,
            ),
            (
                await b.call(
                    RequestCode.SEND_BATCH_MESSAGE,
                    encode_batch_body([{"body": b"a"}, {"body": b"y" * 2000}]),
                    topic=TOPIC,
                    queueId="0",
                ),
                ResponseCode.MESSAGE_ILLEGAL,
            ),
            (await b.call(RequestCode.SEND_MESSAGE, b"x"), ResponseCode.SYSTEM_ERROR),
            (await b.send(b"x", flag="notanint"), ResponseCode.SYSTEM_ERROR),
        ]
        for resp, code in cases:
            assert resp.code == code, resp.remark
            assert resp.remark
            assert "msgId" not in resp.ext_fields
        assert b.store.commitlog.max_offset == before
        assert "bad topic!" not in b.topics


async def test_auto_create_on_and_off(tmp_path: Path) -> None:
    async with running_broker(tmp_path / "on") as b:
        assert "NewTopic" not in b.topics
        resp = await b.send(b"x", topic="NewTopic", queue_id=-1)
        assert resp.code == ResponseCode.SUCCESS
        config = b.topics.select("NewTopic")
        assert config is not None
        assert config.write_queue_nums == 4
        # queueId -1: round robin over the writable queues
        queues = {resp.ext_fields["queueId"]}
        for _ in range(3):
            resp = await b.send(b"x", topic="NewTopic", queue_id=-1)
            queues.add(resp.ext_fields["queueId"])
        assert queues == {"0", "1", "2", "3"}
    async with running_broker(tmp_path / "off", auto_create=False) as b:
        before = b.store.commitlog.max_offset
        resp = await b.send(b"x", topic="NewTopic")
        assert resp.code == ResponseCode.TOPIC_NOT_EXIST
        assert "NewTopic" not in b.topics
        assert b.store.commitlog.max_offset == before


async def test_send_message_v2_single_letter_header(tmp_path: Path) -> None:
    async with running_broker(tmp_path) as b:
        resp = await b.call(
            RequestCode.SEND_MESSAGE_V2,
            b"v2",
            a="pg",
            b=TOPIC,
            e="1",
            f="0",
            g="1700000000000",
            h="0",
            i=props(TAGS="V2"),
            j="0",
        )
        assert resp.code == ResponseCode.SUCCESS, resp.remark
        assert resp.ext_fields["queueId"] == "1"
        await b.wait_dispatched(TOPIC, 1, 1)
        (rec,) = decode_records((await b.pull(0, queue_id=1)).body)
        assert rec.body == b"v2"
        assert rec.tags == "V2"


# --------------------------------------------------------------------------- offsets + queries


async def test_consumer_offsets(tmp_path: Path) -> None:
    async with running_broker(tmp_path) as b:
        for i in range(5):
            await b.send(b"m%d" % i)
        await b.wait_dispatched(TOPIC, 0, 5)
        query = {"consumerGroup": GROUP, "topic": TOPIC, "queueId": "0"}

        # no committed offset, queue starts at 0: 0
        resp = await b.call(RequestCode.QUERY_CONSUMER_OFFSET, **query)
        assert resp.code == ResponseCode.SUCCESS
        assert resp.ext_fields["offset"] == "0"

        resp = await b.pull(2, sysFlag="1", commitOffset="2")  # PullSysFlag COMMIT_OFFSET
        assert resp.code == ResponseCode.SUCCESS
        assert b.offsets.query_offset(GROUP, TOPIC, 0) == 2
        resp = await b.call(RequestCode.QUERY_CONSUMER_OFFSET, **query)
        assert resp.ext_fields["offset"] == "2"

        resp = await b.pull(2, sysFlag="1", commitOffset="-1")  # -1: no commit
        assert b.offsets.query_offset(GROUP, TOPIC, 0) == 2
        # without the flag the field means nothing: RocketMQ's pull and lite-pull consumers
        # send commitOffset=0 so, and it must not rewind the group
        resp = await b.pull(0, sysFlag="0", commitOffset="0")
        assert b.offsets.query_offset(GROUP, TOPIC, 0) == 2
        resp = await b.pull(0, commitOffset="0")
        assert b.offsets.query_offset(GROUP, TOPIC, 0) == 2

        resp = await b.call(RequestCode.UPDATE_CONSUMER_OFFSET, commitOffset="4", **query)
        assert resp.code == ResponseCode.SUCCESS
        resp = await b.call(RequestCode.QUERY_CONSUMER_OFFSET, **query)
        assert resp.ext_fields["offset"] == "4"

        resp = await b.call(RequestCode.UPDATE_CONSUMER_OFFSET, commitOffset="-5", **query)
        assert resp.code == ResponseCode.SYSTEM_ERROR

        # past the queue's end (5): kept at the end, or the messages the queue gets later up to
        # that offset would be skipped unread
        resp = await b.call(RequestCode.UPDATE_CONSUMER_OFFSET, commitOffset="1000", **query)
        assert resp.code == ResponseCode.SUCCESS
        assert b.offsets.query_offset(GROUP, TOPIC, 0) == 5
        await b.pull(4, sysFlag="1", commitOffset="999")
        assert b.offsets.query_offset(GROUP, TOPIC, 0) == 5
        resp = await b.call(RequestCode.UPDATE_CONSUMER_OFFSET, commitOffset="4", **query)

        # offsets of a topic or a queue that does not exist are refused, not kept
        no_topic = {**query, "topic": "NoSuchTopic"}
        resp = await b.call(RequestCode.UPDATE_CONSUMER_OFFSET, commitOffset="1", **no_topic)
        assert resp.code == ResponseCode.TOPIC_NOT_EXIST
        no_queue = {**query, "queueId": "99"}
        resp = await b.call(RequestCode.UPDATE_CONSUMER_OFFSET, commitOffset="1", **no_queue)
        assert resp.code == ResponseCode.SYSTEM_ERROR
        assert "queueId[99] is illegal" in resp.remark
        assert b.offsets.query_offsets(GROUP, "NoSuchTopic") == {}
        assert b.offsets.query_offsets(GROUP, TOPIC) == {0: 4}

        resp = await b.call(
            RequestCode.QUERY_CONSUMER_OFFSET,
            setZeroIfNotFound="false",
            **{**query, "consumerGroup": "other"},
        )
        assert resp.code == ResponseCode.QUERY_NOT_FOUND

        resp = await b.call(RequestCode.GET_MAX_OFFSET, topic=TOPIC, queueId="0")
        assert resp.code == ResponseCode.SUCCESS
        assert resp.ext_fields["offset"] == "5"
        resp = await b.call(RequestCode.GET_MIN_OFFSET, topic=TOPIC, queueId="0")
        assert resp.code == ResponseCode.SUCCESS
        assert resp.ext_fields["offset"] == "0"
        resp = await b.call(RequestCode.GET_MAX_OFFSET, topic="Nope", queueId="0")
        assert resp.ext_fields["offset"] == "0"


async def test_search_by_timestamp_view_by_id_and_query_by_key(tmp_path: Path) -> None:
    async with running_broker(tmp_path) as b:
        stamps: list[int] = []
        ids: list[str] = []
        for i in range(4):
            stamps.append(b.clock.advance(1000))
            resp = await b.send(b"m%d" % i, properties=props(KEYS=f"key{i % 2} all"))
            ids.append(str(resp.ext_fields["msgId"]))
        await b.wait_dispatched(TOPIC, 0, 4)

        async def search(ts: int) -> int:
            resp = await b.call(
                RequestCode.SEARCH_OFFSET_BY_TIMESTAMP, topic=TOPIC, queueId="0", timestamp=str(ts)
            )
            assert resp.code == ResponseCode.SUCCESS
            return int(str(resp.ext_fields["offset"]))

        assert await search(0) == 0
        assert await search(stamps[2]) == 2
        assert await search(stamps[2] - 1) == 2
        assert await search(stamps[3] + 1) == 4

        async def earliest(topic: str) -> str:
            resp = await b.call(RequestCode.GET_EARLIEST_MSG_STORETIME, topic=topic, queueId="0")
            assert resp.code == ResponseCode.SUCCESS
            return str(resp.ext_fields["timestamp"])

        assert await earliest(TOPIC) == str(stamps[0])
        assert await earliest("NoSuchTopic") == "-1"

        _, _, phys = decode_offset_msg_id(ids[1])
        resp = await b.call(RequestCode.VIEW_MESSAGE_BY_ID, topic=TOPIC, offset=str(phys))
        assert resp.code == ResponseCode.SUCCESS
        assert decode_record(resp.body).body == b"m1"
        resp = await b.call(RequestCode.VIEW_MESSAGE_BY_ID, topic=TOPIC, offset=str(10**9))
        assert resp.code == ResponseCode.SYSTEM_ERROR

        window = {"beginTimestamp": "0", "endTimestamp": str(stamps[-1] + 1000)}
        resp = await b.call(
            RequestCode.QUERY_MESSAGE, topic=TOPIC, key="key1", maxNum="32", **window
        )
        assert resp.code == ResponseCode.SUCCESS
        assert sorted(r.body for r in decode_records(resp.body)) == [b"m1", b"m3"]
        resp = await b.call(
            RequestCode.QUERY_MESSAGE, topic=TOPIC, key="all", maxNum="32", **window
        )
        assert len(decode_records(resp.body)) == 4
        resp = await b.call(
            RequestCode.QUERY_MESSAGE, topic=TOPIC, key="missing", maxNum="32", **window
        )
        assert resp.code == ResponseCode.QUERY_NOT_FOUND
        assert resp.body == b""


# --------------------------------------------------------------------------- answers that wait


async def test_sync_flush_send_is_answered_only_once_flushed(tmp_path: Path) -> None:
    """Under SYNC_FLUSH the send handler's answer waits for the flush covering the message."""
    async with running_broker(tmp_path, flush_disk_type=FlushDiskType.SYNC_FLUSH) as b:
        for i in range(5):
            resp = await b.send(b"durable-%d" % i)
            assert resp.code == ResponseCode.SUCCESS
            assert b.store.flushed_offset >= b.store.commitlog.max_offset


async def test_a_failed_flush_is_answered_flush_disk_timeout_then_refused(tmp_path: Path) -> None:
    async with running_broker(tmp_path, flush_disk_type=FlushDiskType.SYNC_FLUSH) as b:
        assert (await b.send(b"durable")).code == ResponseCode.SUCCESS
        break_commitlog_flush(b.store)
        resp = await b.send(b"not durable")
        assert resp.code == ResponseCode.FLUSH_DISK_TIMEOUT
        resp = await b.send(b"refused")
        assert resp.code == ResponseCode.SERVICE_NOT_AVAILABLE
        assert "could not be flushed" in (resp.remark or "")


async def test_a_stalled_disk_is_answered_flush_disk_timeout_and_then_recovers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A disk that stops answering (reliability plan R10): SYNC_FLUSH sends waiting past
    syncFlushTimeout get FLUSH_DISK_TIMEOUT, never SEND_OK, and reads go on meanwhile. Unlike
    a failed flush, a slow one refuses nothing: once the disk answers again sends succeed, and
    the timed-out messages (outcome unknown to their senders) turn out stored."""
    async with running_broker(
        tmp_path, flush_disk_type=FlushDiskType.SYNC_FLUSH, sync_flush_timeout=300
    ) as b:
        assert (await b.send(b"before")).code == ResponseCode.SUCCESS
        released = stall_commitlog_flushes(b.store, monkeypatch.setattr)
        answers: list[int] = []

        async def send(i: int) -> None:
            answers.append((await b.send(b"stalled-%d" % i)).code)

        async with trio.open_nursery() as nursery:
            for i in range(4):
                nursery.start_soon(send, i)
        assert answers == [ResponseCode.FLUSH_DISK_TIMEOUT] * 4
        assert (await b.pull(0)).code == ResponseCode.SUCCESS  # reads are not held up
        released.set()  # the disk answers again
        assert (await b.send(b"after")).code == ResponseCode.SUCCESS
        await b.wait_dispatched(TOPIC, 0, 6)
        bodies = [r.body for r in decode_records((await b.pull(0)).body)]
        assert bodies[0] == b"before"
        assert sorted(bodies[1:5]) == [b"stalled-%d" % i for i in range(4)]
        assert bodies[5] == b"after"


async def test_send_creating_a_topic_is_answered_after_the_registration(tmp_path: Path) -> None:
    """The answer to a send that auto-created its topic waits for ``on_topic_created``."""
    store = MessageStore(small_store_config(tmp_path / "store")).open()
    registered: list[float] = []

    async def register() -> None:
        await trio.sleep(0.05)  # a name server round trip
        registered.append(trio.current_time())

    try:
        services = StoreServices(store)
        topics = TopicConfigManager(tmp_path / "config", 4, True)
        config = BrokerConfig(broker_ip1="127.0.0.1")
        handlers = make_send_handlers(store, services, topics, config, on_topic_created=register)
        with trio.fail_after(LIMIT):
            async with trio.open_nursery() as nursery:
                await nursery.start(services.run)
                port = await nursery.start(RemotingServer(handlers, host="127.0.0.1", port=0).run)
                async with RemotingClient() as client:
                    offsets = ConsumerOffsetManager(tmp_path / "config")
                    b = Broker(store, topics, offsets, client, f"127.0.0.1:{port}", ManualClock())
                    first = await b.send(b"new topic", topic="BrandNew")
                    assert first.code == ResponseCode.SUCCESS
                    assert len(registered) == 1
                    again = await b.send(b"known topic", topic="BrandNew")
                    assert again.code == ResponseCode.SUCCESS
                    assert len(registered) == 1  # only a new topic registers
                nursery.cancel_scope.cancel()
    finally:
        store.close()
