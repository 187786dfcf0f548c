"""A SYNC_FLUSH ``mqbroker`` process SIGKILLed and restarted on its store (the reliability plan's
R1 at the process level), with real ``mqnamesrv``/``mqbroker`` processes and the trio client.

Two producers without retries send numbered messages (body, tags and keys all derived from the
message's id) and classify each send: **acked** (``SEND_OK``), **failed** (refused before the
request left: no connection, or the broker answered an error) or **unknown** (timed out, the
connection dropped mid-request, or a status other than ``SEND_OK``). A group pull consumer
long-polls all along. The broker is SIGKILLed a few times at seeded points (counted in acks, not
in seconds) and restarted on the same store; once, the restart itself is SIGKILLed while it is
starting (recovering) and started again. After the last restart:

- every acked message is in the store exactly once, at the queue offset its ack named, with
  identical body, tags and keys; every unknown one is there once or not at all; no failed one
  and nothing that was never sent is there (a fresh reader reads every queue from offset 0 up
  to its max offset);
- the group consumer has received every acked message and nothing that was never sent;
- the broker's log has no traceback.

The seed is ``CHAOS_SEED`` (printed); every process is killed by pid when the test ends.
"""

from __future__ import annotations

import os
import random
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import trio

from client.aio import (
    ConsumeFromWhere,
    Message,
    Producer,
    PullConsumer,
    ReceivedMessage,
    SendStatus,
)
from client.errors import MQBrokerError, MQClientError
from remoting.errors import RemotingConnectError
from tests.e2e.cluster import (
    RECOVERING,
    BrokerProc,
    Cluster,
    causes,
    create_topic,
    kill_when_logged,
    running_cluster,
    wait_until,
)
from tests.processes import read_log

TOPIC = "R1KillTopic"
QUEUES = 4
PRODUCERS = 2
KILLS = 3
SEED = int(os.environ.get("CHAOS_SEED", "20250611"))
SYNC = {"flushDiskType": "SYNC_FLUSH", "diskMaxUsedSpaceRatio": "95"}


def message_of(msg_id: str) -> Message:
    """The message named ``msg_id`` (``p<producer>-<seq>``): body, tags and keys from it."""
    seq = int(msg_id.split("-")[1])
    body = f"{msg_id}|".encode() * (1 + seq % 7)
    return Message(TOPIC, body, tags=f"T{seq % 5}", keys=[f"K{msg_id}", f"G{seq // 16}"])


def id_of(body: bytes) -> str:
    """The id a body carries (up to the first ``|``)."""
    return body.split(b"|", 1)[0].decode()


@dataclass
class SendBook:
    """Every send's outcome: acked (id -> queue id, queue offset), failed and unknown ids."""

    attempted: set[str] = field(default_factory=set)
    acked: dict[str, tuple[int, int]] = field(default_factory=dict)
    failed: set[str] = field(default_factory=set)
    unknown: set[str] = field(default_factory=set)
    stop: trio.Event = field(default_factory=trio.Event)

    def classify_error(self, msg_id: str, exc: MQClientError) -> None:
        """A send that raised: failed if it surely never reached the store, else unknown."""
        chain = list(causes(exc))
        refused = any(isinstance(e, RemotingConnectError) for e in chain)
        if refused or any(isinstance(e, MQBrokerError) for e in chain):
            self.failed.add(msg_id)
        else:
            self.unknown.add(msg_id)


async def wait_for_acks(book: SendBook, count: int) -> None:
    """Wait until ``count`` sends in all were acknowledged."""
    await wait_until(lambda: len(book.acked) >= count, f"{count} acks", 60)


async def produce(namesrv: str, number: int, book: SendBook) -> None:
    """Send ``p<number>-<seq>`` messages one by one, without retries, until ``book.stop``."""
    async with Producer(f"pg_r1_{number}", namesrv, send_timeout=3.0, retry_times=0) as producer:
        seq = 0
        while not book.stop.is_set():
            msg_id = f"p{number}-{seq}"
            seq += 1
            book.attempted.add(msg_id)
            try:
                result = await producer.send(message_of(msg_id))
            except MQClientError as exc:
                book.classify_error(msg_id, exc)
                await trio.sleep(0.05)  # the broker is down: do not spin
                continue
            if result.status is SendStatus.SEND_OK:
                book.acked[msg_id] = (result.queue.queue_id, result.queue_offset)
            else:
                book.unknown.add(msg_id)


