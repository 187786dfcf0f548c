"""SIGKILLed ``mqbroker`` processes under batches sent to a BatchCQ topic (RocketMQ 5's
``queue.type=BatchCQ``): the reliability plan's process-level R1 for that queue type, with real
``mqnamesrv``/``mqbroker`` processes and the trio client.

Producers without retries send batches of 1 to 64 messages as fast as they can; every message
has its own body, tags, keys and the properties ``BATCH`` (its batch's id) and ``SEQ`` (its
index in the batch), all derived from the batch id. Each batch is classified **acked**
(``SEND_OK``, with its queue and base offset), **failed** (surely not stored: no connection, or
an error answer) or **unknown** (timed out, connection dropped mid-request). :data:`KILLS`
times, the broker is SIGKILLed once a seeded number of batches were acknowledged, while the
producers keep sending, and restarted on the same store. The small commitlog (1 MiB) and batch
consume queue files (:data:`BCQ_FILE_UNITS` units) roll many times, so recovery crosses file
boundaries. After every restart a reader pulls every queue from offset 0 up to the max offset
the broker reports, and:

- every acked message is there exactly once, at its batch's base offset plus its index in the
  batch, with its body, tags, keys, properties and ``msg_id`` (the UNIQ_KEY its ack named);
- every queue's offsets run 0 .. max offset with no gap and no offset served twice, and its
  min offset is 0;
- a batch is atomic: a stored batch has all its messages, in order, at contiguous offsets of
  one queue; an unknown one is wholly present or wholly absent; no failed one and nothing never
  sent is there;
- new batches continue every queue at its max offset, without gaps, and read back identical.

At the end the broker stops cleanly (SIGTERM, exit 0, no traceback in its log), and its store is
checked offline: the raw ``batchconsumequeue/`` files hold exactly one unit per stored batch,
chained from offset 0, and only zeros after the last one; ``store.invariants.check_store``
finds no problem.

Variants: SYNC_FLUSH and ASYNC_FLUSH (a process crash keeps the page cache, so nothing acked is
lost either way); a group that committed an offset in the middle of a batch before the first
kill resumes exactly there after every restart; a SIGKILL during recovery (as the restarted
broker logs that it recovers, and again as soon as its port answers) followed by a third start.

The seed is ``CHAOS_SEED`` (printed); every process is killed by pid when a test ends.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import zlib
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import trio

from broker.config import BrokerConfig
from client.admin.admin_client import AdminClient
from client.aio import (
    ConsumeFromWhere,
    Message,
    Producer,
    PullConsumer,
    ReceivedMessage,
    SendStatus,
)
from client.errors import MQBrokerError, MQClientError
from common.route import TopicConfig
from remoting.errors import RemotingConnectError
from store.batch_consume_queue import BCQ_STORE_UNIT_SIZE, count_valid_units, unpack_unit
from store.invariants import check_store
from store.message_store import MessageStore
from tests.broker.inprocess import SMALL_STORE
from tests.e2e.cluster import (
    RECOVERING,
    BrokerProc,
    Cluster,
    causes,
    kill_when_logged,
    running_cluster,
    wait_until,
)
from tests.processes import BROKER_BOOT_ANY, read_log

TOPIC = "BcqCrashTopic"
QUEUES = 2
PRODUCERS = 2
KILLS = 3
MAX_BATCH = 64
BCQ_FILE_UNITS = 16
"""Units per batch consume queue file: a queue's units span many files."""
SEED = int(os.environ.get("CHAOS_SEED", "20250704"))
BASE = {
    "diskMaxUsedSpaceRatio": "95",
    "mappedFileSizeCommitLog": "1048576",
    "mapperFileSizeBatchConsumeQueue": str(BCQ_FILE_UNITS * BCQ_STORE_UNIT_SIZE),
    "flushConsumerOffsetInterval": "200",
}
SYNC = {**BASE, "flushDiskType": "SYNC_FLUSH"}
ASYNC = {**BASE, "flushDiskType": "ASYNC_FLUSH"}
Place = tuple[int, int]
"""(queue id, queue offset)."""


# --------------------------------------------------------------------------- the messages


def batch_size_of(batch_id: str) -> int:
    """How many messages batch ``batch_id`` (``<producer>b<seq>``) holds: 1 .. 64, seeded."""
    return random.Random(f"{SEED}:{batch_id}").randint(1, MAX_BATCH)


