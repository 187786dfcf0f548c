"""Where a push consumer keeps its progress (RocketMQ's ``OffsetStore``).

- :class:`RemoteOffsetStore` (``CLUSTERING``): the offsets live on each queue's broker. Local
  updates go to a table; :meth:`RemoteOffsetStore.persist` sends them
  (``UPDATE_CONSUMER_OFFSET``) every ``persist_interval`` and when a queue is dropped or the
  consumer closes.
- :class:`LocalFileOffsetStore` (``BROADCASTING``): every member keeps its own offsets in
  ``<dir>/<client id>/<group>/offsets.json`` (written atomically, with a ``.bak``), because
  each member reads every message.

``update(mq, offset, increase_only=True)`` never moves an offset backwards unless told to
(a reset does).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from pathlib import Path
from typing import Final, Protocol

import trio

from client import api
from client.errors import MQClientError
from client.instance import ClientInstance
from client.message import MessageQueue
from common.clock import wall_clock_ms
from common.digits import parse_uint
from common.json_store import load_json, write_json_atomic
from remoting.client_bodies import ConsumeFromWhere
from remoting.codes import RequestCode

log = logging.getLogger(__name__)

DEFAULT_LOCAL_OFFSET_DIR = Path.home() / ".minimq_offsets"


class OffsetStore(Protocol):
    """What the push consumer needs of an offset store."""

    async def read(self, mq: MessageQueue) -> int | None:
        """The stored offset of ``mq`` (None: the group has none)."""
        ...

    def update(self, mq: MessageQueue, offset: int, *, increase_only: bool = True) -> None:
        """Record progress locally."""
        ...

    async def persist(self, mqs: Iterable[MessageQueue]) -> None:
        """Make the recorded progress of ``mqs`` durable."""
        ...

    def remove(self, mq: MessageQueue) -> None:
        """Forget ``mq`` (after it was persisted and released)."""
        ...

    async def overtaken(self, mq: MessageQueue) -> bool:
        """True when the stored offset of ``mq`` is past the one recorded here: another member
        consumed further while this one was stalled, so ours must not be written back."""
        ...


class RemoteOffsetStore:
    """Offsets on the brokers (clustering)."""

    def __init__(self, instance: ClientInstance, group: str) -> None:
        self.instance = instance
        self.group = group
        self.table: dict[MessageQueue, int] = {}
        self._persisted: dict[MessageQueue, int] = {}

    async def _query(self, mq: MessageQueue) -> int | None:
        """The broker's committed offset (QUERY_CONSUMER_OFFSET; None: the group has none)."""
        addr = await self.instance.find_broker_addr(mq)
        resp = await self.instance.invoke(addr, api.query_offset_request(self.group, mq))
        return api.parse_query_offset(resp, addr)

    async def read(self, mq: MessageQueue) -> int | None:
        """The broker's committed offset; remembered locally."""
        offset = await self._query(mq)
        if offset is not None:
            self.table[mq] = offset
            self._persisted[mq] = offset
        return offset

    def update(self, mq: MessageQueue, offset: int, *, increase_only: bool = True) -> None:
        """Record ``offset`` for ``mq``."""
        if offset < 0:
            return
        current = self.table.get(mq)
        if current is None or not increase_only or offset > current:
            self.table[mq] = offset

    async def persist(self, mqs: Iterable[MessageQueue]) -> None:
        """Send every changed offset of ``mqs`` to its broker, concurrently; failures logged."""
        async with trio.open_nursery() as nursery:
            for mq in mqs:
                offset = self.table.get(mq)
                if offset is not None and self._persisted.get(mq) != offset:
                    nursery.start_soon(self._persist_one, mq, offset)

    async def _persist_one(self, mq: MessageQueue, offset: int) -> None:
        try:
            addr = await self.instance.find_broker_addr(mq)
            resp = await self.instance.invoke(
                addr, api.update_offset_request(self.group, mq, offset)
            )
            api.check_success(resp, addr)
        except MQClientError as exc:
            log.warning("persisting offset %d of %s for %s failed: %s", offset, mq, self.group, exc)
            return
        self._persisted[mq] = offset

    def remove(self, mq: MessageQueue) -> None:
        """Forget ``mq``."""
        self.table.pop(mq, None)
        self._persisted.pop(mq, None)

    async def overtaken(self, mq: MessageQueue) -> bool:
        """True when the broker's committed offset is past ours (asked of the broker; False
        when it cannot be asked)."""
        ours = self.table.get(mq)
        if ours is None:
            return False
        try:
            theirs = await self._query(mq)
        except MQClientError as exc:
            log.warning("cannot check the committed offset of %s for %s: %s", mq, self.group, exc)
            return False
        return theirs is not None and theirs > ours


