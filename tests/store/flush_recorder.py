"""Test instrumentation: record what the store made durable, to simulate a power failure.

A SIGKILL cannot prove a flush policy: the page cache survives it. So the crash child can
install this recorder (``install``), which wraps the store's durability calls and appends one
line per completed call to a log, and :func:`power_loss` rewrites the store's files after the
kill as a power failure would have left them:

- ``C seq path``: a mapped file was created (allocated and renamed into place);
- ``A seq path``: a new mapped file's allocation was synced, under its temporary name ``path``
  (before the rename: the size is durable whenever the name is);
- ``M seq dir``: a directory was created (its name is durable only once its parent is synced
  after that, as a file's);
- ``D seq dir``: a directory was synced (``seq`` taken before the call, so a file counts as
  named durably only when a sync that *started* after its creation completed);
- ``F pos path``: a mapped file was flushed up to ``pos`` (read before the call: conservative);
- ``S snapshot path``: a file was synced whole (an index file or the checkpoint, written in
  place; or a commitlog or consume-queue file that recovery cut), and ``snapshot`` holds its
  bytes as synced.

The path comes last on every line, so a path with spaces still parses.

A file created in this run whose allocation (``posix_fallocate``) no sync covered, neither
at creation (``A``) nor by a flush, has a durable name at best, not a durable size: so
:func:`power_loss` may give such a file back with its whole size, size 0, or cut short.

The wrappers only observe: each calls the store's own function and records after it returned.
"""

from __future__ import annotations

import itertools
import os
import random
import shutil
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

PAGE = 4096
TMP_SUFFIX = ".tmp"  # a new mapped file's name until it is renamed into place


def install(
    log_path: Path, snapshot_dir: Path, patch: Callable[[Any, str, Any], None] = setattr
) -> None:
    """Wrap the store's durability calls in this process; see the module docstring.

    ``patch`` sets each wrapper in place (a test passes ``monkeypatch.setattr``, to have them
    taken out again after it)."""
    from store import checkpoint as checkpoint_mod
    from store import mapped_file as mapped_file_mod

    snapshot_dir.mkdir(parents=True, exist_ok=True)
    log_path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    seq = itertools.count()

    def note(line: str) -> None:
        os.write(fd, (line + "\n").encode())

    def snapshot(path: Path, data: bytes) -> str:
        name = f"{next(seq):08d}"
        (snapshot_dir / name).write_bytes(data)
        return name

    create = mapped_file_mod._create_allocated

    def recorded_create(path: Path, size: int) -> int:
        out = create(path, size)
        note(f"C {next(seq)} {path}")
        return out

    sync_allocation = mapped_file_mod.sync_allocation

    def recorded_sync_allocation(fd: int) -> None:
        sync_allocation(fd)
        note(f"A {next(seq)} {os.readlink(f'/proc/self/fd/{fd}')}")

    def recorded_dir_sync(fsync_directory: Callable[[Path], None]) -> Callable[[Path], None]:
        def recorded_fsync_directory(directory: Path) -> None:
            started = next(seq)
            fsync_directory(directory)
            note(f"D {started} {directory}")

        return recorded_fsync_directory

    recorded_fsync_directory = recorded_dir_sync(mapped_file_mod.fsync_directory)

    mf_cls = mapped_file_mod.MappedFile
    flush, sync = mf_cls.flush, mf_cls.sync

    def recorded_flush(self: Any) -> int:
        pos = self.wrote_position
        out = flush(self)
        note(f"F {min(pos, out)} {self.path}")  # a closed file flushes nothing
        return out

    def recorded_sync(self: Any) -> None:
        data = bytes(self.mm)
        sync(self)
        note(f"S {snapshot(self.path, data)} {self.path}")

    real_mkdir = os.mkdir

    def recorded_mkdir(path: Any, mode: int = 0o777, *, dir_fd: int | None = None) -> None:
        real_mkdir(path, mode, dir_fd=dir_fd)
        if dir_fd is None:
            note(f"M {next(seq)} {Path(path).absolute()}")

    cp_cls = checkpoint_mod.StoreCheckpoint
    cp_flush = cp_cls.flush

    def recorded_checkpoint_flush(self: Any) -> None:
        cp_flush(self)
        note(f"S {snapshot(self.path, bytes(self.mm))} {self.path}")

    from common import json_store
    from store import message_store

    patch(mapped_file_mod, "_create_allocated", recorded_create)
    patch(mapped_file_mod, "sync_allocation", recorded_sync_allocation)
    patch(mapped_file_mod, "fsync_directory", recorded_fsync_directory)
    patch(mf_cls, "flush", recorded_flush)
    patch(mf_cls, "sync", recorded_sync)
    patch(cp_cls, "flush", recorded_checkpoint_flush)
    patch(os, "mkdir", recorded_mkdir)  # pathlib's mkdir calls it
    # the crash-safe JSON files (deletedTopics.json, the broker's config/*.json) sync their own
    patch(json_store, "_fsync_dir", recorded_dir_sync(json_store._fsync_dir))
    # the message store imported the helper by name: point it at the recorder too
    patch(message_store, "fsync_directory", recorded_fsync_directory)