def message_of(batch_id: str, index: int) -> Message:
    """Message ``index`` of batch ``batch_id``: body, tags, keys and properties from both."""
    name = f"{batch_id}m{index}"
    body = f"{name}|".encode() * (1 + (zlib.crc32(batch_id.encode()) + index * 7) % 23)
    return Message(
        TOPIC,
        body,
        tags=f"T{index % 5}",
        keys=[f"K{name}", f"B{batch_id}"],
        properties={"BATCH": batch_id, "SEQ": str(index)},
    )


def batch_of(batch_id: str) -> list[Message]:
    """Every message of batch ``batch_id``, in order."""
    return [message_of(batch_id, i) for i in range(batch_size_of(batch_id))]


def identity(msg: Message | ReceivedMessage) -> tuple[bytes, str | None, list[str], str, str]:
    """What must survive of a message: body, tags, keys and the two user properties."""
    props = msg.properties
    return msg.body, msg.tags, msg.keys, props.get("BATCH", ""), props.get("SEQ", "")


# --------------------------------------------------------------------------- the producers


@dataclass(frozen=True)
class Ack:
    """An acknowledged batch: its queue, base offset and its messages' UNIQ_KEYs."""

    queue_id: int
    base: int
    msg_ids: tuple[str, ...]


@dataclass
class SendBook:
    """Every batch's outcome: acked, failed (surely not stored) or unknown."""

    attempted: set[str] = field(default_factory=set)
    acked: dict[str, Ack] = field(default_factory=dict)
    failed: set[str] = field(default_factory=set)
    unknown: set[str] = field(default_factory=set)
    stop: trio.Event = field(default_factory=trio.Event)

    def classify_error(self, batch_id: str, exc: MQClientError) -> None:
        """A send that raised: failed if it surely never reached the store, else unknown."""
        chain = list(causes(exc))
        if any(isinstance(e, RemotingConnectError | MQBrokerError) for e in chain):
            self.failed.add(batch_id)
        else:
            self.unknown.add(batch_id)

    def acked_in(self, queue_id: int) -> list[tuple[str, Ack]]:
        """The acked batches of one queue, by base offset."""
        return sorted(
            ((b, a) for b, a in self.acked.items() if a.queue_id == queue_id),
            key=lambda item: item[1].base,
        )


async def send_one(producer: Producer, batch_id: str, book: SendBook) -> None:
    """Send batch ``batch_id`` once and record its outcome in ``book``."""
    book.attempted.add(batch_id)
    try:
        result = await producer.send_batch(batch_of(batch_id))
    except MQClientError as exc:
        book.classify_error(batch_id, exc)
        await trio.sleep(0.05)  # the broker is down: do not spin
        return
    if result.status is not SendStatus.SEND_OK:
        book.unknown.add(batch_id)
        return
    ids = tuple(result.msg_id.split(","))
    assert len(ids) == batch_size_of(batch_id), (batch_id, result.msg_id)
    book.acked[batch_id] = Ack(result.queue.queue_id, result.queue_offset, ids)


async def produce(namesrv: str, prefix: str, book: SendBook) -> None:
    """Send batches ``<prefix>b<seq>`` one after another, without retries, until ``book.stop``."""
    async with Producer(f"pg_{prefix}", namesrv, send_timeout=3.0, retry_times=0) as producer:
        seq = 0
        while not book.stop.is_set():
            await send_one(producer, f"{prefix}b{seq}", book)
            seq += 1


async def produce_count(namesrv: str, prefix: str, count: int, book: SendBook) -> None:
    """Send ``count`` batches ``<prefix>b<seq>``; each must be acknowledged."""
    async with Producer(f"pg_{prefix}", namesrv, send_timeout=10.0) as producer:
        for seq in range(count):
            await send_one(producer, f"{prefix}b{seq}", book)
    assert not book.failed | book.unknown, sorted(book.failed | book.unknown)


# --------------------------------------------------------------------------- the broker


async def create_batch_cq_topic(namesrv: str, broker: BrokerProc) -> None:
    """Create TOPIC on ``broker`` with ``+queue.type=BatchCQ`` through the admin API."""
    async with AdminClient(namesrv) as admin:
        await admin.update_topic(
            broker.addr, TopicConfig(TOPIC, QUEUES, QUEUES), "+queue.type=BatchCQ"
        )


