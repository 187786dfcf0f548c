"""Transactional messages with real processes: ``mqnamesrv``, ``mqbroker`` and producer-group
members (``python -m tests.e2e.tx_member``), and the blocking client.

- A producer killed (SIGKILL) between its half message and its decision: a second member of
  the group answers the broker's check (commit) and the message is delivered once.
- A broker (SYNC_FLUSH) killed between the half message and the commit: the commit sent after
  the restart (or the check, if the old connection lost it) delivers the message once; a half
  message whose producer died is checked after the broker's restart by a member started then.
- Mixed decisions: consumers see each committed message once, and never a rolled-back one or
  one left undecided until ``transactionCheckMax``.

The brokers check every 200 ms messages older than 300 ms (never the real defaults).
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import trio

from client import (
    ConsumeFromWhere,
    LocalTransactionState,
    Message,
    Producer,
    PullConsumer,
    ReceivedMessage,
    TransactionProducer,
    TransactionSendResult,
)
from tests.e2e.cluster import (
    LIMIT,
    create_topic,
    in_thread,
    poll_until,
    running_cluster,
    wait_until,
)
from tests.processes import REPO, read_log, stop_process

TOPIC = "TxE2E"
GROUP = "tx_pg_e2e"
CHECK_MAX = 4
TX = {
    "transactionCheckInterval": "200",
    "transactionTimeOut": "300",
    "transactionCheckMax": str(CHECK_MAX),
    "flushDiskType": "SYNC_FLUSH",
}
COMMIT = LocalTransactionState.COMMIT_MESSAGE
ROLLBACK = LocalTransactionState.ROLLBACK_MESSAGE
UNKNOW = LocalTransactionState.UNKNOW
Event = dict[str, Any]


# --------------------------------------------------------------------------- member processes


@dataclass(eq=False)
class Member:
    """One ``tx_member`` process and every event it reported."""

    name: str
    proc: trio.Process
    log: Path
    events: list[Event] = field(default_factory=list)
    eof: trio.Event = field(default_factory=trio.Event)

    def saw(self, event: str, body: str | None = None) -> bool:
        """True once the member reported ``event`` (about ``body``)."""
        return any(
            e["event"] == event and (body is None or e.get("body") == body) for e in self.events
        )

    def alive(self) -> bool:
        """Fail (with its log) if the process has exited on its own."""
        if self.proc.returncode is not None or self.eof.is_set():
            raise AssertionError(f"{self.name} exited: {read_log(self.log)[-3000:]}")
        return True


@dataclass(eq=False)
class Members:
    """Starts members under ``root`` and reads their stdout in ``nursery``."""

    root: Path
    namesrv: str
    nursery: trio.Nursery
    started: list[Member] = field(default_factory=list)

    async def start(self, name: str, *options: str) -> Member:
        """Start a member and wait for its ``ready`` event."""
        argv = [sys.executable, "-m", "tests.e2e.tx_member", "--namesrv", self.namesrv]
        argv += ["--group", GROUP, "--topic", TOPIC, *options]
        log = self.root / f"{name}.log"
        with log.open("ab") as stderr:
            proc = await trio.lowlevel.open_process(
                argv, cwd=REPO, stdout=subprocess.PIPE, stderr=stderr
            )
        member = Member(name, proc, log)
        self.started.append(member)
        self.nursery.start_soon(self._read, member)
        await wait_until(lambda: member.saw("ready") or member.eof.is_set(), f"{name} ready")
        member.alive()
        return member

    async def _read(self, member: Member) -> None:
        assert member.proc.stdout is not None
        buf = b""
        try:
            while chunk := await member.proc.stdout.receive_some(65536):
                *lines, buf = (buf + chunk).split(b"\n")
                for line in lines:
                    member.events.append(json.loads(line))
        except trio.ClosedResourceError:
            pass  # the test is over: the pipe was closed under us
        finally:
            member.eof.set()

    async def kill(self, member: Member) -> None:
        """SIGKILL and reap; every line it wrote before dying is read."""
        member.proc.send_signal(signal.SIGKILL)
        with trio.fail_after(LIMIT):
            await member.proc.wait()
            await member.eof.wait()

    async def aclose(self) -> None:
        """Kill every member still running (by pid)."""
        for member in self.started:
            await stop_process(member.proc)


@asynccontextmanager
async def tx_cluster(tmp_path: Path) -> AsyncIterator[tuple[Any, Members]]:
    """One SYNC_FLUSH broker with fast checks, TOPIC created, and a member starter."""
    async with running_cluster(tmp_path, {"broker-a": TX}) as cluster:
        await create_topic(cluster.brokers["broker-a"].addr, TOPIC, 4)
        members: Members | None = None
        try:
            async with trio.open_nursery() as nursery:
                members = Members(tmp_path, cluster.namesrv_addr, nursery)
                try:
                    yield cluster, members
                finally:
                    nursery.cancel_scope.cancel()  # stop the readers before the pipes close
        finally:
            if members is not None:
                await members.aclose()


# --------------------------------------------------------------------------- consuming


def read_topic(namesrv: str, group: str, wanted: list[str]) -> Counter[str]:
    """Blocking: read TOPIC from the first offset until every body of ``wanted`` arrived, then
    send a plain sentinel to every queue and read up to all of them; returns body counts
    (sentinels excluded)."""
    with PullConsumer(
        group=group, namesrv=namesrv, consume_from=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET
    ) as consumer:
        queues = consumer.fetch_queues(TOPIC)
        consumer.assign(queues)

        def has(bodies: list[str]) -> Callable[[list[ReceivedMessage]], bool]:
            return lambda got: set(bodies) <= {m.body.decode() for m in got}

        got = poll_until(consumer, has(wanted))
        assert has(wanted)(got), f"missing {set(wanted) - {m.body.decode() for m in got}}"
        sentinels = [f"sentinel-{mq.queue_id}" for mq in queues]
        with Producer(group="pg_tx_sentinel", namesrv=namesrv) as producer:
            for mq, body in zip(queues, sentinels, strict=True):
                producer.send(Message(TOPIC, body.encode()), queue=mq)
        got += poll_until(consumer, has(sentinels))
        assert has(sentinels)(got)
    return Counter(m.body.decode() for m in got if not m.body.startswith(b"sentinel-"))


# --------------------------------------------------------------------------- tests


async def test_a_killed_producer_is_answered_for_by_another_member(tmp_path: Path) -> None:
    async with tx_cluster(tmp_path) as (cluster, members):
        helper = await members.start("helper", "--check", "COMMIT_MESSAGE")
        doomed = await members.start("doomed", "--check", "UNKNOW", "--hold", "orphan")
        await wait_until(lambda: doomed.saw("half", "orphan"), "the half message")
        await members.kill(doomed)
        bodies = await in_thread(read_topic, cluster.namesrv_addr, "cg_tx_killed", ["orphan"])
        assert bodies == Counter({"orphan": 1})
        assert helper.saw("check", "orphan")
        check = next(e for e in helper.events if e["event"] == "check")
        assert check["topic"] == TOPIC
        helper.alive()


class BlockingTransaction:
    """A blocking TransactionProducer sending one message from a worker thread, its local
    transaction parked until :meth:`decide`."""

    def __init__(self, namesrv: str, body: str) -> None:
        self.namesrv = namesrv
        self.body = body
        self.half_stored = threading.Event()
        self.go = threading.Event()
        self.decision = UNKNOW
        self.checks: list[str] = []
        self.close_when = threading.Event()

    def decide(self, state: LocalTransactionState) -> None:
        self.decision = state
        self.go.set()

    def _execute(self, msg: Message, arg: object) -> LocalTransactionState:
        self.half_stored.set()
        assert self.go.wait(LIMIT)
        return self.decision

    def _checker(self, msg: ReceivedMessage) -> LocalTransactionState:
        self.checks.append(msg.body.decode())
        return COMMIT

    def run(self) -> TransactionSendResult:
        with TransactionProducer(GROUP, self.namesrv, checker=self._checker) as producer:
            result = producer.send_in_transaction(Message(TOPIC, self.body.encode()), self._execute)
            # stay a live member until the message is read (a lost commit is checked)
            assert self.close_when.wait(LIMIT * 2)
            return result


async def test_a_broker_killed_between_half_message_and_commit(tmp_path: Path) -> None:
    async with tx_cluster(tmp_path) as (cluster, _):
        tx = BlockingTransaction(cluster.namesrv_addr, "survivor")
        results: list[TransactionSendResult] = []

        async def send() -> None:
            results.append(await in_thread(tx.run))

        async with trio.open_nursery() as nursery:
            nursery.start_soon(send)
            await wait_until(tx.half_stored.is_set, "the half message")
            broker = cluster.brokers["broker-a"]
            await cluster.kill(broker)  # SYNC_FLUSH: the acknowledged half message is on disk
            await cluster.restart_broker(broker)
            tx.decide(COMMIT)
            bodies = await in_thread(
                read_topic, cluster.namesrv_addr, "cg_tx_restart", ["survivor"]
            )
            tx.close_when.set()
        assert bodies == Counter({"survivor": 1})
        assert results[0].local_state is COMMIT


async def test_a_half_message_is_checked_after_a_broker_restart(tmp_path: Path) -> None:
    async with tx_cluster(tmp_path) as (cluster, members):
        doomed = await members.start("doomed", "--check", "UNKNOW", "--hold", "pending")
        await wait_until(lambda: doomed.saw("half", "pending"), "the half message")
        await members.kill(doomed)
        broker = cluster.brokers["broker-a"]
        await cluster.kill(broker)
        await cluster.restart_broker(broker)
        helper = await members.start("helper", "--check", "COMMIT_MESSAGE")
        bodies = await in_thread(read_topic, cluster.namesrv_addr, "cg_tx_pending", ["pending"])
        assert bodies == Counter({"pending": 1})
        assert helper.saw("check", "pending")


def mixed_transactions(namesrv: str) -> tuple[set[str], Counter[str]]:
    """Blocking: 20 transactions with every kind of decision (see the test); returns the
    bodies that must be delivered and how often the checker was asked about each body."""
    kinds = ["commit", "rollback", "checked-commit", "raised-rollback", "undecided"]
    local = {"commit": COMMIT, "rollback": ROLLBACK, "undecided": UNKNOW}
    on_check = {"checked-commit": COMMIT, "raised-rollback": ROLLBACK, "probe": COMMIT}
    on_check["rollback"] = COMMIT  # a check of a rolled-back message would expose it
    calls: Counter[str] = Counter()
    lock = threading.Lock()

    def checker(msg: ReceivedMessage) -> LocalTransactionState:
        kind = msg.body.decode().split("#")[0]
        with lock:
            calls[msg.body.decode()] += 1
        return on_check.get(kind, UNKNOW)

    def execute(msg: Message, arg: str) -> LocalTransactionState:
        if arg == "raised-rollback":
            raise RuntimeError("local transaction failed")
        return local.get(arg, UNKNOW)

    with TransactionProducer(GROUP, namesrv, checker=checker) as producer:
        bodies = [f"{kinds[i % 5]}#{i}" for i in range(20)]
        for body in bodies:
            kind = body.split("#")[0]
            result = producer.send_in_transaction(Message(TOPIC, body.encode()), execute, kind)
            want = local.get(kind, UNKNOW)
            assert result.local_state is want, (body, result.local_state)
        undecided = [b for b in bodies if b.startswith("undecided")]
        deadline = time.monotonic() + LIMIT
        while time.monotonic() < deadline:
            with lock:
                if all(calls[b] >= CHECK_MAX for b in undecided):
                    break
            time.sleep(0.05)
        with lock:
            assert all(calls[b] == CHECK_MAX for b in undecided), calls
        # checked after every undecided message reached the limit: the check service passed
        # them again (and must have discarded them, not delivered them)
        producer.send_in_transaction(Message(TOPIC, b"probe#0"), execute, "probe")
        delivered = {b for b in bodies if b.split("#")[0] in ("commit", "checked-commit")}
        counts = read_topic(namesrv, "cg_tx_mixed", sorted(delivered | {"probe#0"}))
        with lock:
            assert all(calls[b] == CHECK_MAX for b in undecided), calls
            return delivered | {"probe#0"}, counts


async def test_consumers_see_each_committed_message_once_and_nothing_else(
    tmp_path: Path,
) -> None:
    async with tx_cluster(tmp_path) as (cluster, _):
        delivered, counts = await in_thread(mixed_transactions, cluster.namesrv_addr)
    assert counts == Counter({body: 1 for body in delivered})
