"""mqadmin consumerStatus (GET_CONSUMER_RUNNING_INFO) and queryMsgById -g -d (consume directly,
CONSUME_MESSAGE_DIRECTLY): two in-process brokers forward them to live consumers over the
consumers' own connections."""

from __future__ import annotations

import time
from pathlib import Path

import trio
import trio.testing

from client.aio import ConsumeFrom, Message, Producer, PullConsumer, PushConsumer
from client.consume_service import ConsumeResult
from client.consumer_stats import CONSUME_OK_TPS
from client.message import ReceivedMessage
from client.running_info import thread_stacks, trio_task_stacks
from common.subscription import build_subscription
from remoting.consumer_bodies import (
    CMResult,
    ConsumeMessageDirectlyResult,
    ConsumerRunningInfo,
    ConsumeStatus,
    ProcessQueueInfo,
    decode_direct_result,
    decode_running_info,
    encode_direct_result,
    encode_running_info,
)
from tests.admin.harness import as_json, collecting_consumer, fails, headers_in, ok
from tests.broker.inprocess import wait_until
from tests.client.inproc_cluster import TOPIC, Cluster, cluster


async def online_everywhere(c: Cluster, group: str, client_id: str) -> None:
    """Wait until every broker has the member in its table (its heartbeats arrived)."""

    def online() -> bool:
        return all(
            ctl.clients.manager.find_consumer(group, client_id) is not None
            for ctl in c.controllers.values()
        )

    await wait_until(online, f"{client_id} online in {group} on every broker")


async def test_running_info_of_a_live_push_consumer(tmp_path: Path) -> None:
    async with cluster(tmp_path) as c:
        n = ("-n", c.namesrv)
        consumer, got = collecting_consumer(c.namesrv)
        async with consumer, Producer("pg", c.namesrv) as producer:
            for i in range(8):
                await producer.send(Message(TOPIC, f"m{i}".encode(), tags="T"))
            await wait_until(lambda: len(got) == 8, "every message consumed")
            client_id = consumer.instance.client_id
            await online_everywhere(c, "cg", client_id)

            summary = await as_json("consumerStatus", *n, "-g", "cg")
            [row] = summary["clients"]
            assert (row["clientId"], row["consumeType"], row["messageModel"]) == (
                client_id,
                "PUSH",
                "CLUSTERING",
            )
            assert row["queues"] == 10  # TOPIC's 2 x 4 queues and the retry topic's 2 x 1
            assert (summary["sameSubscription"], summary["rebalanceOK"]) == (True, True)
            text = await ok("consumerStatus", *n, "-g", "cg")
            assert headers_in(text, "#Index", "#ClientId", "#Version", "#ConsumeType", client_id)
            assert "Same subscription in the same group of consumer" in text
            assert "Rebalance OK" in text

            async def offsets_recorded() -> bool:
                info = await as_json("consumerStatus", *n, "-g", "cg", "-i", client_id)
                mine = [q for q in info["mqTable"] if q["topic"] == TOPIC]
                return sum(max(0, q["commitOffset"]) for q in mine) == 8

            await wait_until(offsets_recorded, "the running info shows the consumed offsets")
            info = await as_json("consumerStatus", *n, "-g", "cg", "-i", client_id)
            props = info["properties"]
            assert props["consumerGroup"] == "cg"
            assert props["PROP_CONSUME_TYPE"] == "CONSUME_PASSIVELY"
            assert props["PROP_CONSUMEORDERLY"] == "false"
            assert props["consumeFromWhere"] == "CONSUME_FROM_FIRST_OFFSET"
            assert props["PROP_NAMESERVER_ADDR"] == c.namesrv
            topics = {s["topic"]: s["subString"] for s in info["subscriptionSet"]}
            assert topics == {TOPIC: "*", "%RETRY%cg": "*"}
            mine = [q for q in info["mqTable"] if q["topic"] == TOPIC]
            assert sorted((q["brokerName"], q["queueId"]) for q in mine) == [
                (b, i) for b in ("broker-a", "broker-b") for i in range(4)
            ]
            assert all(q["cachedMsgCount"] == 0 and not q["droped"] for q in mine)
            assert not any(q["locked"] for q in mine)  # only orderly clustering locks queues
            assert all(q["lastPullTimestamp"] > 0 for q in mine)
            text = await ok("consumerStatus", *n, "-g", "cg", "-i", client_id)
            for section in (
                "#Consumer Properties#",
                "#Consumer Subscription#",
                "#Consumer Offset#",
                "#Consumer MQ Detail#",
                "#Consumer RT&TPS#",
            ):
                assert section in text
            assert "ProcessQueueInfo [commitOffset=" in text


