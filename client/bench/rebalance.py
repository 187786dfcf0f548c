"""The rebalance benchmark (``mqbench rebalance``): group members as processes, and how long
the group takes to give every queue exactly one owner again after a member joins or leaves.

A member process connects (a :class:`client.aio.ClientInstance` with the topic's route),
reports ready with its client id and, on the parent's go, starts a push consumer of the group
(no-op handler) on that instance. It then sends ``("assignment", (stamp_ns, queues))``
whenever its queues of the topic change (checked after every rebalance round), and closes
cleanly on SIGTERM (releasing its queues and leaving the group).

The parent (:class:`Members`) keeps the latest assignment of every live member. The group has
converged when each live member owns exactly what ``AllocateMessageQueueAveragely`` gives it
for the live members' client ids (so every queue has exactly one owner and nobody is left
out); the convergence time runs from the change (the go of a joining member, the signal to a
leaving one) to the latest report that completed that state. A member being stopped or
killed stops counting as an owner at the moment of the change.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import signal
import time
from dataclasses import dataclass, field
from multiprocessing.connection import Connection, wait
from multiprocessing.process import BaseProcess
from typing import Any

import trio

from client import aio
from client.allocate import AllocateMessageQueueAveragely
from client.bench.account import NO_ACCOUNT, Account
from client.bench.protocol import WorkerLink, now_ns, run_worker
from client.bench.runner import JOIN_TIMEOUT_S, BenchError

BOOT_LIMIT_S = 30.0
"""A member must be connected and ready within this long."""
CONVERGE_LIMIT_S = 30.0
"""A change not converged after this long fails the run (the periodic rebalance is 20 s)."""

Queue = tuple[str, int]
"""(broker name, queue id) of one of the topic's queues."""


@dataclass(frozen=True, slots=True)
class MemberSpec:
    """What a member consumes."""

    namesrv: str
    topic: str
    group: str
    account: Account = NO_ACCOUNT


def member_main(spec: MemberSpec, conn: Connection) -> None:
    """A group member process (see the module docstring)."""
    run_worker(conn, lambda link: trio.run(_member, spec, link))


async def _noop(msgs: list[aio.ReceivedMessage]) -> aio.ConsumeResult:
    return aio.ConsumeResult.SUCCESS


async def _member(spec: MemberSpec, link: WorkerLink) -> dict[str, Any]:
    with trio.open_signal_receiver(signal.SIGTERM) as signals:
        async with spec.account.instance(spec.namesrv) as instance:
            await instance.topic_route(spec.topic)
            await link.ready_then_go(instance.client_id)
            consumer = aio.PushConsumer(spec.group, instance=instance)
            consumer.subscribe(spec.topic, "*", _noop)
            async with consumer, trio.open_nursery() as nursery:
                nursery.start_soon(_report_assignment, consumer, spec.topic, link)
                async for _ in signals:
                    break
                nursery.cancel_scope.cancel()
    return {"client_id": instance.client_id}


async def _report_assignment(consumer: aio.PushConsumer, topic: str, link: WorkerLink) -> None:
    last: list[Queue] | None = None
    while True:
        round_done = consumer.rebalanced
        now = [(mq.broker_name, mq.queue_id) for mq in consumer.assignment() if mq.topic == topic]
        if now != last:
            link.send("assignment", (now_ns(), now))
            last = now
        await round_done.wait()


@dataclass(eq=False)
class Member:
    """One member process, as the parent sees it."""

    proc: BaseProcess
    conn: Connection
    client_id: str = ""
    queues: frozenset[Queue] | None = None
    stamp_ns: int = 0
    leaving: bool = False


