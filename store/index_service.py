"""IndexService: the ordered index files under ``index/``, batch building and key lookup."""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable, Generator, Sequence
from itertools import repeat
from pathlib import Path
from typing import NamedTuple, TypeVar

import numpy as np

from common.hashing import (
    index_key_hash,
    index_key_hash_prefixed,
    index_key_hashes_prefixed,
    prefix_hash,
)
from common.message import MessageConst, MessageSysFlag
from store import mapped_file
from store.checkpoint import NO_INDEX_FILE, IndexMark
from store.config import StoreConfig
from store.dispatch_request import DispatchRequest, key_suffixes
from store.index_file import IndexFile, index_file_size

_T = TypeVar("_T")
log = logging.getLogger(__name__)

SMALL_BATCH = 24
"""At or below this many keys a dispatch indexes in pure Python; above it, in numpy."""
WALK_STEP = 1 << 13
"""Index entries a lookup reads between two pauses: a few milliseconds of pure Python."""


def run_steps(steps: Generator[None, None, _T]) -> _T:
    """Run ``steps`` (a lookup in steps, such as :meth:`IndexService.query_steps`) without
    pausing; its result."""
    while True:
        try:
            next(steps)
        except StopIteration as done:
            result: _T = done.value
            return result


def timestamp_file_name(ms: int) -> str:
    """RocketMQ's ``timeMillisToHumanString``: ``yyyyMMddHHmmssSSS`` in local time."""
    return time.strftime("%Y%m%d%H%M%S", time.localtime(ms / 1000)) + f"{ms % 1000:03d}"


def file_name_ms(name: str) -> int:
    """The epoch milliseconds a :func:`timestamp_file_name` stands for (local time)."""
    seconds = time.mktime(time.strptime(name[:14], "%Y%m%d%H%M%S"))
    return int(seconds) * 1000 + int(name[14:17])


def name_between(lower: str, upper: str, want_ms: int) -> str | None:
    """A timestamp file name sorting strictly between ``lower`` ("" for none) and ``upper``:
    the one for ``want_ms`` if it fits, else the millisecond after ``lower`` (or, with no
    ``lower``, the one before ``upper``); None when that does not fit either."""
    name = timestamp_file_name(want_ms)
    if lower < name < upper:
        return name
    name = timestamp_file_name(file_name_ms(lower) + 1 if lower else file_name_ms(upper) - 1)
    return name if lower < name < upper else None


class LostIndexRecord(NamedTuple):
    """A commitlog record whose index entries a lost index file held."""

    topic: str
    properties: dict[str, str]
    phys_offset: int
    store_timestamp: int


class _KeyBatch:
    """The keys of one dispatch, as parallel lists (prefix hash, suffix, phys, store time)."""

    def __init__(self) -> None:
        self.prefixes: list[int] = []
        self.suffixes: list[str] = []
        self.phys: list[int] = []
        self.stamps: list[int] = []

    def add(self, prefix: int, suffixes: list[str], phys: int, stamp: int) -> None:
        """One record's keys."""
        n = len(suffixes)
        self.prefixes += [prefix] * n
        self.suffixes += suffixes
        self.phys += [phys] * n
        self.stamps += [stamp] * n

    def add_record(self, prefix: int, props: dict[str, str], phys: int, stamp: int) -> None:
        """One record's keys, from its properties."""
        uniq = props.get(_UNIQ_KEY)
        raw = props.get(_KEYS)
        if uniq:
            self.prefixes.append(prefix)
            self.suffixes.append(uniq)
            self.phys.append(phys)
            self.stamps.append(stamp)
        if raw:
            if _SEPARATOR in raw:
                self.add(prefix, [k for k in raw.split(_SEPARATOR) if k], phys, stamp)
            else:
                self.prefixes.append(prefix)
                self.suffixes.append(raw)
                self.phys.append(phys)
                self.stamps.append(stamp)

    def add_run(self, run: DispatchRequest, prefix: int) -> None:
        """Every key of a run of several records, with whole-run list operations when records
        look alike (a run of one goes to :meth:`add_record`)."""
        props = run.properties
        n = len(props)
        uniqs: list[str] = list(map(dict.get, props, repeat(_UNIQ_KEY)))  # type: ignore[arg-type]
        plain: list[str] = list(map(dict.get, props, repeat(_KEYS)))  # type: ignore[arg-type]
        # (None where a record lacks the property: the checks below look for it)
        phys = run.phys_offsets()
        if _all_set(uniqs) and _all_set(plain) and _SEPARATOR not in "".join(plain):
            # each record has a UNIQ_KEY and one key: interleave them in record order
            self.suffixes += _interleave(uniqs, plain)
            self.phys += _interleave(phys, phys)
            n *= 2
        elif _all_set(uniqs) and not any(plain):
            self.suffixes += uniqs
            self.phys += phys
        else:
            for p, record in zip(phys, props, strict=True):
                self.add(prefix, key_suffixes(record), p, run.store_timestamp)
            return
        self.prefixes += [prefix] * n
        self.stamps += [run.store_timestamp] * n


