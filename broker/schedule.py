"""Delayed messages (RocketMQ's ``HookUtils.transformDelayLevelMessage`` and
``ScheduleMessageService``).

::

    put path   message with DELAY=n (n > 0; clamped to the last level)
               --transform_delay_message--> SCHEDULE_TOPIC_XXXX queue n-1,
               REAL_TOPIC / REAL_QID = the real destination (DELAY kept)
    run        one task per level + persist_loop
    ├─ level n  read SCHEDULE_TOPIC_XXXX queue n-1 from offsetTable[n]; each message whose
    │           store_timestamp + delay(n) <= now is re-stored in REAL_TOPIC / REAL_QID
    │           (DELAY removed; body, flag, sysFlag, born fields, reconsume times, other
    │           properties and UNIQ_KEY kept), then offsetTable[n] moves past it; the first
    │           message not yet due puts the task to sleep until it is (or until a wakeup)
    └─ persist_loop  writes config/delayOffset.json every flushDelayOffsetInterval ms if changed

Rules:

- Only plain and committed messages are delayed (transaction prepared/rollback ones never).
- A level's offset advances only after its re-stored message is stored (the put and the
  advance run under one shield, so cancellation cannot split them). The file is written every
  flush interval and at shutdown (:meth:`ScheduleMessageService.persist`, called by the
  controller once the tasks have stopped), so a clean restart neither loses nor repeats a
  delivery. A crash between a re-store and the next persist re-delivers those messages after
  the restart: at-least-once, as RocketMQ.
- A failed re-store (store full, not running) is retried after :data:`RETRY_AFTER_FAILURE_S`;
  a schedule message without a valid REAL_TOPIC / REAL_QID is logged and skipped.
- The store's arrival listener (:meth:`ScheduleMessageService.notify`) wakes a level's task when
  its queue grows; with no wakeup a task re-reads every :data:`IDLE_RECHECK_S`.
- "now" comes from the injected ``clock_ms``; the store stamps ``store_timestamp`` with its own
  clock, so both must be the same wall clock in production. A message due later than now plus
  its level's delay can only have been stored before the clock was stepped back: it is due at
  once (RocketMQ's ``correctDeliverTimestamp``), so a backward step never holds deliveries
  back by the size of the step.
- ``GET_ALL_DELAY_OFFSET`` (45) answers the ``delayOffset.json`` document as a msgpack body.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Final

import msgpack
import trio

from broker.json_store import load_json, write_json_atomic
from common.clock import wall_clock_ms
from common.digits import parse_uint
from common.message import MessageConst, MessageSysFlag
from common.record import MessageRecord, RecordError, decode_record
from common.topic import SCHEDULE_TOPIC
from remoting.channel import Channel, Handler
from remoting.codes import RequestCode, ResponseCode
from remoting.command import RemotingCommand
from remoting.headers import guarded
from store import GetStatus, MessageStore
from store.services import StoreServices

log = logging.getLogger(__name__)

DELAY_OFFSET_FILE: Final = "delayOffset.json"
READ_BATCH: Final = 32
IDLE_RECHECK_S: Final = 1.0
"""Safety-net re-read period of an idle level (arrivals normally wake it at once)."""
RETRY_AFTER_FAILURE_S: Final = 10.0
"""Pause before retrying a failed re-store (RocketMQ's ``DELAY_FOR_A_PERIOD``)."""


def delay_level_of(msg: MessageRecord) -> int:
    """The DELAY property as an int (0 when absent); ValueError when not an integer."""
    return delay_level_in(msg.properties)


def delay_level_in(properties: Mapping[str, str]) -> int:
    """:func:`delay_level_of` a message with these properties."""
    raw = properties.get(MessageConst.DELAY)
    if raw is None or raw == "":
        return 0
    try:
        return int(raw)
    except ValueError:
        raise ValueError(f"the DELAY property {raw!r} is not an integer") from None


def transform_delay_message(msg: MessageRecord, max_level: int) -> bool:
    """Redirect a delayed message to the schedule topic in place; True when it was delayed.

    The level is clamped to ``max_level``; REAL_TOPIC / REAL_QID keep the real destination.
    ValueError when DELAY is not an integer, for a half (prepared) message too: its commit
    applies the DELAY, and a commit must not fail on what the send could have refused.
    """
    level = delay_level_of(msg)
    tx = MessageSysFlag.transaction_value(msg.sys_flag)
    if tx not in (MessageSysFlag.TRANSACTION_NOT_TYPE, MessageSysFlag.TRANSACTION_COMMIT_TYPE):
        return False
    if level <= 0:
        return False
    if level > max_level:
        level = max_level
        msg.properties[MessageConst.DELAY] = str(level)
    msg.properties[MessageConst.REAL_TOPIC] = msg.topic
    msg.properties[MessageConst.REAL_QID] = str(msg.queue_id)
    msg.topic = SCHEDULE_TOPIC
    msg.queue_id = level - 1
    return True


def corrected_due_ms(store_timestamp: int, delay_ms: int, now_ms: int) -> int:
    """When a message stored at ``store_timestamp`` on a level of ``delay_ms`` is due: then
    plus the delay, or now if that is more than the delay away (the clock went back since)."""
    due = store_timestamp + delay_ms
    return now_ms if due > now_ms + delay_ms else due


def delivery_record(rec: MessageRecord) -> MessageRecord | None:
    """The message to re-store for a due schedule record; None when it has no valid target."""
    props = dict(rec.properties)
    real_topic = props.get(MessageConst.REAL_TOPIC)
    try:
        real_qid = int(props.get(MessageConst.REAL_QID, ""))
    except ValueError:
        return None
    if not real_topic or real_qid < 0:
        return None
    props.pop(MessageConst.DELAY, None)
    return MessageRecord(
        real_topic,
        rec.body,
        queue_id=real_qid,
        flag=rec.flag,
        properties=props,
        sys_flag=rec.sys_flag,
        born_timestamp=rec.born_timestamp,
        born_host=rec.born_host,
        reconsume_times=rec.reconsume_times,
        prepared_transaction_offset=rec.prepared_transaction_offset,
    )


class ScheduleMessageService:
    """Delivers delayed messages when due; see the module docstring."""

    def __init__(
        self,
        store: MessageStore,
        services: StoreServices,
        levels_ms: Sequence[int],
        config_dir: Path,
        *,
        flush_interval_ms: int = 10_000,
        clock_ms: Callable[[], int] = wall_clock_ms,
    ) -> None:
        if not levels_ms:
            raise ValueError("at least one delay level is needed")
        self.store = store
        self.services = services
        self.levels_ms = tuple(levels_ms)
        self.config_dir = Path(config_dir)
        self.flush_interval_ms = flush_interval_ms
        self.clock_ms = clock_ms
        self.offsets: dict[int, int] = {}
        """Level -> next logical offset to read in its schedule queue."""
        self.dirty = False
        self.next_due_ms: dict[int, int] = {}
        """Level -> due time of the first message not yet delivered (while one waits)."""
        self.last_check_ms: dict[int, int] = {}
        """Level -> the clock when the level last found its head not yet due."""
        self.delivered = 0
        """Messages re-stored since start."""
        self._wakeups: dict[int, trio.Event] = {}
        self.load()

    @property
    def max_level(self) -> int:
        """The highest delay level (the number of levels)."""
        return len(self.levels_ms)

    @property
    def path(self) -> Path:
        """``<config_dir>/delayOffset.json``."""
        return self.config_dir / DELAY_OFFSET_FILE

    def transform(self, msg: MessageRecord) -> bool:
        """:func:`transform_delay_message` with this broker's last level."""
        return transform_delay_message(msg, self.max_level)

    # ------------------------------------------------------------------ wakeups

    def notify(self, topic: str, queue_id: int, next_offset: int) -> None:
        """Arrival listener: wake the level whose schedule queue grew."""
        if topic == SCHEDULE_TOPIC:
            event = self._wakeups.get(queue_id + 1)
            if event is not None:
                event.set()

    def wakeup(self) -> None:
        """Wake every level (e.g. after a test moved an injected clock)."""
        for event in self._wakeups.values():
            event.set()

    # ------------------------------------------------------------------ tasks

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Run the level tasks and the persist loop until cancelled."""
        async with trio.open_nursery() as nursery:
            for level in range(1, self.max_level + 1):
                self._wakeups[level] = trio.Event()
                nursery.start_soon(self._level_loop, level)
            nursery.start_soon(self._persist_loop)
            task_status.started()

    async def _level_loop(self, level: int) -> None:
        while True:
            wait_s = await self.deliver_due(level)
            event = self._wakeups[level]
            with trio.move_on_after(IDLE_RECHECK_S if wait_s is None else wait_s):
                await event.wait()
            if event.is_set():
                self._wakeups[level] = trio.Event()

    async def deliver_due(self, level: int) -> float | None:
        """Re-store the due messages at the head of ``level``'s queue.

        Returns the seconds until the head is due, 0 to read again at once, or None when the
        queue has nothing left to read.
        """
        offset = self.offsets.get(level, 0)
        result = self.store.get_messages(SCHEDULE_TOPIC, level - 1, offset, READ_BATCH)
        if result.status is not GetStatus.FOUND:
            if result.next_begin_offset != offset:
                self._advance(level, result.next_begin_offset)  # moved or removed: skip ahead
                return 0.0
            return None
        self.next_due_ms.pop(level, None)
        delay = self.levels_ms[level - 1]
        for raw, queue_offset in zip(result.records, result.queue_offsets, strict=True):
            try:
                rec = decode_record(raw)
            except RecordError:
                log.exception("schedule level %d offset %d unreadable; skipped", level, offset)
                self._advance(level, queue_offset + 1)
                continue
            now = self.clock_ms()
            due = corrected_due_ms(rec.store_timestamp, delay, now)
            if due > now:
                self.next_due_ms[level] = due
                self.last_check_ms[level] = now
                return (due - now) / 1000
            if not await self._deliver(level, rec, queue_offset):
                return RETRY_AFTER_FAILURE_S
        return 0.0

    async def _deliver(self, level: int, rec: MessageRecord, queue_offset: int) -> bool:
        """Re-store one due message and advance the level past it; False if the put failed."""
        msg = delivery_record(rec)
        if msg is None:
            log.error(
                "schedule level %d offset %d has no valid REAL_TOPIC/REAL_QID; skipped",
                level,
                queue_offset,
            )
            self._advance(level, queue_offset + 1)
            return True
        with trio.CancelScope(shield=True):  # stored => advanced, even on shutdown
            result = await self.services.put_message(msg)
            if not result.status.ok:
                log.warning(
                    "re-storing delayed message (level %d offset %d) failed: %s; retrying",
                    level,
                    queue_offset,
                    result.status.value,
                )
                return False
            self.delivered += 1
            self._advance(level, queue_offset + 1)
        return True

    def _advance(self, level: int, offset: int) -> None:
        if self.offsets.get(level) != offset:
            self.offsets[level] = offset
            self.dirty = True

    async def _persist_loop(self) -> None:
        while True:
            await trio.sleep(self.flush_interval_ms / 1000)
            doc = self.take_dirty_snapshot()
            if doc is None:
                continue
            try:
                await trio.to_thread.run_sync(write_json_atomic, self.path, doc, self._decode)
            except OSError:
                self.dirty = True
                log.exception("persisting delay offsets failed; retrying next period")

    # ------------------------------------------------------------------ persistence

    def to_wire(self) -> dict[str, Any]:
        """RocketMQ's ``delayOffset.json`` document: ``{"offsetTable": {"level": offset}}``."""
        return {"offsetTable": {str(lvl): off for lvl, off in sorted(self.offsets.items())}}

    def take_dirty_snapshot(self) -> dict[str, Any] | None:
        """The document to write if something changed (clearing :attr:`dirty`), else None."""
        if not self.dirty:
            return None
        self.dirty = False
        return self.to_wire()

    def persist(self) -> None:
        """Write ``delayOffset.json`` atomically (previous file kept as ``.bak``)."""
        write_json_atomic(self.path, self.to_wire(), self._decode)
        self.dirty = False

    def load(self) -> bool:
        """Replace the table with ``delayOffset.json``; False when neither it nor its ``.bak``
        exists.

        A file that does not parse or has the wrong shape is skipped for its ``.bak``;
        ValueError when neither loads.
        """
        loaded = load_json(self.path, self._decode)
        if loaded is None:
            return False
        self.offsets = loaded
        self.dirty = False
        return True

    @staticmethod
    def _decode(doc: object) -> dict[int, int]:
        """A delay offsets document -> its table; ValueError if it has the wrong shape."""
        table = doc.get("offsetTable") if isinstance(doc, dict) else None
        if not isinstance(table, dict):
            raise ValueError("expected a map with an 'offsetTable' map")
        loaded: dict[int, int] = {}
        for level, offset in table.items():
            number = parse_uint(str(level), max_digits=9)
            bad = not isinstance(offset, int) or isinstance(offset, bool) or offset < 0
            if number is None or bad:
                raise ValueError(f"bad entry {level!r}: {offset!r}")
            loaded[number] = offset
        return loaded

    # ------------------------------------------------------------------ requests

    async def get_all_delay_offset(
        self, request: RemotingCommand, channel: Channel
    ) -> RemotingCommand:
        """GET_ALL_DELAY_OFFSET: the offset table as msgpack ``{"offsetTable": {...}}``."""
        body: bytes = msgpack.packb(self.to_wire(), use_bin_type=True)
        return RemotingCommand.response_to(request, ResponseCode.SUCCESS, body=body)

    def handlers(self) -> dict[int, Handler]:
        """The ``{request code: handler}`` table."""
        return {int(RequestCode.GET_ALL_DELAY_OFFSET): guarded(self.get_all_delay_offset)}
