"""BatchCQ topics end to end, in process: topic attributes through mqadmin and the admin API,
batches stored as one inner-batch record, consumers reading them message by message (commit
mid-batch, restart, resume), tag filtering, send-back of one inner message, SQL92 refused."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest
import trio

from client import api
from client.admin.admin_client import AdminClient
from client.aio import ConsumeFrom, Message, Producer, PullConsumer, PushConsumer
from client.consume_service import ConsumeResult
from client.errors import MQBrokerError
from client.message import MessageQueue, ReceivedMessage
from common.inner_batch import is_inner_batch
from common.message import MessageConst
from common.record import decode_record
from common.route import TopicConfig
from common.subscription import MessageSelector
from common.topic import dlq_topic, retry_topic
from common.topic_attributes import QUEUE_TYPE, CQType
from remoting.client import RemotingClient
from remoting.codes import RequestCode, ResponseCode
from remoting.command import RemotingCommand
from remoting.consume_queue_bodies import decode_query_consume_queue
from tests.admin.harness import fails, ok
from tests.broker.inprocess import wait_until
from tests.client.inproc_cluster import LIMIT, Cluster, cluster

BCQ = "BCQ"
FAST = {"messageDelayLevel": " ".join(["100ms"] * 18), "enablePropertyFilter": "true"}
"""Retries come back at once; SQL92 on, so its refusal on a BatchCQ topic is the BatchCQ one."""


async def _create(c: Cluster, topic: str = BCQ, queues: int = 1, mod: str = "") -> None:
    async with AdminClient(c.namesrv) as admin:
        await admin.update_topic(
            c.brokers["broker-a"], TopicConfig(topic, queues, queues), mod or "+queue.type=BatchCQ"
        )


def _config(c: Cluster, topic: str = BCQ) -> TopicConfig | None:
    topics = c.controllers["broker-a"].topics
    assert topics is not None
    return topics.select(topic)


def _batch(n: int, start: int = 0, tags: list[str] | None = None) -> list[Message]:
    return [
        Message(BCQ, b"m%d" % i, tags=(tags[i - start] if tags else f"t{i}"), keys=[f"k{i}"])
        for i in range(start, start + n)
    ]


async def _read(consumer: PullConsumer, n: int) -> list[ReceivedMessage]:
    got: list[ReceivedMessage] = []
    with trio.fail_after(LIMIT):
        while len(got) < n:
            got += await consumer.poll_for(0.2)
    return got


def _pull_consumer(c: Cluster, group: str = "cg") -> PullConsumer:
    return PullConsumer(group, c.namesrv, consume_from=ConsumeFrom.FIRST_OFFSET)


async def test_mqadmin_creates_a_batch_cq_topic_and_refuses_changing_its_type(
    tmp_path: Path,
) -> None:
    async with cluster(tmp_path, brokers=("broker-a",)) as c:
        addr = c.brokers["broker-a"]
        out = await ok(
            "updateTopic", "-n", c.namesrv, "-b", addr, "-t", BCQ, "-a", "+queue.type=BatchCQ"
        )
        assert "attributes={+queue.type=BatchCQ}" in out
        config = _config(c)
        assert config is not None
        assert dict(config.attributes) == {QUEUE_TYPE: "BatchCQ"}
        store = c.controllers["broker-a"].store
        assert store is not None
        assert store.queue_type(BCQ) is CQType.BATCH_CQ
        doc = json.loads(_topics_json(c).read_text())
        assert doc["topicConfigTable"][BCQ]["attributes"] == {QUEUE_TYPE: "BatchCQ"}

        err = await fails(
            "updateTopic", "-n", c.namesrv, "-b", addr, "-t", BCQ, "-a", "+queue.type=SimpleCQ"
        )
        assert "unchangeable attribute" in err
        assert "queue.type" in err
        assert _config(c) == config
        err = await fails(
            "updateTopic",
            "-n",
            c.namesrv,
            "-b",
            addr,
            "-t",
            "Other",
            "-a",
            "+cleanup.policy=DELETE",
        )
        assert "unsupported key: cleanup.policy" in err
        assert _config(c, "Other") is None
        err = await fails(
            "updateTopic", "-n", c.namesrv, "-b", addr, "-t", BCQ, "-a", "queue.type=BatchCQ"
        )
        assert "format is wrong" in err

        # an update without -a keeps the type; so does updateTopicPerm, which shows it
        await ok("updateTopic", "-n", c.namesrv, "-b", addr, "-t", BCQ, "-r", "2", "-w", "2")
        kept = _config(c)
        assert kept is not None
        assert kept.write_queue_nums == 2
        assert dict(kept.attributes) == {QUEUE_TYPE: "BatchCQ"}
        out = await ok("updateTopicPerm", "-n", c.namesrv, "-b", addr, "-t", BCQ, "-p", "4")
        assert "attributes={queue.type=BatchCQ}" in out
        async with AdminClient(c.namesrv) as admin:
            held = await admin.topic_config(addr, BCQ)
        assert held is not None
        assert dict(held.attributes) == {QUEUE_TYPE: "BatchCQ"}


def _topics_json(c: Cluster) -> Path:
    store = c.controllers["broker-a"].store
    assert store is not None
    return Path(store.config.config_dir) / "topics.json"


async def test_a_batch_is_one_record_and_every_message_is_read_once(tmp_path: Path) -> None:
    async with cluster(tmp_path, brokers=("broker-a",), overrides=FAST) as c:
        await _create(c)
        async with Producer("pg", c.namesrv) as producer:
            result = await producer.send_batch(_batch(8))
            single = await producer.send(Message(BCQ, b"single", tags="s", keys="ks"))
        assert result.queue_offset == 0
        assert "," not in result.offset_msg_id
        assert len(result.msg_id.split(",")) == 8
        assert single.queue_offset == 8
        store = c.controllers["broker-a"].store
        assert store is not None
        assert store.get_max_offset_in_queue(BCQ, 0) == 9
        phys = int(result.offset_msg_id[-16:], 16)
        raw = store.lookup_message_by_offset(phys)
        assert raw is not None
        record = decode_record(raw)
        assert is_inner_batch(record.sys_flag)
        assert record.properties[MessageConst.PROPERTY_INNER_NUM] == "8"

        async with _pull_consumer(c) as consumer:
            consumer.subscribe(BCQ)
            got = await _read(consumer, 9)
        assert [(m.queue_offset, m.body) for m in got] == [
            *((i, b"m%d" % i) for i in range(8)),
            (8, b"single"),
        ]
        assert [m.tags for m in got] == [*(f"t{i}" for i in range(8)), "s"]
        assert [m.keys for m in got] == [*([f"k{i}"] for i in range(8)), ["ks"]]
        assert [m.msg_id for m in got[:8]] == result.msg_id.split(",")
        assert all(m.sys_flag == 0 and "INNER_NUM" not in m.properties for m in got)


async def test_commit_mid_batch_then_restart_resumes_without_redelivery(tmp_path: Path) -> None:
    async with cluster(tmp_path, brokers=("broker-a",)) as c:
        await _create(c)
        async with Producer("pg", c.namesrv) as producer:
            await producer.send_batch(_batch(5))
            await producer.send_batch(_batch(5, 5))
        mq = MessageQueue(BCQ, "broker-a", 0)
        async with _pull_consumer(c) as consumer:
            consumer.assign([mq])
            with trio.fail_after(LIMIT):
                first = await consumer.poll(3)
                while not first:
                    first = await consumer.poll(3)
            await consumer.commit({mq: first[-1].queue_offset + 1})
        assert [m.queue_offset for m in first] == [0, 1, 2]

        await c.stop_broker("broker-a")
        async with trio.open_nursery() as nursery:
            await nursery.start(c.run_broker, tmp_path, "broker-a", None)
            async with _pull_consumer(c) as again:
                again.assign([mq])
                assert await again.committed(mq) == 3
                rest = await _read(again, 7)
            assert [(m.queue_offset, m.body) for m in rest] == [
                (i, b"m%d" % i) for i in range(3, 10)
            ]
            nursery.cancel_scope.cancel()


async def test_a_tag_subscription_gets_only_the_matching_inner_messages(tmp_path: Path) -> None:
    async with cluster(tmp_path, brokers=("broker-a",)) as c:
        await _create(c)
        async with Producer("pg", c.namesrv) as producer:
            await producer.send_batch(_batch(4, tags=["A", "B", "A", "C"]))
            await producer.send(Message(BCQ, b"last", tags="A"))
        async with _pull_consumer(c) as consumer:
            consumer.subscribe(BCQ, "A || C")
            got = await _read(consumer, 4)
            assert await consumer.poll_for(0.3) == []
        assert [(m.queue_offset, m.tags) for m in got] == [(0, "A"), (2, "A"), (3, "C"), (4, "A")]


async def test_sql92_pulls_of_a_batch_cq_topic_are_refused(tmp_path: Path) -> None:
    async with cluster(tmp_path, brokers=("broker-a",), overrides=FAST) as c:
        await _create(c)
        async with Producer("pg", c.namesrv) as producer:
            await producer.send_batch(_batch(2))
        async with AdminClient(c.namesrv) as admin:
            await admin.topic_route(BCQ)
            mq = MessageQueue(BCQ, "broker-a", 0)
            with pytest.raises(MQBrokerError, match="SQL92 filtering is not supported") as info:
                await admin.pull(mq, 0, 4, expression=MessageSelector.by_sql("a = 1"))  # type: ignore[arg-type]
            assert info.value.code == ResponseCode.SYSTEM_ERROR
            assert "BatchCQ" in str(info.value)
            found = await admin.pull(mq, 0, 4)  # tags are fine
            assert len(found.messages) == 2


async def test_batch_checks_answer_as_for_any_batch(tmp_path: Path) -> None:
    async with cluster(tmp_path, brokers=("broker-a",)) as c:
        await _create(c)
        delayed = Message(BCQ, b"d", properties={"DELAY": "2"})
        bad = Message(BCQ, b"d", properties={"DELAY": "x"})
        answers = []
        for topic in (BCQ, "Orders"):  # Orders: the cluster's SimpleCQ topic
            for msgs in ([delayed], [bad]):
                for m in msgs:
                    m.topic = topic
                answers.append(await _raw_batch(c, topic, msgs))
        assert answers[:2] == answers[2:]
        assert answers[0] == (
            ResponseCode.MESSAGE_ILLEGAL,
            "TimeDelayLevel is not supported for batching",
        )
        assert answers[1][0] == ResponseCode.MESSAGE_ILLEGAL
        assert "not an integer" in answers[1][1]
        store = c.controllers["broker-a"].store
        assert store is not None
        assert store.get_max_offset_in_queue(BCQ, 0) == 0


async def _raw_batch(c: Cluster, topic: str, msgs: list[Message]) -> tuple[int, str]:
    """Send a batch body as the producer builds it, bypassing its own checks."""
    from client.producer import encode_batch

    cmd = api.send_request(
        group="pg", topic=topic, queue_id=0, body=encode_batch(msgs), properties="",
        sys_flag=0, flag=0, born_timestamp=1, batch=True,
    )  # fmt: skip
    async with RemotingClient() as client:
        resp = await client.invoke(c.brokers["broker-a"], cmd)
    return resp.code, resp.remark


async def test_send_back_of_an_inner_message_sends_that_message_only(tmp_path: Path) -> None:
    async with cluster(tmp_path, brokers=("broker-a",), overrides=FAST) as c:
        await _create(c)
        async with Producer("pg", c.namesrv) as producer:
            await producer.send_batch(_batch(4))
        async with _pull_consumer(c) as consumer:
            consumer.subscribe(BCQ)
            got = await _read(consumer, 4)
        addr = c.brokers["broker-a"]
        async with RemotingClient() as client:
            back = api.send_back_request("cg", got[2], -1, 16)  # -1: straight to the DLQ
            assert (await client.invoke(addr, back)).code == ResponseCode.SUCCESS
            got[1].msg_id = "NOT-IN-THE-BATCH"
            refused = await client.invoke(addr, api.send_back_request("cg", got[1], -1, 16))
        assert refused.code == ResponseCode.SYSTEM_ERROR
        assert "inner batch" in refused.remark
        async with _pull_consumer(c, "dlq-reader") as reader:
            await wait_until(lambda: _config(c, dlq_topic("cg")) is not None, "the DLQ exists")
            reader.subscribe(dlq_topic("cg"))
            dead = await _read(reader, 1)
            assert await reader.poll_for(0.3) == []
        assert [(m.body, m.tags, m.msg_id) for m in dead] == [(b"m2", "t2", got[2].msg_id)]
        assert dead[0].properties[MessageConst.RETRY_TOPIC] == BCQ


async def test_a_failing_push_listener_gets_one_inner_message_back_from_the_retry_topic(
    tmp_path: Path,
) -> None:
    async with cluster(tmp_path, brokers=("broker-a",), overrides=FAST) as c:
        await _create(c)
        seen: Counter[bytes] = Counter()
        topics: dict[bytes, list[str]] = {}
        """Each message's queue's topic, per delivery."""

        def handle(msgs: list[ReceivedMessage]) -> ConsumeResult:
            for m in msgs:
                seen[m.body] += 1
                topics.setdefault(m.body, []).append(m.queue.topic)  # m.topic: reset to BCQ
            failing = any(m.body == b"m2" and m.reconsume_times == 0 for m in msgs)
            return ConsumeResult.RECONSUME_LATER if failing else ConsumeResult.SUCCESS

        consumer = PushConsumer("cg", c.namesrv, consume_from=ConsumeFrom.FIRST_OFFSET)
        consumer.subscribe(BCQ, "*", handle)
        async with consumer, Producer("pg", c.namesrv) as producer:
            await producer.send_batch(_batch(5))
            await wait_until(lambda: seen[b"m2"] == 2 and len(seen) == 5, "m2 retried")
            await trio.sleep(0.3)  # nothing else comes back
        assert seen == Counter({b"m0": 1, b"m1": 1, b"m2": 2, b"m3": 1, b"m4": 1})
        assert topics[b"m2"] == [BCQ, retry_topic("cg")]


async def test_query_consume_queue_lists_each_batch_unit_once(tmp_path: Path) -> None:
    """Regression: QUERY_CONSUME_QUEUE stepped through a BatchCQ queue by units as if they were
    message offsets, and listed a batch's unit again for each of its messages."""
    async with cluster(tmp_path, brokers=("broker-a",)) as c:
        await _create(c)
        async with Producer("pg", c.namesrv) as producer:
            first = await producer.send_batch(_batch(3))
            await producer.send_batch(_batch(4, 3))
            await producer.send(Message(BCQ, b"single"))
        cmd = RemotingCommand.request(
            RequestCode.QUERY_CONSUME_QUEUE, {"topic": BCQ, "queueId": 0, "index": 1}, opaque=0
        )
        async with RemotingClient() as client:
            resp = await client.invoke(c.brokers["broker-a"], cmd)
        assert resp.code == ResponseCode.SUCCESS, resp.remark
        body = decode_query_consume_queue(resp.body)
        assert body.max_queue_index == 8
        phys = [u.physic_offset for u in body.queue_data]
        assert len(phys) == 3
        assert len(set(phys)) == 3
        assert phys[0] == int(first.offset_msg_id[-16:], 16)
