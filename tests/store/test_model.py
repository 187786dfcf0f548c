"""Model-based test: random puts, dispatches, reads, queries and reopens of a real MessageStore,
checked step by step against a plain in-memory model (a list of messages per queue).

Files are tiny (8 KiB commitlog, 4-unit consume-queue files, 16-entry index files) so a run
crosses every kind of file boundary many times.
"""

from __future__ import annotations

import contextlib
import logging
import shutil
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from common.hashing import java_string_hash
from common.message import MessageSysFlag
from common.record import decode_record
from store import GetStatus, MessageStore, PutStatus
from tests.conftest import TINY_CQ_UNITS, ManualClock, make_msg, tiny_store_config

TOPICS = ("TopicA", "TopicB")
QUEUES = (0, 1)
TAGS = (None, "TagA", "TagB")
KEYS = ("k1", "k2", "k3", "k4")
CQ_UNITS = TINY_CQ_UNITS
MAX_TRANSFER = 32
LONG_MAX = 2**63 - 1
PREPARED = MessageSysFlag.TRANSACTION_PREPARED_TYPE
COMMIT = MessageSysFlag.TRANSACTION_COMMIT_TYPE

# A passing run takes seconds; a failing one spends minutes shrinking, which is worth waiting for.
pytestmark = pytest.mark.timeout(600)


@dataclass
class Msg:
    """What the model remembers of one stored message."""

    topic: str
    queue_id: int
    body: bytes
    tags: str | None
    keys: tuple[str, ...]
    sys_flag: int
    phys: int = -1
    dead: bool = False  # its topic was deleted while it waited for dispatch

    @property
    def consumable(self) -> bool:
        """True unless it is a prepared transactional message."""
        return self.sys_flag != PREPARED

    @property
    def tags_code(self) -> int:
        """The consume-queue tag code."""
        return java_string_hash(self.tags) if self.tags else 0


message_specs = st.tuples(
    st.sampled_from(TOPICS),
    st.sampled_from(QUEUES),
    st.integers(0, 400),  # padding length
    st.sampled_from(TAGS),
    st.sets(st.sampled_from(KEYS), max_size=2).map(lambda s: tuple(sorted(s))),
    st.sampled_from((0, 0, 0, 0, COMMIT, PREPARED)),
)


@contextlib.contextmanager
def _warnings(logger: str) -> Iterator[list[str]]:
    """Collect the warnings ``logger`` and its children log meanwhile."""
    got: list[str] = []
    handler = logging.Handler(logging.WARNING)
    handler.emit = lambda record: got.append(record.getMessage())  # type: ignore[method-assign]
    log = logging.getLogger(logger)
    log.addHandler(handler)
    try:
        yield got
    finally:
        log.removeHandler(handler)