async def kill_when_port_answers(cluster: Cluster, broker: BrokerProc) -> None:
    """Start ``mqbroker`` on the broker's store and port; SIGKILL it as soon as it prints its
    boot line (its port answers from then on)."""
    argv = cluster.broker_argv(broker.name, broker.store, broker.port, broker.overrides)
    with broker.log.open("ab") as stderr:
        proc = await trio.lowlevel.open_process(argv, stdout=subprocess.PIPE, stderr=stderr)
    cluster.procs.append(proc)
    assert proc.stdout is not None
    buf = b""
    with trio.fail_after(20):
        while b"\n" not in buf:
            chunk = await proc.stdout.receive_some()
            assert chunk, f"the broker exited early: {read_log(broker.log)[-2000:]}"
            buf += chunk
    proc.kill()
    with trio.fail_after(20):
        await proc.wait()
    await proc.stdout.aclose()
    assert BROKER_BOOT_ANY.fullmatch(buf.split(b"\n", 1)[0].decode()), buf


def store_files(broker: BrokerProc, *parts: str) -> list[Path]:
    """The non-empty files of a store directory, by name."""
    return sorted(p for p in broker.store.joinpath(*parts).iterdir() if p.stat().st_size)


def persisted_offset(broker: BrokerProc, group: str, queue_id: int) -> int | None:
    """The group's offset of TOPIC/``queue_id`` in the broker's ``consumerOffset.json``."""
    paths = list(broker.store.rglob("consumerOffset.json"))
    if not paths:
        return None
    try:
        doc = json.loads(paths[0].read_text())
    except (OSError, ValueError):  # being replaced right now
        return None
    offset = doc.get("offsetTable", {}).get(f"{TOPIC}@{group}", {}).get(str(queue_id))
    return None if offset is None else int(offset)


# --------------------------------------------------------------------------- reading back


async def broker_ends(namesrv: str) -> dict[int, tuple[int, int]]:
    """Each queue's (min offset, max offset) as the broker reports them."""
    out = {}
    async with PullConsumer("cg_bcq_ends", namesrv, auto_commit=False) as reader:
        queues = await reader.fetch_queues(TOPIC)
        reader.assign(queues)
        for mq in queues:
            await reader.seek_to_begin(mq)
            low = reader.position(mq)
            await reader.seek_to_end(mq)
            high = reader.position(mq)
            assert low is not None
            assert high is not None
            out[mq.queue_id] = (low, high)
    return out


async def read_range(
    namesrv: str, starts: dict[int, int]
) -> tuple[dict[Place, ReceivedMessage], dict[int, int]]:
    """Every message of TOPIC from ``starts[queue]`` up to the queue's max offset as the broker
    reports it: (queue id, offset) -> message, and the max offsets."""
    out: dict[Place, ReceivedMessage] = {}
    ends = {q: high for q, (_, high) in (await broker_ends(namesrv)).items()}
    async with PullConsumer("cg_bcq_reader", namesrv, auto_commit=False) as reader:
        queues = await reader.fetch_queues(TOPIC)
        reader.assign(queues)
        for mq in queues:
            reader.seek(mq, starts.get(mq.queue_id, 0))
        with trio.fail_after(30):
            while any(reader.position(mq) != ends[mq.queue_id] for mq in queues):
                for msg in await reader.poll_for(0.5):
                    place = (msg.queue.queue_id, msg.queue_offset)
                    assert place not in out, f"offset {place} served twice"
                    out[place] = msg
    return out, ends


def assert_contiguous(stored: dict[Place, ReceivedMessage], ends: dict[int, int]) -> None:
    """Queue ``q``'s offsets are exactly 0 .. ends[q] - 1."""
    by_queue: dict[int, set[int]] = defaultdict(set)
    for queue_id, offset in stored:
        by_queue[queue_id].add(offset)
    for queue_id, end in ends.items():
        assert by_queue[queue_id] == set(range(end)), (queue_id, end, len(by_queue[queue_id]))


