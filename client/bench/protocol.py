"""How a benchmark worker process talks to ``mqbench``: tagged tuples over a pipe.

A worker sends ``("ready", info)`` once warmed up, waits for ``("go", None)``, sends
``("progress", done)`` now and then and finally ``("result", dict)``; a failure is sent as
``("error", traceback text)``. The parent may also send ``("stop", payload)``: to the latency
consumer, the positions (broker, queue id, offset) of the messages the producer has sent; to a
push consumer, None.
"""

from __future__ import annotations

import time
import traceback
from collections.abc import Callable
from multiprocessing.connection import Connection
from typing import TYPE_CHECKING, Any, TypeVar

import trio

if TYPE_CHECKING:
    from client import aio

T = TypeVar("T")

PROGRESS_EVERY_S = 0.25

QueueKey = tuple[str, int]
"""(broker name, queue id): one queue of a topic (every broker numbers its queues from 0)."""
QueueRanges = dict[QueueKey, tuple[int, int]]
"""Queue -> ``[first, end)`` offsets of the messages to count (a fill wrote them)."""


def queue_key(mq: aio.MessageQueue) -> QueueKey:
    """The :data:`QueueKey` of ``mq``."""
    return (mq.broker_name, mq.queue_id)


class WorkerLink:
    """The worker's end of the pipe."""

    def __init__(self, conn: Connection) -> None:
        self.conn = conn

    def send(self, kind: str, payload: Any = None) -> None:
        """Send one tagged message to the parent."""
        self.conn.send((kind, payload))

    async def receive(self) -> tuple[str, Any]:
        """The next message from the parent (read in a thread; cancellable)."""
        msg: tuple[str, Any] = await trio.to_thread.run_sync(self.conn.recv, abandon_on_cancel=True)
        return msg

    async def ready_then_go(self, info: Any = None) -> None:
        """Report ready and wait for the parent's go."""
        self.send("ready", info)
        kind, _ = await self.receive()
        if kind != "go":
            raise RuntimeError(f"expected go, got {kind}")

    async def report_progress(self, done: Callable[[], int]) -> None:
        """Send ``done()`` every ``PROGRESS_EVERY_S`` until cancelled."""
        while True:
            await trio.sleep(PROGRESS_EVERY_S)
            self.send("progress", done())


def run_worker(conn: Connection, body: Callable[[WorkerLink], T]) -> None:
    """Run ``body`` (a worker's main), sending its result, or its traceback on failure."""
    link = WorkerLink(conn)
    try:
        result = body(link)
    except BaseException:  # noqa: BLE001 - every failure goes back to the parent
        link.send("error", traceback.format_exc())
        raise SystemExit(1) from None
    link.send("result", result)
    conn.close()


def now_ns() -> int:
    """Wall-clock nanoseconds (comparable between processes on one machine)."""
    return time.time_ns()
