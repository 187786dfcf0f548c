"""The broker's transaction state: decisions (END_TRANSACTION) and the check service
(RocketMQ's ``TransactionalMessageServiceImpl`` + ``TransactionalMessageCheckService``).

::

    end_transaction   look up the half record by commitlog offset, check topic, queue offset and
                      PGROUP; an undecided key is settled by ONE atomic put: commit = [the real
                      message, op "commit"], rollback = [op "rollback"]; UNKNOW only logs
    run               check_once every transactionCheckInterval ms
    check_once        read the op queue (new decisions), then the half queue from its progress
                      (both in steps of READ_STEP records, with a checkpoint between two), in
                      order; each undecided latest copy of a key:
                      - younger than transactionTimeOut, without CHECK_IMMUNITY_TIME_IN_SECONDS:
                        the round stops there (RocketMQ's "check it later" break);
                      - younger than its CHECK_IMMUNITY_TIME_IN_SECONDS: re-stored unchecked (same
                        key, same TRANSACTION_CHECK_TIMES) and passed, as RocketMQ's
                        putImmunityMsgBackToHalfQueue: it never holds the progress;
                      - otherwise moved to TRANS_CHECK_MAX_TIME_TOPIC with op "discard"
                        (TRANSACTION_CHECK_TIMES >= transactionCheckMax) or re-stored with
                        TRANSACTION_CHECK_TIMES + 1 and its producer group asked
                        (CHECK_TRANSACTION_STATE, oneway, to one live producer connection; with
                        none alive the round counts all the same, so a vanished group's half
                        messages reach the limit, as in RocketMQ)

State and its rules (keys: see :mod:`broker.transaction.messages`):

- ``half_progress``: every half record below it is done (decided, superseded by a later copy
  of its key, or discarded). It never passes a pending record, nor one whose decision is
  being stored while the round reads it (that put may yet fail: the record then stays
  pending), so a restart checks again everything still pending.
- ``half_read_end`` and ``window_keys``: the half queue's end when the last round (or the
  load) read it, and the keys of every half record at or after ``half_progress`` (the copies a
  round re-stored included). A key below ``half_read_end`` and not in ``window_keys`` has no
  copy left that is not done: it is decided. A pending message, inside its immunity or checked
  again and again, is re-stored past the progress with its key, so it stays in
  ``window_keys`` and holds nothing else: ops of the keys decided meanwhile are forgotten and
  the op progress moves past them (RocketMQ moves its op progress past every op of a half
  offset below the half progress).
- ``decided``: keys with an op (commit / rollback / discard) that are still in
  ``window_keys`` or not below ``half_read_end``; the others are forgotten, with their ops. So
  it holds what the last round could not pass yet, not what was decided since the oldest
  pending message. A key is decided at most once: a second END_TRANSACTION, or one racing a
  discard, is ignored.
- Both progresses are the consumer offsets of ``CID_SYS_RMQ_TRANS`` on the half and op queues
  (persisted with the other offsets, consistently, by the controller); on start the decisions
  are re-read from the op progress.
- The real message and its op are stored in one put (real message first): an acknowledged
  commit is delivered exactly once, also across restarts; with SYNC_FLUSH the answer waits for
  the flush.
"""

from __future__ import annotations

import itertools
import logging
from collections import deque
from collections.abc import Callable, Generator
from typing import Final

import trio

from broker.client_manager import ClientManager
from broker.consumer_offset import ConsumerOffsetManager
from broker.transaction import messages as tx
from common.clock import wall_clock_ms
from common.digits import parse_uint
from common.message import MessageConst, MessageSysFlag
from common.message_id import create_offset_msg_id
from common.record import MessageRecord, RecordError, decode_record
from common.topic import TRANS_HALF_TOPIC, TRANS_OP_HALF_TOPIC
from remoting.channel import Channel
from remoting.codes import RequestCode
from remoting.command import ExtValue, RemotingCommand
from remoting.errors import RemotingError
from remoting.transaction_bodies import HalfMessage
from store import GetStatus, MessageStore, PutResult
from store.index_service import run_steps
from store.services import StoreServices

log = logging.getLogger(__name__)

READ_BATCH: Final = 32
READ_STEP: Final = 512
"""Records read and decoded from a queue (or looked at by a round) between two checkpoints:
a long half or op queue never holds the event loop in one stretch."""
CHECK_SEND_TIMEOUT_S: Final = 3.0
"""Upper bound of one oneway CHECK_TRANSACTION_STATE send."""