def assert_acked_in_place(book: SendBook, stored: dict[Place, ReceivedMessage]) -> None:
    """Every acked message is at base + index, identical, with the msg_id its ack named."""
    for batch_id, ack in book.acked.items():
        for index, want in enumerate(batch_of(batch_id)):
            place = (ack.queue_id, ack.base + index)
            got = stored.get(place)
            assert got is not None, f"acked {batch_id}[{index}] at {place} is gone"
            assert identity(got) == identity(want), (batch_id, index, place)
            assert got.msg_id == ack.msg_ids[index], (batch_id, index)


def assert_batches_atomic(book: SendBook, stored: dict[Place, ReceivedMessage]) -> Counter[str]:
    """Each stored batch is whole, in order, at contiguous offsets of one queue, and was sent
    and not refused; returns how many messages of each batch are stored."""
    places: dict[str, list[tuple[int, int, ReceivedMessage]]] = defaultdict(list)
    for (queue_id, offset), msg in stored.items():
        places[msg.properties["BATCH"]].append((queue_id, offset, msg))
    for batch_id, found in places.items():
        assert batch_id in book.attempted, f"{batch_id} was never sent"
        assert batch_id not in book.failed, f"{batch_id} failed but is stored"
        found.sort(key=lambda item: item[:2])
        queue_id, base, _ = found[0]
        want = batch_of(batch_id)
        assert len(found) == len(want), f"{batch_id}: {len(found)} of {len(want)} stored"
        for index, (q, offset, msg) in enumerate(found):
            assert (q, offset) == (queue_id, base + index), (batch_id, index, q, offset)
            assert identity(msg) == identity(want[index]), (batch_id, index)
    return Counter({b: len(f) for b, f in places.items()})


def assert_store_matches(
    book: SendBook, stored: dict[Place, ReceivedMessage], ends: dict[int, int]
) -> None:
    """All the checks of the module docstring on a read of every queue from offset 0."""
    assert_contiguous(stored, ends)
    assert_acked_in_place(book, stored)
    assert_batches_atomic(book, stored)


async def check_new_sends_continue(
    namesrv: str, ends: dict[int, int], prefix: str, book: SendBook
) -> dict[int, int]:
    """Send fresh batches (``<prefix>b<seq>``, recorded in ``book`` too): each queue continues
    at its old max offset, without gaps, and the new messages read back identical. Returns the
    new max offsets."""
    fresh = SendBook()
    await produce_count(namesrv, prefix, 4 * QUEUES, fresh)
    book.attempted |= fresh.attempted
    book.acked.update(fresh.acked)
    for queue_id, end in ends.items():
        expected = end
        for batch_id, ack in fresh.acked_in(queue_id):
            assert ack.base == expected, (queue_id, batch_id, ack.base, expected)
            expected += batch_size_of(batch_id)
    stored, new_ends = await read_range(namesrv, ends)
    for queue_id, end in new_ends.items():
        got = {offset for q, offset in stored if q == queue_id}
        assert got == set(range(ends[queue_id], end)), (queue_id, ends[queue_id], end)
    assert_acked_in_place(fresh, stored)
    added = sum(new_ends.values()) - sum(ends.values())
    assert added == sum(batch_size_of(b) for b in fresh.acked)
    return new_ends


# --------------------------------------------------------------------------- the scenario


@dataclass
class MidBatchCommit:
    """A group's commit in the middle of a batch: queue, offset, batch and index there."""

    group: str
    queue_id: int
    offset: int
    batch_id: str
    index: int


async def commit_mid_batch(namesrv: str, book: SendBook, broker: BrokerProc) -> MidBatchCommit:
    """Read queue 0 a few messages at a time until the position is inside an acked batch,
    commit it, and wait until the broker has persisted it."""
    group = "cg_bcq_mid"
    async with PullConsumer(
        group, namesrv, consume_from=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET, auto_commit=False
    ) as consumer:
        mq = next(q for q in await consumer.fetch_queues(TOPIC) if q.queue_id == 0)
        consumer.assign([mq])
        with trio.fail_after(30):
            while (inside := inside_batch(book, consumer.position(mq))) is None:
                await consumer.poll_for(0.5, max_records=3)
        offset = consumer.position(mq)
        assert offset is not None
        await consumer.commit({mq: offset})
        assert await consumer.committed(mq) == offset
    await wait_until(
        lambda: persisted_offset(broker, group, 0) == offset, "the committed offset on disk"
    )
    batch_id, index = inside
    return MidBatchCommit(group, 0, offset, batch_id, index)