async def test_running_info_of_an_orderly_consumer_shows_its_locks(tmp_path: Path) -> None:
    async with cluster(tmp_path) as c:
        consumer = PushConsumer("og", c.namesrv, orderly=True)
        consumer.subscribe(TOPIC, "*", lambda msgs: ConsumeResult.SUCCESS)
        async with consumer:
            n = ("-n", c.namesrv, "-g", "og", "-i", consumer.instance.client_id)

            await online_everywhere(c, "og", consumer.instance.client_id)

            async def all_locked() -> bool:
                info = await as_json("consumerStatus", *n)
                mine = [q for q in info["mqTable"] if q["topic"] == TOPIC]
                return len(mine) == 8 and all(q["locked"] for q in mine)

            await wait_until(all_locked, "every queue locked to the orderly consumer")
            info = await as_json("consumerStatus", *n)
            assert info["properties"]["PROP_CONSUMEORDERLY"] == "true"
            assert all(q["lastLockTimestamp"] > 0 for q in info["mqTable"])


async def test_running_info_of_a_pull_consumer(tmp_path: Path) -> None:
    async with cluster(tmp_path) as c, PullConsumer("pull-g", c.namesrv) as consumer:
        consumer.subscribe(TOPIC)
        await wait_until(lambda: len(consumer.assignment()) == 8, "queues assigned")
        n = ("-n", c.namesrv)
        await online_everywhere(c, "pull-g", consumer.instance.client_id)
        info = await as_json(
            "consumerStatus", *n, "-g", "pull-g", "-i", consumer.instance.client_id
        )
        assert info["properties"]["PROP_CONSUME_TYPE"] == "CONSUME_ACTIVELY"
        assert len([q for q in info["mqTable"] if q["topic"] == TOPIC]) == 8


async def test_consume_directly_runs_the_handler_once_and_commits_nothing(
    tmp_path: Path,
) -> None:
    calls: list[tuple[str, bool]] = []
    directly = True

    def handle(msgs: list[ReceivedMessage]) -> ConsumeResult | None:
        (msg,) = msgs
        body = msg.body.decode()
        calls.append((body, directly))
        if not directly:
            return ConsumeResult.SUCCESS
        if body == "boom":
            raise RuntimeError("the handler broke")
        return {"ok": ConsumeResult.SUCCESS, "later": ConsumeResult.RECONSUME_LATER}.get(body)

    async with cluster(tmp_path) as c:
        n = ("-n", c.namesrv)
        consumer = PushConsumer("cg", c.namesrv, consume_from=ConsumeFrom.FIRST_OFFSET)
        consumer.subscribe(TOPIC, "*", handle)
        async with consumer, Producer("pg", c.namesrv) as producer:
            consumer.suspend()  # before its first rebalance: it never pulls until resumed
            sent = {
                b: await producer.send(Message(TOPIC, b.encode()))
                for b in ("ok", "later", "boom", "none")
            }
            client_id = consumer.instance.client_id
            await online_everywhere(c, "cg", client_id)
            expected = {
                "ok": CMResult.CR_SUCCESS,
                "later": CMResult.CR_LATER,
                "boom": CMResult.CR_THROW_EXCEPTION,
                "none": CMResult.CR_RETURN_NULL,
            }
            for body, result in sent.items():
                args = ("-i", result.offset_msg_id, "-g", "cg", "-d", client_id)
                [answer] = await as_json("queryMsgById", *n, *args)
                assert answer["consumeResult"] == expected[body].value, answer
                assert (answer["order"], answer["autoCommit"]) == (False, True)
                assert answer["msgId"] == result.msg_id
            assert calls == [(b, True) for b in sent]  # each handled exactly once
            [answer] = await as_json(
                "queryMsgById", *n, "-i", sent["boom"].offset_msg_id, "-g", "cg", "-d", client_id
            )
            assert "RuntimeError: the handler broke" in answer["remark"]
            text = await ok(
                "queryMsgById",
                *n,
                "-i",
                sent["ok"].msg_id,
                "-t",
                TOPIC,
                "-g",
                "cg",
                "-d",
                client_id,
            )
            head = "ConsumeMessageDirectlyResult [order=false, autoCommit=true, consumeResult="
            assert f"{head}CR_SUCCESS, remark=, spentTimeMills=" in text
            calls.clear()

            # nothing was committed or sent back: resumed, the consumer gets every message,
            # once, first try
            directly = False
            consumer.resume()
            await wait_until(lambda: len(calls) == 4, "every message consumed normally")
            assert sorted(b for b, _ in calls) == sorted(sent)


