"""mqadmin queryCq, printMsgByQueue, queryMsgByUniqueKey, topicClusterList, allocateMQ and
skipAccumulatedMessage against two in-process brokers (and QUERY_CONSUME_QUEUE behind queryCq)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from client.aio import Message, Producer, PullConsumer, PushConsumer
from client.consume_service import ConsumeResult
from client.message import MessageQueue, ReceivedMessage
from common.hashing import java_string_hash
from common.message_id import decode_offset_msg_id
from tests.admin.harness import as_json, fails, ok
from tests.broker.inprocess import wait_until
from tests.client.inproc_cluster import TOPIC, cluster

CQ_OF_THREE_UNITS = {"mappedFileSizeConsumeQueue": "60"}
"""Consume queue files of three units, so four messages span two files."""
TAGS = ("tagA", "tagB", "tagA", "tagC")


async def send_to(namesrv: str, mq: MessageQueue, tags: tuple[str, ...]) -> list[int]:
    """Send one message per tag to ``mq``; their commitlog offsets."""
    async with Producer("pg", namesrv) as producer:
        sent = [await producer.send(Message(TOPIC, b"m", tags=tag), queue=mq) for tag in tags]
    return [decode_offset_msg_id(r.offset_msg_id)[2] for r in sent]


def unit(phys: int, size: int, tag: str, taken: bool = False) -> dict[str, Any]:
    """A ``queueData`` entry as queryCq --json prints it."""
    return {
        "physicOffset": phys,
        "physicSize": size,
        "tagsCode": java_string_hash(tag),
        "extendDataJson": None,
        "bitMap": None,
        "eval": taken,
        "msg": None,
    }


async def test_query_cq_lists_the_units_of_a_queue_across_files(tmp_path: Path) -> None:
    async with cluster(tmp_path, overrides=CQ_OF_THREE_UNITS) as c:
        n = ("-n", c.namesrv)
        addr = c.brokers["broker-a"]
        phys = await send_to(c.namesrv, MessageQueue(TOPIC, "broker-a", 1), TAGS)
        size = phys[1] - phys[0]  # one body, one tag length: every record is as long
        assert phys == [phys[0] + i * size for i in range(4)]
        q = ("-t", TOPIC, "-q", "1")

        got = await as_json("queryCq", *n, *q, "-i", "1", "-c", "3")  # units 1 to 3: two files
        assert got == {
            "brokerAddr": addr,  # the topic's first master by name
            "subscriptionData": None,
            "filterData": None,
            "queueData": [unit(phys[i], size, TAGS[i]) for i in (1, 2, 3)],
            "maxQueueIndex": 4,
            "minQueueIndex": 0,
        }
        got = await as_json("queryCq", *n, *q, "-i", "0", "-b", addr)  # -c 10 by default
        assert [u["physicOffset"] for u in got["queueData"]] == phys

        text = await ok("queryCq", *n, *q, "-i", "2", "-c", "1")
        assert text.splitlines() == [
            "Queue data:",
            "max: 4, min: 0",
            "=" * 38,
            "#Idx  #PhysicOffset  #PhysicSize  #TagsCode  #Eval",
            f"2     {phys[2]:<13}  {size:<11}  {java_string_hash('tagA'):<9}  false",
        ]


async def test_query_cq_with_a_group_evaluates_its_subscription(tmp_path: Path) -> None:
    async with cluster(tmp_path) as c:
        n = ("-n", c.namesrv)
        await send_to(c.namesrv, MessageQueue(TOPIC, "broker-a", 0), TAGS)
        q = ("queryCq", *n, "-t", TOPIC, "-q", "0", "-i", "0")
        offline = await as_json(*q, "-g", "cqg")
        assert (offline["subscriptionData"], offline["filterData"]) == (
            None,
            f"cqg@{TOPIC} is not online!",
        )
        assert [u["eval"] for u in offline["queueData"]] == [False] * 4

        def handle(msgs: list[ReceivedMessage]) -> ConsumeResult:
            return ConsumeResult.SUCCESS

        consumer = PushConsumer("cqg", c.namesrv)
        consumer.subscribe(TOPIC, "tagA || tagC", handle)
        async with consumer:

            async def subscribed() -> bool:  # the consumer's heartbeat reached broker-a
                return (await as_json(*q, "-g", "cqg"))["subscriptionData"] is not None

            await wait_until(subscribed, "the group's subscription on broker-a")
            online = await as_json(*q, "-g", "cqg")
            text = await ok(*q, "-g", "cqg")
        assert online["subscriptionData"]["subString"] == "tagA || tagC"
        assert online["filterData"] is None
        assert [u["eval"] for u in online["queueData"]] == [True, False, True, True]
        assert text.startswith("Subscription data:\n{\n")


async def test_query_cq_refuses_bad_input(tmp_path: Path) -> None:
    async with cluster(tmp_path) as c:
        n = ("-n", c.namesrv)
        addr = c.brokers["broker-a"]
        await send_to(c.namesrv, MessageQueue(TOPIC, "broker-a", 1), TAGS[:2])
        q = ("queryCq", *n, "-b", addr)
        err = await fails(*q, "-t", "NoSuchTopic", "-q", "0", "-i", "0")
        assert "topic[NoSuchTopic] not exist" in err
        err = await fails(*q, "-t", TOPIC, "-q", "9", "-i", "0")
        assert f"9@{TOPIC} is not exist! (the topic has queues 0 to 3)" in err
        err = await fails(*q, "-t", TOPIC, "-q", "1", "-i", "2")
        assert f"Index 2 of 1@{TOPIC} is not exist! (the queue holds indexes [0, 2))" in err
        err = await fails(*q, "-t", TOPIC, "-q", "2", "-i", "0")  # a queue never written
        assert f"Index 0 of 2@{TOPIC} is not exist! (the queue holds indexes [0, 0))" in err
        err = await fails("queryCq", *n, "-t", "NoSuchTopic", "-q", "0", "-i", "0")
        assert "NoSuchTopic" in err


async def test_print_msg_by_queue_prints_and_counts_one_queue(tmp_path: Path) -> None:
    async with cluster(tmp_path) as c:
        n = ("-n", c.namesrv)
        await send_to(c.namesrv, MessageQueue(TOPIC, "broker-b", 3), TAGS)
        await send_to(c.namesrv, MessageQueue(TOPIC, "broker-b", 2), ("other",))
        q = ("printMsgByQueue", *n, "-t", TOPIC, "-a", "broker-b", "-i", "3")

        got = await as_json(*q, "-p", "true", "-f", "true")
        assert [(m["queueId"], m["queueOffset"], m["tags"]) for m in got["messages"]] == [
            (3, i, tag) for i, tag in enumerate(TAGS)
        ]
        assert all("body" not in m for m in got["messages"])  # -d false
        assert got["tagCounts"] == [
            {"tag": "tagA", "count": 2},
            {"tag": "tagB", "count": 1},
            {"tag": "tagC", "count": 1},
        ]
        text = await ok(*q, "-f", "true")
        assert text.splitlines() == [
            f"Tag: {'tagA':<30} Count: 2",
            f"Tag: {'tagB':<30} Count: 1",
            f"Tag: {'tagC':<30} Count: 1",
        ]
        text = await ok(*q, "-p", "true", "-d", "true", "-s", "tagB")
        rows = text.splitlines()
        assert rows[0].split() == [
            "#Broker",
            "Name",
            "#QID",
            "#Offset",
            "#MsgId",
            "#Tags",
            "#Keys",
            "#StoreTime",
            "#Body",
        ]
        assert [r.split()[:3] + r.split()[4:5] + r.split()[-1:] for r in rows[1:]] == [
            ["broker-b", "3", "1", "tagB", "m"]
        ]
        err = await fails(*q[:-1], "7")
        assert f"queue 7 of broker-b is not in topic {TOPIC}: broker broker-b has readable" in err
        assert "has readable queues 0 to 3" in err
        err = await fails(*q[:-3], "broker-x", "-i", "0")
        assert "no broker named broker-x has readable queues of it" in err
        err = await fails("printMsgByQueue", *n, "-t", "NoSuchTopic", "-a", "broker-b", "-i", "0")
        assert "NoSuchTopic" in err


async def test_query_msg_by_unique_key_shows_the_first_or_every_copy(tmp_path: Path) -> None:
    async with cluster(tmp_path) as c:
        n = ("-n", c.namesrv)
        msg = Message(TOPIC, b"twice", tags="t")
        async with Producer("pg", c.namesrv) as producer:
            first = await producer.send(msg, queue=MessageQueue(TOPIC, "broker-a", 0))
            again = await producer.send(msg, queue=MessageQueue(TOPIC, "broker-b", 1))
        assert first.msg_id == again.msg_id  # the UNIQ_KEY stamped on the first send stays
        q = ("queryMsgByUniqueKey", *n, "-t", TOPIC, "-i", first.msg_id)

        one = await as_json(*q)
        assert [(m["brokerName"], m["queueId"], m["body"]) for m in one] == [
            ("broker-a", 0, "twice")
        ]
        both = await as_json(*q, "-a")
        assert [m["offsetMsgId"] for m in both] == [first.offset_msg_id, again.offset_msg_id]
        text = await ok(*q)
        assert f"Msg ID:              {first.msg_id}" in text.splitlines()
        assert "Message Body:        twice" in text.splitlines()
        err = await fails("queryMsgByUniqueKey", *n, "-t", TOPIC, "-i", "0A0B0C")
        assert f"0A0B0C: no message with this UNIQ_KEY in topic {TOPIC}" in err


async def test_topic_cluster_list_and_allocate_mq(tmp_path: Path) -> None:
    async with cluster(tmp_path) as c:
        n = ("-n", c.namesrv)
        assert await ok("topicClusterList", *n, "-t", TOPIC) == "DefaultCluster\n"
        assert await as_json("topicClusterList", *n, "-t", TOPIC) == ["DefaultCluster"]
        err = await fails("topicClusterList", *n, "-t", "NoSuchTopic")
        assert "NoSuchTopic" in err

        ips = ("-t", TOPIC, "-i", " 10.0.0.3,10.0.0.1,,10.0.0.2,10.0.0.1")
        got = await as_json("allocateMQ", *n, *ips)

        def mqs(broker: str, *ids: int) -> list[dict[str, Any]]:
            return [{"brokerName": broker, "queueId": i, "topic": TOPIC} for i in ids]

        assert got == {  # 8 queues over 3 consumers: 3, 3, 2 in sorted order
            "result": {
                "10.0.0.1": mqs("broker-a", 0, 1, 2),
                "10.0.0.2": mqs("broker-a", 3) + mqs("broker-b", 0, 1),
                "10.0.0.3": mqs("broker-b", 2, 3),
            }
        }
        text = await ok("allocateMQ", *n, "-t", TOPIC, "-i", "h1")
        assert [line.split() for line in text.splitlines()] == [
            ["#IP", "#Broker", "Name", "#QID"],
            *(["h1", b, str(i)] for b in ("broker-a", "broker-b") for i in range(4)),
        ]
        err = await fails("allocateMQ", *n, "-t", TOPIC, "-i", " , ")
        assert "no IP given" in err
        err = await fails("allocateMQ", *n, "-t", "NoSuchTopic", "-i", "h1")
        assert "NoSuchTopic" in err


async def test_skip_accumulated_message_moves_the_group_to_the_end(tmp_path: Path) -> None:
    async with cluster(tmp_path) as c:
        n = ("-n", c.namesrv)
        await send_to(c.namesrv, MessageQueue(TOPIC, "broker-a", 0), TAGS[:3])
        await send_to(c.namesrv, MessageQueue(TOPIC, "broker-b", 2), TAGS[:1])
        async with PullConsumer("sg", c.namesrv) as pc:  # a reset needs a group with offsets
            await pc.commit({q: 0 for q in await pc.fetch_queues(TOPIC)})
        before = await as_json("consumerProgress", *n, "-g", "sg", "-t", TOPIC)
        assert before["diffTotal"] == 4

        got = await as_json("skipAccumulatedMessage", *n, "-g", "sg", "-t", TOPIC)
        ends = {("broker-a", 0): 3, ("broker-b", 2): 1}
        assert got["timestamp"] == -1
        assert got["force"] is True
        assert sorted((r["brokerName"], r["queueId"], r["offset"]) for r in got["offsetTable"]) == [
            (b, i, ends.get((b, i), 0)) for b in ("broker-a", "broker-b") for i in range(4)
        ]
        after = await as_json("consumerProgress", *n, "-g", "sg", "-t", TOPIC)
        assert after["diffTotal"] == 0
        text = await ok("skipAccumulatedMessage", *n, "-g", "sg", "-t", TOPIC)
        assert text.splitlines()[0].split() == ["#brokerName", "#queueId", "#offset"]
        assert "broker-a     0         3" in text.splitlines()[1]
        err = await fails("skipAccumulatedMessage", *n, "-g", "nosuchgroup", "-t", TOPIC)
        assert "nosuchgroup" in err
