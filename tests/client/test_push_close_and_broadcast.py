"""Closing a push consumer keeps what its handlers finish; broadcasting offsets and orderly
broadcasting (an in-process name server and brokers)."""

from __future__ import annotations

import threading
from collections import defaultdict
from pathlib import Path

import pytest
import trio

from client.aio import ConsumeFrom, Message, Producer, PushConsumer
from client.config import ClientConfig
from client.consume_service import ConsumeResult
from client.errors import MQClientError
from client.instance import ClientInstance
from client.message import MessageQueue, ReceivedMessage
from client.offset_store import RemoteOffsetStore
from remoting.client_bodies import MessageModel
from tests.broker.inprocess import wait_until
from tests.client.inproc_cluster import LIMIT, TOPIC, cluster


async def send_to_each_queue(namesrv: str, queues: list[MessageQueue], bodies: list[str]) -> None:
    async with Producer("pg", namesrv) as producer:
        for mq in queues:
            for body in bodies:
                await producer.send(Message(TOPIC, body.encode()), queue=mq)


async def committed(namesrv: str, group: str, queues: list[MessageQueue]) -> list[int | None]:
    async with ClientInstance(ClientConfig.create(namesrv)) as instance:
        await instance.topic_route(TOPIC)
        store = RemoteOffsetStore(instance, group)
        return [await store.read(mq) for mq in queues]


async def test_close_counts_what_the_handlers_finish_while_it_waits(tmp_path: Path) -> None:
    """Closing stops pulling, then lets the handlers in flight finish before it persists: the
    messages they finished are not delivered again."""
    async with cluster(tmp_path, brokers=("broker-a",)) as c:
        mq = MessageQueue(TOPIC, "broker-a", 0)
        await send_to_each_queue(c.namesrv, [mq], [f"m{i}" for i in range(10)])
        started, release = threading.Event(), threading.Event()
        got: list[bytes] = []

        def handle(msgs: list[ReceivedMessage]) -> ConsumeResult:
            started.set()
            release.wait(LIMIT)
            got.extend(m.body for m in msgs)
            return ConsumeResult.SUCCESS

        consumer = PushConsumer("cg", c.namesrv, consume_from=ConsumeFrom.FIRST_OFFSET)
        consumer.subscribe(TOPIC, "*", handle)
        close = trio.Event()

        async def consume() -> None:
            async with consumer:
                await close.wait()

        async with trio.open_nursery() as nursery:
            nursery.start_soon(consume)
            await wait_until(started.is_set, "the handler runs")
            close.set()
            # _running turns False where closing begins, with no checkpoint before the wait
            await wait_until(lambda: not consumer._running, "closing began")
            release.set()
        assert got
        assert await committed(c.namesrv, "cg", [mq]) == [len(got)]


async def test_an_orderly_close_persists_every_queue_while_handlers_are_busy(
    tmp_path: Path,
) -> None:
    """Busy handlers (in threads: they cannot be cancelled) on every queue: the close waits
    for them once, not for each queue in turn, so every queue's offset is persisted within
    the close's bound."""
    async with cluster(tmp_path) as c:
        queues = [MessageQueue(TOPIC, b, q) for b in ("broker-a", "broker-b") for q in range(4)]
        await send_to_each_queue(c.namesrv, queues, ["first", "second"])
        busy: set[MessageQueue] = set()
        release = threading.Event()

        def handle(msgs: list[ReceivedMessage]) -> ConsumeResult:
            if msgs[0].body == b"second":
                busy.add(msgs[0].queue)
                release.wait(LIMIT)
            return ConsumeResult.SUCCESS

        consumer = PushConsumer(
            "og", c.namesrv, orderly=True, consume_from=ConsumeFrom.FIRST_OFFSET
        )
        consumer.subscribe(TOPIC, "*", handle)
        close = trio.Event()

        async def consume() -> None:
            async with consumer:
                await close.wait()

        async def all_persisted() -> bool:
            return await committed(c.namesrv, "og", queues) == [1] * 8

        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(consume)
                await wait_until(lambda: len(busy) == 8, "a busy handler on every queue")
                close.set()  # the close waits for the handlers, then persists every queue
                await wait_until(all_persisted, "every queue's offset persisted")
                release.set()
        finally:
            release.set()


