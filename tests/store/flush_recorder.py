"""Test instrumentation: record what the store made durable, to simulate a power failure.

A SIGKILL cannot prove a flush policy: the page cache survives it. So the crash child can
install this recorder (``install``), which wraps the store's durability calls and appends one
line per completed call to a log, and :func:`power_loss` rewrites the store's files after the
kill as a power failure would have left them:

- ``C seq path``: a mapped file was created (allocated and renamed into place);
- ``D seq dir``: a directory was synced (``seq`` taken before the call, so a file counts as
  named durably only when a sync that *started* after its creation completed);
- ``F pos path``: a mapped file was flushed up to ``pos`` (read before the call: conservative);
- ``S snapshot path``: a file written in place (an index file, the checkpoint) was synced, and
  ``snapshot`` holds its bytes as synced.

The path comes last on every line, so a path with spaces still parses.

The wrappers only observe: each calls the store's own function and records after it returned.
"""

from __future__ import annotations

import itertools
import os
import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

PAGE = 4096


def install(log_path: Path, snapshot_dir: Path) -> None:
    """Wrap the store's durability calls in this process; see the module docstring."""
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

    fsync_directory = mapped_file_mod.fsync_directory

    def recorded_fsync_directory(directory: Path) -> None:
        started = next(seq)
        fsync_directory(directory)
        note(f"D {started} {directory}")

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

    cp_cls = checkpoint_mod.StoreCheckpoint
    cp_flush = cp_cls.flush

    def recorded_checkpoint_flush(self: Any) -> None:
        cp_flush(self)
        note(f"S {snapshot(self.path, bytes(self.mm))} {self.path}")

    mapped_file_mod._create_allocated = recorded_create  # type: ignore[assignment]
    mapped_file_mod.fsync_directory = recorded_fsync_directory  # type: ignore[assignment]
    mf_cls.flush = recorded_flush  # type: ignore[method-assign]
    mf_cls.sync = recorded_sync  # type: ignore[method-assign]
    cp_cls.flush = recorded_checkpoint_flush  # type: ignore[method-assign]
    # the message store imported the helper by name: point it at the recorder too
    from store import message_store

    message_store.fsync_directory = recorded_fsync_directory  # type: ignore[attr-defined]


@dataclass
class Durable:
    """What the log says was made durable."""

    created: dict[Path, int] = field(default_factory=dict)
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
            elif kind == "D":
                out.dir_syncs.setdefault(Path(b), []).append(int(a))
            elif kind == "F":
                out.flushed[Path(b)] = max(out.flushed.get(Path(b), 0), int(a))
            elif kind == "S":
                out.snapshots[Path(b)] = a
        return out

    def name_durable(self, path: Path) -> bool:
        """False for a file created in this run whose directory was not synced after."""
        made = self.created.get(path)
        return made is None or any(s > made for s in self.dir_syncs.get(path.parent, []))


@dataclass
class PowerLossReport:
    """What :func:`power_loss` did."""

    deleted: list[str] = field(default_factory=list)
    reverted_bytes: int = 0


def power_loss(
    store_dir: Path, baseline_dir: Path | None, log_path: Path, snapshot_dir: Path, seed: int
) -> PowerLossReport:
    """Rewrite ``store_dir`` as a power failure right after the kill would have left it.

    ``baseline_dir`` holds the store as it was on disk when the killed process started (None
    for a new store). Files whose name was never made durable are deleted. Commitlog and
    consume-queue files keep what was flushed plus a random page-aligned prefix of what was not
    (write-back may have saved some); the rest reverts to the baseline (zeros for new files).
    Index files and the checkpoint become their last synced snapshot, else the baseline.
    """
    durable = Durable.read(log_path)
    rng = random.Random(seed)
    report = PowerLossReport()
    for path in sorted(p for p in store_dir.rglob("*") if p.is_file()):
        rel = path.relative_to(store_dir)
        base_path = baseline_dir / rel if baseline_dir is not None else None
        base = base_path.read_bytes() if base_path is not None and base_path.exists() else None
        if not durable.name_durable(path):
            path.unlink()
            report.deleted.append(str(rel))
            continue
        if rel.parts[0] == "index" or rel.name == "checkpoint":
            snap = durable.snapshots.get(path)
            current = path.read_bytes()
            data = (snapshot_dir / snap).read_bytes() if snap else base or bytes(len(current))
        elif rel.parts[0] in ("commitlog", "consumequeue"):
            data = _append_only_after_loss(path, base, durable.flushed.get(path, 0), rng, report)
        else:
            continue
        path.write_bytes(data)
    return report


def _append_only_after_loss(
    path: Path, base: bytes | None, flushed: int, rng: random.Random, report: PowerLossReport
) -> bytes:
    current = path.read_bytes()
    old = base if base is not None and len(base) == len(current) else bytes(len(current))
    keep = flushed
    if keep < len(current) and rng.random() < 0.5:  # write-back saved some pages
        pages = (len(current) - keep) // PAGE
        keep = min(len(current), (keep // PAGE + rng.randint(0, pages)) * PAGE)
        keep = max(keep, flushed)
    report.reverted_bytes += sum(current[i] != old[i] for i in range(keep, len(current)))
    return current[:keep] + old[keep:]
