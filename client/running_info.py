"""What a consumer answers when an admin asks it through a broker (RocketMQ's
``ClientRemotingProcessor.getConsumerRunningInfo`` / ``consumeMessageDirectly``): its running
info (``mqadmin consumerStatus``) and the outcome of its handler on one message sent to it
(``mqadmin queryMsgById -g group -d clientId``).

Rules:

- The running info is a snapshot of the consumer's existing state, taken in the loop with no
  lock: the properties, the subscriptions, and one :class:`ProcessQueueInfo` per assigned
  queue. Times are ms since the epoch (the process queues keep trio's clock; the snapshot
  converts), 0 for never. The per-topic RT/TPS figures (``statusTable``) come from the
  instance's :mod:`client.consumer_stats`, one row per subscribed topic.
- Asked for ``jstack``, the info carries the stacks of every Python thread of the process
  (:func:`thread_stacks`) and, since a trio program's concurrency lives in tasks rather than
  threads, where each task of the client's trio loop is waiting (:func:`trio_task_stacks`):
  at most :data:`JSTACK_MAX_CHARS` characters in all.
- Consuming directly runs the topic's handler on that one message, exactly once, and reports
  how it ended; nothing else happens: no offset is recorded or committed, a failure is not
  sent back, nothing enters a process queue (RocketMQ's ``consumeMessageDirectly``). A
  message of the group's retry topic reaches the handler with its original topic, as in
  normal consumption. A plain-function handler runs in a worker thread of its own, an
  ``async def`` one in the loop.
"""

from __future__ import annotations

import inspect
import sys
import threading
import time
import traceback
from collections.abc import Awaitable, Callable, Sequence
from typing import Final

import trio

from client.consume_service import ConsumeResult, Handler, is_async_handler
from client.consumer_stats import ConsumerStatsManager
from client.message import MessageQueue, ReceivedMessage
from client.process_queue import ProcessQueue
from common.subscription import SubscriptionData
from remoting.consumer_bodies import (
    CMResult,
    ConsumeMessageDirectlyResult,
    ConsumerRunningInfo,
    ConsumeStatus,
    ProcessQueueInfo,
)

MIB = 1024 * 1024
JSTACK_MAX_CHARS: Final = 256 * 1024
"""The most characters of thread stacks one running info carries (a process with thousands of
threads or deep recursion must not make a huge answer)."""

RunningInfoSource = Callable[[], ConsumerRunningInfo]
"""Gives a consumer's running info (registered with the client instance)."""
DirectConsumer = Callable[[ReceivedMessage], Awaitable[ConsumeMessageDirectlyResult]]
"""Consumes one message directly (registered with the client instance)."""


def epoch_offset_ms() -> int:
    """What to add to a time of trio's clock (in ms) to make it ms since the epoch."""
    return int(time.time() * 1000) - int(trio.current_time() * 1000)


def process_queue_info(
    mq: MessageQueue,
    pq: ProcessQueue,
    commit_offset: int | None,
    epoch_offset: int,
    *,
    uses_locks: bool,
) -> ProcessQueueInfo:
    """One assigned queue's row (``commit_offset`` None: nothing recorded yet, shown -1).
    ``locked`` and ``lastLockTimestamp`` say what the broker lock does only for a consumer
    that ``uses_locks`` (orderly clustering); otherwise they are false and 0, as RocketMQ's."""
    low, high = pq.cached_offsets()

    def wall(ms: int) -> int:
        return ms + epoch_offset if ms > 0 else 0

    return ProcessQueueInfo(
        mq.topic,
        mq.broker_name,
        mq.queue_id,
        commit_offset=-1 if commit_offset is None else commit_offset,
        cached_msg_min_offset=low,
        cached_msg_max_offset=high,
        cached_msg_count=pq.count,
        cached_msg_size_in_mib=pq.size_bytes // MIB,
        locked=pq.locked and uses_locks,
        last_lock_timestamp=wall(pq.last_lock_ms) if uses_locks else 0,
        droped=pq.dropped,
        last_pull_timestamp=wall(pq.last_pull_ms),
        last_consume_timestamp=wall(pq.last_consume_ms),
    )


def consume_status_table(
    stats: ConsumerStatsManager, group: str, subscriptions: Sequence[SubscriptionData]
) -> dict[str, ConsumeStatus]:
    """The ``statusTable``: each subscribed topic's figures now (RocketMQ's
    ``consumerRunningInfo`` asks ``consumeStatus`` for each subscription)."""
    now = trio.current_time()
    return {s.topic: stats.consume_status(group, s.topic, now) for s in subscriptions}


