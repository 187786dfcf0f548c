"""The parent's side of the benchmarks: spawning worker processes, starting them together,
collecting their results, and filling a topic (untimed) before a consume run.

Workers are ``multiprocessing`` ``spawn`` processes (a clean interpreter each, no fork of the
parent's threads). :class:`WorkerPool` waits for every worker's ``ready`` before sending
``go`` to all, so connection set-up and warm-up are not timed.
"""

from __future__ import annotations

import multiprocessing
import os
import time
from collections.abc import Callable, Iterable, Sequence
from multiprocessing.connection import Connection, wait
from multiprocessing.process import BaseProcess
from types import TracebackType
from typing import Any

import trio

from client import aio, rebalance
from client.admin.admin_client import AdminClient
from client.bench.account import NO_ACCOUNT, Account
from client.bench.protocol import QueueRanges, queue_key
from client.errors import MQClientError
from common.benchkit import ProgressHook
from common.route import TopicConfig
from common.topic_attributes import QUEUE_TYPE, add_modification

JOIN_TIMEOUT_S = 10.0
WORKER_SILENCE_LIMIT_S = 120.0
"""A worker that sends nothing (not even progress) for this long is considered hung."""
STALL_LIMIT_S = 30.0
"""Workers whose progress does not grow for this long have stalled."""


class BenchError(RuntimeError):
    """A benchmark worker failed."""


class WorkerPool:
    """Worker processes running ``target(spec, conn)`` for each spec; a context manager that
    kills (by pid) any worker still alive when it exits."""

    def __init__(self, name: str, target: Callable[[Any, Connection], None], specs: Sequence[Any]):
        ctx = multiprocessing.get_context("spawn")
        self.name = name
        self.conns: list[Connection] = []
        self.procs: list[BaseProcess] = []
        self.progress = [0] * len(specs)
        for i, spec in enumerate(specs):
            parent, child = ctx.Pipe()
            proc = ctx.Process(target=target, args=(spec, child), name=f"{name}-{i}", daemon=True)
            self.procs.append(proc)
            self.conns.append(parent)
            proc.start()
            child.close()

    def __enter__(self) -> WorkerPool:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close(abandon=exc_type is not None)

    @property
    def pids(self) -> list[int]:
        """The workers' pids."""
        return [p.pid for p in self.procs if p.pid is not None]

    def send_all(self, kind: str, payload: Any = None) -> None:
        """Send one message to every worker."""
        for conn in self.conns:
            conn.send((kind, payload))

    def send(self, index: int, kind: str, payload: Any = None) -> None:
        """Send one message to worker ``index``."""
        self.conns[index].send((kind, payload))

    def collect(self, kind: str, on_progress: Callable[[int], None] | None = None) -> list[Any]:
        """Wait for every worker's ``kind`` message; return their payloads in worker order.

        ``progress`` messages update :attr:`progress` and call ``on_progress(total)``.
        """
        out: dict[int, Any] = {}
        silent_since = time.monotonic()
        while len(out) < len(self.conns):
            got = self._receive([i for i in range(len(self.conns)) if i not in out], on_progress)
            if got is None:
                if time.monotonic() - silent_since > WORKER_SILENCE_LIMIT_S:
                    raise BenchError(f"{self.name} workers silent for {WORKER_SILENCE_LIMIT_S} s")
                continue
            silent_since = time.monotonic()
            for i, what, payload in got:
                if what != kind:
                    raise BenchError(f"{self.name} worker {i}: expected {kind}, got {what}")
                out[i] = payload
        return [out[i] for i in range(len(self.conns))]

    def until_progress(
        self,
        total: int,
        on_progress: Callable[[int], None] | None = None,
        stall_s: float = STALL_LIMIT_S,
    ) -> None:
        """Read the workers' ``progress`` until their sum reaches ``total``; BenchError when
        it does not grow for ``stall_s`` seconds or a worker sends anything else."""
        grown_at, best = time.monotonic(), sum(self.progress)
        while sum(self.progress) < total:
            for i, what, _ in self._receive(range(len(self.conns)), on_progress) or []:
                raise BenchError(f"{self.name} worker {i}: expected progress, got {what}")
            if sum(self.progress) > best:
                grown_at, best = time.monotonic(), sum(self.progress)
            elif time.monotonic() - grown_at > stall_s:
                raise BenchError(f"{self.name} workers stalled at {best}/{total} for {stall_s} s")

    def _receive(
        self, indexes: Iterable[int], on_progress: Callable[[int], None] | None
    ) -> list[tuple[int, str, Any]] | None:
        """One round of reading workers ``indexes`` (up to 1 s): their messages other than
        ``progress`` (None when nothing arrived); errors and exits raise BenchError."""
        index = {id(self.conns[i]): i for i in indexes}
        ready = wait([self.conns[i] for i in index.values()], timeout=1.0)
        if not ready:
            return None
        out = []
        for conn in ready:
            assert isinstance(conn, Connection)
            i = index[id(conn)]
            try:
                got, payload = conn.recv()
            except EOFError:
                raise BenchError(f"{self.name} worker {i} exited without a result") from None
            if got == "error":
                raise BenchError(f"{self.name} worker {i} failed:\n{payload}")
            if got == "progress":
                self.progress[i] = payload
                if on_progress is not None:
                    on_progress(sum(self.progress))
            else:
                out.append((i, got, payload))
        return out

    def close(self, *, abandon: bool = False) -> None:
        """Join the workers; kill by pid any still running after ``JOIN_TIMEOUT_S``, or at
        once when ``abandon`` (the run failed or was interrupted: nobody waits for them)."""
        for proc in self.procs:
            if abandon and proc.is_alive():
                proc.kill()
            proc.join(JOIN_TIMEOUT_S)
            if proc.is_alive():
                proc.kill()
                proc.join()
        for conn in self.conns:
            conn.close()


