"""Messages through a real cluster: one ``mqnamesrv``, brokers ``broker-a`` and ``broker-b``.

- 10,000 messages (single sends and batches, bodies, tags, keys, properties, a few bodies big
  enough to be compressed) land on both brokers and a PullConsumer reading every queue from the
  first offset gets each one back exactly once, with the id, queue and offset the send returned.
- ``send_oneway``, ``send_async`` (future and callback) and ``send_orderly`` (one sharding key
  -> one queue, in send order) on the same cluster.
"""

from __future__ import annotations

import queue
from dataclasses import dataclass
from pathlib import Path

import trio

from client import (
    ConsumeFromWhere,
    Message,
    MessageQueue,
    Producer,
    PullConsumer,
    ReceivedMessage,
    SendResult,
    SendStatus,
)
from client.producer import SendCallback
from tests.e2e.cluster import IdsSeen, create_topic, in_thread, poll_until, running_cluster

BROKERS: dict[str, dict[str, str]] = {"broker-a": {}, "broker-b": {}}
QUEUES_PER_BROKER = 4
TOTAL = 10_000
SINGLE = 2_000
BATCH_SIZE = 100
BIG_EVERY = 997
"""Every BIG_EVERY-th single send has a body over the 4 KiB compression threshold."""


@dataclass(frozen=True)
class Sent:
    """A message as sent, and where the broker said it went."""

    msg: Message
    queue: MessageQueue
    queue_offset: int