def inside_batch(book: SendBook, position: int | None) -> tuple[str, int] | None:
    """(batch, index > 0) of the acked batch of queue 0 that ``position`` lies strictly inside."""
    if position is None:
        return None
    for batch_id, ack in book.acked_in(0):
        if ack.base < position < ack.base + len(ack.msg_ids):
            return batch_id, position - ack.base
    return None


async def check_resumes_mid_batch(namesrv: str, mid: MidBatchCommit) -> None:
    """A new member of the group starts exactly at the committed offset, mid-batch."""
    async with PullConsumer(mid.group, namesrv, auto_commit=False) as consumer:
        mq = next(q for q in await consumer.fetch_queues(TOPIC) if q.queue_id == mid.queue_id)
        assert await consumer.committed(mq) == mid.offset
        consumer.assign([mq])  # no position given: it starts at the group's committed offset
        with trio.fail_after(30):
            while not (got := await consumer.poll_for(0.5)):
                pass
    first = got[0]
    assert first.queue_offset == mid.offset
    assert identity(first) == identity(message_of(mid.batch_id, mid.index))


async def produce_and_kill(
    cluster: Cluster, book: SendBook, rng: random.Random, kill: int, *, mid_batch: bool
) -> MidBatchCommit | None:
    """Producers ``r<kill>p<n>`` send until a seeded number of batches were acked; SIGKILL the
    broker while they still send, then stop them. With ``mid_batch``, a group commits
    mid-batch first."""
    ns, broker = cluster.namesrv_addr, cluster.brokers["broker-a"]
    book.stop = trio.Event()
    mid = None
    async with trio.open_nursery() as nursery:
        for number in range(PRODUCERS):
            nursery.start_soon(produce, ns, f"r{kill}p{number}", book)
        try:
            if mid_batch:
                await wait_until(lambda: len(book.acked_in(0)) >= 20, "acks in queue 0", 60)
                mid = await commit_mid_batch(ns, book, broker)
            target = len(book.acked) + rng.randint(150, 300)
            await wait_until(lambda: len(book.acked) >= target, f"{target} acked batches", 90)
            await cluster.kill(broker)
            killed_at = len(book.attempted)
            await wait_until(
                lambda: len(book.attempted) >= killed_at + PRODUCERS, "sends after the kill"
            )
        finally:
            book.stop.set()
    return mid


def assert_files_rolled(broker: BrokerProc) -> None:
    """The commitlog and every batch consume queue span several files (recovery crossed file
    boundaries)."""
    assert len(store_files(broker, "commitlog")) >= 2
    for queue_id in range(QUEUES):
        files = store_files(broker, "batchconsumequeue", TOPIC, str(queue_id))
        assert len(files) >= 3, (queue_id, files)


