"""Model-based power cuts: random puts, dispatches and flushes of a real store, cut off at
random points as a power failure would cut them, then recovered and checked against a model.

The flush recorder (:mod:`tests.store.flush_recorder`) logs what each flush and sync made
durable; a power cut abandons the open store without flushing anything and rewrites its files
with :func:`~tests.store.flush_recorder.power_loss` (write-back saving none, a prefix, or any of
the unflushed pages, and, or not, any pages of index files written since their last sync).
After recovery:

- every message whose record a commitlog flush covered, and every message that survived an
  earlier cut, is there; the survivors are exactly the messages before the log's new end, each
  intact, in its queue at its offset, and findable by its keys;
- ``check_store`` finds nothing wrong, and new puts continue every queue's offsets.

Clean restarts come in between, after which everything is required; and topic deletions,
durable when they return: a deleted topic's messages never come back, whatever the cut.

Files are tiny (8 KiB commitlog, 4-unit consume-queue files, 16-entry index files), so a run
crosses every kind of file boundary, and cuts land inside every kind of file.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any
from unittest import mock

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, rule

from common.message import MessageSysFlag
from common.record import CRC32_RESERVED_LEN, decode_record, encode_properties, record_length
from store import MessageStore, PutStatus
from store.commitlog import PROPS_CRC_MIN
from store.config import StoreConfig
from store.invariants import check_store
from tests.conftest import ManualClock, make_msg, tiny_store_config
from tests.store.flush_recorder import Durable, abandon, install, power_loss

TOPICS = ("TopicA", "TopicB")
QUEUES = (0, 1)
TAGS = (None, "TagA")
KEYS = ("k1", "k2", "k3")
LONG_MAX = 2**63 - 1
PREPARED = MessageSysFlag.TRANSACTION_PREPARED_TYPE
COMMIT = MessageSysFlag.TRANSACTION_COMMIT_TYPE

pytestmark = pytest.mark.timeout(600)  # a failing run spends minutes shrinking


@dataclass
class Msg:
    """What the model remembers of one stored message."""

    topic: str
    queue_id: int
    body: bytes
    keys: tuple[str, ...]
    phys: int
    size: int
    queue_offset: int
    consumable: bool = True  # False for a prepared transactional message: no queue, keys only
    dead: bool = False  # its topic was deleted after it was put


Spec = tuple[str, int, int, str | None, tuple[str, ...], int]
"""topic, queue, padding, tags, keys, sys flag"""
message_specs = st.tuples(
    st.sampled_from(TOPICS),
    st.sampled_from(QUEUES),
    st.integers(0, 700),  # padding length: a few records fill an 8 KiB file
    st.sampled_from(TAGS),
    st.sets(st.sampled_from(KEYS), max_size=2).map(lambda s: tuple(sorted(s))),
    st.sampled_from((0, 0, 0, COMMIT, PREPARED)),
)


class PowerCutModel(RuleBasedStateMachine):
    """A real store under the flush recorder on one side, the list of its messages on the
    other."""

    def __init__(self) -> None:
        super().__init__()
        self.dir = Path(tempfile.mkdtemp(prefix="minimq-power-"))
        self.root = self.dir / "store"
        self.log = self.dir / "durable.log"
        self.snapshots = self.dir / "snapshots"
        self.baseline: Path | None = None  # the files as on disk when this run began
        self.patches = contextlib.ExitStack()
        install(self.log, self.snapshots, self._patch)
        self.config = self.make_config(self.root)
        self.clock = ManualClock()
        self.store = MessageStore(self.config, clock_ms=self.clock).open()
        self.counter = 0
        self.msgs: list[Msg] = []  # in commitlog order
        self.required = 0  # msgs[:required] must survive any cut (they are on disk)

    @staticmethod
    def make_config(root: Path) -> StoreConfig:
        """The store's settings: tiny files (one page for an index file)."""
        return tiny_store_config(root)

    def _patch(self, target: Any, name: str, value: Any) -> None:
        self.patches.enter_context(mock.patch.object(target, name, value))

    # -- rules -----------------------------------------------------------------------------
    @rule(spec=message_specs)
    def put_one(self, spec: Spec) -> None:
        self._put([spec])

    @rule(spec=message_specs, n=st.integers(2, 6))
    def put_batch(self, spec: Spec, n: int) -> None:
        topic, qid, pad, tags, keys, sys_flag = spec
        self._put([(topic, qid, pad // n, tags, keys, sys_flag)] * n)

    @rule(max_batch=st.integers(1, 10))
    def dispatch(self, max_batch: int) -> None:
        self.store.dispatch_pending(max_batch)

    @rule(topic=st.sampled_from(TOPICS))
    def delete_topic(self, topic: str) -> None:
        """Durable on return: its messages never come back, its queues start again at 0."""
        self.store.delete_topic(topic)
        for m in self.msgs:
            if m.topic == topic:
                m.dead = True

    @rule()
    def flush_commitlog(self) -> None:
        self.store.flush_commitlog()

    @rule()
    def flush_logics(self) -> None:
        self.store.flush_logics()

    @rule(seed=st.integers(0, 2**30), writeback=st.booleans(), index_writeback=st.booleans())
    def power_cut(self, seed: int, writeback: bool, index_writeback: bool) -> None:
        self._require_flushed(Durable.read(self.log))
        abandon(self.store)
        power_loss(
            self.root,
            self.baseline,
            self.log,
            self.snapshots,
            seed,
            writeback=writeback,
            index_writeback=index_writeback,
        )
        self._reopen(clean=False)

    @rule()
    def restart(self) -> None:
        """A clean shutdown makes everything durable."""
        self.store.close()
        self.required = len(self.msgs)
        self._reopen(clean=True)

    def _reopen(self, *, clean: bool) -> None:
        self.baseline = self.dir / "baseline"
        shutil.rmtree(self.baseline, ignore_errors=True)
        shutil.copytree(self.root, self.baseline)
        os.truncate(self.log, 0)  # a new run: what recovery syncs counts from here
        self.store = MessageStore(self.config, clock_ms=self.clock).open()
        assert self.store.last_exit_ok is clean
        self._check_recovered()

    # -- helpers ---------------------------------------------------------------------------
    def _put(self, specs: list[Spec]) -> None:
        records = []
        for topic, qid, pad, tags, keys, sys_flag in specs:
            self.counter += 1
            body = f"{self.counter}:".encode()
            # the padding goes into the body, or past 560 bytes into a property (long
            # properties: the record ends with a CRC of itself)
            extra = {"PAD": "p" * pad} if pad > 560 else {}
            body += b"" if extra else b"p" * pad
            keys_prop = list(keys) or None
            records.append(
                make_msg(
                    topic, body, qid, tags=tags, keys=keys_prop, sys_flag=sys_flag, properties=extra
                )
            )
        self.clock.advance(1)
        result = self.store.put_messages(records)
        assert result.status is PutStatus.PUT_OK
        for rec, phys, qoff, spec in zip(
            records, result.phys_offsets, result.queue_offsets, specs, strict=True
        ):
            consumable = spec[5] != PREPARED
            assert qoff == (self._next_offset(rec.topic, rec.queue_id) if consumable else 0)
            props = len(encode_properties(rec.properties))
            props += CRC32_RESERVED_LEN if props > PROPS_CRC_MIN else 0
            size = record_length(len(rec.body), len(rec.topic.encode()), props)
            msg = Msg(rec.topic, rec.queue_id, rec.body, spec[4], phys, size, qoff, consumable)
            self.msgs.append(msg)

    def _next_offset(self, topic: str, queue_id: int) -> int:
        return len(self._queue(topic, queue_id))

    def _queue(self, topic: str, queue_id: int) -> list[Msg]:
        return [
            m
            for m in self.msgs
            if (m.topic, m.queue_id) == (topic, queue_id) and m.consumable and not m.dead
        ]

    def _require_flushed(self, durable: Durable) -> None:
        """Messages whose records a commitlog flush of this run covered must survive."""
        file_size = self.config.mapped_file_size_commit_log
        for i in range(self.required, len(self.msgs)):
            m = self.msgs[i]
            start = m.phys - m.phys % file_size
            path = self.config.commitlog_dir / f"{start:020d}"
            if m.phys - start + m.size <= durable.flushed.get(path, 0):
                self.required = i + 1

    def _check_recovered(self) -> None:
        store = self.store
        end = store.commitlog.max_offset
        survivors = [m for m in self.msgs if m.phys < end]
        assert len(survivors) >= self.required, (
            f"flushed message {self.msgs[len(survivors)]} lost: the log ends at {end}"
        )
        if survivors:  # the log ends after the last survivor, or after the blank filling
            last_end = survivors[-1].phys + survivors[-1].size  # the rest of its file
            file_size = self.config.mapped_file_size_commit_log
            assert end in (last_end, last_end - last_end % file_size + file_size)
        self.msgs, self.required = survivors, len(survivors)
        assert check_store(store) == []
        for topic in TOPICS:
            for qid in QUEUES:
                self._check_queue(topic, qid)
            for key in KEYS:
                hits = store.query_messages(topic, key, 64, 0, LONG_MAX)
                want = [
                    m.body
                    for m in reversed(self.msgs)
                    if m.topic == topic and key in m.keys and not m.dead
                ]
                assert [decode_record(r).body for r in hits.records] == want[:64]

    def _check_queue(self, topic: str, qid: int) -> None:
        want = self._queue(topic, qid)
        assert self.store.get_max_offset_in_queue(topic, qid) == len(want)
        got = []
        offset = 0
        while offset < len(want):
            g = self.store.get_messages(topic, qid, offset, 32)
            assert g.records, (topic, qid, offset, g.status)
            got.extend(decode_record(r, check_crc=True) for r in g.records)
            offset = g.next_begin_offset
        assert [(r.body, r.queue_offset, r.physical_offset) for r in got] == [
            (m.body, m.queue_offset, m.phys) for m in want
        ]

    def teardown(self) -> None:
        try:
            self.store.close()
        finally:
            self.patches.close()
            shutil.rmtree(self.dir, ignore_errors=True)


class WideIndexPowerCutModel(PowerCutModel):
    """The same, with index files of three pages: the header and most slots in the first,
    the last slots and the first entries in the second, more entries in the third, so that
    write-back can save a header or a slot without the entries it counts or points at."""

    @staticmethod
    def make_config(root: Path) -> StoreConfig:
        """Tiny files, but index files that span pages."""
        return replace(tiny_store_config(root), max_hash_slot_num=1031, max_index_num=220)


PowerCutModel.TestCase.settings = settings(max_examples=100, stateful_step_count=50, deadline=None)
TestPowerCutModel = PowerCutModel.TestCase
WideIndexPowerCutModel.TestCase.settings = settings(
    max_examples=100, stateful_step_count=50, deadline=None
)
TestWideIndexPowerCutModel = WideIndexPowerCutModel.TestCase