class StoreModel(RuleBasedStateMachine):
    """The state machine: a real store on one side, lists on the other."""

    def __init__(self) -> None:
        super().__init__()
        self.dir = Path(tempfile.mkdtemp(prefix="minimq-model-"))
        self.config = tiny_store_config(self.dir / "store")
        self.clock = ManualClock()
        self.store = MessageStore(self.config, clock_ms=self.clock).open()
        self.counter = 0
        self.pending: list[Msg] = []  # appended, not dispatched, in commitlog order
        self.queues: dict[tuple[str, int], list[Msg]] = {}  # dispatched, per queue
        self.next_queue_offset: dict[tuple[str, int], int] = {}
        self.indexed: list[Msg] = []  # dispatched, every sys flag

    # -- helpers ---------------------------------------------------------------------------
    def _new_msg(self, spec: tuple) -> Msg:
        topic, qid, pad, tags, keys, sys_flag = spec
        self.counter += 1
        body = f"{self.counter}:".encode() + b"p" * pad
        return Msg(topic, qid, body, tags, keys, sys_flag)

    def _put(self, msgs: list[Msg]) -> None:
        records = [
            make_msg(
                m.topic,
                m.body,
                m.queue_id,
                tags=m.tags,
                keys=list(m.keys) if m.keys else None,
                sys_flag=m.sys_flag,
            )
            for m in msgs
        ]
        self.clock.advance(1)
        result = self.store.put_messages(records)
        assert result.status is PutStatus.PUT_OK
        expected_offsets = []
        for m in msgs:
            key = (m.topic, m.queue_id)
            if m.consumable:
                expected_offsets.append(self.next_queue_offset.get(key, 0))
                self.next_queue_offset[key] = expected_offsets[-1] + 1
            else:
                expected_offsets.append(0)
        assert result.queue_offsets == expected_offsets
        for m, phys in zip(msgs, result.phys_offsets, strict=True):
            m.phys = phys
        # a batch is contiguous and lands in one commitlog file
        file_size = self.config.mapped_file_size_commit_log
        assert result.phys_offsets[0] // file_size == (result.end_offset - 1) // file_size
        self.pending.extend(msgs)

    def _mark_dispatched(self, n: int) -> None:
        done, self.pending = self.pending[:n], self.pending[n:]
        for m in done:
            if m.dead:  # its topic was deleted after it was appended
                continue
            self.indexed.append(m)
            if m.consumable:
                self.queues.setdefault((m.topic, m.queue_id), []).append(m)

    # -- rules -----------------------------------------------------------------------------
    @rule(spec=message_specs)
    def put_one(self, spec: tuple) -> None:
        self._put([self._new_msg(spec)])

    @rule(data=st.data(), topic=st.sampled_from(TOPICS), n=st.integers(1, 8))
    def put_batch(self, data: st.DataObject, topic: str, n: int) -> None:
        specs = data.draw(st.lists(message_specs, min_size=n, max_size=n))
        self._put([self._new_msg((topic, *spec[1:])) for spec in specs])

    @rule(data=st.data(), spec=message_specs, n=st.integers(2, 8))
    def put_uniform_batch(self, data: st.DataObject, spec: tuple, n: int) -> None:
        """A batch send: one topic, queue and sys flag, the rest drawn per message."""
        specs = data.draw(st.lists(message_specs, min_size=n, max_size=n))
        topic, queue, *_, flag = spec
        self._put([self._new_msg((topic, queue, *s[2:-1], flag)) for s in specs])

    @rule(bad_topic=st.sampled_from(("", "bad topic", "a/b", "T" * 128)))
    def put_invalid(self, bad_topic: str) -> None:
        end = self.store.commitlog.max_offset
        result = self.store.put_messages([make_msg("TopicA", b"ok"), make_msg(bad_topic)])
        assert result.status is PutStatus.MESSAGE_ILLEGAL
        assert self.store.commitlog.max_offset == end

    @rule(max_batch=st.integers(1, 10))
    def dispatch(self, max_batch: int) -> None:
        n = self.store.dispatch_pending(max_batch)
        # whole runs (the records of one put) go together, so a call may pass max_batch
        assert min(max_batch, len(self.pending)) <= n <= len(self.pending)
        self._mark_dispatched(n)

    @rule(
        data=st.data(),
        topic=st.sampled_from(TOPICS),
        queue_id=st.sampled_from(QUEUES),
        max_msgs=st.integers(1, 40),
        tag_filter=st.sampled_from((None, ("TagA",), ("TagB",), ("TagA", "TagB"), ("",))),
    )
    def get(
        self,
        data: st.DataObject,
        topic: str,
        queue_id: int,
        max_msgs: int,
        tag_filter: tuple[str, ...] | None,
    ) -> None:
        units = self.queues.get((topic, queue_id))
        hi = len(units) if units else 0
        offset = data.draw(st.integers(0, hi + 2), label="offset")
        codes = None if tag_filter is None else {java_string_hash(t) for t in tag_filter}
        g = self.store.get_messages(topic, queue_id, offset, max_msgs, tag_codes=codes)
        if units is None:
            assert (g.status, g.next_begin_offset) == (GetStatus.NO_MATCHED_LOGIC_QUEUE, 0)
            return
        assert (g.min_offset, g.max_offset) == (0, hi)
        if offset == hi:
            assert (g.status, g.next_begin_offset) == (GetStatus.OFFSET_OVERFLOW_ONE, offset)
            return
        if offset > hi:
            assert (g.status, g.next_begin_offset) == (GetStatus.OFFSET_OVERFLOW_BADLY, hi)
            return
        # RocketMQ's loop: never past the consume-queue file's end, batch-full checked first
        limit = max(1, min(max_msgs, MAX_TRANSFER))
        scan_end = min(hi, (offset // CQ_UNITS + 1) * CQ_UNITS)
        want: list[int] = []
        next_offset = offset
        for i in range(offset, scan_end):
            if want and len(want) >= limit:
                break
            next_offset += 1
            if codes is None or units[i].tags_code in codes:
                want.append(i)
        assert g.status is (GetStatus.FOUND if want else GetStatus.NO_MATCHED_MESSAGE)
        assert g.next_begin_offset == next_offset
        assert g.queue_offsets == want
        for raw, i in zip(g.records, want, strict=True):
            rec = decode_record(raw, check_crc=True)
            m = units[i]
            assert (rec.body, rec.topic, rec.queue_id) == (m.body, topic, queue_id)
            assert (rec.queue_offset, rec.physical_offset) == (i, m.phys)
            assert rec.tags == m.tags

    @rule(topic=st.sampled_from(TOPICS), key=st.sampled_from(KEYS), max_num=st.integers(1, 70))
    def query(self, topic: str, key: str, max_num: int) -> None:
        q = self.store.query_messages(topic, key, max_num, 0, LONG_MAX)
        matches = [m for m in self.indexed if m.topic == topic and key in m.keys]
        matches.sort(key=lambda m: m.phys, reverse=True)
        expected = [m.body for m in matches[: min(max_num, 64)]]
        assert [decode_record(r).body for r in q.records] == expected

    @rule(topic=st.sampled_from(TOPICS))
    def delete_topic(self, topic: str) -> None:
        """Its queues and offsets go; what it had stored, dispatched or not, is never seen
        again; sends to it start again at queue offset 0."""
        removed = self.store.delete_topic(topic)
        assert removed == len([k for k in self.queues if k[0] == topic])
        for m in self.pending:
            if m.topic == topic:
                m.dead = True
        self.queues = {k: v for k, v in self.queues.items() if k[0] != topic}
        self.next_queue_offset = {k: v for k, v in self.next_queue_offset.items() if k[0] != topic}
        self.indexed = [m for m in self.indexed if m.topic != topic]

    @rule()
    def reopen(self) -> None:
        self.store.close()
        self._mark_dispatched(len(self.pending))  # close() dispatches what is pending
        assert not self.config.abort_path.exists()
        with _warnings("store") as warned:
            self.store = MessageStore(self.config, clock_ms=self.clock).open()
        assert self.store.last_exit_ok
        assert warned == []  # a clean restart repairs nothing

    @rule()
    def lookup_pending(self) -> None:
        if not self.pending:
            return
        m = self.pending[-1]
        raw = self.store.lookup_message_by_offset(m.phys)
        assert raw is not None
        assert decode_record(raw).body == m.body

    # -- invariants and teardown ------------------------------------------------------------
    @invariant()
    def queue_bounds_match(self) -> None:
        for (topic, qid), units in self.queues.items():
            assert self.store.get_max_offset_in_queue(topic, qid) == len(units)
            assert self.store.get_min_offset_in_queue(topic, qid) == 0
        assert self.store.dispatch_behind == len(self.pending)

    def teardown(self) -> None:
        try:
            self.store.close()
        finally:
            shutil.rmtree(self.dir, ignore_errors=True)


StoreModel.TestCase.settings = settings(max_examples=60, stateful_step_count=40, deadline=None)
TestStoreModel = StoreModel.TestCase