async def test_a_handler_slower_than_the_call_timeout_is_a_timeout_and_nothing_breaks(
    tmp_path: Path,
) -> None:
    """The broker gives a forwarded call ``call_timeout_s`` (RocketMQ's 10 s; shortened here):
    a handler still running then is CONSUME_MSG_TIMEOUT for the admin, its late answer is
    dropped, and the member stays online and can be called again."""
    release = trio.Event()
    calls: list[bytes] = []

    async def handle(msgs: list[ReceivedMessage]) -> ConsumeResult:
        calls.append(msgs[0].body)
        if msgs[0].body == b"slow":
            await release.wait()
        return ConsumeResult.SUCCESS

    async with cluster(tmp_path) as c:
        for ctl in c.controllers.values():
            assert ctl.consumer_calls is not None
            ctl.consumer_calls.call_timeout_s = 0.5
        n = ("-n", c.namesrv)
        consumer = PushConsumer("cg", c.namesrv)
        consumer.subscribe(TOPIC, "*", handle)
        async with consumer, Producer("pg", c.namesrv) as producer:
            consumer.suspend()  # it never pulls: only the direct calls run the handler
            slow = await producer.send(Message(TOPIC, b"slow"))
            fast = await producer.send(Message(TOPIC, b"fast"))
            client_id = consumer.instance.client_id
            await online_everywhere(c, "cg", client_id)
            args = ("-g", "cg", "-d", client_id)
            err = await fails("queryMsgById", *n, "-i", slow.offset_msg_id, *args)
            assert f"consumer <cg> <{client_id}> Timeout" in err, err
            assert calls == [b"slow"]
            release.set()  # the late answer reaches a broker no longer waiting for it
            [answer] = await as_json("queryMsgById", *n, "-i", fast.offset_msg_id, *args)
            assert answer["consumeResult"] == CMResult.CR_SUCCESS.value
            assert calls == [b"slow", b"fast"]
            await online_everywhere(c, "cg", client_id)


async def test_offline_client_is_a_clear_error(tmp_path: Path) -> None:
    async with cluster(tmp_path) as c:
        n = ("-n", c.namesrv)
        consumer, _ = collecting_consumer(c.namesrv)
        async with consumer, Producer("pg", c.namesrv) as producer:
            sent = await producer.send(Message(TOPIC, b"x"))
            await wait_until(lambda: bool(consumer.assignment()), "the consumer took its queues")
            err = await fails("consumerStatus", *n, "-g", "cg", "-i", "10.0.0.1@gone")
            assert "The Consumer <cg> <10.0.0.1@gone> not online" in err
            err = await fails(
                "queryMsgById", *n, "-i", sent.offset_msg_id, "-g", "cg", "-d", "10.0.0.1@gone"
            )
            assert "The Consumer <cg> <10.0.0.1@gone> not online" in err
            err = await fails("queryMsgById", *n, "-i", sent.offset_msg_id, "-g", "cg")
            assert "-g and -d go together" in err
        err = await fails("consumerStatus", *n, "-g", "cg")
        assert "the consumer group[cg] not online" in err


