"""Every kind of handler a push consumer accepts is called and its result honoured: besides
plain functions and ``async def`` functions, an object whose ``__call__`` is ``async def``
(runs in the loop), an unhashable callable object (a dataclass instance), and a
plain function that returns a coroutine (the ``Handler`` type allows an awaitable result).

Before, the object with an ``async def __call__`` was called in a worker thread and its
coroutine never awaited (every message counted as failed and was sent back, again and again),
a plain function's coroutine likewise, and an unhashable handler crashed the consumer
(``TypeError: unhashable type`` from the handler-kind cache).
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from client.aio import ConsumeFrom, MessageQueue, PushConsumer
from client.consume_service import ConsumeResult
from client.message import ReceivedMessage
from tests.broker.inprocess import wait_until
from tests.client.inproc_cluster import cluster
from tests.client.test_push_close_abandon import send
from tests.client.test_push_close_bounds import committed


@dataclass
class Recorder:
    """Unhashable (a dataclass with ``eq``): records the bodies it is handed."""

    got: list[bytes] = field(default_factory=list)

    def __call__(self, msgs: list[ReceivedMessage]) -> ConsumeResult:
        return self.handle(msgs)

    def handle(self, msgs: list[ReceivedMessage]) -> ConsumeResult:
        self.got.extend(m.body for m in msgs)
        return ConsumeResult.SUCCESS

    async def handle_async(self, msgs: list[ReceivedMessage]) -> ConsumeResult:
        return self.handle(msgs)


class AsyncCall:
    """A handler object whose ``__call__`` is ``async def``."""

    def __init__(self, recorder: Recorder) -> None:
        self.recorder = recorder

    async def __call__(self, msgs: list[ReceivedMessage]) -> ConsumeResult:
        return self.recorder.handle(msgs)


def returning_coroutine(
    recorder: Recorder,
) -> Callable[[list[ReceivedMessage]], Coroutine[Any, Any, ConsumeResult]]:
    """A plain function that returns its result as a coroutine."""
    return lambda msgs: recorder.handle_async(msgs)


KINDS: dict[str, Callable[[Recorder], Any]] = {
    "async-call-object": AsyncCall,
    "unhashable-object": lambda r: r,
    "plain-function-returning-a-coroutine": returning_coroutine,
}


@pytest.mark.parametrize("orderly", [False, True], ids=["concurrent", "orderly"])
@pytest.mark.parametrize("kind", list(KINDS))
async def test_every_kind_of_handler_consumes(tmp_path: Path, kind: str, orderly: bool) -> None:
    topic, group = "HandlerKinds", "cg_handler_kinds"
    mq = MessageQueue(topic, "broker-a", 0)
    recorder = Recorder()
    async with cluster(tmp_path, brokers=("broker-a",)) as c:
        await c.create_topic(topic, queues=1)
        await send(c.namesrv, topic, 3)
        async with PushConsumer(
            group, c.namesrv, consume_from=ConsumeFrom.FIRST_OFFSET, orderly=orderly
        ) as consumer:
            consumer.subscribe(topic, "*", KINDS[kind](recorder))
            await wait_until(lambda: len(recorder.got) == 3, "three messages consumed")
        assert recorder.got == [b"m0", b"m1", b"m2"]
        assert await committed(c.namesrv, group, [mq]) == [3]  # none failed