def shares(count: int, parts: int) -> list[int]:
    """``count`` split into ``parts`` near-equal shares (the first ones take the remainder)."""
    base, extra = divmod(count, parts)
    return [base + (1 if i < extra else 0) for i in range(parts)]


def bench_group(prefix: str) -> str:
    """A group name unique to this run (no committed offsets, no other members)."""
    return f"{prefix}_{os.getpid()}_{os.urandom(3).hex()}"


def ensure_topic(
    namesrv: str, topic: str, body_size: int, queues: int = 4, account: Account = NO_ACCOUNT
) -> None:
    """Send one message of zero bytes (a zero latency stamp) so that the broker creates the
    topic (with ``queues`` queues, if it is new) and the name servers know its route."""
    trio.run(_send_one, namesrv, topic, bytes(max(body_size, 8)), queues, account)


async def _send_one(namesrv: str, topic: str, body: bytes, queues: int, account: Account) -> None:
    async with (
        account.instance(namesrv) as instance,
        aio.Producer(
            group=bench_group("bench_init"), instance=instance, default_topic_queue_nums=queues
        ) as p,
    ):
        await p.send(aio.Message(topic, body))


def create_topic(
    namesrv: str, topic: str, queue_type: str, queues: int = 8, account: Account = NO_ACCOUNT
) -> None:
    """Create ``topic`` with ``queues`` queues and ``queue.type=queue_type`` on every master
    broker (UPDATE_AND_CREATE_TOPIC with RocketMQ's ``+queue.type=...``), so that a run sends
    to a topic of that type; BenchError when a broker refuses (e.g. the topic exists with
    another queue type, which cannot change)."""
    try:
        trio.run(_create_topic, namesrv, topic, queue_type, queues, account)
    except MQClientError as exc:
        raise BenchError(f"creating topic {topic} with queue.type={queue_type}: {exc}") from None


async def _create_topic(
    namesrv: str, topic: str, queue_type: str, queues: int, account: Account
) -> None:
    modification = add_modification({QUEUE_TYPE: queue_type})
    config = TopicConfig(topic, queues, queues)
    async with AdminClient(
        namesrv, access_key=account.access_key, secret_key=account.secret_key
    ) as admin:
        for _, addr in await admin.masters():
            await admin.update_topic(addr, config, modification)


# -- filling a topic (untimed) -----------------------------------------------------------------


def fill_topic(
    namesrv: str,
    topic: str,
    count: int,
    *,
    body_size: int,
    batch: int = 32,
    inflight: int = 4,
    progress: ProgressHook,
    queues: int = 4,
    account: Account = NO_ACCOUNT,
) -> QueueRanges:
    """Send ``count`` messages with batch sends, ``inflight`` batches at a time (a new topic
    is created with ``queues`` queues)."""
    return trio.run(
        _fill, namesrv, topic, count, body_size, batch, inflight, progress, queues, account
    )


async def _fill(
    namesrv: str,
    topic: str,
    count: int,
    body_size: int,
    batch: int,
    inflight: int,
    progress: ProgressHook,
    queues: int,
    account: Account,
) -> QueueRanges:
    body = os.urandom(body_size)
    ranges: QueueRanges = {}
    left = count
    done = 0
    shown = 0.0
    progress.phase(f"fill {topic}", count)
    async with (
        account.instance(namesrv) as instance,
        aio.Producer(
            group=bench_group("bench_fill"), instance=instance, default_topic_queue_nums=queues
        ) as p,
    ):

        async def sender() -> None:
            nonlocal left, done, shown
            while left > 0:
                n = min(batch, left)
                left -= n
                r = await p.send_batch([aio.Message(topic, body) for _ in range(n)])
                key, first = queue_key(r.queue), r.queue_offset
                b, e = ranges.get(key, (first, first + n))
                ranges[key] = (min(b, first), max(e, first + n))
                done += n
                if time.monotonic() - shown > 0.1:
                    shown = time.monotonic()
                    progress.advance(done)

        async with trio.open_nursery() as nursery:
            for _ in range(inflight):
                nursery.start_soon(sender)
    progress.advance(done)
    return ranges


# -- group members and queues (parent side) ------------------------------------------------------
MEMBERS_WAIT_S = 15.0


def wait_members(
    namesrv: str, group: str, topic: str, members: int, account: Account = NO_ACCOUNT
) -> None:
    """Wait (up to ``MEMBERS_WAIT_S``) until the broker of ``topic`` lists ``members`` clients
    in ``group``, so that every member's first allocation already sees them all."""
    trio.run(_wait_members, namesrv, group, topic, members, account)


async def _wait_members(
    namesrv: str, group: str, topic: str, members: int, account: Account
) -> None:
    async with account.instance(namesrv) as instance:
        with trio.move_on_after(MEMBERS_WAIT_S):
            while True:
                if len(await rebalance.consumer_ids(instance, group, topic)) >= members:
                    return
                await trio.sleep(0.05)
    raise BenchError(f"{group} did not reach {members} members in {MEMBERS_WAIT_S:g} s")


def topic_queues(namesrv: str, topic: str, account: Account = NO_ACCOUNT) -> list[aio.MessageQueue]:
    """The readable queues of ``topic``, sorted."""
    return trio.run(_topic_queues, namesrv, topic, account)


async def _topic_queues(namesrv: str, topic: str, account: Account) -> list[aio.MessageQueue]:
    async with account.instance(namesrv) as instance:
        return sorted(await instance.subscribe_queues(topic))