def test_bodies_round_trip() -> None:
    info = ConsumerRunningInfo(
        {"PROP_CONSUME_TYPE": "CONSUME_PASSIVELY"},
        (build_subscription(TOPIC, "a || b", 7),),
        (ProcessQueueInfo(TOPIC, "broker-a", 3, commit_offset=5, locked=True, droped=True),),
        {TOPIC: ConsumeStatus(pull_rt=1.5, consume_failed_msgs=2)},
    )
    assert decode_running_info(encode_running_info(info)) == info
    with_stacks = info.with_jstack("main  TID: 1\n")
    assert decode_running_info(encode_running_info(with_stacks)) == with_stacks
    result = ConsumeMessageDirectlyResult(True, False, CMResult.CR_LATER, "why", 12)
    assert decode_direct_result(encode_direct_result(result)) == result


async def test_query_msg_by_unique_key_consumes_directly(tmp_path: Path) -> None:
    calls: list[str] = []

    def handle(msgs: list[ReceivedMessage]) -> ConsumeResult:
        calls.extend(m.body.decode() for m in msgs)
        return ConsumeResult.RECONSUME_LATER

    async with cluster(tmp_path) as c:
        n = ("-n", c.namesrv)
        consumer = PushConsumer("cg", c.namesrv)
        consumer.subscribe(TOPIC, "*", handle)
        async with consumer, Producer("pg", c.namesrv) as producer:
            consumer.suspend()  # it consumes only what it is sent directly
            msg = Message(TOPIC, b"twice")
            first = await producer.send(msg)
            await producer.send(msg)  # the same UNIQ_KEY again
            client_id = consumer.instance.client_id
            await online_everywhere(c, "cg", client_id)
            q = ("queryMsgByUniqueKey", *n, "-t", TOPIC, "-i", first.msg_id)

            [answer] = await as_json(*q, "-g", "cg", "-d", client_id)
            assert (answer["msgId"], answer["consumeResult"]) == (first.msg_id, "CR_LATER")
            assert calls == ["twice"]  # the first stored copy only
            text = await ok(*q, "-g", "cg", "-d", client_id, "-a")
            assert text.count("ConsumeMessageDirectlyResult [order=false") == 2  # each copy
            assert calls == ["twice"] * 3
            err = await fails(*q, "-g", "cg")
            assert "-g and -d go together" in err
            err = await fails(*q, "-g", "cg", "-d", "10.0.0.1@gone")
            assert "The Consumer <cg> <10.0.0.1@gone> not online" in err
            err = await fails(*q[:-1], "0A0B0C", "-g", "cg", "-d", client_id)
            assert f"0A0B0C: no message with this UNIQ_KEY in topic {TOPIC}" in err
            assert len(calls) == 3


async def test_status_table_shows_the_pull_and_consume_figures(tmp_path: Path) -> None:
    handled: list[str] = []

    def handle(msgs: list[ReceivedMessage]) -> ConsumeResult:
        time.sleep(0.02)  # every call takes at least 20 ms
        handled.extend(m.body.decode() for m in msgs)
        return ConsumeResult.RECONSUME_LATER if msgs[0].body == b"bad" else ConsumeResult.SUCCESS

    async with cluster(tmp_path) as c:
        consumer = PushConsumer("cg", c.namesrv, consume_from=ConsumeFrom.FIRST_OFFSET)
        consumer.subscribe(TOPIC, "*", handle)
        async with consumer, Producer("pg", c.namesrv) as producer:
            for body in ("ok", "ok", "bad", "ok", "bad", "ok"):
                await producer.send(Message(TOPIC, body.encode()))
            await wait_until(lambda: len(handled) >= 6, "every message handled once")
            client_id = consumer.instance.client_id
            await online_everywhere(c, "cg", client_id)
            n = ("-n", c.namesrv, "-g", "cg", "-i", client_id)

            async def both_counted() -> bool:
                row = (await as_json("consumerStatus", *n))["statusTable"][TOPIC]
                return row["consumeFailedMsgs"] == 2 and row["consumeOKTPS"] > 0

            await wait_until(both_counted, "the outcomes counted")
            info = await as_json("consumerStatus", *n)
            assert set(info["statusTable"]) == {TOPIC, "%RETRY%cg"}  # one row per subscription
            row = info["statusTable"][TOPIC]
            assert row["pullTPS"] > 0
            assert row["pullRT"] >= 0
            assert row["consumeRT"] >= 20  # ms per handler call
            assert row["consumeOKTPS"] > 0
            assert row["consumeFailedTPS"] > 0
            ok_item = consumer.instance.consumer_stats.tables[CONSUME_OK_TPS][f"{TOPIC}@cg"]
            assert ok_item.value == 4  # the four acknowledged messages, each once
            text = await ok("consumerStatus", *n)
            rt_tps = text[text.index("#Consumer RT&TPS#") :].splitlines()
            [line] = [ln for ln in rt_tps if ln.startswith(f"{TOPIC} ")]
            assert line.split()[-1] == "2"  # #ConsumeFailedMsgsInHour
            assert "#Consumer jstack#" not in text
            assert "jstack" not in info


