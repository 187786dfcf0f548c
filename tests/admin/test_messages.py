"""mqadmin message commands against two in-process brokers."""

from __future__ import annotations

from pathlib import Path

from client.aio import Message, Producer
from tests.admin.harness import as_json, fails, headers_in, ok
from tests.client.inproc_cluster import TOPIC, cluster


async def test_send_and_query_messages(tmp_path: Path) -> None:
    async with cluster(tmp_path) as c:
        n = ("-n", c.namesrv)
        text = await ok("sendMessage", *n, "-t", TOPIC, "-p", "hello", "-k", "k1", "-c", "tagA")
        assert headers_in(text, "#Broker Name", "#QID", "#Send Result", "#MsgId")
        assert "SEND_OK" in text
        sent = await as_json(
            "sendMessage", *n, "-t", TOPIC, "-p", "to-b2", "-k", "k2", "-b", "broker-b", "-i", "2"
        )
        assert (sent["brokerName"], sent["queueId"], sent["sendStatus"]) == (
            "broker-b",
            2,
            "SEND_OK",
        )

        by_offset_id = await as_json("queryMsgById", *n, "-i", sent["offsetMsgId"])
        assert [m["body"] for m in by_offset_id] == ["to-b2"]
        text = await ok("queryMsgById", *n, "-i", sent["offsetMsgId"])
        assert "Message Body:" in text
        assert "to-b2" in text
        assert "Keys:" in text
        by_uniq = await as_json("queryMsgById", *n, "-i", sent["msgId"], "-t", TOPIC)
        assert [m["msgId"] for m in by_uniq] == [sent["msgId"]]
        # an id is not a key, nor a key an id (the index shares one hash table)
        err = await fails("queryMsgById", *n, "-i", "k2", "-t", TOPIC)
        assert f"no message with this UNIQ_KEY in topic {TOPIC}" in err
        assert await as_json("queryMsgByKey", *n, "-t", TOPIC, "-k", sent["msgId"]) == []

        text = await ok("queryMsgByKey", *n, "-t", TOPIC, "-k", "k1")
        assert headers_in(text, "#Message ID", "#QID", "#Offset")
        found = await as_json("queryMsgByKey", *n, "-t", TOPIC, "-k", "k1")
        assert [(m["body"], m["tags"]) for m in found] == [("hello", "tagA")]
        assert await as_json("queryMsgByKey", *n, "-t", TOPIC, "-k", "nokey") == []

        at = await as_json(
            "queryMsgByOffset",
            *n,
            "-t",
            TOPIC,
            "-b",
            "broker-b",
            "-i",
            "2",
            "-o",
            str(sent["queueOffset"]),
        )
        assert [m["body"] for m in at] == ["to-b2"]
        err = await fails(
            "queryMsgByOffset", *n, "-t", TOPIC, "-b", "broker-b", "-i", "2", "-o", "99"
        )
        assert "no message at offset 99" in err
        err = await fails("queryMsgById", *n, "-i", "nonsense")
        assert "nonsense" in err
        for charset, reason in (("nosuchcharset", "unknown charset"), ("base64", "not a text")):
            for command in (("printMsg", "-t", TOPIC), ("queryMsgById", "-i", "x")):
                err = await fails(*command, *n, "-c", charset)
                assert reason in err


async def test_print_and_consume_messages(tmp_path: Path) -> None:
    async with cluster(tmp_path) as c:
        n = ("-n", c.namesrv)
        async with Producer("pg", c.namesrv) as producer:
            for i in range(40):
                await producer.send(
                    Message(TOPIC, f"m{i}".encode(), tags="even" if i % 2 == 0 else "odd")
                )
        msgs = await as_json("printMsg", *n, "-t", TOPIC)
        assert sorted(m["body"] for m in msgs) == sorted(f"m{i}" for i in range(40))
        evens = await as_json("printMsg", *n, "-t", TOPIC, "-s", "even")
        assert len(evens) == 20
        assert {m["tags"] for m in evens} == {"even"}
        text = await ok("printMsg", *n, "-t", TOPIC, "-d", "false")
        assert headers_in(text, "#Broker Name", "#QID", "#Offset", "#MsgId", "#Body")
        assert "NOT PRINT BODY" in text
        assert "m1" not in text.replace("#", "")
        first = min(m["storeTimestamp"] for m in msgs)
        last = max(m["storeTimestamp"] for m in msgs)
        assert len(await as_json("printMsg", *n, "-t", TOPIC, "-b", str(last + 1))) == 0
        ranged = await as_json("printMsg", *n, "-t", TOPIC, "-b", str(first), "-e", str(last))
        assert len(ranged) == 40

        some = await as_json("consumeMessage", *n, "-t", TOPIC, "-c", "7")
        assert len(some) == 7
        q = msgs[0]
        one = await as_json(
            "consumeMessage",
            *n,
            "-t",
            TOPIC,
            "-b",
            q["brokerName"],
            "-i",
            str(q["queueId"]),
            "-o",
            str(q["queueOffset"]),
            "-c",
            "1",
        )
        assert [m["body"] for m in one] == [q["body"]]
        text = await ok("consumeMessage", *n, "-t", TOPIC, "-c", "3")
        assert "Consumed 3 message(s)." in text
        # a failure while reading is one line too (no progress bar left on a non-terminal)
        err = await fails(
            "consumeMessage", *n, "-t", TOPIC, "-b", "broker-a", "-i", "0", "-o", "-3"
        )
        assert "illegal" in err
        err = await fails("consumeMessage", *n, "-t", TOPIC, "-o", "3")
        assert "-o offset needs -b brokerName and -i queueId" in err
        for count in ("0", "-5"):
            assert "MessageNumber" in await fails("consumeMessage", *n, "-t", TOPIC, "-c", count)
