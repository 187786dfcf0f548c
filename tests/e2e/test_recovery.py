"""Brokers stopping and coming back, with real processes and the blocking client.

- Offsets: a consumer commits part-way; ``broker-a`` stops on SIGTERM (exit 0) and restarts on
  its store (on its old port when it can be bound again); a new consumer of the group starts at
  exactly the committed offsets and reads exactly the rest.
- Failure: ``broker-a`` (SYNC_FLUSH, so an acknowledged message is on disk) is SIGKILLed while
  a producer sends; every send still succeeds, those started after the kill on ``broker-b``;
  restarted on its store, ``broker-a`` serves every message it acknowledged.
- Pause: the only broker is SIGSTOPped under a producer without retries; sends time out while
  it is stopped and succeed once it continues; every acknowledged message is stored once and
  nothing is stored that was not sent.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import trio

from client import (
    ConsumeFromWhere,
    Message,
    MessageQueue,
    MQClientError,
    Producer,
    PullConsumer,
    ReceivedMessage,
    SendResult,
    SendStatus,
)
from tests.e2e.cluster import (
    IdsSeen,
    create_topic,
    in_thread,
    poll_until,
    running_cluster,
    wait_until,
)
from tests.processes import read_log


def consumer(namesrv: str, group: str) -> PullConsumer:
    """A manually committing consumer reading from the first offset."""
    return PullConsumer(
        group=group,
        namesrv=namesrv,
        consume_from=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET,
        auto_commit=False,
    )


# --------------------------------------------------------------------------- offsets

OFFSETS_TOPIC = "E2E_Offsets"
OFFSETS_GROUP = "cg_e2e_offsets"
OFFSETS_TOTAL = 400


def send_numbered(namesrv: str, topic: str, count: int) -> dict[str, bytes]:
    """Blocking: ``count`` sends; msg_id -> body."""
    out: dict[str, bytes] = {}
    with Producer(group="pg_e2e_offsets", namesrv=namesrv) as producer:
        for i in range(count):
            result = producer.send(Message(topic, f"n-{i}".encode()))
            assert result.status is SendStatus.SEND_OK
            out[result.msg_id] = f"n-{i}".encode()
    return out


def consume_and_commit(namesrv: str) -> tuple[dict[MessageQueue, int], list[ReceivedMessage]]:
    """Blocking: read part of every queue, commit; returns the committed offsets (as the broker
    reports them) and what was read."""
    with consumer(namesrv, OFFSETS_GROUP) as c:
        queues = c.fetch_queues(OFFSETS_TOPIC)
        c.assign(queues)

        def enough(got: list[ReceivedMessage]) -> bool:
            return len(got) >= OFFSETS_TOTAL // 2 and {m.queue for m in got} == set(queues)

        got = poll_until(c, enough, max_records=10)
        assert enough(got)
        positions = {mq: c.position(mq) for mq in queues}
        c.commit()
        committed = {mq: c.committed(mq) for mq in queues}
        assert committed == positions
        for mq in queues:
            assert max(m.queue_offset for m in got if m.queue == mq) + 1 == positions[mq]
    return {mq: off for mq, off in committed.items() if off is not None}, got


def resume(namesrv: str, committed: dict[MessageQueue, int]) -> list[ReceivedMessage]:
    """Blocking: a new consumer of the group sees the committed offsets and reads the rest."""
    with consumer(namesrv, OFFSETS_GROUP) as c:
        queues = c.fetch_queues(OFFSETS_TOPIC)
        assert set(queues) == set(committed)
        assert {mq: c.committed(mq) for mq in queues} == committed
        c.assign(queues)
        remaining = OFFSETS_TOTAL - sum(committed.values())
        got = poll_until(c, lambda g: len(g) >= remaining)
        assert len(got) == remaining
        for mq in queues:  # each queue resumes exactly at its committed offset
            offsets = [m.queue_offset for m in got if m.queue == mq]
            if offsets:  # a queue read to its end in the first pass has nothing left
                assert min(offsets) == committed[mq]
    return got


async def test_committed_offsets_survive_broker_restart(tmp_path: Path) -> None:
    brokers: dict[str, dict[str, str]] = {"broker-a": {}, "broker-b": {}}
    with trio.fail_after(90):
        async with running_cluster(tmp_path, brokers) as cluster:
            ns = cluster.namesrv_addr
            for broker in cluster.brokers.values():
                await create_topic(broker.addr, OFFSETS_TOPIC, 2)
            sent = await in_thread(send_numbered, ns, OFFSETS_TOPIC, OFFSETS_TOTAL)
            committed, first = await in_thread(consume_and_commit, ns)
            assert any(mq.broker_name == "broker-a" and off > 0 for mq, off in committed.items())

            broker_a = cluster.brokers["broker-a"]
            old_port = broker_a.port
            assert await cluster.terminate(broker_a) == 0, read_log(broker_a.log)
            assert not (broker_a.store / "abort").exists()
            reused = await cluster.restart_broker(broker_a)
            assert reused == (broker_a.port == old_port)

            rest = await in_thread(resume, ns, committed)
            first_ids, rest_ids = {m.msg_id for m in first}, {m.msg_id for m in rest}
            assert not first_ids & rest_ids
            assert first_ids | rest_ids == set(sent)
            assert {m.body for m in first + rest} == set(sent.values())


# --------------------------------------------------------------------------- failure

KILL_TOPIC = "E2E_Failover"


@dataclass
class SendLog:
    """Every send of the producer thread: (monotonic ns when it started, result or error)."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    entries: list[tuple[int, bytes, SendResult | MQClientError]] = field(default_factory=list)
    stop: threading.Event = field(default_factory=threading.Event)

    def add(self, started: int, body: bytes, outcome: SendResult | MQClientError) -> None:
        """Record one send."""
        with self.lock:
            self.entries.append((started, body, outcome))

    def snapshot(self) -> list[tuple[int, bytes, SendResult | MQClientError]]:
        """A copy of the entries so far."""
        with self.lock:
            return list(self.entries)

    def acked_by(self, broker_name: str) -> int:
        """How many sends ``broker_name`` acknowledged."""
        return sum(
            1
            for _, _, r in self.snapshot()
            if isinstance(r, SendResult) and r.queue.broker_name == broker_name
        )

    def started_after(self, ns: int) -> list[SendResult | MQClientError]:
        """Outcomes of the sends that started after ``ns``."""
        return [r for started, _, r in self.snapshot() if started > ns]