async def test_orderly_broadcasting_gives_every_member_every_message_in_order(
    tmp_path: Path,
) -> None:
    """No broker locks in broadcasting (RocketMQ's rule): locks would give each queue to one
    member."""
    async with cluster(tmp_path) as c:
        got: dict[int, dict[MessageQueue, list[int]]] = {0: defaultdict(list), 1: defaultdict(list)}

        def member(i: int) -> PushConsumer:
            def handle(msgs: list[ReceivedMessage]) -> ConsumeResult:
                for m in msgs:
                    got[i][m.queue].append(int(m.body))
                return ConsumeResult.SUCCESS

            consumer = PushConsumer(
                "obg",
                c.namesrv,
                orderly=True,
                message_model=MessageModel.BROADCASTING,
                consume_from=ConsumeFrom.FIRST_OFFSET,
                offset_dir=tmp_path / "offsets",
                instance_name=f"member{i}",
            )
            consumer.subscribe(TOPIC, "*", handle)
            return consumer

        queues = [MessageQueue(TOPIC, b, q) for b in ("broker-a", "broker-b") for q in range(4)]
        async with member(0), member(1):
            await send_to_each_queue(c.namesrv, queues, [str(n) for n in range(5)])
            await wait_until(
                lambda: all(sum(map(len, got[i].values())) == 40 for i in (0, 1)),
                "both members got all 40",
            )
        for i in (0, 1):
            assert {mq: got[i][mq] for mq in queues} == {mq: list(range(5)) for mq in queues}


def broadcasting(namesrv: str, offsets: Path, **options: object) -> PushConsumer:
    consumer = PushConsumer(
        "bg",
        namesrv,
        message_model=MessageModel.BROADCASTING,
        offset_dir=offsets,
        **options,  # type: ignore[arg-type]
    )
    consumer.subscribe(TOPIC, "*", lambda msgs: ConsumeResult.SUCCESS)
    return consumer


async def test_broadcasting_offsets_that_do_not_load_fail_the_start(tmp_path: Path) -> None:
    async with cluster(tmp_path, brokers=("broker-a",)) as c:
        consumer = broadcasting(c.namesrv, tmp_path / "offsets", instance_name="m")
        path = tmp_path / "offsets" / f"{consumer.instance.config.client_ip}@m" / "bg"
        path.mkdir(parents=True)
        (path / "offsets.json").write_text('{"offsetTable": {"Orders@broker-a@0": 3')
        with pytest.raises(MQClientError, match="cannot load the broadcasting offsets"):
            async with consumer:
                pass
        (path / "offsets.json").unlink()
        async with broadcasting(c.namesrv, tmp_path / "offsets", instance_name="m"):
            pass  # the failed start released the directory


async def test_two_live_broadcasting_members_need_their_own_instance_names(
    tmp_path: Path,
) -> None:
    """They would share one offsets file: the second is refused at start. The client
    config's instance name counts as the member's."""
    offsets = tmp_path / "offsets"
    async with cluster(tmp_path, brokers=("broker-a",)) as c, broadcasting(c.namesrv, offsets):
        with pytest.raises(MQClientError, match="in use by another consumer"):
            async with broadcasting(c.namesrv, offsets):
                pass
        config = ClientConfig.create(c.namesrv, instance_name="second")
        async with (
            ClientInstance(config) as instance,
            broadcasting(c.namesrv, offsets, instance=instance),
        ):
            assert (offsets / f"{instance.config.client_ip}@second" / "bg").is_dir()