_UNIQ_KEY = MessageConst.UNIQ_KEY
_KEYS = MessageConst.KEYS
_SEPARATOR = MessageConst.KEY_SEPARATOR


def _interleave(a: Sequence[_T], b: Sequence[_T]) -> list[_T]:
    """``a[0], b[0], a[1], b[1], ...`` (same lengths), by slice assignment."""
    out: list[_T] = [*a, *b]
    out[0::2] = a
    out[1::2] = b
    return out


def _all_set(values: list[str]) -> bool:
    """True when no value is None or empty."""
    return None not in values and "" not in values


def _missing_suffixes(
    prefix: int, props: dict[str, str], phys: int, files: Sequence[IndexFile]
) -> list[str]:
    """The key suffixes of the record at ``phys`` that none of ``files`` maps to ``phys``
    (a record's keys can straddle two index files)."""
    held = {h for f in files for h in f.hashes_at(phys)}
    return [s for s in key_suffixes(props) if index_key_hash_prefixed(prefix, s) not in held]


class IndexService:
    """Owns the index files; see :mod:`store.index_file` for the format."""

    def __init__(self, config: StoreConfig, clock_ms: Callable[[], int]) -> None:
        self.directory = Path(config.index_dir)
        self.hash_slot_num = config.max_hash_slot_num
        self.index_num = config.max_index_num
        self.max_msgs_num_batch = config.max_msgs_num_batch
        self.clock_ms = clock_ms
        self.files: list[IndexFile] = []
        self.unflushed_full: list[IndexFile] = []
        self.last_full_end_timestamp = 0
        self._prefix_hashes: dict[str, int] = {}  # topic -> unsigned hash of "topic#"
        self.walk_step = WALK_STEP
        """Index entries a lookup reads between two pauses (:meth:`query_steps`)."""

    def load(self, *, last_exit_ok: bool, mark: IndexMark | None = None) -> None:
        """Map existing index files; after a crash, cut them back to the checkpoint's ``mark``.

        A power cut keeps an index file as its last sync left it, plus whatever pages
        write-back saved since: a header or slot page can be newer than the entries it counts
        or points at. So files newer than the mark's go, and the marked file keeps only the
        entries it had then (:meth:`IndexFile.cut_to`); recovery indexes the rest again. With
        no mark (a checkpoint from before it existed), each file's last batch is re-linked
        instead (a sync that ran inside a batch may hold its entries without its slots).
        """
        if not self.directory.is_dir():
            return
        size = index_file_size(self.hash_slot_num, self.index_num)
        for path in sorted(self.directory.iterdir()):
            if not path.name.isdigit():
                with contextlib.suppress(OSError):
                    path.unlink()  # a half-made file from a crash during creation
                continue
            if path.stat().st_size != size:
                path.unlink()  # created with other settings or cut short: rebuilt by dispatch
                continue
            self.files.append(IndexFile(path, self.hash_slot_num, self.index_num, create=False))
        if last_exit_ok:
            return
        if mark is None:
            for f in self.files:
                f.repair_tail()
        else:
            self._cut_back_to(mark)

    def durable_mark(self) -> IndexMark:
        """The newest file's name, entry count and end offset: what a flush that starts now
        makes durable (read with dispatch held off, so no batch is half written)."""
        if not self.files:
            return IndexMark(NO_INDEX_FILE, 0, -1)
        last = self.files[-1]
        return IndexMark(int(last.path.name), last.index_count, last.end_phy_offset)

    def _cut_back_to(self, mark: IndexMark) -> None:
        """Drop files newer than ``mark`` and cut the marked file back to its entries then."""
        newer = [f for f in self.files if int(f.path.name) > mark.file_name]
        for f in newer:
            f.destroy()
            self.files.remove(f)
        if newer:
            mapped_file.fsync_directory(self.directory)
            log.warning("index: %d files newer than the checkpoint removed", len(newer))
        last = self.files[-1] if self.files else None
        if last is not None and int(last.path.name) == mark.file_name:
            last.cut_to(mark.index_count, mark.end_phy_offset)

    @property
    def indexed_up_to(self) -> int:
        """Commitlog offset of the newest indexed record, or -1 when nothing is indexed."""
        if not self.files:
            return -1
        last = self.files[-1]
        if last.index_count <= 1 and len(self.files) == 1 and last.end_timestamp == 0:
            return -1
        return last.end_phy_offset

    def cut_past(self, end: int) -> None:
        """The commitlog was cut at ``end``: drop every entry pointing at or past it.

        Files whose entries all point past the cut go; the file holding the last entry below
        it is cut back to there (:meth:`IndexFile.cut_to`) and claims records up to ``end - 1``,
        so records written from ``end`` on are indexed. (An entry left pointing past the cut
        would never return a wrong record, as queries confirm hits against the log; but it
        would point at whatever record lands there next, and make the stretch between it and
        the next file look like a lost file's.)
        """
        removed = False
        while self.files and self.files[-1].end_phy_offset >= end:
            f = self.files[-1]
            keep = f.entries_below(end)
            if keep > 1 or f.begin_phy_offset < end or len(self.files) == 1:
                f.cut_to(keep, end - 1)
                break
            f.destroy()
            self.files.pop()
            removed = True
        if removed:
            mapped_file.fsync_directory(self.directory)

    # -- building ----------------------------------------------------------------------------
    def build_index(self, runs: Sequence[DispatchRequest]) -> None:
        """Index every key of the records of ``runs`` (commitlog order) not already indexed.

        A key is ``topic#suffix``; its hash is combined from the topic's cached prefix hash
        and the suffix's, so no key string is built. Entries go in record order, each record's
        UNIQ_KEY before its KEYS.
        """
        floor = self.indexed_up_to
        keys = self._collect_keys(runs, floor)
        if keys.suffixes:
            self._put_all(keys)
        if runs and runs[-1].end_offset > floor:
            # keyless records count as indexed too, so recovery need not rescan them
            last = runs[-1]
            last_phys = last.end_offset - last.sizes[-1]
            if last_phys > self.indexed_up_to:
                self._writable_file().mark_covered(last_phys, last.store_timestamp)

    def _collect_keys(self, runs: Sequence[DispatchRequest], floor: int) -> _KeyBatch:
        """The keys of ``runs`` past ``floor``, run by run (any mix of runs)."""
        keys = _KeyBatch()
        rollback = MessageSysFlag.TRANSACTION_ROLLBACK_TYPE
        mask = MessageSysFlag.TRANSACTION_MASK
        for run in runs:
            if run.sys_flag & mask == rollback or run.end_offset <= floor:
                continue
            prefix = self._prefix_hashes.get(run.topic)
            if prefix is None:
                prefix = self._prefix_hash(run.topic)
            if run.phys_offset > floor:
                run_props = run.properties
                if len(run_props) == 1:  # a single send
                    keys.add_record(prefix, run_props[0], run.phys_offset, run.store_timestamp)
                else:
                    keys.add_run(run, prefix)
            else:  # the run straddles what is indexed (recovery): record by record
                for phys, props in zip(run.phys_offsets(), run.properties, strict=True):
                    if phys == floor:
                        self._complete_newest(run, phys, props, prefix, keys)
                    elif phys > floor:
                        keys.add(prefix, key_suffixes(props), phys, run.store_timestamp)
        return keys

    def _put_all(self, keys: _KeyBatch) -> None:
        """Hash and store ``keys``: in pure Python for a few, in numpy for more."""
        if len(keys.suffixes) <= SMALL_BATCH:
            hashes = [
                index_key_hash_prefixed(p, s)
                for p, s in zip(keys.prefixes, keys.suffixes, strict=True)
            ]
            self._put_keys(hashes, keys.phys, keys.stamps)
        else:
            hashes_arr = index_key_hashes_prefixed(keys.prefixes, keys.suffixes)
            self._put_batch(hashes_arr, keys.phys, keys.stamps)

    def _prefix_hash(self, topic: str) -> int:
        if len(self._prefix_hashes) >= 100_000:
            self._prefix_hashes.clear()
        h = self._prefix_hashes[topic] = prefix_hash(f"{topic}#")
        return h

    def _put_keys(self, hashes: list[int], phys: list[int], stamps: list[int]) -> None:
        done = 0
        while done < len(hashes):
            f = self._writable_file()
            done += f.put_keys(hashes[done:], phys[done:], stamps[done:])

    def _put_batch(
        self,
        hashes: np.ndarray,
        phys: list[int],
        stamps: list[int],
        next_file: Callable[[], IndexFile | None] | None = None,
    ) -> int:
        """Put the keys into ``next_file()`` (the writable file by default) until all are in
        or it gives None; return how many went in."""
        phy_arr = np.array(phys, dtype=np.int64)
        ts_arr = np.array(stamps, dtype=np.int64)
        take = next_file or self._writable_file
        done = 0
        while done < len(hashes):
            f = take()
            if f is None:
                break
            done += f.put_batch(hashes[done:], phy_arr[done:], ts_arr[done:])
        return done

    def _complete_newest(
        self,
        run: DispatchRequest,
        phys: int,
        props: dict[str, str],
        prefix: int,
        keys: _KeyBatch,
    ) -> None:
        """Offer the keys the newest indexed record may lack.

        Its keys may have straddled two index files with a crash or a full disk before the
        second: only the missing ones are added.
        """
        missing = _missing_suffixes(prefix, props, phys, self.files[-2:])
        keys.add(prefix, missing, phys, run.store_timestamp)

    def _writable_file(self) -> IndexFile:
        last = self.files[-1] if self.files else None
        if last is not None and not last.is_write_full:
            return last
        end_phy = last.end_phy_offset if last else 0
        end_ts = last.end_timestamp if last else 0
        if last is not None:
            self.unflushed_full.append(last)
        ms = self.clock_ms()  # the file creates the directory if missing (MappedFile)
        path = self.directory / timestamp_file_name(ms)
        while path.exists() or (self.files and path.name <= self.files[-1].path.name):
            ms += 1
            path = self.directory / timestamp_file_name(ms)
        f = IndexFile(
            path,
            self.hash_slot_num,
            self.index_num,
            create=True,
            end_phy_offset=end_phy,
            end_timestamp=end_ts,
        )
        self.files.append(f)
        return f

    # -- lost files (recovery) -------------------------------------------------------------
    def uncovered(self, log_min: int, log_end: int) -> list[tuple[int, int, int]]:
        """Stretches of the commitlog before or between index files that no file vouches for.

        Each is ``(after, before, position)``: the records with ``after <= offset <= before``
        would sit in a file at ``position`` of :attr:`files`. A file vouches for the records
        from its first entry to its ``end_phy_offset`` (keyless ones included); a stretch holds
        records with keys only when a file was lost. The records at ``after`` and ``before``
        are the neighbours' last and first: their keys may have straddled into the lost file
        (:meth:`backfill` adds only the keys the neighbours lack). Records past the last
        file's end are not listed: dispatch indexes them (:attr:`indexed_up_to`).
        """
        out = []
        after = log_min - 1
        for position, f in enumerate(self.files):
            if f.index_count > 1:
                before = min(f.begin_phy_offset, log_end)
                if before - after > 1:
                    out.append((after, before, position))
            after = max(after, f.end_phy_offset)
        return out

    def backfill(self, records: Sequence[LostIndexRecord], position: int) -> int:
        """Index ``records`` (commitlog order) into new files placed at ``position`` of
        :attr:`files`, named to sort there, as the lost file was; return the entries written.

        A record the neighbouring files also point at (the stretch's boundary records, see
        :meth:`uncovered`) gets only the keys they lack. Fewer than all when no file name is
        left between the neighbours (logged).
        """
        keys = self._lost_keys(records, position)
        if not keys.suffixes:
            return 0
        lower = self.files[position - 1].path.name if position else ""
        upper = self.files[position].path.name
        made: list[IndexFile] = []

        def next_file() -> IndexFile | None:
            if made and not made[-1].is_write_full:
                return made[-1]
            name = name_between(made[-1].path.name if made else lower, upper, keys.stamps[0])
            if name is None:
                return None
            f = IndexFile(self.directory / name, self.hash_slot_num, self.index_num, create=True)
            made.append(f)
            return f

        hashes = index_key_hashes_prefixed(keys.prefixes, keys.suffixes)
        done = self._put_batch(hashes, keys.phys, keys.stamps, next_file)
        for f in made:
            f.flush()
        self.files[position:position] = made
        if done < len(hashes):
            log.warning(
                "index: %d keys of a lost file not rebuilt: no file name left between %s and %s",
                len(hashes) - done,
                lower or "the start",
                upper,
            )
        return done

    def _lost_keys(self, records: Sequence[LostIndexRecord], position: int) -> _KeyBatch:
        """The keys of ``records`` that the files around ``position`` do not hold."""
        neighbours = self.files[max(position - 1, 0) : position + 1]
        low = self.files[position - 1].end_phy_offset if position else -1
        high = self.files[position].begin_phy_offset
        keys = _KeyBatch()
        for rec in records:
            prefix = self._prefix_hashes.get(rec.topic) or self._prefix_hash(rec.topic)
            phys, stamp = rec.phys_offset, rec.store_timestamp
            if low < phys < high:
                keys.add_record(prefix, rec.properties, phys, stamp)
            else:
                keys.add(
                    prefix, _missing_suffixes(prefix, rec.properties, phys, neighbours), phys, stamp
                )
        return keys

    # -- lookup ----------------------------------------------------------------------------
    def query_offsets(
        self,
        topic: str,
        key: str,
        max_num: int,
        begin: int,
        end: int,
    ) -> tuple[list[int], int, int]:
        """Offsets of records whose ``topic#key`` hash matches, newest file first.

        Returns ``(offsets, last_update_timestamp, last_update_phy_offset)``.
        """
        return run_steps(self.query_steps(topic, key, max_num, begin, end))

    def query_steps(
        self, topic: str, key: str, max_num: int, begin: int, end: int
    ) -> Generator[None, None, tuple[list[int], int, int]]:
        """:meth:`query_offsets` in steps: yields after every :attr:`walk_step` entries read.

        A key many records share, queried for an old time window, has its whole chain of
        newer entries read first (millions of entries, seconds of pure Python); an event loop
        running the steps lets other tasks run between two. Pausing is safe where the steps
        run on the thread that indexes (the broker's loop) and retention runs elsewhere: the
        files are those of the first step (retention's ``delete_expired`` and new files change
        only :attr:`files`), entries are only appended (:meth:`IndexFile.walk_phy_offsets`),
        and a file retention deletes stays mapped while a walk holds it
        (:meth:`MappedFile.destroy` does not unmap). Only :meth:`close` unmaps: a walk
        resumed after it raises ValueError.
        """
        max_num = min(max_num, self.max_msgs_num_batch)
        key_hash = index_key_hash(f"{topic}#{key}")
        out: list[int] = []
        files = list(self.files)
        if not files:
            return out, 0, 0
        last_ts, last_phy = files[-1].end_timestamp, files[-1].end_phy_offset
        done = 0  # entries read
        for f in reversed(files):
            if f.is_time_matched(begin, end):
                done = yield from f.walk_phy_offsets(
                    key_hash, max_num, begin, end, out, step=self.walk_step, done=done
                )
            if f.begin_timestamp < begin or len(out) >= max_num:
                break
        return out, last_ts, last_phy

    # -- maintenance -----------------------------------------------------------------------
    def delete_expired(self, commitlog_min_offset: int) -> int:
        """Delete files (never the last) whose every entry points below the commitlog's start;
        the deletions are durable (one directory sync) on return."""
        deleted = 0
        try:
            while len(self.files) > 1 and self.files[0].end_phy_offset < commitlog_min_offset:
                f = self.files[0]
                f.destroy()  # an unlink that fails raises with the file kept, tried next pass
                self.files.pop(0)
                if f in self.unflushed_full:
                    self.unflushed_full.remove(f)
                deleted += 1
        finally:
            if deleted:
                mapped_file.fsync_directory(self.directory)
        return deleted

    def flush(self) -> None:
        """Flush full files not yet flushed, then the file being written."""
        while self.unflushed_full:
            f = self.unflushed_full[0]
            f.flush()
            self.last_full_end_timestamp = f.end_timestamp
            self.unflushed_full.pop(0)
        if self.files:
            self.files[-1].flush()

    def close(self) -> None:
        """Unmap every file."""
        for f in self.files:
            f.close()