async def test_jstack_shows_the_consumer_threads(tmp_path: Path) -> None:
    async with (
        cluster(tmp_path) as c,
        PullConsumer("pull-g", c.namesrv, consume_from=ConsumeFrom.FIRST_OFFSET) as consumer,
    ):
        consumer.subscribe(TOPIC)
        async with Producer("pg", c.namesrv) as producer:
            sent = await producer.send(Message(TOPIC, b"x"))
        got: list[ReceivedMessage] = []
        await wait_until(lambda: bool(got.extend(consumer.poll_nowait()) or got), "a message")
        client_id = consumer.instance.client_id
        await online_everywhere(c, "pull-g", client_id)
        n = ("-n", c.namesrv, "-g", "pull-g", "-i", client_id)
        text = await ok("consumerStatus", *n, "-s")
        jstack = text[text.index("#Consumer jstack#") :]
        assert "MainThread" in jstack
        assert "TID: " in jstack
        assert "<init>" + " " * 34 + " TASK: 0 PARENT: -1" in jstack  # trio's tasks follow
        info = await as_json("consumerStatus", *n, "-s")
        assert "MainThread" in info["jstack"]
        row = info["statusTable"][TOPIC]  # a pull consumer's pull figures
        assert row["pullTPS"] > 0
        assert (row["consumeOKTPS"], row["consumeFailedMsgs"]) == (0.0, 0)
        err = await fails("consumerStatus", "-n", c.namesrv, "-g", "pull-g", "-s")
        assert "-s (jstack) needs -i clientId" in err
        direct = ("-n", c.namesrv, "-g", "pull-g", "-d", client_id, "-t", TOPIC, "-i")
        err = await fails("queryMsgByUniqueKey", *direct, sent.msg_id)
        assert f"this {client_id} client is not push consumer, not support direct push" in err


def test_thread_stacks_are_bounded() -> None:
    stacks = thread_stacks()
    assert "thread_stacks(" in stacks  # this very call, in the main thread's stack
    cut = thread_stacks(100)
    assert cut.startswith(stacks[:100])
    assert cut.endswith(f"... {len(stacks) - 100} more characters left out\n")


async def test_task_stacks_show_where_each_trio_task_waits() -> None:
    parked = trio.Event()

    async def parked_on_an_event() -> None:
        await parked.wait()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(parked_on_an_event)
        await trio.testing.wait_all_tasks_blocked()
        stacks = trio_task_stacks()
        parked.set()
    blocks = [b.splitlines() for b in stacks.strip("\n").split("\n\n")]
    heads = {b[0].split(" TASK: ")[0].strip(): b[0].split(" TASK: ")[1] for b in blocks}
    assert heads["<init>"] == "0 PARENT: -1"
    [mine] = [b for b in blocks if "parked_on_an_event" in b[0]]
    this_test = heads[next(n for n in heads if "test_task_stacks_show" in n)].split()[0]
    assert mine[0].endswith(f"PARENT: {this_test}")  # the nursery's owner
    assert any(line.split()[-1].startswith("parked_on_an_event(") for line in mine[1:])
    assert any(" wait(" in line for line in mine[1:])  # the Event it waits on
    assert "test_task_stacks_show" in "".join(thread_stacks().split("TASK: 0")[1:])


def test_task_stacks_are_empty_outside_trio() -> None:
    assert trio_task_stacks() == ""
