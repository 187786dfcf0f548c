"""The trio-native PushConsumer against an in-process name server and two brokers."""

from __future__ import annotations

import logging
from collections import Counter
from pathlib import Path

import pytest
import trio

from client.aio import ConsumeFrom, Producer, PullConsumer, PushConsumer
from client.consume_service import ConsumeResult
from client.message import Message, MessageQueue, ReceivedMessage
from remoting.client_bodies import MessageModel
from tests.broker.inprocess import wait_until
from tests.client.inproc_cluster import LIMIT, TOPIC, cluster


def owners(consumers: list[PushConsumer]) -> Counter[MessageQueue]:
    """How many members consume each queue of TOPIC."""
    return Counter(mq for c in consumers for mq in c.assignment() if mq.topic == TOPIC)


async def send_all(namesrv: str, n: int, prefix: str = "m") -> set[bytes]:
    bodies = {f"{prefix}{i}".encode() for i in range(n)}
    async with Producer("pg", namesrv) as producer:
        for body in sorted(bodies):
            await producer.send(Message(TOPIC, body, tags="T"))
    return bodies


async def test_group_members_share_the_queues_and_consume_everything(tmp_path: Path) -> None:
    async with cluster(tmp_path) as c:
        got: list[bytes] = []

        def handle(msgs: list[ReceivedMessage]) -> ConsumeResult:
            got.extend(m.body for m in msgs)
            return ConsumeResult.SUCCESS

        members = [
            PushConsumer("cg", c.namesrv, consume_from=ConsumeFrom.FIRST_OFFSET) for _ in range(3)
        ]
        for m in members:
            m.subscribe(TOPIC, "*", handle)
        async with members[0], members[1], members[2]:
            await wait_until(
                lambda: sorted(owners(members).values()) == [1] * 8, "every queue owned once"
            )
            sizes = sorted(len([q for q in m.assignment() if q.topic == TOPIC]) for m in members)
            assert sizes == [2, 3, 3]
            sent = await send_all(c.namesrv, 60)
            await wait_until(lambda: set(got) >= sent, "every message consumed")
        assert Counter(got).most_common(1)[0][1] == 1  # no duplicate without a membership change


async def test_a_member_leaving_hands_its_queues_over(tmp_path: Path) -> None:
    async with cluster(tmp_path) as c:
        got: list[bytes] = []

        async def handle(msgs: list[ReceivedMessage]) -> ConsumeResult:
            got.extend(m.body for m in msgs)
            return ConsumeResult.SUCCESS

        a = PushConsumer("cg", c.namesrv, consume_from=ConsumeFrom.FIRST_OFFSET)
        b = PushConsumer("cg", c.namesrv, consume_from=ConsumeFrom.FIRST_OFFSET)
        a.subscribe(TOPIC, "*", handle)
        b.subscribe(TOPIC, "*", handle)
        async with a:
            async with b:
                await wait_until(lambda: sorted(owners([a, b]).values()) == [1] * 8, "split")
                assert len(a.assignment()) > 0
                first = await send_all(c.namesrv, 20, "first")
                await wait_until(lambda: set(got) >= first, "first batch consumed")
            await wait_until(lambda: len(owners([a])) == 8, "a owns all after b left")
            second = await send_all(c.namesrv, 20, "second")
            await wait_until(lambda: set(got) >= first | second, "second batch consumed")


async def test_broadcasting_gives_every_member_every_message(tmp_path: Path) -> None:
    async with cluster(tmp_path) as c:
        got: dict[int, list[bytes]] = {0: [], 1: []}

        def member(i: int) -> PushConsumer:
            def handle(msgs: list[ReceivedMessage]) -> ConsumeResult:
                got[i].extend(m.body for m in msgs)
                return ConsumeResult.SUCCESS

            consumer = PushConsumer(
                "bg",
                c.namesrv,
                message_model=MessageModel.BROADCASTING,
                consume_from=ConsumeFrom.FIRST_OFFSET,
                offset_dir=tmp_path / "offsets",
                instance_name=f"member{i}",
            )
            consumer.subscribe(TOPIC, "*", handle)
            return consumer

        members = [member(0), member(1)]
        async with members[0], members[1]:
            await wait_until(lambda: all(len(m.assignment()) == 8 for m in members), "all queues")
            sent = await send_all(c.namesrv, 30)
            await wait_until(lambda: set(got[0]) >= sent and set(got[1]) >= sent, "both got all")
        assert sorted(got[0]) == sorted(got[1]) == sorted(sent)
        # a restarted member resumes from its own offsets: only the new messages arrive
        async with member(0):
            later = await send_all(c.namesrv, 10, "later")
            await wait_until(lambda: set(got[0]) >= sent | later, "the restarted member")
        assert sorted(got[0]) == sorted(sent | later)