def abandon(store: Any) -> None:
    """Leave an open store as a killed process would: unmap everything, flush nothing."""
    store.running = False
    for cq in store.consume_queues():
        cq.close()
    store.index.close()
    store.commitlog.queue.close()
    store.checkpoint.abandon()
    store._release_lock()


@dataclass
class Durable:
    """What the log says was made durable."""

    created: dict[Path, int] = field(default_factory=dict)
    made_dirs: dict[Path, int] = field(default_factory=dict)
    allocated: set[Path] = field(default_factory=set)
    dir_syncs: dict[Path, list[int]] = field(default_factory=dict)
    flushed: dict[Path, int] = field(default_factory=dict)
    snapshots: dict[Path, str] = field(default_factory=dict)

    @classmethod
    def read(cls, log_path: Path) -> Durable:
        """Parse a recorder log (a line cut short by the kill is ignored)."""
        out = cls()
        text = log_path.read_text() if log_path.exists() else ""
        for line in text.split("\n")[:-1]:
            kind, a, b = line.split(" ", 2)
            if kind == "C":
                out.created[Path(b)] = int(a)
            elif kind == "A":
                out.allocated.add(Path(b.removesuffix(TMP_SUFFIX)))
            elif kind == "M":
                out.made_dirs[Path(b)] = int(a)
            elif kind == "D":
                out.dir_syncs.setdefault(Path(b), []).append(int(a))
            elif kind == "F":
                out.flushed[Path(b)] = max(out.flushed.get(Path(b), 0), int(a))
            elif kind == "S":
                out.snapshots[Path(b)] = a
        return out

    def entry_durable(self, path: Path) -> bool:
        """False for a file or directory created in this run whose directory was not synced
        after."""
        made = self.created.get(path, self.made_dirs.get(path))
        return made is None or any(s > made for s in self.dir_syncs.get(path.parent, []))

    def name_durable(self, path: Path) -> bool:
        """True when ``path``'s entry, and that of every directory above it created in this
        run, is durable: a file in a directory whose own name was lost is lost with it."""
        return self.entry_durable(path) and all(
            self.entry_durable(d) for d in path.parents if d in self.made_dirs
        )

    def size_durable(self, path: Path) -> bool:
        """False for a file created in this run whose allocation no sync covered: not at
        creation, not by a flush or a whole-file sync."""
        return (
            path not in self.created
            or path in self.allocated
            or self.flushed.get(path, 0) > 0
            or path in self.snapshots
        )


@dataclass
class PowerLossReport:
    """What :func:`power_loss` did."""

    deleted: list[str] = field(default_factory=list)
    resized: dict[str, int] = field(default_factory=dict)
    """Files created in this run whose size was not durable: the size they came back with."""
    reverted_pages: int = 0