def make_message(topic: str, i: int, kind: str) -> Message:
    """Message ``i``: distinct body, one of four tags, two keys, two user properties."""
    size = 5000 if kind == "single" and i % BIG_EVERY == 0 else 20 + i % 200
    body = (f"msg-{i}-".encode() * (size // 8 + 1))[:size]
    return Message(
        topic,
        body,
        tags=f"Tag{i % 4}",
        keys=[f"key-{i}", f"grp-{i % 10}"],
        properties={"idx": str(i), "kind": kind},
    )


def send_all(namesrv: str, topic: str) -> dict[str, Sent]:
    """Blocking: SINGLE single sends, then batches; msg_id -> what was sent."""
    sent: dict[str, Sent] = {}
    with Producer(group="pg_e2e_mixed", namesrv=namesrv, send_timeout=10.0) as producer:
        for i in range(SINGLE):
            msg = make_message(topic, i, "single")
            result = producer.send(msg)
            assert result.status is SendStatus.SEND_OK
            sent[result.msg_id] = Sent(msg, result.queue, result.queue_offset)
        for start in range(SINGLE, TOTAL, BATCH_SIZE):
            batch = [make_message(topic, i, "batch") for i in range(start, start + BATCH_SIZE)]
            result = producer.send_batch(batch)
            assert result.status is SendStatus.SEND_OK
            ids = result.msg_id.split(",")
            assert len(ids) == len(batch)
            for j, (msg_id, msg) in enumerate(zip(ids, batch, strict=True)):
                sent[msg_id] = Sent(msg, result.queue, result.queue_offset + j)
    return sent


def read_all(namesrv: str, topic: str, group: str, wanted: set[str]) -> list[ReceivedMessage]:
    """Blocking: assign every queue of ``topic`` from the first offset; read until every id
    in ``wanted`` arrived (or the deadline)."""
    with PullConsumer(
        group=group,
        namesrv=namesrv,
        consume_from=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET,
        auto_commit=False,
    ) as consumer:
        queues = consumer.fetch_queues(topic)
        assert {(q.broker_name, q.queue_id) for q in queues} == {
            (b, i) for b in BROKERS for i in range(QUEUES_PER_BROKER)
        }
        consumer.assign(queues)
        return poll_until(consumer, IdsSeen(wanted), limit=40.0)


def check_received(sent: dict[str, Sent], got: list[ReceivedMessage]) -> None:
    """Every sent message received once, with its body, tags, keys, properties and place."""
    ids = [m.msg_id for m in got]
    assert len(ids) == len(set(ids)), "a message was received twice"
    assert set(ids) == set(sent)
    assert {m.body for m in got} == {s.msg.body for s in sent.values()}
    for msg in got:
        expected = sent[msg.msg_id]
        assert msg.body == expected.msg.body
        assert msg.tags == expected.msg.tags
        assert msg.keys == expected.msg.keys
        assert expected.msg.properties.items() <= msg.properties.items()
        assert (msg.queue, msg.queue_offset) == (expected.queue, expected.queue_offset)


async def test_ten_thousand_messages_on_two_brokers(tmp_path: Path) -> None:
    topic = "E2E_Mixed"
    with trio.fail_after(120):
        async with running_cluster(tmp_path, BROKERS) as cluster:
            for broker in cluster.brokers.values():
                await create_topic(broker.addr, topic, QUEUES_PER_BROKER)
            sent = await in_thread(send_all, cluster.namesrv_addr, topic)
            assert len(sent) == TOTAL
            landed = {s.queue.broker_name for s in sent.values()}
            assert landed == set(BROKERS)
            got = await in_thread(read_all, cluster.namesrv_addr, topic, "cg_e2e_mixed", set(sent))
            check_received(sent, got)


# --------------------------------------------------------------------------- send variants


@dataclass
class VariantsSent:
    """What the send-variant producer sent, by msg_id."""

    oneway: dict[str, Message]
    asynchronous: dict[str, tuple[Message, SendResult]]
    orderly: dict[str, list[tuple[Message, SendResult]]]


def _recorder(
    calls: queue.Queue[tuple[Message, SendResult | None, BaseException | None]], msg: Message
) -> SendCallback:
    """A send callback putting ``(msg, result, error)`` on ``calls``."""

    def callback(result: SendResult | None, error: BaseException | None) -> None:
        calls.put((msg, result, error))

    return callback


def send_variants(namesrv: str, topic: str) -> VariantsSent:
    """Blocking: 20 oneway, 20 async with futures, 20 async with callbacks, and 2 x 20 orderly
    sends under two sharding keys, interleaved."""
    out = VariantsSent({}, {}, {"order-A": [], "order-B": []})
    with Producer(group="pg_e2e_variants", namesrv=namesrv, send_timeout=10.0) as producer:
        for i in range(20):
            msg = Message(topic, f"oneway-{i}".encode(), tags="oneway")
            producer.send_oneway(msg)
            assert msg.uniq_key is not None
            out.oneway[msg.uniq_key] = msg
        futures = []
        for i in range(20):
            msg = Message(topic, f"future-{i}".encode(), tags="async")
            futures.append((msg, producer.send_async(msg)))
        for msg, future in futures:
            result = future.result(timeout=15)
            out.asynchronous[result.msg_id] = (msg, result)
        calls: queue.Queue[tuple[Message, SendResult | None, BaseException | None]] = queue.Queue()
        for i in range(20):
            msg = Message(topic, f"callback-{i}".encode(), tags="async")
            producer.send_async(msg, callback=_recorder(calls, msg))
        for _ in range(20):
            msg, maybe_result, error = calls.get(timeout=15)
            assert error is None, error
            assert maybe_result is not None
            out.asynchronous[maybe_result.msg_id] = (msg, maybe_result)
        for i in range(40):
            key = "order-A" if i % 2 == 0 else "order-B"
            msg = Message(topic, f"{key}-{i}".encode(), tags="orderly", keys=key)
            out.orderly[key].append((msg, producer.send_orderly(msg, sharding_key=key)))
    return out


def check_variants(sent: VariantsSent, got: list[ReceivedMessage]) -> None:
    """Every variant's messages arrived; each sharding key's messages share one queue and
    appear in it in send order."""
    by_id = {m.msg_id: m for m in got}
    assert len(by_id) == len(got), "a message was received twice"
    for msg_id, msg in sent.oneway.items():
        assert by_id[msg_id].body == msg.body
    for msg_id, (msg, result) in sent.asynchronous.items():
        assert result.status is SendStatus.SEND_OK
        assert by_id[msg_id].body == msg.body
        assert (by_id[msg_id].queue, by_id[msg_id].queue_offset) == (
            result.queue,
            result.queue_offset,
        )
    for key, sends in sent.orderly.items():
        assert all(r.status is SendStatus.SEND_OK for _, r in sends)
        queues = {r.queue for _, r in sends}
        assert len(queues) == 1, f"{key} went to {queues}"
        received = [by_id[r.msg_id] for _, r in sends]
        assert {m.queue for m in received} == queues
        in_queue_order = sorted(received, key=lambda m: m.queue_offset)
        assert [m.body for m in in_queue_order] == [msg.body for msg, _ in sends]


async def test_oneway_async_and_orderly_sends(tmp_path: Path) -> None:
    topic = "E2E_Variants"
    with trio.fail_after(60):
        async with running_cluster(tmp_path, BROKERS) as cluster:
            for broker in cluster.brokers.values():
                await create_topic(broker.addr, topic, QUEUES_PER_BROKER)
            sent = await in_thread(send_variants, cluster.namesrv_addr, topic)
            wanted = set(sent.oneway) | set(sent.asynchronous)
            wanted |= {r.msg_id for sends in sent.orderly.values() for _, r in sends}
            assert len(wanted) == 100
            got = await in_thread(read_all, cluster.namesrv_addr, topic, "cg_e2e_variants", wanted)
            check_variants(sent, got)
