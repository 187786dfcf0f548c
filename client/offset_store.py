"""Where a push consumer keeps its progress (RocketMQ's ``OffsetStore``).

- :class:`RemoteOffsetStore` (``CLUSTERING``): the offsets live on each queue's broker. Local
  updates go to a table; :meth:`RemoteOffsetStore.persist` sends them
  (``UPDATE_CONSUMER_OFFSET``) every ``persist_interval`` and when a queue is dropped or the
  consumer closes.
- :class:`LocalFileOffsetStore` (``BROADCASTING``): every member keeps its own offsets in
  ``<dir>/<client id>/<group>/offsets.json`` (written atomically, with a ``.bak``), because
  each member reads every message. The consumer opens it at start (RocketMQ's ``load()``):
  it claims the directory with a POSIX lock (``lockf``) on ``offsets.lock`` (a second live
  member with the same path, here or in another process, is refused; the lock belongs to the
  process, so a forked child never holds it: the parent's ``close()`` releases the directory
  whatever its children do) and reads the table, so a file that cannot be read fails the
  start. A table never loaded is never written, and a failed write is logged and retried at
  the next persist (the offsets stay in memory), as RocketMQ does.

``update(mq, offset, increase_only=True)`` never moves an offset backwards unless told to
(a reset does).
"""

from __future__ import annotations

import fcntl
import logging
import os
import threading
from collections.abc import Iterable
from pathlib import Path
from typing import Final, Protocol

import trio

from client import api
from client.errors import CLIENT_ERROR, MQClientError
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

    table: dict[MessageQueue, int]
    """The offsets recorded here (``mqadmin consumerStatus`` shows them)."""

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

    def close(self) -> None:
        """Release what the store holds (after the last persist)."""
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

    def close(self) -> None:
        """Nothing to release: the offsets live on the brokers."""

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


def check_start_position(consume_from: object, consume_timestamp_ms: object) -> None:
    """ValueError for a ``consume_from`` that is not a :class:`ConsumeFromWhere` member, or a
    ``consume_timestamp_ms`` that is not None or a whole number of milliseconds >= 0.

    A name given as a string (``"CONSUME_FROM_FIRST_OFFSET"``) used to be taken and crash the
    consumer's first heartbeat; a float timestamp was refused by the broker at every rebalance,
    and RocketMQ's ``yyyyMMddHHmmss`` string was read as milliseconds (far in the future)."""
    if not isinstance(consume_from, ConsumeFromWhere):
        names = ", ".join(f"ConsumeFromWhere.{m.name}" for m in ConsumeFromWhere)
        raise ValueError(f"consume_from must be one of {names}, got {consume_from!r}")
    if consume_timestamp_ms is not None and (
        isinstance(consume_timestamp_ms, bool)
        or not isinstance(consume_timestamp_ms, int)
        or consume_timestamp_ms < 0
    ):
        raise ValueError(
            "consume_timestamp_ms must be a whole number of milliseconds since the epoch "
            f"(>= 0; RocketMQ's yyyyMMddHHmmss string is not taken), got {consume_timestamp_ms!r}"
        )


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


def _decode_table(doc: object) -> dict[MessageQueue, int]:
    """An ``offsets.json`` document -> its table; ValueError if it has the wrong shape."""
    table = doc.get("offsetTable") if isinstance(doc, dict) else None
    if not isinstance(table, dict):
        raise ValueError("expected a map with an 'offsetTable' map")
    decoded: dict[MessageQueue, int] = {}
    for key, offset in table.items():
        mq = _parse_key(str(key))
        if mq is None or not isinstance(offset, int) or isinstance(offset, bool) or offset < 0:
            raise ValueError(f"bad offsetTable entry {key!r}: {offset!r}")
        decoded[mq] = offset
    return decoded


LOCK_FILE_NAME: Final = "offsets.lock"
"""The file in a group's offsets directory whose lock marks the directory in use."""

_held: dict[str, LocalFileOffsetStore] = {}
"""The directories this process's stores hold (resolved paths): a POSIX lock never refuses
its own process, so a second store here is refused by this table."""
_held_lock = threading.Lock()


def _forget_locks_in_child() -> None:
    """After a fork, in the child: the parent's stores hold nothing here (a POSIX lock is not
    inherited); close their copied descriptors. The table lock may have been held by another
    thread of the parent at the fork: start afresh."""
    global _held_lock
    stores = list(_held.values())
    _held.clear()
    _held_lock = threading.Lock()
    for store in stores:
        store.forget_lock()


os.register_at_fork(after_in_child=_forget_locks_in_child)