def send_until_stopped(producer: Producer, topic: str, prefix: str, log: SendLog) -> None:
    """Blocking: send ``<prefix>-<n>`` bodies one after another until ``log.stop`` is set."""
    i = 0
    while not log.stop.is_set():
        body = f"{prefix}-{i}".encode()
        started = time.monotonic_ns()
        try:
            outcome: SendResult | MQClientError = producer.send(Message(topic, body))
        except MQClientError as exc:
            outcome = exc
        log.add(started, body, outcome)
        i += 1


def produce(namesrv: str, log: SendLog) -> None:
    """Blocking: numbered sends with the default retries until ``log.stop`` is set."""
    with Producer(group="pg_e2e_failover", namesrv=namesrv, send_timeout=10.0) as producer:
        send_until_stopped(producer, KILL_TOPIC, "f", log)


def read_back(namesrv: str, wanted: set[str]) -> list[ReceivedMessage]:
    """Blocking: read every queue of the topic from the first offset until ``wanted`` arrived."""
    with consumer(namesrv, "cg_e2e_failover") as c:
        c.assign(c.fetch_queues(KILL_TOPIC))
        return poll_until(c, IdsSeen(wanted), limit=30.0)


async def test_producer_survives_broker_kill_and_acked_messages_survive(tmp_path: Path) -> None:
    brokers = {"broker-a": {"flushDiskType": "SYNC_FLUSH"}, "broker-b": {}}
    log = SendLog()
    with trio.fail_after(90):
        async with running_cluster(tmp_path, brokers) as cluster:
            ns = cluster.namesrv_addr
            for broker in cluster.brokers.values():
                await create_topic(broker.addr, KILL_TOPIC, 4)
            broker_a = cluster.brokers["broker-a"]
            async with trio.open_nursery() as nursery:
                nursery.start_soon(in_thread, produce, ns, log)
                try:
                    await wait_until(lambda: log.acked_by("broker-a") >= 100, "acks by broker-a")
                    await cluster.kill(broker_a)
                    killed = time.monotonic_ns()
                    await wait_until(
                        lambda: len(log.started_after(killed)) >= 200, "sends after the kill"
                    )
                finally:
                    log.stop.set()
            entries = log.snapshot()
            errors = [r for _, _, r in entries if not isinstance(r, SendResult)]
            assert errors == []
            after = log.started_after(killed)
            assert all(
                isinstance(r, SendResult)
                and r.status is SendStatus.SEND_OK
                and r.queue.broker_name == "broker-b"
                for r in after
            )

            await cluster.restart_broker(broker_a)
            acked = {r.msg_id: body for _, body, r in entries if isinstance(r, SendResult)}
            got = await in_thread(read_back, ns, set(acked))
            received = {m.msg_id: m.body for m in got}
            assert {i: received.get(i) for i in acked} == acked
            on_a = {
                r.msg_id
                for _, _, r in entries
                if isinstance(r, SendResult) and r.queue.broker_name == "broker-a"
            }
            assert len(on_a) >= 100
            assert on_a <= {m.msg_id for m in got if m.queue.broker_name == "broker-a"}