class EndOutcome:
    """What an END_TRANSACTION did (answer code is derived by the processor)."""

    COMMITTED: Final = "committed"
    ROLLED_BACK: Final = "rolled back"
    IGNORED: Final = "ignored"
    """Already decided (or being decided): nothing stored."""
    UNKNOWN: Final = "unknown"
    """commitOrRollback was TRANSACTION_NOT_TYPE: only logged."""


class TransactionService:
    """Decides and checks half messages; see the module docstring."""

    def __init__(
        self,
        store: MessageStore,
        services: StoreServices,
        offsets: ConsumerOffsetManager,
        producers: ClientManager[Channel],
        *,
        timeout_ms: int = 6000,
        check_max: int = 15,
        check_interval_ms: int = 30_000,
        transform: Callable[[MessageRecord], object] | None = None,
        clock_ms: Callable[[], int] = wall_clock_ms,
    ) -> None:
        self.store = store
        self.services = services
        self.offsets = offsets
        self.producers = producers
        self.timeout_ms = timeout_ms
        self.check_max = check_max
        self.check_interval_ms = check_interval_ms
        self.transform = transform
        """Applied to a committed message before its put (delay levels, as RocketMQ)."""
        self.clock_ms = clock_ms
        self.decided: dict[int, str] = {}
        self.half_read_end = 0
        """The half queue's end when the last round (or the load) read it."""
        self.window_keys: set[int] = set()
        """Keys of the half records at or after :attr:`half_progress` (re-stored copies too)."""
        self.checks_sent = 0
        self.discarded = 0
        self._deciding: set[int] = set()
        self._superseded: set[int] = set()
        self._unread_copies: dict[int, int] = {}
        """Queue offset -> key of the copies the rounds re-stored that no round read yet (the
        consume queue may not list them yet): their keys stay in :attr:`window_keys`."""
        self._op_read = 0
        self._op_log: deque[tuple[int, int]] = deque()
        self._round_robin = itertools.count()
        self.load()

    # ------------------------------------------------------------------ progress

    def _progress(self, topic: str) -> int:
        stored = self.offsets.query_offset(tx.SYS_TRANS_GROUP, topic, 0)
        return max(stored, self.store.get_min_offset_in_queue(topic, 0))

    @property
    def half_progress(self) -> int:
        """Every half record below this queue offset is done."""
        return self._progress(TRANS_HALF_TOPIC)

    @property
    def op_progress(self) -> int:
        """Ops below this queue offset concern keys decided and passed by the rounds."""
        return self._progress(TRANS_OP_HALF_TOPIC)

    def _commit(self, topic: str, offset: int) -> None:
        self.offsets.commit_offset(tx.SYS_TRANS_GROUP, topic, 0, offset)

    def load(self) -> None:
        """Re-read the decisions from the op progress and the window keys from the half
        progress."""
        self.decided.clear()
        self._op_log.clear()
        self._op_read = self.op_progress
        self._read_ops()
        window, self.half_read_end = self._read_half(self.half_progress)
        self.window_keys = {tx.key_of(rec) for _, rec in window}

    # ------------------------------------------------------------------ reading queues

    def _read_step(
        self, topic: str, start: int, stop: int
    ) -> tuple[list[tuple[int, MessageRecord]], int]:
        """Up to READ_STEP decoded ``(queue offset, record)`` of queue 0 of ``topic`` from
        ``start`` and below ``stop``, and the offset to read next (``start``: nothing more)."""
        out: list[tuple[int, MessageRecord]] = []
        offset = start
        while offset < stop and len(out) < READ_STEP:
            result = self.store.get_messages(topic, 0, offset, READ_BATCH)
            if result.status is not GetStatus.FOUND:
                if result.next_begin_offset > offset:  # removed or filtered: skip ahead
                    offset = min(result.next_begin_offset, stop)
                    continue
                break
            for raw, queue_offset in zip(result.records, result.queue_offsets, strict=True):
                if queue_offset >= stop:
                    break
                try:
                    out.append((queue_offset, decode_record(raw)))
                except RecordError:
                    log.exception("%s offset %d unreadable; skipped", topic, queue_offset)
            offset = min(result.next_begin_offset, stop)
        return out, offset

    def _queue_steps(
        self, topic: str, start: int
    ) -> Generator[None, None, tuple[list[tuple[int, MessageRecord]], int]]:
        """Decoded ``(queue offset, record)`` of queue 0 of ``topic`` from ``start`` to the end
        it has now, and the offset after the last one read; yields after each step of
        READ_STEP records."""
        stop = self.store.get_max_offset_in_queue(topic, 0)
        out: list[tuple[int, MessageRecord]] = []
        offset = start
        while True:
            step, after = self._read_step(topic, offset, stop)
            out.extend(step)
            if after == offset:
                return out, offset
            offset = after
            yield

    def _read_queue(self, topic: str, start: int) -> tuple[list[tuple[int, MessageRecord]], int]:
        """:meth:`_queue_steps` in one go (loading, listing)."""
        return run_steps(self._queue_steps(topic, start))

    async def _read_queue_in_steps(
        self, topic: str, start: int
    ) -> tuple[list[tuple[int, MessageRecord]], int]:
        """:meth:`_queue_steps` with a checkpoint after each step."""
        steps = self._queue_steps(topic, start)
        while True:
            try:
                next(steps)
            except StopIteration as done:
                result: tuple[list[tuple[int, MessageRecord]], int] = done.value
                return result
            await trio.lowlevel.checkpoint()

    def _read_half(self, start: int) -> tuple[list[tuple[int, MessageRecord]], int]:
        return self._read_queue(TRANS_HALF_TOPIC, start)

    def _read_ops_step(self, stop: int) -> bool:
        """Add up to READ_STEP ops stored since the last read to :attr:`decided`; False when
        there was nothing more below ``stop``. Reads and moves the op read offset at once, so
        concurrent readers never add one op twice."""
        ops, after = self._read_step(TRANS_OP_HALF_TOPIC, self._op_read, stop)
        if after <= self._op_read:
            return False
        self._op_read = after
        for offset, rec in ops:
            key = tx.op_key(rec)
            if key is not None:
                self.decided.setdefault(key, rec.properties.get(tx.OP_KIND, "removed"))
                self._op_log.append((offset, key))
        return True

    def _read_ops(self) -> None:
        """Add the ops stored since the last read to :attr:`decided` (in one go)."""
        stop = self.store.get_max_offset_in_queue(TRANS_OP_HALF_TOPIC, 0)
        while self._read_ops_step(stop):
            pass

    async def _read_ops_in_steps(self) -> None:
        """:meth:`_read_ops` with a checkpoint after each step of READ_STEP ops."""
        stop = self.store.get_max_offset_in_queue(TRANS_OP_HALF_TOPIC, 0)
        while self._read_ops_step(stop):
            await trio.lowlevel.checkpoint()

    def is_decided(self, key: int) -> bool:
        """True when ``key`` is settled (or being settled right now)."""
        return key in self.decided or key in self._deciding or self._passed(key)

    def _passed(self, key: int) -> bool:
        """True when every copy of ``key`` lies below the half progress: it is done."""
        return key < self.half_read_end and key not in self.window_keys

    # ------------------------------------------------------------------ END_TRANSACTION

    async def end_transaction(self, rec: MessageRecord, commit_or_rollback: int) -> str:
        """Settle the half record ``rec`` (already validated by the caller); an EndOutcome.

        Raises ValueError when a commit's half record has no valid REAL_TOPIC / REAL_QID, and
        :class:`PutFailedError` when the store refused the put.
        """
        key = tx.key_of(rec)
        if commit_or_rollback == MessageSysFlag.TRANSACTION_NOT_TYPE:
            return EndOutcome.UNKNOWN
        if self.is_decided(key):
            return EndOutcome.IGNORED
        commit = commit_or_rollback == MessageSysFlag.TRANSACTION_COMMIT_TYPE
        if commit:
            real = tx.commit_record(rec)
            if real is None:
                raise ValueError("the half message has no valid REAL_TOPIC / REAL_QID")
            if self.transform is not None:
                self._transform(real)
            batch = [real, tx.op_record(rec, tx.OP_COMMIT)]
        else:
            batch = [tx.op_record(rec, tx.OP_ROLLBACK)]
        kind = tx.OP_COMMIT if commit else tx.OP_ROLLBACK
        await self._settle(key, kind, batch)
        return EndOutcome.COMMITTED if commit else EndOutcome.ROLLED_BACK

    def _transform(self, real: MessageRecord) -> None:
        """The send path's transform of a committed message; a DELAY it refuses (a half message
        stored before the send path checked it) is dropped, so the commit still delivers."""
        assert self.transform is not None
        try:
            self.transform(real)
        except ValueError as exc:
            log.warning("committed message %s: %s; delivered without delay", real.uniq_key, exc)
            real.properties.pop(MessageConst.DELAY, None)
            self.transform(real)

    async def _settle(self, key: int, kind: str, batch: list[MessageRecord]) -> PutResult:
        """Store ``batch`` (ending with the op) and mark ``key`` decided; uncancellable."""
        self._deciding.add(key)
        try:
            with trio.CancelScope(shield=True):  # stored => marked decided
                result = await self.services.put_messages(batch)
            if not result.status.ok:
                raise PutFailedError(result)
            self.decided[key] = kind
            return result
        finally:
            self._deciding.discard(key)

    # ------------------------------------------------------------------ the check service

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """:meth:`check_once` every ``check_interval_ms``; never returns."""
        task_status.started()
        while True:
            await trio.sleep(self.check_interval_ms / 1000)
            try:
                await self.check_once()
            except PutFailedError as exc:
                log.warning("transaction check round stopped: %s; retrying next round", exc)
            except Exception:  # a bad round must not take the broker down
                log.exception("transaction check round failed; retrying next round")

    async def check_once(self) -> None:
        """One round over the half queue; see the module docstring."""
        await self._read_ops_in_steps()
        start = self.half_progress
        window, end = await self._read_queue_in_steps(TRANS_HALF_TOPIC, start)
        latest = {tx.key_of(rec): offset for offset, rec in window}
        now = self.clock_ms()
        progress = end
        being_decided: int | None = None
        for index, (offset, rec) in enumerate(window):
            if index % READ_STEP == READ_STEP - 1:
                await trio.lowlevel.checkpoint()
            key = tx.key_of(rec)
            if latest[key] != offset or offset in self._superseded:
                continue
            if key in self._deciding and being_decided is None:
                being_decided = offset  # its put may yet fail: the progress must not pass it
            if self.is_decided(key):
                continue
            if not await self._check_one(offset, rec, now):
                progress = offset  # too young: this one and everything after wait
                break
        if being_decided is not None:
            progress = min(progress, being_decided)
        progress = max(start, progress)
        keys = {tx.key_of(rec) for offset, rec in window if offset >= progress}
        self._advance(progress, max(end, progress), keys)

    def _advance(self, half_progress: int, read_end: int, window_keys: set[int]) -> None:
        """Move the half progress and the window; forget the decisions (and pass the ops) of
        the keys it passed."""
        self._commit(TRANS_HALF_TOPIC, half_progress)
        self._superseded = {o for o in self._superseded if o >= half_progress}
        self.half_read_end = max(self.half_read_end, read_end)
        # a re-stored copy lies past the progress, even when its key was decided meanwhile (a
        # commit landing during the re-store): its key stays until a round passes the copy
        unread = {o: k for o, k in self._unread_copies.items() if o >= self.half_read_end}
        self._unread_copies = unread
        self.window_keys = window_keys.union(unread.values())
        for key in [k for k in self.decided if self._passed(k)]:
            del self.decided[key]
        while self._op_log and self._passed(self._op_log[0][1]):
            self._commit(TRANS_OP_HALF_TOPIC, self._op_log.popleft()[0] + 1)
        if not self._op_log:
            self._commit(TRANS_OP_HALF_TOPIC, self._op_read)

    def _immunity_s(self, rec: MessageRecord) -> int | None:
        """CHECK_IMMUNITY_TIME_IN_SECONDS of a half record; None when absent or malformed."""
        return parse_uint(rec.properties.get(MessageConst.CHECK_IMMUNITY_TIME_IN_SECONDS))

    async def _check_one(self, offset: int, rec: MessageRecord, now: int) -> bool:
        """Check, discard or (inside its immunity) renew one pending latest copy; True when it
        is done with, False when it is too young to be checked yet."""
        age = now - rec.born_timestamp
        immunity_s = self._immunity_s(rec)
        if immunity_s is None:
            if 0 <= age < self.timeout_ms:
                return False
        elif 0 <= age < immunity_s * 1000:
            await self._renew(offset, tx.renewed_record(rec, checked=False))
            return True
        key = tx.key_of(rec)
        if tx.check_times(rec) >= self.check_max:
            moved = [tx.discarded_record(rec), tx.op_record(rec, tx.OP_DISCARD)]
            await self._settle(key, tx.OP_DISCARD, moved)
            self.discarded += 1
            log.warning(
                "half message %s (group %s, key %d) checked %d times without a decision; "
                "moved to TRANS_CHECK_MAX_TIME_TOPIC",
                rec.uniq_key,
                rec.properties.get(MessageConst.PGROUP),
                key,
                tx.check_times(rec),
            )
            return True
        result = await self._renew(offset, tx.renewed_record(rec))
        group = rec.properties.get(MessageConst.PGROUP, "")
        channel = self._pick_producer(group)
        if channel is None:  # the round counts all the same, as RocketMQ's: the limit applies
            log.info("no live producer of group %s to check %s", group, rec.uniq_key)
        else:
            await self._send_check(channel, rec, result)
        return True

    async def _renew(self, offset: int, copy: MessageRecord) -> PutResult:
        """Store ``copy`` of the half record at ``offset``, which it supersedes."""
        result = await self.services.put_message(copy)
        if not result.status.ok:
            raise PutFailedError(result)
        self._superseded.add(offset)
        self._unread_copies[result.queue_offsets[0]] = tx.key_of(copy)
        return result

    def _pick_producer(self, group: str) -> Channel | None:
        """One live producer connection of ``group`` (round robin), or None."""
        live = [
            info.channel
            for _, info in sorted(self.producers.producers.get(group, {}).items())
            if not info.channel.closed
        ]
        return live[next(self._round_robin) % len(live)] if live else None

    async def _send_check(self, channel: Channel, rec: MessageRecord, put: PutResult) -> None:
        """CHECK_TRANSACTION_STATE for the re-stored copy; failures are logged."""
        phys, queue_offset = put.phys_offsets[0], put.queue_offsets[0]
        body = self.store.lookup_message_by_offset(phys) or b""
        host, port = self.store.config.store_host
        uniq = rec.uniq_key or ""
        fields: dict[str, ExtValue] = {
            "topic": rec.properties.get(MessageConst.REAL_TOPIC, ""),
            "tranStateTableOffset": str(queue_offset),
            "commitLogOffset": str(phys),
            "msgId": uniq,
            "transactionId": uniq,
            "offsetMsgId": create_offset_msg_id(host, port, phys),
        }
        cmd = RemotingCommand.request(RequestCode.CHECK_TRANSACTION_STATE, fields, body, opaque=0)
        try:
            with trio.fail_after(CHECK_SEND_TIMEOUT_S):
                await channel.invoke_oneway(cmd)
            self.checks_sent += 1
        except (RemotingError, OSError, trio.TooSlowError, trio.BrokenResourceError,
                trio.ClosedResourceError) as exc:  # fmt: skip
            log.warning("check of %s to %s failed: %r", uniq, channel.remote_addr, exc)

    # ------------------------------------------------------------------ listing

    def pending(self, group: str | None = None) -> list[HalfMessage]:
        """The undecided half messages (latest copies), of ``group`` or of every group; reads
        the queues in one go (:meth:`list_pending` does it in steps)."""
        window, _ = self._read_half(self.half_progress)
        self._read_ops()
        return self._pending_of(window, group)

    async def list_pending(self, group: str | None = None) -> list[HalfMessage]:
        """:meth:`pending`, reading the queues in steps with checkpoints between them."""
        window, _ = await self._read_queue_in_steps(TRANS_HALF_TOPIC, self.half_progress)
        await self._read_ops_in_steps()
        return self._pending_of(window, group)

    def _pending_of(
        self, window: list[tuple[int, MessageRecord]], group: str | None
    ) -> list[HalfMessage]:
        latest = {tx.key_of(rec): offset for offset, rec in window}
        host, port = self.store.config.store_host
        out: list[HalfMessage] = []
        for offset, rec in window:
            key = tx.key_of(rec)
            pgroup = rec.properties.get(MessageConst.PGROUP, "")
            if self.is_decided(key) or latest[key] != offset or offset in self._superseded:
                continue
            if group is not None and pgroup != group:
                continue
            dest = tx.real_destination(rec) or ("", -1)
            out.append(
                HalfMessage(
                    pgroup,
                    dest[0],
                    dest[1],
                    rec.uniq_key or "",
                    create_offset_msg_id(host, port, rec.physical_offset),
                    offset,
                    rec.physical_offset,
                    key,
                    tx.check_times(rec),
                    rec.born_timestamp,
                    rec.store_timestamp,
                )
            )
        return out


class PutFailedError(Exception):
    """The store refused a transaction put."""

    def __init__(self, result: PutResult) -> None:
        super().__init__(f"put failed: {result.status.value} {result.remark}")
        self.result = result