async def test_pull_consumers_in_group_mode_share_the_queues(tmp_path: Path) -> None:
    async with cluster(tmp_path) as c:
        a = PullConsumer("pcg", c.namesrv, consume_from=ConsumeFrom.FIRST_OFFSET)
        b = PullConsumer("pcg", c.namesrv, consume_from=ConsumeFrom.FIRST_OFFSET)
        async with a, b:
            a.subscribe(TOPIC)
            b.subscribe(TOPIC)

            def split() -> bool:
                mine = [set(a.assignment()), set(b.assignment())]
                return not (mine[0] & mine[1]) and len(mine[0] | mine[1]) == 8 and all(mine)

            await wait_until(split, "the queues split between a and b")
            sent = await send_all(c.namesrv, 40)
            got: list[bytes] = []
            with trio.fail_after(LIMIT):
                while set(got) < sent:
                    got += [m.body for m in a.poll_nowait() + b.poll_nowait()]
                    await trio.sleep(0.01)
            assert len(got) == len(sent)


def test_pull_max_idle_must_outlast_the_longest_pull_twice() -> None:
    # a pass may last suspend_timeout_ms plus the request timeout (3 s by default) plus the
    # 1 s pause after a failure: 19 s
    with pytest.raises(ValueError, match="pull_max_idle_ms"):
        PushConsumer("cg", "127.0.0.1:9876", suspend_timeout_ms=15_000, pull_max_idle_ms=37_999)
    PushConsumer("cg", "127.0.0.1:9876", suspend_timeout_ms=15_000, pull_max_idle_ms=38_000)


async def test_a_new_tag_expression_applies_to_the_queues_at_once(tmp_path: Path) -> None:
    """subscribe() again with another expression: the pull parked with the old one is
    dropped, and the next pulls filter with the new one (they used the old one for ever, and
    the broker skipped the new tag's messages)."""
    async with cluster(tmp_path, brokers=("broker-a",), queues=1) as c:
        tags: list[str | None] = []

        def handle(msgs: list[ReceivedMessage]) -> ConsumeResult:
            tags.extend(m.tags for m in msgs)
            return ConsumeResult.SUCCESS

        consumer = PushConsumer("cg", c.namesrv, consume_from=ConsumeFrom.FIRST_OFFSET)
        consumer.subscribe(TOPIC, "A", handle)
        async with consumer, Producer("pg", c.namesrv) as producer:
            await producer.send(Message(TOPIC, b"a", tags="A"))
            await wait_until(lambda: tags == ["A"], "the A message")  # the next pull parks
            consumer.subscribe(TOPIC, "B", handle)
            for i in range(4):
                await producer.send(Message(TOPIC, b"b%d" % i, tags="B"))
            await wait_until(lambda: tags.count("B") == 4, "the B messages")


async def test_a_topic_nobody_knows_is_a_warning_not_silence(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A misspelt topic (or a wrong name server) must not look like a consumer that merely
    has no messages: each rebalance round warns."""
    async with cluster(tmp_path, brokers=("broker-a",), queues=1) as c:
        consumer = PushConsumer("cg", c.namesrv)
        consumer.subscribe("Ordres", "*", lambda msgs: ConsumeResult.SUCCESS)
        with caplog.at_level(logging.WARNING, logger="client.rebalance"):
            async with consumer:
                await wait_until(
                    lambda: "rebalance of Ordres skipped" in caplog.text, "the warning"
                )
        # but not for the group's own retry topic, which the broker makes on the first
        # heartbeat: a first round that comes before it is no fault
        assert "%RETRY%" not in caplog.text
