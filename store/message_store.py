"""MessageStore: the facade the broker drives (RocketMQ's ``DefaultMessageStore``).

Synchronous and free of trio: appends never block on disk, and everything that does
(``flush_commitlog``, ``flush_logics``) is safe to run in a worker thread while the event loop
keeps putting and reading. ``store.services`` is the trio shell that runs the background loops.
"""

from __future__ import annotations

import bisect
import contextlib
import fcntl
import logging
import os
import struct
import threading
import time
from collections.abc import Callable, Generator, Iterable, Sequence
from pathlib import Path
from typing import Any, cast

from common.digits import parse_uint
from common.errors import caused_by
from common.message import MessageConst, MessageSysFlag
from common.record import MessageRecord, decode_record, pack_host
from common.topic_attributes import CQType
from store import batch_get, recovery, retention
from store.batch_consume_queue import BatchConsumeQueue
from store.checkpoint import StoreCheckpoint
from store.commitlog import CommitLog
from store.config import StoreConfig
from store.consume_queue import CQ_STORE_UNIT_SIZE, UNIT, ConsumeQueue
from store.consume_queue_interface import ConsumeQueueInterface
from store.deleted_topics import FILE_NAME as DELETED_TOPICS_FILE
from store.deleted_topics import DeletedTopics
from store.dispatch_request import DispatchRequest
from store.errors import CorruptFileError, MappedFileCreateError, StoreLockedError
from store.index_service import IndexService, run_steps
from store.mapped_file import create_directories, fsync_directory, sync_directory_entries
from store.status import GetResult, GetStatus, PutResult, PutStatus, QueryResult

log = logging.getLogger(__name__)

ArrivalListener = Callable[[str, int, int], None]
"""Called as ``listener(topic, queue_id, next_offset)`` after new units are dispatched."""

_BLANK_SIZE = 0x7FFFFFFF
_BATCH_CQ = CQType.BATCH_CQ
_STORE_TS = struct.Struct(">q")


def wall_clock_ms() -> int:
    """Milliseconds since the epoch."""
    return time.time_ns() // 1_000_000


