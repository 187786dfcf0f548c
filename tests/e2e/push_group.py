"""Push-consumer group members as real processes for the end-to-end tests.

- :class:`Group` starts ``python -m tests.e2e.push_member`` processes (one per member; or
  ``tests.e2e.pull_member``, which reports the same events) and reads their JSON event lines in
  one task each; :func:`member_group` kills every member by pid when the block ends.
- :class:`Feeder` / :func:`feeding` send messages from a worker thread with the blocking
  producer while a test changes the group; :func:`send_bodies` sends a fixed list.
- Every wait has a deadline (``LIMIT``), none sleeps and hopes.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
import time
from collections import Counter, defaultdict
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import trio

from client import AllocateMessageQueueAveragely, Message, MessageQueue, Producer, SendStatus
from tests.e2e.cluster import LIMIT, in_thread, wait_until
from tests.processes import REPO, read_log, stop_process

TOPIC = "PushE2E"
GROUP = "cg_push_e2e"
FAST_LEVELS = {"messageDelayLevel": " ".join(["100ms"] * 18)}
"""All 18 delay levels 100 ms, so messages sent back for a retry return at once."""
Event = dict[str, Any]


@dataclass(eq=False)
class Member:
    """One member process and everything it reported."""

    name: str
    proc: trio.Process
    log: Path
    events: list[Event] = field(default_factory=list)
    client_id: str = ""
    assignment: frozenset[MessageQueue] | None = None
    eof: trio.Event = field(default_factory=trio.Event)

    def on_event(self, event: Event) -> None:
        """Record one stdout event."""
        self.events.append(event)
        if event["event"] == "started":
            self.client_id = event["client_id"]
        elif event["event"] == "assignment":
            queues = (MessageQueue(*q) for q in event["queues"])
            self.assignment = frozenset(q for q in queues if q.topic == TOPIC)

    def msgs(self) -> list[Event]:
        """Every handler call on a message, in order."""
        return [e for e in self.events if e["event"] == "msg"]

    def check_alive(self) -> None:
        """Fail (with its log) if the process has exited on its own."""
        if self.proc.returncode is not None or self.eof.is_set():
            raise AssertionError(f"{self.name} exited: {read_log(self.log)[-3000:]}")


@dataclass(eq=False)
class Group:
    """Starts member processes; ``members`` holds all of them, ``live`` the running ones."""

    root: Path
    namesrv: str
    nursery: trio.Nursery
    module: str = "tests.e2e.push_member"
    """The member program (``python -m``)."""
    members: list[Member] = field(default_factory=list)
    live: list[Member] = field(default_factory=list)
    changed_at: float = 0.0
    """``time.monotonic()`` of the last membership change (spawn or signal)."""

    async def start(self, name: str, *options: str) -> Member:
        """Start a member and wait for its ``started`` event."""
        argv = [sys.executable, "-m", self.module, "--namesrv", self.namesrv]
        argv += ["--group", GROUP, "--topic", TOPIC, *options]
        log = self.root / f"{name}.log"
        self.changed_at = time.monotonic()
        with log.open("ab") as stderr:
            proc = await trio.lowlevel.open_process(
                argv, cwd=REPO, stdout=subprocess.PIPE, stderr=stderr
            )
        member = Member(name, proc, log)
        self.members.append(member)
        self.nursery.start_soon(self._read, member)
        await wait_until(lambda: bool(member.client_id) or member.eof.is_set(), f"{name} start")
        member.check_alive()
        self.live.append(member)
        return member

    async def _read(self, member: Member) -> None:
        assert member.proc.stdout is not None
        buf = b""
        while chunk := await member.proc.stdout.receive_some(65536):
            *lines, buf = (buf + chunk).split(b"\n")
            for line in lines:
                member.on_event(json.loads(line))
        member.eof.set()

    async def terminate(self, member: Member) -> None:
        """SIGTERM: the member closes its consumer, reports ``closed`` and exits 0."""
        self.live.remove(member)
        self.changed_at = time.monotonic()
        member.proc.send_signal(signal.SIGTERM)
        with trio.fail_after(LIMIT):
            assert await member.proc.wait() == 0, read_log(member.log)[-3000:]
            await member.eof.wait()
        assert member.events[-1]["event"] == "closed"

    async def kill(self, member: Member) -> None:
        """SIGKILL and reap; every line it wrote before dying is read."""
        self.live.remove(member)
        self.changed_at = time.monotonic()
        member.proc.send_signal(signal.SIGKILL)
        with trio.fail_after(LIMIT):
            await member.proc.wait()
            await member.eof.wait()

    def pause(self, member: Member) -> None:
        """SIGSTOP: frozen, it says nothing to anyone (no longer counted live)."""
        self.live.remove(member)
        self.changed_at = time.monotonic()
        member.proc.send_signal(signal.SIGSTOP)

    def resume(self, member: Member) -> None:
        """SIGCONT: it carries on where it stopped (counted live again)."""
        self.live.append(member)
        self.changed_at = time.monotonic()
        member.proc.send_signal(signal.SIGCONT)

    def converged(self, queues: list[MessageQueue]) -> bool:
        """True when every live member reports exactly its share of ``queues`` under the
        default strategy for the live client ids (so each queue has exactly one owner)."""
        for member in self.live:
            member.check_alive()
        cids = sorted(m.client_id for m in self.live)
        strategy = AllocateMessageQueueAveragely()
        for member in self.live:
            want = strategy.allocate(GROUP, member.client_id, queues, cids)
            if member.assignment != frozenset(want):
                return False
        owners = Counter(q for m in self.live for q in m.assignment or ())
        assert owners == Counter(queues), owners  # implied by the above; stated for clarity
        return True

    async def wait_converged(self, queues: list[MessageQueue], what: str) -> float:
        """Wait for :meth:`converged`; returns the seconds since the change."""
        await wait_until(lambda: self.converged(queues), f"one owner per queue after {what}")
        return round(time.monotonic() - self.changed_at, 3)

    def consumed(self) -> list[Event]:
        """Every successful handler call on a message, over all members ever started."""
        return [e for m in self.members for e in m.msgs() if e["ok"]]


@asynccontextmanager
async def member_group(
    root: Path, namesrv: str, module: str = "tests.e2e.push_member"
) -> AsyncIterator[Group]:
    """A :class:`Group` of ``module`` members; on exit its readers stop and every member is
    killed by pid."""
    async with trio.open_nursery() as nursery:
        group = Group(root, namesrv, nursery, module)
        try:
            yield group
        finally:
            nursery.cancel_scope.cancel()
            for member in group.members:
                await stop_process(member.proc)


class Feeder:
    """Sends messages from a worker thread, paced, until stopped; ``sent`` holds the bodies."""

    def __init__(
        self, namesrv: str, make: Callable[[int], tuple[Message, str | None]], interval: float
    ) -> None:
        self.namesrv = namesrv
        self.make = make
        self.interval = interval
        self.sent: list[str] = []
        self.stop = threading.Event()
        self.done = trio.Event()

    def run(self) -> None:
        """Blocking: send until stopped; ``make(i)`` gives message ``i`` and an optional
        sharding key (then the send is orderly)."""
        with Producer(group="pg_push_e2e", namesrv=self.namesrv, send_timeout=10.0) as producer:
            i = 0
            while not self.stop.is_set():
                msg, key = self.make(i)
                if key is None:
                    result = producer.send(msg)
                else:
                    result = producer.send_orderly(msg, sharding_key=key)
                assert result.status is SendStatus.SEND_OK
                self.sent.append(msg.body.decode())
                i += 1
                self.stop.wait(self.interval)  # pacing, not waiting for anything

    async def serve(self) -> None:
        """Run :meth:`run` in a worker thread."""
        try:
            await in_thread(self.run)
        finally:
            self.done.set()

    async def finish(self) -> list[str]:
        """Stop sending, wait for the thread to end; returns every body sent."""
        self.stop.set()
        with trio.fail_after(LIMIT):
            await self.done.wait()
        return self.sent


@asynccontextmanager
async def feeding(
    namesrv: str, make: Callable[[int], tuple[Message, str | None]], interval: float = 0.004
) -> AsyncIterator[Feeder]:
    """A :class:`Feeder` sending in the background; it stops when the block ends."""
    feeder = Feeder(namesrv, make, interval)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(feeder.serve)
        try:
            yield feeder
        finally:
            feeder.stop.set()


def plain(i: int) -> tuple[Message, str | None]:
    """Message ``i`` with a distinct body, sent to any queue."""
    return Message(TOPIC, f"m{i}".encode()), None


def topic_queues(brokers: dict[str, int]) -> list[MessageQueue]:
    """Sorted queues of TOPIC: ``brokers`` maps broker name -> queue count."""
    return sorted(MessageQueue(TOPIC, b, q) for b, n in brokers.items() for q in range(n))


async def wait_all_consumed(group: Group, sent: list[str], limit: float = LIMIT) -> None:
    """Wait until every body in ``sent`` has been consumed successfully by some member."""
    wanted = set(sent)

    def done() -> bool:
        for member in group.live:
            member.check_alive()
        return wanted <= {e["body"] for e in group.consumed()}

    await wait_until(done, f"all {len(wanted)} messages consumed", limit)


def keyed(keys: int) -> Callable[[int], tuple[Message, str | None]]:
    """Message ``i``: body ``k<key>:<seq>`` (seq counts up per key), sent orderly by key."""

    def make(i: int) -> tuple[Message, str | None]:
        key = f"k{i % keys}"
        return Message(TOPIC, f"{key}:{i // keys}".encode()), key

    return make


async def send_bodies(namesrv: str, bodies: list[str]) -> None:
    """Send one message per body (any queue) from a worker thread."""

    def run() -> None:
        with Producer(group="pg_push_e2e", namesrv=namesrv, send_timeout=10.0) as producer:
            for body in bodies:
                assert producer.send(Message(TOPIC, body.encode())).status is SendStatus.SEND_OK

    with trio.fail_after(LIMIT):
        await in_thread(run)


def bodies_of(member: Member) -> Counter[str]:
    """How often ``member`` consumed each body."""
    return Counter(e["body"] for e in member.msgs() if e["ok"])


def lost_queue(member: Member, queue: tuple[str, int], after: float) -> bool:
    """True if ``member`` stopped owning ``queue`` after wall-clock time ``after`` (it left or
    reported an assignment without it)."""
    if member.proc.returncode is not None:
        return True
    return any(
        e["event"] == "assignment" and e["t"] >= after and [TOPIC, *queue] not in e["queues"]
        for e in member.events
    )


def assert_duplicates_follow_handovers(
    group: Group, allowed: Callable[[str], bool] = lambda body: False
) -> None:
    """Each message consumed twice (but those ``allowed``) was first consumed by a member that
    later lost its queue."""
    deliveries: defaultdict[str, list[tuple[float, Member, tuple[str, int]]]] = defaultdict(list)
    for member in group.members:
        for e in member.msgs():
            deliveries[e["body"]].append((e["t0"], member, (e["queue"][0], e["queue"][1])))
    for body, seen in deliveries.items():
        if len(seen) > 1 and not allowed(body):
            t0, first, queue = min(seen, key=lambda d: d[0])
            assert lost_queue(first, queue, t0), (body, [(t, m.name) for t, m, _ in seen])