CONSUME_TIMESTAMP_BACK_MS: Final = 30 * 60 * 1000
"""RocketMQ's default ``consumeTimestamp``: half an hour before the consumer was made."""


def default_consume_timestamp_ms(given: int | None) -> int:
    """``given``, or half an hour ago (for ``CONSUME_FROM_TIMESTAMP`` without a timestamp)."""
    return wall_clock_ms() - CONSUME_TIMESTAMP_BACK_MS if given is None else given


async def offset_from_where(
    instance: ClientInstance,
    mq: MessageQueue,
    consume_from: ConsumeFromWhere,
    timestamp_ms: int = 0,
) -> int:
    """Where a group with no stored offset starts reading ``mq`` (``computePullFromWhere``):
    its first offset, the first one stored at or after ``timestamp_ms``, or its end."""
    if consume_from is ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET:
        return await instance.broker_offset(RequestCode.GET_MIN_OFFSET, mq)
    if consume_from is ConsumeFromWhere.CONSUME_FROM_TIMESTAMP:
        return await instance.broker_offset(
            RequestCode.SEARCH_OFFSET_BY_TIMESTAMP, mq, timestamp_ms
        )
    return await instance.broker_offset(RequestCode.GET_MAX_OFFSET, mq)


def _key(mq: MessageQueue) -> str:
    return f"{mq.topic}@{mq.broker_name}@{mq.queue_id}"


def _parse_key(key: str) -> MessageQueue | None:
    topic, _, rest = key.partition("@")
    broker, _, qid = rest.rpartition("@")
    queue_id = parse_uint(qid, max_digits=9)
    if not topic or not broker or queue_id is None:
        return None
    return MessageQueue(topic, broker, queue_id)


class LocalFileOffsetStore:
    """Offsets in a local file per client id and group (broadcasting)."""

    def __init__(self, client_id: str, group: str, directory: Path | None = None) -> None:
        base = DEFAULT_LOCAL_OFFSET_DIR if directory is None else Path(directory)
        safe_id = client_id.replace("/", "_").replace("#", "_").replace(":", "_")
        self.path = base / safe_id / group / "offsets.json"
        self.table: dict[MessageQueue, int] = {}
        self._loaded = False
        self._write_lock = trio.Lock()

    def load(self) -> None:
        """Read the file (or its ``.bak``); a missing file means no offsets yet."""
        self._loaded = True
        doc = load_json(self.path)
        table = doc.get("offsetTable", {}) if isinstance(doc, dict) else {}
        for key, offset in table.items():
            mq = _parse_key(str(key))
            if mq is not None and isinstance(offset, int) and offset >= 0:
                self.table[mq] = offset

    async def read(self, mq: MessageQueue) -> int | None:
        """The offset from the file (loaded once)."""
        if not self._loaded:
            await trio.to_thread.run_sync(self.load)
        return self.table.get(mq)

    def update(self, mq: MessageQueue, offset: int, *, increase_only: bool = True) -> None:
        """Record ``offset`` for ``mq``."""
        if offset < 0:
            return
        current = self.table.get(mq)
        if current is None or not increase_only or offset > current:
            self.table[mq] = offset

    async def persist(self, mqs: Iterable[MessageQueue]) -> None:
        """Write the whole table (``mqs`` are all in it) atomically, off the event loop.

        One write at a time (a periodic persist, a dropped queue's and the closing one may
        overlap): two worker threads would share the temporary files, and an older table
        could land last. The table is read once the lock is held, so the last write is the
        newest."""
        del mqs
        async with self._write_lock:
            doc = {"offsetTable": {_key(mq): off for mq, off in sorted(self.table.items())}}
            await trio.to_thread.run_sync(self._write, doc)

    def _write(self, doc: dict[str, dict[str, int]]) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        write_json_atomic(self.path, doc)

    async def overtaken(self, mq: MessageQueue) -> bool:
        """Never: each broadcasting member alone writes its offsets."""
        del mq
        return False

    def remove(self, mq: MessageQueue) -> None:
        """Broadcasting keeps every queue's offset; nothing to forget."""