def _in_use(directory: Path, where: str) -> MQClientError:
    return MQClientError(
        CLIENT_ERROR,
        f"the broadcasting offsets in {directory} are in use by another consumer of this group "
        f"{where}; give each member its own instance_name",
    )


class LocalFileOffsetStore:
    """Offsets in a local file per client id and group (broadcasting)."""

    def __init__(self, client_id: str, group: str, directory: Path | None = None) -> None:
        base = DEFAULT_LOCAL_OFFSET_DIR if directory is None else Path(directory)
        safe_id = client_id.replace("/", "_").replace("#", "_").replace(":", "_")
        self.path = base / safe_id / group / "offsets.json"
        self.table: dict[MessageQueue, int] = {}
        self._loaded = False
        self._written: dict[MessageQueue, int] | None = None
        """The table as last written (None: not written by this store yet)."""
        self._lock_fd: int | None = None
        self._held_key: str | None = None
        """The directory's key in ``_held`` while this store holds it."""
        self._write_lock = trio.Lock()

    def open(self) -> None:
        """Claim the directory and load the table (blocking: run it in a thread).

        Raises :class:`MQClientError` when another live consumer holds the directory, or when
        the directory or the file cannot be read (the file and its ``.bak`` both corrupt).
        """
        directory = self.path.parent
        try:
            directory.mkdir(parents=True, exist_ok=True)
            key = os.path.realpath(directory)
        except OSError as exc:
            raise self._unusable(exc) from exc
        with _held_lock:
            if key in _held:
                raise _in_use(directory, "in this process")
            _held[key] = self  # before the lock file is opened: see _lock
            self._held_key = key
        self._lock()
        try:
            self.load()
        except (OSError, ValueError) as exc:
            self.close()
            raise MQClientError(
                CLIENT_ERROR, f"cannot load the broadcasting offsets: {exc}"
            ) from exc

    def _lock(self) -> None:
        """Take the POSIX lock of the directory's lock file (``lockf``). Such a lock belongs to
        the process: a forked child does not share it, so the parent's :meth:`close` releases
        the directory whatever its children do. Closing any descriptor of the file releases the
        process's lock, so only the store in ``_held`` ever opens it."""
        directory = self.path.parent
        try:
            fd = os.open(directory / LOCK_FILE_NAME, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as exc:
            self._release_key()
            raise self._unusable(exc) from exc
        try:
            fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            self._release_key()
            raise _in_use(directory, "on this host") from None
        self._lock_fd = fd

    def _unusable(self, exc: OSError) -> MQClientError:
        return MQClientError(
            CLIENT_ERROR,
            f"cannot use the broadcasting offsets directory {self.path.parent}: {exc}",
        )

    def _release_key(self) -> None:
        """Give the directory up in this process's table."""
        key, self._held_key = self._held_key, None
        with _held_lock:
            if key is not None and _held.get(key) is self:
                del _held[key]

    def close(self) -> None:
        """Release the directory (idempotent)."""
        self.forget_lock()  # closing the descriptor releases the process's lock
        self._release_key()  # after: a store opened here meanwhile would lose its lock

    def forget_lock(self) -> None:
        """Close this process's descriptor of the directory lock."""
        fd, self._lock_fd = self._lock_fd, None
        if fd is not None:
            os.close(fd)

    def load(self) -> None:
        """Read the file (or its ``.bak``); a missing file means no offsets yet. ValueError
        when both are corrupt; OSError when they cannot be read."""
        for mq, offset in (load_json(self.path, _decode_table) or {}).items():
            self.table.setdefault(mq, offset)
        self._loaded = True

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

        Nothing is written before the file was loaded (an empty table would replace the
        offsets a restarted member has not read yet) or when the table did not change. A
        failed write (a full disk, a removed directory) is logged and the table kept: the
        next persist tries again. One write at a time (a periodic persist, a dropped queue's
        and the closing one may overlap): two worker threads would share the temporary files,
        and an older table could land last. The table is read once the lock is held, so the
        last write is the newest."""
        del mqs
        if not self._loaded:
            return
        async with self._write_lock:
            table = dict(self.table)
            if table == self._written:
                return
            doc = {"offsetTable": {_key(mq): off for mq, off in sorted(table.items())}}
            try:
                await trio.to_thread.run_sync(self._write, doc)
            except OSError as exc:
                log.warning("persisting broadcasting offsets to %s failed: %s", self.path, exc)
                return
            self._written = table

    def _write(self, doc: dict[str, dict[str, int]]) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        write_json_atomic(self.path, doc, _decode_table)

    async def overtaken(self, mq: MessageQueue) -> bool:
        """Never: each broadcasting member alone writes its offsets."""
        del mq
        return False

    def remove(self, mq: MessageQueue) -> None:
        """Broadcasting keeps every queue's offset; nothing to forget."""