@dataclass(eq=False)
class Members:
    """The group's member processes; a context manager that stops every one left."""

    spec: MemberSpec
    queues: list[Queue]
    members: list[Member] = field(default_factory=list)

    def __enter__(self) -> Members:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def live(self) -> list[Member]:
        """The members not stopped or killed."""
        return [m for m in self.members if not m.leaving]

    @property
    def pids(self) -> list[int]:
        """Every member process's pid."""
        return [m.proc.pid for m in self.members if m.proc.pid is not None]

    def spawn(self) -> Member:
        """Start a member process and wait for its ready (its client id); not yet go."""
        ctx = multiprocessing.get_context("spawn")
        parent, child = ctx.Pipe()
        name = f"member-{len(self.members)}"
        proc = ctx.Process(target=member_main, args=(self.spec, child), name=name, daemon=True)
        member = Member(proc, parent)
        self.members.append(member)
        proc.start()
        child.close()
        if not parent.poll(BOOT_LIMIT_S):
            raise BenchError(f"{name} not ready in {BOOT_LIMIT_S:g} s")
        kind, payload = self._recv(member)
        if kind != "ready":
            raise BenchError(f"{name}: expected ready, got {kind}: {payload}")
        member.client_id = payload
        return member

    def go(self, member: Member) -> int:
        """Let ``member`` start consuming; the time of the go (ns)."""
        t = now_ns()
        member.conn.send(("go", None))
        return t

    def signal(self, member: Member, sig: signal.Signals) -> int:
        """Send ``sig`` to ``member`` (it stops counting as an owner); the time (ns)."""
        member.leaving = True
        t = now_ns()
        assert member.proc.pid is not None
        with contextlib.suppress(ProcessLookupError):
            if sig is signal.SIGKILL:
                member.proc.kill()
            else:
                member.proc.terminate()
        return t

    def converged(self) -> bool:
        """Does every live member own exactly its share (``AllocateMessageQueueAveragely``)?"""
        live = self.live
        if not live or any(m.queues is None for m in live):
            return False
        cids = sorted(m.client_id for m in live)
        mq_all = [aio.MessageQueue(self.spec.topic, b, q) for b, q in self.queues]
        strategy = AllocateMessageQueueAveragely()
        for m in live:
            share = strategy.allocate(self.spec.group, m.client_id, mq_all, cids)
            if m.queues != frozenset((mq.broker_name, mq.queue_id) for mq in share):
                return False
        return True

    def wait_converged(self, since_ns: int) -> float:
        """Read reports until :meth:`converged`; seconds from ``since_ns`` to the report that
        completed it."""
        deadline = time.monotonic() + CONVERGE_LIMIT_S
        while not self.converged():
            left = deadline - time.monotonic()
            if left <= 0:
                state = {m.client_id: m.queues for m in self.live}
                raise BenchError(f"no single owner per queue after {CONVERGE_LIMIT_S:g} s: {state}")
            self._pump(min(left, 1.0))
        done = max([since_ns, *(m.stamp_ns for m in self.live)])
        return (done - since_ns) / 1e9

    def _pump(self, timeout: float) -> None:
        conns = {id(m.conn): m for m in self.members if not m.conn.closed}
        for conn in wait([m.conn for m in conns.values()], timeout):
            assert isinstance(conn, Connection)
            m = conns[id(conn)]
            try:
                kind, payload = self._recv(m)
            except EOFError:
                if not m.leaving:
                    raise BenchError(f"{m.proc.name} exited unexpectedly") from None
                m.conn.close()
                continue
            if kind == "assignment" and not m.leaving:
                m.stamp_ns, queues = payload
                m.queues = frozenset(tuple(q) for q in queues)
            elif kind == "error" and not m.leaving:
                raise BenchError(f"{m.proc.name} failed:\n{payload}")

    def _recv(self, member: Member) -> tuple[str, Any]:
        got: tuple[str, Any] = member.conn.recv()
        if got[0] == "error":
            raise BenchError(f"{member.proc.name} failed:\n{got[1]}")
        return got

    def close(self) -> None:
        """SIGTERM every member still running, SIGKILL those not gone in ``JOIN_TIMEOUT_S``."""
        for m in self.members:
            if m.proc.is_alive():
                m.proc.terminate()
        for m in self.members:
            m.proc.join(JOIN_TIMEOUT_S)
            if m.proc.is_alive():
                m.proc.kill()
                m.proc.join()
            m.conn.close()