def thread_stacks(max_chars: int = JSTACK_MAX_CHARS) -> str:
    """The stack of every Python thread of this process, innermost call last, in the shape
    of RocketMQ's ``UtilAll.jstack``: a line ``<name> TID: <ident> DAEMON: <bool>`` then
    one line per frame, each led by the thread's name, and a blank line; then, when called
    in a trio loop, :func:`trio_task_stacks`. Cut at ``max_chars`` with a last line saying
    how much was left out."""
    threads = {t.ident: t for t in threading.enumerate()}
    parts: list[str] = []
    for ident, frame in sorted(sys._current_frames().items()):
        thread = threads.get(ident)
        name = thread.name if thread is not None else f"thread-{ident}"
        daemon = str(thread.daemon).lower() if thread is not None else "unknown"
        lines = [f"{name:<40}TID: {ident} DAEMON: {daemon}"]
        lines.extend(
            f"{name:<40}{fs.name}({fs.filename}:{fs.lineno})"
            for fs in traceback.extract_stack(frame)
        )
        parts.append("\n".join(lines) + "\n\n")
    parts.append(trio_task_stacks())
    text = "".join(parts)
    if len(text) <= max_chars:
        return text
    return text[:max_chars] + f"\n... {len(text) - max_chars} more characters left out\n"


def trio_task_stacks() -> str:
    """Where every task of the running trio loop waits, outermost call first: a line
    ``<task name> TASK: <n> PARENT: <parent's n>`` (numbered depth first from the root
    task, 0), one line per awaiting frame led by the task's name, and a blank line.
    Empty outside a trio loop. The calling task shows the frames up to this call."""
    try:
        root = trio.lowlevel.current_root_task()
    except RuntimeError:
        return ""
    if root is None:
        return ""
    parts: list[str] = []
    todo: list[tuple[trio.lowlevel.Task, int]] = [(root, -1)]
    number = 0
    while todo:
        task, parent = todo.pop()
        name = _short_task_name(task.name)
        lines = [f"{name:<40} TASK: {number} PARENT: {parent}"]
        lines.extend(
            f"{name:<40} {frame.f_code.co_name}({frame.f_code.co_filename}:{lineno})"
            for frame, lineno in task.iter_await_frames()
        )
        parts.append("\n".join(lines) + "\n\n")
        children = [t for n in task.child_nurseries for t in n.child_tasks]
        todo.extend((child, number) for child in reversed(children))
        number += 1
    return "".join(parts)


def _short_task_name(name: str) -> str:
    """A task's name without the ``<locals>`` noise trio's default names carry."""
    return name.replace(".<locals>", "")


async def consume_directly(
    handler: Handler, msg: ReceivedMessage, *, order: bool
) -> ConsumeMessageDirectlyResult:
    """Run ``handler([msg])`` once and say how it ended (see the module rules)."""
    began = trio.current_time()
    try:
        result, remark = _cm_result(await _call(handler, msg)), ""
    except Exception as exc:  # noqa: BLE001 - reported to the admin, as RocketMQ's
        result, remark = CMResult.CR_THROW_EXCEPTION, f"{type(exc).__name__}: {exc}"
    spent = int((trio.current_time() - began) * 1000)
    return ConsumeMessageDirectlyResult(order, True, result, remark, spent)


async def _call(handler: Handler, msg: ReceivedMessage) -> object:
    """``handler([msg])``: in a worker thread unless it is ``async def``; an awaitable it
    returns is awaited in the loop."""
    if is_async_handler(handler):
        result: object = handler([msg])
    else:
        result = await trio.to_thread.run_sync(handler, [msg], abandon_on_cancel=True)
    if inspect.isawaitable(result):
        result = await result
    return result


def _cm_result(result: object) -> CMResult:
    """RocketMQ's mapping: SUCCESS -> CR_SUCCESS, RECONSUME_LATER -> CR_LATER, nothing ->
    CR_RETURN_NULL (here None also counts as SUCCESS in normal consumption)."""
    if result is None:
        return CMResult.CR_RETURN_NULL
    if result is ConsumeResult.SUCCESS:
        return CMResult.CR_SUCCESS
    if result is ConsumeResult.RECONSUME_LATER:
        return CMResult.CR_LATER
    raise TypeError(f"handler returned {result!r}, not a ConsumeResult")