# --------------------------------------------------------------------------- pause

PAUSE_TOPIC = "E2E_Pause"


def produce_without_retries(namesrv: str, log: SendLog) -> None:
    """Blocking: numbered sends, 1 s timeout, no retry: a timeout is an unknown outcome."""
    with Producer(
        group="pg_e2e_pause", namesrv=namesrv, send_timeout=1.0, retry_times=0
    ) as producer:
        send_until_stopped(producer, PAUSE_TOPIC, "p", log)


def read_bodies(namesrv: str, wanted: set[bytes]) -> list[ReceivedMessage]:
    """Blocking: read every queue from the first offset until every body of ``wanted`` came."""

    def done(got: list[ReceivedMessage]) -> bool:
        return wanted <= {m.body for m in got}

    with consumer(namesrv, "cg_e2e_pause") as c:
        c.assign(c.fetch_queues(PAUSE_TOPIC))
        return poll_until(c, done, limit=30.0)


async def test_a_paused_broker_costs_timeouts_not_messages(tmp_path: Path) -> None:
    """SIGSTOP the broker under a producer (the reliability plan's R7): sends time out while it
    is stopped and succeed again once it continues; every acknowledged message is stored once,
    and nothing is stored that was not sent. A timed-out send may or may not be stored."""
    log = SendLog()
    with trio.fail_after(90):
        async with running_cluster(tmp_path, {"broker-a": {}}) as cluster:
            ns = cluster.namesrv_addr
            broker = cluster.brokers["broker-a"]
            await create_topic(broker.addr, PAUSE_TOPIC, 4)
            async with trio.open_nursery() as nursery:
                nursery.start_soon(in_thread, produce_without_retries, ns, log)
                try:
                    await wait_until(lambda: broker_acks(log) >= 100, "acks before the pause")
                    os.kill(broker.proc.pid, signal.SIGSTOP)
                    try:
                        paused = time.monotonic_ns()
                        await wait_until(
                            lambda: any(
                                isinstance(r, MQClientError) for r in log.started_after(paused)
                            ),
                            "a send timing out",
                        )
                    finally:
                        os.kill(broker.proc.pid, signal.SIGCONT)
                    resumed = time.monotonic_ns()
                    await wait_until(
                        lambda: (
                            sum(isinstance(r, SendResult) for r in log.started_after(resumed))
                            >= 100
                        ),
                        "acks after the pause",
                    )
                finally:
                    log.stop.set()
            entries = log.snapshot()
            acked = {body for _, body, r in entries if isinstance(r, SendResult)}
            unknown = {body for _, body, r in entries if not isinstance(r, SendResult)}
            assert unknown, "no send timed out while the broker was stopped"
            errors = [r for r in log.started_after(0) if not isinstance(r, SendResult)]
            assert all("timed out" in str(r) for r in errors), errors[:3]  # nothing else failed
            got = await in_thread(read_bodies, ns, acked)
            bodies = [m.body for m in got]
            assert acked <= set(bodies)  # every acknowledged message is stored
            assert len(bodies) == len(set(bodies))  # nothing stored twice
            assert set(bodies) <= acked | unknown  # nothing stored that was not sent
            assert broker.proc.poll() is None  # it kept running


def broker_acks(log: SendLog) -> int:
    """Acknowledged sends so far."""
    return sum(1 for _, _, r in log.snapshot() if isinstance(r, SendResult))