async def consume(namesrv: str, received: Counter[str], stop: trio.Event) -> None:
    """A group member long-polling TOPIC from the first offset, committing every 0.5 s."""
    async with PullConsumer(
        "cg_r1_kills",
        namesrv,
        consume_from=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET,
        auto_commit_interval=0.5,
    ) as consumer:
        consumer.subscribe(TOPIC)
        while not stop.is_set():
            for msg in await consumer.poll_for(0.5):
                received[id_of(msg.body)] += 1


async def kill_while_starting(cluster: Cluster, broker: BrokerProc, rng: random.Random) -> bool:
    """Start ``mqbroker`` on the broker's store and port and SIGKILL it as it recovers (once
    its log says so, after a seeded delay of up to 20 ms). Returns whether it had booted."""
    return await kill_when_logged(cluster, broker, RECOVERING, rng.uniform(0, 0.02))


async def read_store(namesrv: str) -> dict[tuple[int, int], ReceivedMessage]:
    """Every message of TOPIC, read from offset 0 to each queue's max offset: (queue id,
    queue offset) -> message."""
    out: dict[tuple[int, int], ReceivedMessage] = {}
    async with PullConsumer("cg_r1_reader", namesrv, auto_commit=False) as reader:
        queues = await reader.fetch_queues(TOPIC)
        reader.assign(queues)
        ends = {}
        for mq in queues:
            await reader.seek_to_end(mq)
            ends[mq] = reader.position(mq)
            reader.seek(mq, 0)
        with trio.fail_after(30):
            while any(reader.position(mq) != end for mq, end in ends.items()):
                for msg in await reader.poll_for(0.5):
                    key = (msg.queue.queue_id, msg.queue_offset)
                    assert key not in out, f"offset {key} served twice"
                    out[key] = msg
    return out


def assert_store_matches(book: SendBook, stored: dict[tuple[int, int], ReceivedMessage]) -> None:
    """Acked: once, at its offset, identical; unknown: at most once; nothing else there."""
    at = Counter(id_of(m.body) for m in stored.values())
    assert at.most_common(1)[0][1] == 1, at.most_common(3)  # nothing stored twice
    assert set(at) <= book.attempted, sorted(set(at) - book.attempted)[:5]  # nothing invented
    assert not set(at) & book.failed, sorted(set(at) & book.failed)[:5]
    for msg_id, place in book.acked.items():
        msg = stored.get(place)
        assert msg is not None, f"acked {msg_id} at {place} is gone"
        want = message_of(msg_id)
        got = (msg.body, msg.tags, msg.keys)
        assert got == (want.body, want.tags, want.keys), (msg_id, place)
    for msg in stored.values():  # the unknowns that did get in are intact too
        want = message_of(id_of(msg.body))
        assert (msg.body, msg.tags, msg.keys) == (want.body, want.tags, want.keys)


async def test_sigkilled_sync_broker_keeps_every_acked_message(tmp_path: Path) -> None:
    rng = random.Random(SEED)
    print(f"\nCHAOS_SEED={SEED}")
    book, received, reading = SendBook(), Counter[str](), trio.Event()
    with trio.fail_after(150):
        async with running_cluster(tmp_path, {"broker-a": SYNC}) as cluster:
            ns, broker = cluster.namesrv_addr, cluster.brokers["broker-a"]
            await create_topic(broker.addr, TOPIC, QUEUES)
            starting_kill, booted = rng.randrange(KILLS), None
            async with trio.open_nursery() as nursery:
                for number in range(PRODUCERS):
                    nursery.start_soon(produce, ns, number, book)
                nursery.start_soon(consume, ns, received, reading)
                for kill in range(KILLS + 1):
                    await wait_for_acks(book, len(book.acked) + rng.randint(40, 160))
                    if kill == KILLS:
                        break
                    await cluster.kill(broker)
                    if kill == starting_kill:
                        booted = await kill_while_starting(cluster, broker, rng)
                    assert await cluster.restart_broker(broker), "the port was taken"
                book.stop.set()
                await wait_until(lambda: set(book.acked) <= set(received), "all acked consumed")
                reading.set()
            stored = await read_store(ns)
            log = read_log(broker.log)
    print(
        f"R1 kills={KILLS} attempted={len(book.attempted)} acked={len(book.acked)} "
        f"failed={len(book.failed)} unknown={len(book.unknown)} stored={len(stored)} "
        f"delivered={sum(received.values())} distinct={len(received)} "
        f"killed_while_starting_had_booted={booted}"
    )
    assert_store_matches(book, stored)
    assert set(received) <= book.attempted - book.failed
    assert "Traceback" not in log, log[log.index("Traceback") - 200 :][:3000]