def power_loss(
    store_dir: Path,
    baseline_dir: Path | None,
    log_path: Path,
    snapshot_dir: Path,
    seed: int,
    *,
    writeback: bool = True,
    index_writeback: bool = False,
) -> PowerLossReport:
    """Rewrite ``store_dir`` as a power failure right after the kill would have left it.

    ``baseline_dir`` holds the store as it was on disk when the killed process started (None
    for a new store). Files whose name was never made durable are deleted. A commitlog or
    consume-queue file keeps what was flushed; past that, it holds what was on disk before:
    its last whole-file sync in this run (recovery syncs a file it cut), else the baseline
    (zeros for a new file). Over that, write-back may have saved some of the unflushed pages:
    none, a prefix, or any of them, in no order (``writeback=False``: none). A file flushed
    in this run was made durable whole, as it was then; past the flushed end that is the
    same as before (appends only ever go at the end), so this needs no more than that.
    Index files and the checkpoint become their last synced snapshot, else the baseline;
    with ``index_writeback``, write-back may also have saved any pages of an index file since
    (as it may: index files are written in place through the mapping), so a header or a slot
    can be newer than the entries it counts or points at. Directories created in this run whose
    names were never made durable go with everything in them; a file created in this run that
    no flush or sync covered may come back with its whole size, size 0 or cut short.
    """
    durable = Durable.read(log_path)
    rng = random.Random(seed)
    size_rng = random.Random(seed ^ 0x5EED)  # its own stream: ``rng``'s choices stay as they were
    report = PowerLossReport()
    for directory in sorted(d for d in durable.made_dirs if d.is_relative_to(store_dir)):
        if directory.is_dir() and not durable.name_durable(directory):
            shutil.rmtree(directory)
            report.deleted.append(str(directory.relative_to(store_dir)) + "/")
    for path in sorted(p for p in store_dir.rglob("*") if p.is_file()):
        rel = path.relative_to(store_dir)
        base_path = baseline_dir / rel if baseline_dir is not None else None
        base = base_path.read_bytes() if base_path is not None and base_path.exists() else None
        if not durable.name_durable(path):
            path.unlink()
            report.deleted.append(str(rel))
            continue
        if path in durable.created:
            base = None  # a new file (a new inode, even where one of that name was deleted)
        snap = durable.snapshots.get(path)
        if snap is not None:
            base = (snapshot_dir / snap).read_bytes()
        if rel.parts[0] == "index" or rel.name == "checkpoint":
            data = base or bytes(path.stat().st_size)
            if index_writeback and rel.parts[0] == "index":
                pages = _pages_written_back(path.stat().st_size, 0, rng)
                data = _append_only_after_loss(path, data, 0, pages, report)
        elif rel.parts[0] in ("commitlog", "consumequeue"):
            flushed = durable.flushed.get(path, 0)
            pages = _pages_written_back(path.stat().st_size, flushed, rng) if writeback else []
            data = _append_only_after_loss(path, base, flushed, pages, report)
        else:
            continue
        if not durable.size_durable(path):
            data = data[: _size_after_loss(len(data), size_rng)]
            report.resized[str(rel)] = len(data)
        path.write_bytes(data)
    return report


def _size_after_loss(size: int, rng: random.Random) -> int:
    """The size a file whose allocation was not durable comes back with: whole, 0, or short."""
    kind = rng.randrange(3)
    if kind == 0:
        return size
    if kind == 1 or size <= PAGE:
        return 0
    return rng.randrange(1, -(-size // PAGE)) * PAGE


def _pages_written_back(size: int, flushed: int, rng: random.Random) -> list[int]:
    """Unflushed pages that write-back saved: none, a prefix of them, or any of them."""
    pages = list(range(flushed // PAGE, -(-size // PAGE)))
    kind = rng.randrange(3)
    if kind == 0 or not pages:
        return []
    if kind == 1:
        return pages[: rng.randint(0, len(pages))]
    return [p for p in pages if rng.random() < 0.5]


def _append_only_after_loss(
    path: Path, base: bytes | None, flushed: int, pages: list[int], report: PowerLossReport
) -> bytes:
    current = path.read_bytes()
    data = bytearray(base if base is not None and len(base) == len(current) else len(current))
    data[:flushed] = current[:flushed]
    for page in pages:
        data[page * PAGE : (page + 1) * PAGE] = current[page * PAGE : (page + 1) * PAGE]
    report.reverted_pages += sum(
        current[i : i + PAGE] != data[i : i + PAGE] for i in range(0, len(current), PAGE)
    )
    return bytes(data)
