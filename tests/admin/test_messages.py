"""mqadmin message commands against two in-process brokers."""

from __future__ import annotations

import subprocess
from datetime import datetime
from pathlib import Path

import trio

from client.admin.base import parse_timestamp
from client.admin.cmd_message import PRINT_PAGE
from client.aio import Message, Producer
from tests.admin.harness import as_json, fails, headers_in, ok
from tests.client.inproc_cluster import TOPIC, cluster
from tests.processes import REPO, console_script


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


async def test_query_msg_by_id_takes_a_comma_separated_list(tmp_path: Path) -> None:
    """As RocketMQ's QueryMsgByIdSubCommand: -i id1,id2 looks each id up, spaces trimmed."""
    async with cluster(tmp_path) as c:
        n = ("-n", c.namesrv)
        sent = [
            await as_json("sendMessage", *n, "-t", TOPIC, "-p", body, "-b", "broker-b", "-i", "1")
            for body in ("first", "second")
        ]
        ids = [s["offsetMsgId"] for s in sent]
        found = await as_json("queryMsgById", *n, "-i", f" {ids[0]} , {ids[1]} ,")
        assert [m["body"] for m in found] == ["first", "second"]
        found = await as_json("queryMsgById", *n, "-i", f"  {ids[1]}  ")
        assert [m["body"] for m in found] == ["second"]
        text = await ok("queryMsgById", *n, "-i", ",".join(ids))
        assert text.count("Message Body:") == 2
        # UNIQ_KEYs too, with -t
        uniq = ",".join(s["msgId"] for s in sent)
        found = await as_json("queryMsgById", *n, "-i", uniq, "-t", TOPIC)
        assert [m["body"] for m in found] == ["first", "second"]
        # one id not found fails the command, naming it; an empty list is a usage error
        err = await fails("queryMsgById", *n, "-i", f"{ids[0]},nonsense")
        assert "nonsense: not an offset message id" in err
        err = await fails("queryMsgById", *n, "-i", " , ")
        assert "no message id given" in err


def test_timestamps_read_the_last_field_as_milliseconds() -> None:
    """yyyy-MM-dd#HH:mm:ss:SSS as Java's SimpleDateFormat reads it: SSS counts milliseconds."""
    base = parse_timestamp("2026-01-01#00:00:00:000")
    assert base == int(datetime(2026, 1, 1).timestamp()) * 1000
    for field, ms in (("5", 5), ("05", 5), ("12", 12), ("120", 120), ("999", 999), ("1234", 1234)):
        assert parse_timestamp(f"2026-01-01#00:00:00:{field}") - base == ms
    assert parse_timestamp("2026-01-01#00:00:01:000") - base == 1000


async def test_a_bad_time_names_its_option(tmp_path: Path) -> None:
    async with cluster(tmp_path) as c:
        n = ("-n", c.namesrv)
        for args, option in (
            (("printMsg", "-t", TOPIC, "-b", "1", "-e", "garbage"), "-e"),
            (("printMsg", "-t", TOPIC, "-b", "2026-01-01#00:00:00"), "-b"),
            (("queryMsgByKey", "-t", TOPIC, "-k", "k", "-b", "x"), "-b"),
            (("consumeMessage", "-t", TOPIC, "-s", "x"), "-s"),
            (("resetOffsetByTime", "-g", "g", "-t", TOPIC, "-s", "yesterday"), "-s"),
        ):
            err = await fails(*args, *n)
            assert f"Invalid value for {option}: " in err, err


async def test_print_msg_pages_a_long_topic(tmp_path: Path) -> None:
    """printMsg prints a topic longer than a page as one table per page (each page as soon as
    it is read, RocketMQ-style headers on each), and --json as one array holding every
    message once."""
    count = 2 * PRINT_PAGE + 50
    async with cluster(tmp_path, brokers=("broker-a",), queues=2) as c:
        n = ("-n", c.namesrv)
        async with Producer("pg", c.namesrv) as producer:
            for start in range(0, count, 50):
                batch = [Message(TOPIC, f"p{i}".encode()) for i in range(start, start + 50)]
                await producer.send_batch(batch)
        msgs = await as_json("printMsg", *n, "-t", TOPIC)
        assert sorted(m["body"] for m in msgs) == sorted(f"p{i}" for i in range(count))
        text = await ok("printMsg", *n, "-t", TOPIC)
        assert text.count("#Broker Name") == 3  # 1,000 + 1,000 + 50 rows
        rows = [line for line in text.splitlines() if line.startswith("broker-a ")]
        assert len(rows) == count
        assert {row.split()[3] for row in rows} == {m["msgId"] for m in msgs}


async def test_print_msg_into_a_closed_pipe_ends_quietly(tmp_path: Path) -> None:
    """``mqadmin printMsg --json | head -1``: the reader leaves after one line; printMsg stops
    with status 1 and says nothing on stderr (no "BrokenPipeError" line, as a table's broken
    pipe and click's own handling do), instead of reporting a failure of the command."""
    async with cluster(tmp_path, brokers=("broker-a",), queues=1) as c:
        async with Producer("pg", c.namesrv) as producer:
            for _ in range(8):  # 400 messages: far more than a pipe buffers
                await producer.send_batch([Message(TOPIC, b"x" * 200) for _ in range(50)])
        argv = [console_script("mqadmin"), "printMsg", "-n", c.namesrv, "-t", TOPIC, "--json"]
        proc = await trio.lowlevel.open_process(
            argv, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE
        )
        assert proc.stdout is not None
        assert proc.stderr is not None
        try:
            first = await proc.stdout.receive_some(1)
            assert first == b"["
            await proc.stdout.aclose()  # as head does once it has its line
            err = b""
            while chunk := await proc.stderr.receive_some():
                err += chunk
            assert await proc.wait() == 1
        finally:
            with trio.CancelScope(shield=True):
                proc.kill()
                await proc.wait()
        assert err == b"", err.decode(errors="replace")