class MessageStore:
    """Commitlog, consume queues, index and checkpoint under one root directory."""

    def __init__(
        self,
        config: StoreConfig,
        *,
        clock_ms: Callable[[], int] = wall_clock_ms,
        disk_usage: Callable[[Path], float] | None = None,
    ) -> None:
        self.config = config
        self.clock_ms = clock_ms
        self.disk_usage = disk_usage or retention.disk_usage_ratio
        self.commitlog = CommitLog(config, clock_ms)
        self.index = IndexService(config, clock_ms)
        self.checkpoint: StoreCheckpoint
        self.cq_table: dict[tuple[str, int], ConsumeQueueInterface] = {}
        self.queue_types: dict[str, CQType] = {}
        """Topics' queue types (:meth:`set_queue_type`); a topic not here is SimpleCQ."""
        self.deleted_topics = DeletedTopics(config.store_path_root_dir / DELETED_TOPICS_FILE)
        self.dead_units_dropped = 0
        self._units_deleted = 0  # units of deleted topics' queues, for flush_logics' count
        """Units of stale queues of deleted topics that open() removed (recovery counts them)."""
        self.dropped_unreadable_queue = False
        """True when open() removed a queue of a deleted topic without a readable unit: it may
        have been the queue of the topic created again, so recovery re-dispatches everything."""
        self.reput_offset = 0
        self.last_dispatched_timestamp = 0
        self.arrival_listener: ArrivalListener | None = None
        self.put_listener: Callable[[], None] | None = None
        self.messages_put = 0
        """Messages stored since open (RocketMQ's ``putMessageTimesTotal``)."""
        self.messages_transferred = 0
        """Messages handed to readers since open (``getMessageTransferedMsgCount``)."""
        self.running = False
        self.disk_full = False
        self.retention_stop = threading.Event()
        """Set to end a retention pass at its next pause between two file deletions
        (``StoreServices`` sets it while stopping, so a long pause does not hold it up)."""
        self.logics_cleaned_below = 0
        """The commitlog minimum the consume queues and index were last cleaned below
        (:func:`store.retention.clean_logics_if_moved`)."""
        self.flush_error: str | None = None
        """Why a commitlog flush failed (an ``OSError`` of ``fdatasync``), once one has: from
        then on puts are refused until a restart, because what the page cache held may never
        reach the disk and a retried flush cannot be trusted to say so."""
        self.dispatch_error: str | None = None
        """Why the last dispatch round failed (a consume-queue or index file that cannot be
        created); puts are refused while it is set."""
        self.dispatch_ns = 0
        """Time spent in :meth:`dispatch_pending` calls that dispatched something (ns)."""
        self.dispatch_calls = 0
        """:meth:`dispatch_pending` calls that dispatched something."""
        self.last_exit_ok = True
        self.recovered_range = (0, 0)
        """Commitlog range the last recovery walked (verified and re-dispatched)."""
        self._dispatch_lock = threading.Lock()
        self.queues_lock = threading.Lock()
        """Held while a queue is removed, and by retention's thread around each queue."""
        self._lock_fd = -1

    # -- lifecycle -------------------------------------------------------------------------
    def open(self) -> MessageStore:
        """Lock the root, load every file, recover, and mark the store open (the abort file)."""
        root = self.config.store_path_root_dir
        new_dirs = create_directories(root)
        self._acquire_lock(root)
        try:
            self.last_exit_ok = not self.config.abort_path.exists()
            if not self.commitlog.queue.load():
                raise CorruptFileError(
                    self.config.commitlog_dir, "commitlog files are not contiguous"
                )
            self._load_consume_queues()
            self.deleted_topics.load()
            self.dead_units_dropped = self._drop_dead_queues()
            self.checkpoint = StoreCheckpoint(self.config.checkpoint_path)
            if self.config.message_index_enable:
                self.index.load(last_exit_ok=self.last_exit_ok, mark=self.checkpoint.index_mark)
            recovery.recover(self, last_exit_ok=self.last_exit_ok)
            if self.config.message_index_enable and self.checkpoint.index_file_name == 0:
                # a checkpoint from an older minimq, or none yet: the index is durable as it
                # is now (closed cleanly, or flushed by recovery), which the next checkpoint
                # write records, even one that is not flush_logics' (a topic deletion's)
                self.checkpoint.index_mark = self.index.durable_mark()
            self._write_abort_file()
            sync_directory_entries(new_dirs)  # a new root's name: before anything is acknowledged
        except BaseException:
            self._release_lock()
            raise
        self.running = True
        return self

    def close(self) -> None:
        """Dispatch what is pending, flush, write the checkpoint and remove the abort file."""
        if not self.running:
            return
        self.running = False
        clean = True
        try:
            while self.dispatch_pending():
                pass
        except MappedFileCreateError as exc:
            clean = False
            log.error("closing with undispatched messages (%s): next open will recover", exc)
        if not self._final_commitlog_flush():
            clean = False
        try:
            self.flush_logics()
        except OSError as exc:
            clean = False
            log.error(
                "closing without a final flush of the queues (%s): the next open recovers", exc
            )
        for cq in self.consume_queues():
            cq.close()
        self.index.close()
        self.commitlog.queue.close()
        self.checkpoint.close()
        if clean:
            with contextlib.suppress(FileNotFoundError):
                self.config.abort_path.unlink()
        self._release_lock()

    def _final_commitlog_flush(self) -> bool:
        """Flush the commitlog on close; False (the abort file stays, so the next open
        verifies the log) if that or an earlier flush failed."""
        try:
            self.flush_commitlog()
        except OSError as exc:
            self.flush_error = self.flush_error or str(exc)
            log.error("closing without a final commitlog flush (%s): next open will recover", exc)
        return self.flush_error is None

    def __enter__(self) -> MessageStore:
        return self.open()

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _acquire_lock(self, root: Path) -> None:
        fd = os.open(self.config.lock_path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise caused_by(StoreLockedError(root), None)
        os.write(fd, b"lock")
        self._lock_fd = fd

    def _release_lock(self) -> None:
        if self._lock_fd >= 0:
            os.close(self._lock_fd)
            self._lock_fd = -1

    def _write_abort_file(self) -> None:
        path = self.config.abort_path
        path.write_text(str(os.getpid()))
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        fsync_directory(path.parent)  # the abort file's name, and the checkpoint's if new

    def _load_consume_queues(self) -> None:
        """Load ``consumequeue/`` (SimpleCQ) and ``batchconsumequeue/`` (BatchCQ): a queue
        keeps the type of the directory it is found in."""
        for batch, root in (
            (False, self.config.consume_queue_dir),
            (True, self.config.batch_consume_queue_dir),
        ):
            if not root.is_dir():
                continue
            for topic_dir in sorted(root.iterdir()):
                if not topic_dir.is_dir():
                    continue
                for qdir in sorted(topic_dir.iterdir()):
                    queue_id = parse_uint(qdir.name, max_digits=9)
                    if queue_id is not None and qdir.is_dir():
                        self._load_queue(topic_dir.name, queue_id, batch=batch)

    def _load_queue(self, topic: str, queue_id: int, *, batch: bool) -> None:
        if (topic, queue_id) in self.cq_table:
            # both kinds on disk (a topic deleted and created again with the other type):
            # the SimpleCQ is kept, the other directory left alone
            log.warning("%s/%d: queues of both types on disk; using the SimpleCQ", topic, queue_id)
            return
        cq = self._new_consume_queue(topic, queue_id, batch=batch)
        cq.load()

    # -- consume queues --------------------------------------------------------------------
    def set_queue_type(self, topic: str, cq_type: CQType) -> None:
        """Make ``topic``'s new queues of ``cq_type`` (its ``queue.type`` attribute).

        The broker calls it for every topic at start and when a topic is created. Queues on
        disk keep the type of the directory they were loaded from. Inner-batch records are
        accepted only for BatchCQ topics. Also works before :meth:`open`, so that recovery
        creates lost queues with the right type (recovery also makes a queue BatchCQ when
        its first record is an inner batch).
        """
        self.queue_types[topic] = cq_type
        if cq_type is CQType.BATCH_CQ:
            self.commitlog.batch_topics.add(topic)
        else:
            self.commitlog.batch_topics.discard(topic)

    def queue_type(self, topic: str) -> CQType:
        """The type of ``topic``'s new queues (SimpleCQ unless :meth:`set_queue_type` said)."""
        return self.queue_types.get(topic, CQType.SIMPLE_CQ)

    def _new_consume_queue(
        self, topic: str, queue_id: int, *, batch: bool | None = None
    ) -> ConsumeQueueInterface:
        """Create (in memory) the queue of ``(topic, queue_id)``: BatchCQ when ``batch``, or
        when None and the topic is a BatchCQ topic."""
        if batch is None:
            batch = self.queue_types.get(topic) is CQType.BATCH_CQ
        cq: ConsumeQueueInterface
        if batch:
            cq = BatchConsumeQueue(
                self.config.batch_consume_queue_dir,
                topic,
                queue_id,
                self.config.mapper_file_size_batch_consume_queue,
            )
        else:
            cq = ConsumeQueue(
                self.config.consume_queue_dir,
                topic,
                queue_id,
                self.config.mapped_file_size_consume_queue,
            )
        self.cq_table[(topic, queue_id)] = cq
        return cq

    def _drop_dead_queues(self) -> int:
        """Remove what is left of the queues of deleted topics (a crash during a deletion can
        leave some); return the units they held. A queue of a topic created again after its
        deletion starts past the cut and stays; one without a readable unit cannot be told
        apart, so it goes and :attr:`dropped_unreadable_queue` makes recovery re-dispatch."""
        dropped = 0
        topics: set[str] = set()
        for (topic, queue_id), cq in list(self.cq_table.items()):
            cut = self.deleted_topics.cuts.get(topic)
            if cut is None:
                continue
            cq.recover()  # its valid units, as recovery would count them
            first = cq.unit_at(cq.min_offset) if cq.max_offset > cq.min_offset else None
            if first is None or first[0] < cut:
                log.warning("removing queue %s/%d of a deleted topic", topic, queue_id)
                self.dropped_unreadable_queue |= first is None
                dropped += cq.max_offset
                self._remove_queue(topic, queue_id)
                topics.add(topic)
        for topic in sorted(topics):
            self._sync_removed_queues(topic)
        return dropped

    def delete_topic(self, topic: str) -> int:
        """Drop ``topic``'s consume queues and queue offsets; return how many queues went.

        Its records stay in the commitlog until retention, dead (:mod:`store.deleted_topics`):
        neither dispatch nor recovery puts them into a queue again, and queries by key skip
        them. The deletion is durable before any file goes, and the checkpoint's unit count
        drops by the topic's units, so a crash at any point leaves no queue of it and costs no
        re-dispatch of the whole log. Sends to the topic afterwards start new queues at 0.

        Runs on the caller's thread (the broker's event loop): one ``fsync`` of the small
        deletion file, then the queue files' unlinks.
        """
        with self._dispatch_lock:
            table = self.commitlog.topic_queue_table
            queues = [k for k in self.cq_table if k[0] == topic]
            with self.commitlog.lock:  # no append between the cut and the offsets' reset
                cut = self.commitlog.max_offset
                # durable first: if it cannot be written (a full disk), nothing changed, and
                # sends to the topic go on at its offsets instead of restarting at 0 over the
                # queues still there
                self.deleted_topics.add(topic, cut)
                for key in [k for k in table if k[0] == topic]:
                    del table[key]
            units = sum(self.cq_table[k].max_offset for k in queues)
            self._units_deleted += units
            self.checkpoint.logics_unit_count = max(0, self.checkpoint.logics_unit_count - units)
            self.checkpoint.flush()
            for key in queues:
                self._remove_queue(*key)
            if queues:
                self._sync_removed_queues(topic)
        log.info("deleted topic %s: %d queues, records below %d dead", topic, len(queues), cut)
        return len(queues)

    def has_topic(self, topic: str) -> bool:
        """True when the store has a consume queue or a queue offset of ``topic``: plain or
        committed records of it were put (dispatched or not) and not deleted since."""
        return any(k[0] == topic for k in self.cq_table) or any(
            k[0] == topic for k in self.commitlog.topic_queue_table
        )

    def _remove_queue(self, topic: str, queue_id: int) -> None:
        """Forget a consume queue and delete its files and directory (durable once
        :meth:`_sync_removed_queues` ran for the topic)."""
        with self.queues_lock:
            cq = self.cq_table.pop((topic, queue_id))
            cq.destroy()
        directory = cq.queue.directory.parent
        try:
            (directory / str(queue_id)).rmdir()
        except OSError:
            cq.queue.sync_deletions()  # the directory stays (a stray file in it): its unlinks
            return
        with contextlib.suppress(OSError):
            directory.rmdir()  # fails while other queues of the topic remain

    def _sync_removed_queues(self, topic: str) -> None:
        """Make the removal of ``topic``'s queue directories durable, so that a power cut
        cannot bring a queue back: one sync of the directory that held the topmost one
        removed (the topic's, or ``consumequeue/`` once that went too), for each type."""
        for root in (self.config.consume_queue_dir, self.config.batch_consume_queue_dir):
            directory = root / topic
            if not directory.is_dir():
                directory = directory.parent
            if directory.is_dir():
                fsync_directory(directory)

    def find_consume_queue(self, topic: str, queue_id: int) -> ConsumeQueueInterface | None:
        """The consume queue of (topic, queue_id), if it exists."""
        return self.cq_table.get((topic, queue_id))

    def consume_queues(self) -> list[ConsumeQueueInterface]:
        """Every consume queue (a snapshot, safe to iterate from another thread)."""
        return list(self.cq_table.values())

    def set_store_host(self, host: str, port: int) -> None:
        """The address written into new records' STOREHOSTADDRESS (and their offset ids).

        A broker asked for port 0 learns its port only once listening; it calls this before
        serving its first request.
        """
        self.config.store_host = (host, port)
        self.commitlog.store_host = pack_host(host, port)

    # -- puts ------------------------------------------------------------------------------
    def put_message(self, msg: MessageRecord) -> PutResult:
        """Store one message; see :meth:`put_messages`."""
        return self.put_messages((msg,))

    def put_messages(self, msgs: Sequence[MessageRecord]) -> PutResult:
        """Store ``msgs`` as one atomic batch; the status says whether and why not.

        The result's ``end_offset`` is what a SYNC_FLUSH caller must wait to see flushed.
        """
        if (
            not self.running
            or self.disk_full
            or self.flush_error
            or self.dispatch_error
            or not msgs
        ):
            return self._refusal()
        result = self.commitlog.append(msgs)
        if result.status is PutStatus.PUT_OK:
            self.messages_put += len(msgs)
            if self.put_listener is not None:
                self.put_listener()
        return result

    @property
    def write_refusal(self) -> str | None:
        """Why every put is refused right now (not running, disk full, a failed flush), or
        None while the store takes writes."""
        if not self.running:
            return "the store is not running"
        if self.disk_full:
            return "the disk is full"
        if self.flush_error:
            return (
                f"the commitlog could not be flushed ({self.flush_error}): "
                "writes are refused until the broker restarts"
            )
        if self.dispatch_error:
            # RocketMQ's makeLogicsQueueError: messages nobody could read must not be
            # acknowledged; writes resume once a dispatch round gets through
            return (
                f"consume queue or index files cannot be created ({self.dispatch_error}; "
                "the broker's log names the file)"
            )
        return None

    def _refusal(self) -> PutResult:
        """Why a put is refused before it reaches the commitlog."""
        reason = self.write_refusal
        if reason is not None:
            return PutResult(PutStatus.SERVICE_NOT_AVAILABLE, remark=reason)
        return PutResult(PutStatus.MESSAGE_ILLEGAL, remark="no messages")

    # -- dispatch (reput) ------------------------------------------------------------------
    def dispatch_pending(self, max_batch: int = 8192) -> int:
        """Put appended records into consume queues and the index, about ``max_batch`` at most.

        Whole runs (see :mod:`store.dispatch_request`) are taken until ``max_batch`` records
        are reached, so one call may dispatch a little more. Returns how many records were
        dispatched. On a full disk the runs go back to the front of the pending list and
        :class:`MappedFileCreateError` propagates; dispatch is idempotent, so a later call
        redoes it safely.
        """
        with self._dispatch_lock:
            pending = self.commitlog.pending_dispatch
            with self.commitlog.lock:
                taken = count = 0
                for run in pending:
                    taken += 1
                    count += len(run.sizes)
                    if count >= max_batch:
                        break
                batch = pending[:taken]
                del pending[:taken]
            if not batch:
                return 0
            t0 = time.perf_counter_ns()
            try:
                self.dispatch(batch)
            except BaseException as exc:
                with self.commitlog.lock:
                    pending[:0] = batch
                if isinstance(exc, MappedFileCreateError):
                    # the reason only: the refusal goes to clients, the path to the log
                    self.dispatch_error = exc.reason
                raise
            self.dispatch_error = None
            self.dispatch_ns += time.perf_counter_ns() - t0
            self.dispatch_calls += 1
            return count

    @property
    def dispatch_behind(self) -> int:
        """Appended records not yet dispatched."""
        return sum([len(run.sizes) for run in self.commitlog.pending_dispatch])

    def dispatch(self, runs: Sequence[DispatchRequest], *, allow_gap: bool = False) -> None:
        """Write ``runs`` (commitlog order) into consume queues and the index."""
        last = runs[-1]
        if self.deleted_topics.cuts:
            dead = self.deleted_topics.is_dead
            runs = [run for run in runs if not dead(run.topic, run.phys_offset)]
        groups: dict[tuple[str, int], list[DispatchRequest]] = {}
        mask, commit = MessageSysFlag.TRANSACTION_MASK, MessageSysFlag.TRANSACTION_COMMIT_TYPE
        for run in runs:
            tx = run.sys_flag & mask  # only plain and committed messages are consumable
            if tx == 0 or tx == commit:
                key = (run.topic, run.queue_id)
                group = groups.get(key)
                if group is None:
                    groups[key] = group = []
                group.append(run)
        for (topic, queue_id), group in groups.items():
            cq = self.cq_table.get((topic, queue_id))
            if cq is None:
                # an inner batch can only be a BatchCQ topic's (a lost queue, re-dispatched
                # by recovery before the broker said the topic's type)
                batch = group[0].sys_flag & MessageSysFlag.INNER_BATCH_FLAG != 0 or None
                cq = self._new_consume_queue(topic, queue_id, batch=batch)
            cq.put(group, allow_gap=allow_gap)
        if self.config.message_index_enable and runs:
            self.index.build_index(runs)
        self.reput_offset = max(self.reput_offset, last.end_offset)
        self.last_dispatched_timestamp = last.store_timestamp
        listener = self.arrival_listener
        if listener is not None:
            for topic, queue_id in groups:
                listener(topic, queue_id, self.cq_table[(topic, queue_id)].max_offset)

    # -- reads -----------------------------------------------------------------------------
    def get_min_offset_in_queue(self, topic: str, queue_id: int) -> int:
        """First readable logical offset of a queue (0 if the queue does not exist)."""
        cq = self.cq_table.get((topic, queue_id))
        return cq.min_offset if cq else 0

    def get_max_offset_in_queue(self, topic: str, queue_id: int) -> int:
        """Next logical offset of a queue = number of dispatched messages (0 if none)."""
        cq = self.cq_table.get((topic, queue_id))
        return cq.max_offset if cq else 0

    def get_messages(
        self,
        topic: str,
        queue_id: int,
        offset: int,
        max_msgs: int,
        *,
        max_bytes: int | None = None,
        tag_codes: Iterable[int] | None = None,
        record_filter: Callable[[bytes], bool] | None = None,
    ) -> GetResult:
        """Read up to ``max_msgs`` records (and ``max_bytes``) of a queue from ``offset``.

        ``tag_codes`` filters by the units' tag hash codes (None = everything);
        ``record_filter`` (None = everything) is asked about each record read (RocketMQ's
        ``isMatchedByCommitLog``, the SQL92 filter): the ones it refuses are skipped like
        tag-filtered ones. Status and ``next_begin_offset`` follow RocketMQ's
        ``DefaultMessageStore.getMessage``, but for one thing: an answer never mixes records
        found with (matching) records whose data is gone. RocketMQ skips the latter and answers
        FOUND with the rest, so a reader that filters cannot tell gone data from filtered-out
        data. Here a read that found records stops at the first gone one, and one that met gone
        ones first answers MESSAGE_WAS_REMOVING up to the first kept one (retention deletes
        from the front, so that is the only order they come in).
        """
        cq = self.cq_table.get((topic, queue_id))
        if cq is None:
            return GetResult(GetStatus.NO_MATCHED_LOGIC_QUEUE, 0, 0, 0)
        lo, hi = cq.min_offset, cq.max_offset
        if hi == 0:
            return GetResult(GetStatus.NO_MESSAGE_IN_QUEUE, 0, lo, hi)
        if offset < lo:
            return GetResult(GetStatus.OFFSET_TOO_SMALL, lo, lo, hi)
        if offset == hi:
            return GetResult(GetStatus.OFFSET_OVERFLOW_ONE, offset, lo, hi)
        if offset > hi:
            return GetResult(GetStatus.OFFSET_OVERFLOW_BADLY, hi, lo, hi)
        if cq.cq_type is _BATCH_CQ:
            return batch_get.read_batch_queue(
                self, cast(BatchConsumeQueue, cq), offset, max_msgs, max_bytes, tag_codes,
                record_filter,
            )  # fmt: skip
        if record_filter is not None:
            return self._read_queue_matching(cq, offset, max_msgs, max_bytes, record_filter, lo, hi)
        return self._read_queue(
            cq,
            offset,
            max_msgs,
            max_bytes,
            None if tag_codes is None else frozenset(tag_codes),
            lo,
            hi,
        )

    def _read_queue(
        self,
        cq: ConsumeQueueInterface,
        offset: int,
        max_msgs: int,
        max_bytes: int | None,
        codes: frozenset[int] | None,
        lo: int,
        hi: int,
    ) -> GetResult:
        window = self._read_window(cq, offset, max_msgs, max_bytes, lo, hi)
        if isinstance(window, GetResult):
            return window
        units, max_msgs, byte_limit = window
        records: list[bytes] = []
        queue_offsets: list[int] = []
        total = 0
        next_offset = offset
        cl_min = self.commitlog.min_offset
        removed = False
        read = self._record_reader()
        for phys, size, code in UNIT.iter_unpack(units):
            if size == _BLANK_SIZE:
                next_offset += 1
                continue
            if records and (len(records) >= max_msgs or total + size > byte_limit):
                break
            if codes is not None and code not in codes:
                next_offset += 1
                continue
            data = read(phys, size) if phys >= cl_min else None
            if data is None:
                if records:  # an answer is all found or all removed: the reader can tell
                    break
                removed = True
                next_offset += 1
                continue
            if removed:  # removed records end where the kept ones begin
                break
            records.append(data)
            queue_offsets.append(next_offset)
            total += size
            next_offset += 1
        return self._read_result(records, queue_offsets, total, removed, next_offset, lo, hi)

    def _read_queue_matching(
        self,
        cq: ConsumeQueueInterface,
        offset: int,
        max_msgs: int,
        max_bytes: int | None,
        matches: Callable[[bytes], bool],
        lo: int,
        hi: int,
    ) -> GetResult:
        """:meth:`_read_queue` keeping only the records ``matches`` accepts (a loop of its
        own, so that a tag pull pays nothing for the record filter)."""
        window = self._read_window(cq, offset, max_msgs, max_bytes, lo, hi)
        if isinstance(window, GetResult):
            return window
        units, max_msgs, byte_limit = window
        records: list[bytes] = []
        queue_offsets: list[int] = []
        total = 0
        next_offset = offset
        cl_min = self.commitlog.min_offset
        removed = False
        read = self._record_reader()
        for phys, size, _ in UNIT.iter_unpack(units):
            if size == _BLANK_SIZE:
                next_offset += 1
                continue
            if records and (len(records) >= max_msgs or total + size > byte_limit):
                break
            data = read(phys, size) if phys >= cl_min else None
            if data is None:
                if records:  # never FOUND with gone records skipped (see get_messages)
                    break
                removed = True
            elif removed:
                break
            elif matches(data):
                records.append(data)
                queue_offsets.append(next_offset)
                total += size
            next_offset += 1
        return self._read_result(records, queue_offsets, total, removed, next_offset, lo, hi)

    def _read_window(
        self,
        cq: ConsumeQueueInterface,
        offset: int,
        max_msgs: int,
        max_bytes: int | None,
        lo: int,
        hi: int,
    ) -> tuple[bytes, int, int] | GetResult:
        """The units a read from ``offset`` scans, with its message and byte limits; or
        OFFSET_FOUND_NULL when the consume queue has no file there."""
        max_msgs = max(1, min(max_msgs, self.config.max_transfer_count_on_message_in_memory))
        byte_limit = self.config.max_transfer_bytes_on_message_in_memory
        if max_bytes is not None:
            byte_limit = min(byte_limit, max_bytes)
        units = cq.read_units(offset, max(16000 // CQ_STORE_UNIT_SIZE, max_msgs))
        if units is None:
            return GetResult(GetStatus.OFFSET_FOUND_NULL, cq.roll_next_file(offset), lo, hi)
        return units, max_msgs, byte_limit

    def _read_result(
        self,
        records: list[bytes],
        queue_offsets: list[int],
        total: int,
        removed: bool,
        next_offset: int,
        lo: int,
        hi: int,
        count: int | None = None,
    ) -> GetResult:
        """The GetResult of a read that scanned up to ``next_offset``; ``count`` is the
        messages in ``records`` (default: one a record; an inner batch holds several)."""
        if records:
            status = GetStatus.FOUND
            self.messages_transferred += len(records) if count is None else count
        elif removed:
            status = GetStatus.MESSAGE_WAS_REMOVING
        else:
            status = GetStatus.NO_MATCHED_MESSAGE
        return GetResult(status, next_offset, lo, hi, records, queue_offsets, total)

    def _record_reader(self) -> Callable[[int, int], bytes | None]:
        """A reader of (offset, size) that remembers the last file it used."""
        queue = self.commitlog.queue
        cache: list[Any] = [None, 0, 0]  # file, start, end

        def read(phys: int, size: int) -> bytes | None:
            mf, start, end = cache
            if mf is None or not start <= phys < end:
                mf = queue.find(phys)
                if mf is None:
                    return None
                start = mf.file_from_offset
                end = start + mf.wrote_position
                cache[:] = mf, start, end
            pos = phys - start
            if phys + size > end:
                return None
            data: bytes = mf.mm[pos : pos + size]
            return data

        return read

    def lookup_message_by_offset(self, phys_offset: int) -> bytes | None:
        """The raw record at a commitlog offset (RocketMQ's ``lookMessageByOffset``), or None."""
        if phys_offset < self.commitlog.min_offset:
            return None
        return self.commitlog.read_record(phys_offset)

    def is_dispatched_message(self, phys_offset: int, record: MessageRecord) -> bool:
        """True when ``record``, decoded at ``phys_offset``, is a message the store dispatched:
        its queue's unit at its queue offset points at ``phys_offset`` with its size. A
        record-shaped run of bytes inside another message (which :meth:`lookup_message_by_offset`
        returns all the same) is not, nor a message not dispatched yet or whose queue is gone."""
        cq = self.cq_table.get((record.topic, record.queue_id))
        if cq is None or not cq.min_offset <= record.queue_offset < cq.max_offset:
            return False
        if isinstance(cq, BatchConsumeQueue):  # the unit must also start at its offset
            batch = cq.batch_unit_at(record.queue_offset)
            if batch is None or batch.base != record.queue_offset:
                return False
        unit = cq.unit_at(record.queue_offset)
        return unit is not None and unit[0] == phys_offset and unit[1] == record.store_size

    def get_earliest_message_time(self, topic: str, queue_id: int) -> int:
        """Store time of the queue's first readable message (RocketMQ's
        ``getEarliestMessageTime``), or -1 if the queue has none."""
        cq = self.cq_table.get((topic, queue_id))
        if cq is None or cq.min_offset >= cq.max_offset:
            return -1
        unit = cq.unit_at(cq.min_offset)
        if unit is None or unit[1] == _BLANK_SIZE or unit[0] < self.commitlog.min_offset:
            return -1
        return self.commitlog.store_timestamp_at(unit[0]) or -1

    def get_offset_in_queue_by_time(self, topic: str, queue_id: int, timestamp: int) -> int:
        """First logical offset whose store time is >= ``timestamp`` (binary search).

        Returns the queue's max offset when every message is older, its min offset when every
        message is newer.
        """
        cq = self.cq_table.get((topic, queue_id))
        if cq is None:
            return 0
        if isinstance(cq, BatchConsumeQueue):
            return cq.offset_by_time(timestamp)
        lo, hi = cq.min_offset, cq.max_offset
        cl = self.commitlog

        def store_time(logical: int) -> int:
            unit = cq.unit_at(logical)
            if unit is None or unit[1] == _BLANK_SIZE:
                return -1
            return cl.store_timestamp_at(unit[0]) if unit[0] >= cl.min_offset else -1

        return lo + bisect.bisect_left(range(lo, hi), timestamp, key=store_time)

    def query_messages(
        self,
        topic: str,
        key: str,
        max_num: int,
        begin: int,
        end: int,
    ) -> QueryResult:
        """Records of ``topic`` whose KEYS or UNIQ_KEY equals ``key``, stored in [begin, end]."""
        return run_steps(self.query_steps(topic, key, max_num, begin, end))

    def query_steps(
        self, topic: str, key: str, max_num: int, begin: int, end: int
    ) -> Generator[None, None, QueryResult]:
        """:meth:`query_messages` in steps, for the event loop: it yields while it walks the
        index (see :meth:`IndexService.query_steps` for why pausing there is safe), then reads
        the at most ``maxMsgsNumBatch`` records found in one go."""
        found = yield from self.index.query_steps(topic, key, max_num, begin, end)
        return self._query_result(topic, key, *found)

    def _query_result(
        self, topic: str, key: str, offsets: list[int], last_ts: int, last_phy: int
    ) -> QueryResult:
        """The records at ``offsets`` that really are ``topic``'s and have ``key``."""
        out = QueryResult(
            index_last_update_timestamp=last_ts, index_last_update_phy_offset=last_phy
        )
        seen: set[int] = set()
        dead = self.deleted_topics.is_dead
        for phys in offsets:
            if phys in seen or dead(topic, phys):
                continue
            seen.add(phys)
            raw = self.lookup_message_by_offset(phys)
            if raw is None:
                continue
            rec = decode_record(raw, with_body=False)
            if rec.topic == topic and (
                key in rec.keys or rec.properties.get(MessageConst.UNIQ_KEY) == key
            ):
                out.records.append(raw)
        return out

    # -- durability ------------------------------------------------------------------------
    def flush_commitlog(self) -> int:
        """Make every appended record durable; return the flushed commitlog offset.

        Safe to call from a worker thread while the event loop appends.
        """
        stamp = self.commitlog.last_store_timestamp
        flushed = self.commitlog.queue.flush()
        if stamp:
            self.checkpoint.physic_msg_timestamp = stamp
        self.checkpoint.master_flushed_offset = flushed
        return flushed

    def flush_logics(self) -> None:
        """Flush consume queues and the index, then record the checkpoint.

        What the checkpoint will claim (the dispatched offset, the index's mark, the queues'
        unit count) is read first, with dispatch held off (so no batch is half written), so
        that it never claims more than the flushes that follow make durable. A topic deleted
        meanwhile has already lowered the checkpoint's unit count: the count read before is
        lowered by as much when it is recorded.
        """
        index_on = self.config.message_index_enable
        with self._dispatch_lock:
            dispatched = self.reput_offset
            stamp = self.last_dispatched_timestamp
            mark = self.index.durable_mark() if index_on else None
            queues = self.consume_queues()
            units = sum(cq.max_offset for cq in queues)
            deleted = self._units_deleted
        for cq in queues:
            cq.flush()
        if index_on:
            self.index.flush()
            if self.index.last_full_end_timestamp:  # as RocketMQ: 0 until a full file is flushed
                self.checkpoint.index_msg_timestamp = self.index.last_full_end_timestamp
        with self._dispatch_lock:
            cp = self.checkpoint
            if stamp:
                cp.logics_msg_timestamp = stamp
            cp.dispatched_phy_offset = dispatched
            cp.logics_unit_count = max(0, units - (self._units_deleted - deleted))
            cp.index_mark = mark
        cp.flush()

    @property
    def flushed_offset(self) -> int:
        """Commitlog offset up to which everything is durable."""
        return self.commitlog.queue.flushed_offset

    # -- retention -------------------------------------------------------------------------
    def clean_expired_files(self, *, manual: bool = False) -> int:
        """Apply the retention policy once (see :mod:`store.retention`); return files deleted."""
        return retention.clean_once(self, manual=manual)
