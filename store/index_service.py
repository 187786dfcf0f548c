"""IndexService: the ordered index files under ``index/``, batch building and key lookup."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

from common.hashing import (
    index_key_hash,
    index_key_hash_prefixed,
    index_key_hashes_prefixed,
    prefix_hash,
)
from common.message import MessageConst, MessageSysFlag
from store.config import StoreConfig
from store.dispatch_request import DispatchRequest
from store.index_file import IndexFile, index_file_size

SMALL_BATCH = 24
"""At or below this many keys a dispatch indexes in pure Python; above it, in numpy."""


def timestamp_file_name(ms: int) -> str:
    """RocketMQ's ``timeMillisToHumanString``: ``yyyyMMddHHmmssSSS`` in local time."""
    return time.strftime("%Y%m%d%H%M%S", time.localtime(ms / 1000)) + f"{ms % 1000:03d}"


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

    def load(self, *, last_exit_ok: bool) -> None:
        """Map existing index files; after a crash, re-link the last file's cut-short batch."""
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
        if self.files and not last_exit_ok:
            self.files[-1].repair_tail()

    @property
    def indexed_up_to(self) -> int:
        """Commitlog offset of the newest indexed record, or -1 when nothing is indexed."""
        if not self.files:
            return -1
        last = self.files[-1]
        if last.index_count <= 1 and len(self.files) == 1 and last.end_timestamp == 0:
            return -1
        return last.end_phy_offset

    def forget_from(self, phys_offset: int) -> None:
        """The commitlog was cut at ``phys_offset``: records written from there on get indexed.

        Entries already pointing past the cut stay (queries confirm every hit against the
        commitlog), but :attr:`indexed_up_to` must not claim them.
        """
        if self.files and self.indexed_up_to >= phys_offset:
            self.files[-1].end_phy_offset = phys_offset - 1

    # -- building --------------------------------------------------------------------------
    def build_index(self, requests: Sequence[DispatchRequest]) -> None:
        """Index every key of ``requests`` (commitlog order) not already indexed.

        A key is ``topic#suffix``; its hash is combined from the topic's cached prefix hash
        and the suffix's, so no key string is built.
        """
        floor = self.indexed_up_to
        prefixes: list[int] = []
        suffixes: list[str] = []
        phys: list[int] = []
        stamps: list[int] = []
        rollback = MessageSysFlag.TRANSACTION_ROLLBACK_TYPE
        mask = MessageSysFlag.TRANSACTION_MASK
        uniq_key, keys_key = MessageConst.UNIQ_KEY, MessageConst.KEYS
        sep = MessageConst.KEY_SEPARATOR
        topic_prefix = self._prefix_hashes
        for r in requests:
            phys_offset = r[2]
            if phys_offset <= floor or r[7] & mask == rollback:
                if phys_offset == floor:
                    self._complete_newest(r, prefixes, suffixes, phys, stamps)
                continue
            props = r[8]
            uniq = props.get(uniq_key)
            raw = props.get(keys_key)
            if not (uniq or raw):
                continue
            prefix = topic_prefix.get(r[0])
            if prefix is None:
                prefix = self._prefix_hash(r[0])
            if uniq:
                prefixes.append(prefix)
                suffixes.append(uniq)
                phys.append(phys_offset)
                stamps.append(r[5])
            if raw:
                for k in raw.split(sep) if sep in raw else (raw,):
                    if k:
                        prefixes.append(prefix)
                        suffixes.append(k)
                        phys.append(phys_offset)
                        stamps.append(r[5])
        if len(suffixes) <= SMALL_BATCH:
            hashes = [
                index_key_hash_prefixed(p, s) for p, s in zip(prefixes, suffixes, strict=True)
            ]
            self._put_keys(hashes, phys, stamps)
        else:
            self._put_batch(index_key_hashes_prefixed(prefixes, suffixes), phys, stamps)
        if requests and requests[-1].phys_offset > self.indexed_up_to:
            # keyless records count as indexed too, so recovery need not rescan them
            last = requests[-1]
            self._writable_file().mark_covered(last.phys_offset, last.store_timestamp)

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

    def _put_batch(self, hashes: np.ndarray, phys: list[int], stamps: list[int]) -> None:
        phy_arr = np.array(phys, dtype=np.int64)
        ts_arr = np.array(stamps, dtype=np.int64)
        done = 0
        while done < len(hashes):
            f = self._writable_file()
            done += f.put_batch(hashes[done:], phy_arr[done:], ts_arr[done:])

    def _complete_newest(
        self,
        r: DispatchRequest,
        prefixes: list[int],
        suffixes: list[str],
        phys: list[int],
        stamps: list[int],
    ) -> None:
        """Offer the keys the newest indexed record may lack.

        Its keys may have straddled two index files with a crash or a full disk before the
        second: only the missing ones are added.
        """
        if r.sys_flag & MessageSysFlag.TRANSACTION_MASK == MessageSysFlag.TRANSACTION_ROLLBACK_TYPE:
            return
        record_suffixes = r.key_suffixes()
        prefix = self._prefix_hash(r.topic)
        depth = len(record_suffixes) + 1
        for suffix in record_suffixes:
            if not self._has_entry(index_key_hash_prefixed(prefix, suffix), r.phys_offset, depth):
                prefixes.append(prefix)
                suffixes.append(suffix)
                phys.append(r.phys_offset)
                stamps.append(r.store_timestamp)

    def _has_entry(self, key_hash: int, phys: int, depth: int) -> bool:
        """True when one of the two newest files maps ``key_hash`` to ``phys``."""
        return any(
            phys in f.select_phy_offsets(key_hash, depth, 0, 2**63 - 1) for f in self.files[-2:]
        )

    def _writable_file(self) -> IndexFile:
        last = self.files[-1] if self.files else None
        if last is not None and not last.is_write_full:
            return last
        end_phy = last.end_phy_offset if last else 0
        end_ts = last.end_timestamp if last else 0
        if last is not None:
            self.unflushed_full.append(last)
        self.directory.mkdir(parents=True, exist_ok=True)
        ms = self.clock_ms()
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
        max_num = min(max_num, self.max_msgs_num_batch)
        key_hash = index_key_hash(f"{topic}#{key}")
        out: list[int] = []
        last_ts = last_phy = 0
        for f in reversed(self.files):
            if f is self.files[-1]:
                last_ts, last_phy = f.end_timestamp, f.end_phy_offset
            if f.is_time_matched(begin, end):
                out.extend(f.select_phy_offsets(key_hash, max_num - len(out), begin, end))
            if f.begin_timestamp < begin or len(out) >= max_num:
                break
        return out, last_ts, last_phy

    # -- maintenance -----------------------------------------------------------------------
    def delete_expired(self, commitlog_min_offset: int) -> int:
        """Delete files (never the last) whose every entry points below the commitlog's start."""
        deleted = 0
        while len(self.files) > 1 and self.files[0].end_phy_offset < commitlog_min_offset:
            f = self.files.pop(0)
            if f in self.unflushed_full:
                self.unflushed_full.remove(f)
            f.destroy()
            deleted += 1
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