def assert_batch_cq_files_exact(
    broker: BrokerProc, stored: dict[Place, ReceivedMessage], ends: dict[int, int]
) -> None:
    """The raw ``batchconsumequeue/`` files of a stopped broker: per queue, one unit per stored
    batch, in queue order, from offset 0 to the max offset without a gap, and nothing but zeros
    after the last unit (no stale or duplicate units left behind by recovery)."""
    bases: dict[int, list[tuple[int, int]]] = defaultdict(list)
    for (queue_id, offset), msg in stored.items():
        if msg.properties["SEQ"] == "0":
            bases[queue_id].append((offset, batch_size_of(msg.properties["BATCH"])))
    for queue_id, end in ends.items():
        files = store_files(broker, "batchconsumequeue", TOPIC, str(queue_id))
        assert int(files[0].name) == 0, files[0]
        data = b"".join(path.read_bytes() for path in files)
        count = count_valid_units(data, len(data) // BCQ_STORE_UNIT_SIZE, expected_base=0)
        units = [unpack_unit(data, i) for i in range(count)]
        assert [(u.base, u.batch_size) for u in units] == sorted(bases[queue_id]), queue_id
        assert units[-1].end == end, (queue_id, units[-1], end)
        tail = data[count * BCQ_STORE_UNIT_SIZE :]
        assert tail.count(0) == len(tail), f"queue {queue_id}: bytes after the last unit"


def assert_store_invariant(broker: BrokerProc) -> None:
    """Open the stopped broker's store in this process: ``check_store`` finds no problem (every
    record has its unit and index keys, every unit its record, the next offsets agree)."""
    settings = {"storePathRootDir": str(broker.store), **SMALL_STORE, **broker.overrides}
    config = BrokerConfig.from_properties(settings).store_config()
    with MessageStore(config) as store:
        assert store.last_exit_ok
        assert check_store(store) == []


def report(book: SendBook, stored: dict[Place, ReceivedMessage], extra: str = "") -> None:
    """One line of figures for the test's output."""
    print(
        f"\nCHAOS_SEED={SEED} attempted={len(book.attempted)} acked={len(book.acked)} "
        f"failed={len(book.failed)} unknown={len(book.unknown)} stored_msgs={len(stored)} "
        f"acked_msgs={sum(len(a.msg_ids) for a in book.acked.values())} {extra}"
    )


def assert_clean_log(broker: BrokerProc) -> None:
    """No traceback in the broker's log."""
    log = read_log(broker.log)
    assert "Traceback" not in log, log[log.index("Traceback") - 200 :][:3000]


async def restart_after_crash(
    cluster: Cluster, broker: BrokerProc, *, kill_in_recovery: bool
) -> str:
    """Start the broker again on its store; with ``kill_in_recovery``, SIGKILL it first as it
    logs that it recovers, then again as soon as its port answers. Returns a note for the
    report."""
    assert (broker.store / "abort").exists()
    note = ""
    if kill_in_recovery:
        had_booted = await kill_when_logged(cluster, broker, RECOVERING)
        await kill_when_port_answers(cluster, broker)
        note = f"first_recovery_kill_had_booted={had_booted}"
    await cluster.restart_broker(broker)
    return note


async def crash_and_check(
    tmp_path: Path,
    overrides: dict[str, str],
    *,
    mid_batch: bool = False,
    kill_in_recovery: bool = False,
) -> None:
    """The scenario of the module docstring, :data:`KILLS` times, with its variants (the
    mid-batch commit before the first kill; the kills during recovery after the second)."""
    rng = random.Random(SEED)
    book = SendBook()
    mid: MidBatchCommit | None = None
    with trio.fail_after(240):
        async with running_cluster(tmp_path, {"broker-a": overrides}) as cluster:
            ns, broker = cluster.namesrv_addr, cluster.brokers["broker-a"]
            await create_batch_cq_topic(ns, broker)
            for kill in range(KILLS):
                first = mid_batch and kill == 0
                mid = await produce_and_kill(cluster, book, rng, kill, mid_batch=first) or mid
                in_recovery = kill_in_recovery and kill == 1
                note = await restart_after_crash(cluster, broker, kill_in_recovery=in_recovery)
                stored, ends = await read_range(ns, {})
                report(book, stored, f"kill={kill} {note}")
                assert_store_matches(book, stored, ends)
                assert all(low == 0 for low, _ in (await broker_ends(ns)).values())
                if mid is not None:
                    await check_resumes_mid_batch(ns, mid)
                await check_new_sends_continue(ns, ends, f"after{kill}", book)
            assert_files_rolled(broker)
            stored, ends = await read_range(ns, {})
            assert_store_matches(book, stored, ends)
            assert await cluster.terminate(broker) == 0, read_log(broker.log)[-3000:]
            assert_clean_log(broker)
    assert_batch_cq_files_exact(broker, stored, ends)
    assert_store_invariant(broker)


@pytest.mark.parametrize("overrides", [SYNC, ASYNC], ids=["SYNC_FLUSH", "ASYNC_FLUSH"])
async def test_sigkilled_broker_keeps_every_acked_batch(
    tmp_path: Path, overrides: dict[str, str]
) -> None:
    await crash_and_check(tmp_path, overrides)


async def test_commit_in_the_middle_of_a_batch_survives_sigkill(tmp_path: Path) -> None:
    await crash_and_check(tmp_path, ASYNC, mid_batch=True)


async def test_sigkill_during_recovery_then_a_third_start(tmp_path: Path) -> None:
    await crash_and_check(tmp_path, SYNC, kill_in_recovery=True)
