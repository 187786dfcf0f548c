"""MappedFile: one fixed-size, memory-mapped store file named by its 20-digit start offset.

Rules:
- A new file gets its whole size allocated on disk (``posix_fallocate``) under a temporary name
  and is renamed into place only then, so a full disk is a clear error before anything is mapped
  (never a SIGBUS later) and a crash never leaves a half-made file behind.
- Writes go through the mapping; ``flush()`` makes them durable with ``fdatasync`` on the file
  descriptor, which covers a shared mapping's dirty pages on Linux and releases the GIL, so it
  can run in a worker thread while the event loop keeps appending.
- ``wrote_position`` is the end of valid data; ``flushed_position`` what a flush covered.
- A new file's first flush also syncs its directory, so that the name survives a power loss as
  well as the data (``fdatasync`` on the file does not make a new directory entry durable).
  Directories missing on the way to a new file are created with it (a new topic's
  ``consumequeue/<topic>/<queueId>/``); the same first flush syncs the parent of each, whose
  entry names it, so no flushed file sits in a directory a power cut can take away.
- The allocation is synced before the rename, so a name that survives a power cut always
  names a file of its whole size (a directory sync made for another file covers every name in
  the directory, this one's too): what a cut can leave is a missing file or a leftover
  ``.tmp``, never an empty or short file that the log's later files depend on.
- Descriptors: CPython 3.11's ``mmap`` keeps a private duplicate of the descriptor it maps, so
  a file would hold two. Ours is closed once the file will not be written again (the flush
  that covers its whole size, or :meth:`MappedFile.release_descriptor`): a full file holds
  only the mapping's, as RocketMQ's holds one ``FileChannel``. Whatever needs ours later (a
  flush after recovery cut the file back, :meth:`MappedFile.sync`, :meth:`MappedFile.zero_from`)
  opens the file again by its path; ``fdatasync`` through any descriptor of the file syncs all
  of its dirty pages, so durability does not depend on which one.
"""

from __future__ import annotations

import contextlib
import errno as errno_mod
import logging
import mmap
import os
import threading
from collections.abc import Iterator
from pathlib import Path

from store.errors import MappedFileCreateError
from store.prefault import PAGE_SIZE, mapping_address, populate_write

log = logging.getLogger(__name__)

NAME_DIGITS = 20
_TMP_SUFFIX = ".tmp"


def offset_to_name(offset: int) -> str:
    """RocketMQ's ``UtilAll.offset2FileName``: the offset as 20 zero-padded digits."""
    return f"{offset:0{NAME_DIGITS}d}"


def fsync_directory(directory: Path) -> None:
    """Make ``directory``'s entries (files created or renamed in it) durable."""
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def is_mapped_file_name(name: str) -> bool:
    """True for a 20-digit file name."""
    return len(name) == NAME_DIGITS and name.isdigit()


class MappedFile:
    """A fixed-size file mapped into memory; see the module docstring for the rules."""

    def __init__(self, path: Path, file_size: int, *, create: bool) -> None:
        """Map the file at ``path``; with ``create``, make it first (and any missing directory
        on the way: see the module docstring)."""
        self.path = Path(path)
        self.file_size = file_size
        self.file_from_offset = int(self.path.name)
        self.wrote_position = 0
        self.flushed_position = 0
        self._lock = threading.Lock()
        self._closed = False
        self._address: int | None = None
        self._entry_synced = not create  # a file found on disk is named durably already
        self._entry_dirs: list[Path] = []
        """Directories to sync at the first flush, deepest first (see :meth:`_sync_entry`)."""
        if create:
            fd = self._create()
        else:
            fd = os.open(self.path, os.O_RDWR)
        self._fd: int | None = fd
        try:
            self.mm = mmap.mmap(fd, file_size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
        except BaseException:
            os.close(fd)
            raise

    def _create(self) -> int:
        """Create the file and the directories it needs; a failure leaves neither behind."""
        try:
            new_dirs = create_directories(self.path.parent)
        except OSError as exc:
            raise _create_error(self.path, self.file_size, exc) from exc
        try:
            fd = _create_allocated(self.path, self.file_size)
        except BaseException:
            remove_directories(new_dirs)
            raise
        self._entry_dirs = entry_directories(self.path, new_dirs)
        return fd

    @property
    def fd(self) -> int | None:
        """Our descriptor of the file; None once released (see the module docstring)."""
        return self._fd

    @property
    def is_full(self) -> bool:
        """True when nothing more can be written."""
        return self.wrote_position >= self.file_size

    @property
    def free_space(self) -> int:
        """Bytes left after ``wrote_position``."""
        return self.file_size - self.wrote_position

    @property
    def closed(self) -> bool:
        """True after close() or destroy()."""
        return self._closed

    def append(self, data: bytes | bytearray | memoryview) -> int:
        """Write ``data`` at ``wrote_position``; return the position it was written at."""
        pos = self.wrote_position
        end = pos + len(data)
        if end > self.file_size:
            raise ValueError(f"{self.path.name}: {len(data)} bytes do not fit at {pos}")
        self.mm[pos:end] = data
        self.wrote_position = end
        return pos

    def prefault(self, start: int, end: int) -> bool:
        """Populate the pages of ``[start, end)`` for writing (:mod:`store.prefault`).

        Safe from a worker thread: holds the file's lock, so close() waits. False when the
        system cannot do it.
        """
        start -= start % PAGE_SIZE
        end = min(end, self.file_size)
        if end <= start:
            return True
        with self._lock:
            if self._closed:
                return True
            if self._address is None:
                self._address = mapping_address(self.mm)
            return populate_write(self._address + start, end - start)

    def write_at(self, pos: int, data: bytes | bytearray | memoryview) -> None:
        """Write ``data`` at ``pos`` without moving ``wrote_position``."""
        self.mm[pos : pos + len(data)] = data

    def read(self, pos: int, size: int) -> bytes:
        """Copy ``size`` bytes from ``pos``."""
        return self.mm[pos : pos + size]

    def flush(self) -> int:
        """Make everything written so far durable; return the new ``flushed_position``."""
        target = self.wrote_position
        if target <= self.flushed_position:
            return self.flushed_position
        with self._lock:
            if self._closed:
                return self.flushed_position
            os.fdatasync(self._descriptor())
            self._sync_entry()
            if target >= self.file_size:  # full and now durable: written no more
                self._close_descriptor()
        self.flushed_position = max(self.flushed_position, target)
        return self.flushed_position

    def sync(self) -> None:
        """``fdatasync`` the whole file, whatever the positions say (for files written in place)."""
        with self._lock:
            if not self._closed:
                os.fdatasync(self._descriptor())
                self._sync_entry()

    def release_descriptor(self) -> None:
        """Close our descriptor of a file that will not be written again: only the mapping's
        stays. A later flush, sync or zeroing opens the file again (module docstring)."""
        with self._lock:
            self._close_descriptor()

    def release_descriptor_if_complete(self) -> None:
        """:meth:`release_descriptor` when everything up to the file's end is flushed."""
        if self.flushed_position >= self.file_size:
            self.release_descriptor()

    def _descriptor(self) -> int:
        """Our descriptor, opened again by path if it was released; the caller holds the lock
        on an open file."""
        if self._fd is None:
            self._fd = os.open(self.path, os.O_RDWR)
        return self._fd

    def _close_descriptor(self) -> None:
        """Close our descriptor if it is open; the caller holds the lock."""
        fd, self._fd = self._fd, None
        if fd is not None:
            os.close(fd)

    def _sync_entry(self) -> None:
        """Sync the directory once after creation, so the file's name is durable too; and
        its parent, which holds the directory's own name when the file was its first; and the
        parent of every directory created for the file (:func:`entry_directories`)."""
        if not self._entry_synced:
            try:
                for directory in self._entry_dirs:
                    fsync_directory(directory)
            except OSError as exc:
                if exc.errno not in (errno_mod.EMFILE, errno_mod.ENFILE):
                    raise
                # no descriptor to open the directory with (clients took them all): the data
                # itself is synced; the entry is synced at the next flush instead
                log.warning("cannot sync the directory of %s yet: %s", self.path, exc)
                return
            self._entry_synced = True

    def zero_from(self, pos: int, chunk: int = 1 << 20) -> bool:
        """Zero every non-zero byte from ``pos`` to the end (used after truncating a dirty tail);
        True when any byte changed. Only ranges that may hold data are read (see
        :meth:`_data_ranges`), so a mostly empty gigabyte file costs next to nothing."""
        zeros = bytes(chunk)
        changed = False
        with self._lock:  # a flush in another thread may close the descriptor meanwhile
            ranges = list(self._data_ranges(pos))
        for start, stop in ranges:
            while start < stop:
                end = min(start + chunk, stop)
                if self.mm[start:end] != zeros[: end - start]:
                    self.mm[start:end] = zeros[: end - start]
                    changed = True
                start = end
        return changed

    def _data_ranges(self, pos: int) -> Iterator[tuple[int, int]]:
        """The ranges from ``pos`` on that may hold data: holes and never-written (fallocated)
        extents are skipped with ``SEEK_DATA``/``SEEK_HOLE``, which count pages still in the
        page cache as data; where the file system cannot tell, the whole rest. The caller
        holds the lock."""
        if self._closed:
            yield pos, self.file_size
            return
        fd = self._descriptor()
        while pos < self.file_size:
            try:
                start = os.lseek(fd, pos, os.SEEK_DATA)
                stop = os.lseek(fd, start, os.SEEK_HOLE)
            except OSError as exc:
                if exc.errno != errno_mod.ENXIO:  # ENXIO: no data from ``pos`` on
                    yield pos, self.file_size
                return
            if start >= self.file_size:
                return
            yield start, min(stop, self.file_size)
            pos = stop

    def last_modified(self) -> float:
        """The file's modification time (seconds since the epoch). Read through the path once
        the descriptor is closed or released (a destroyed file whose unlink failed: its number
        may be another file's by now)."""
        with self._lock:
            if not self._closed and self._fd is not None:
                return os.stat(self._fd).st_mtime
        return os.stat(self.path).st_mtime

    def close(self) -> None:
        """Unmap and close; waits for a flush in progress."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            self.mm.close()
            self._close_descriptor()

    def destroy(self) -> None:
        """Delete the file and close its descriptor; the mapping goes with the last reference.

        Retention destroys files in a worker thread while the event loop may be reading one:
        the mmap is not closed here (a racing read would raise "mmap closed"), CPython unmaps
        it when the last reader drops this object, and only then is the disk space freed.
        """
        with self._lock:
            if not self._closed:
                self._closed = True
                self._close_descriptor()
        with contextlib.suppress(FileNotFoundError):
            self.path.unlink()

    def __repr__(self) -> str:
        return (
            f"MappedFile({self.path.name}, wrote={self.wrote_position}, "
            f"flushed={self.flushed_position})"
        )


def sync_allocation(fd: int) -> None:
    """Make a new file's allocation (its size) durable before it is renamed into place."""
    os.fdatasync(fd)


def _create_allocated(path: Path, size: int) -> int:
    """Allocate ``size`` bytes under a temporary name, sync that, and rename it to ``path``;
    return the descriptor.

    The sync comes before the rename: any directory sync from then on (this file's first
    flush, or another's in the same directory) makes the name durable, and a name must never
    be durable before the size, or a power cut could leave a full-sized file's name on an
    empty or short file in the middle of the log. The name itself is synced by the file's
    first flush (:meth:`MappedFile._sync_entry`). One ``fdatasync`` per new file, no more.
    """
    tmp = path.with_name(path.name + _TMP_SUFFIX)
    fd = -1
    try:
        fd = os.open(tmp, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
        os.posix_fallocate(fd, 0, size)
        sync_allocation(fd)
        os.rename(tmp, path)
        return fd
    except OSError as exc:
        if fd >= 0:
            os.close(fd)
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise _create_error(path, size, exc) from exc


def _create_error(path: Path, size: int, exc: OSError) -> MappedFileCreateError:
    """The clear error for a file that could not be made: the errno's name and message."""
    reason = errno_mod.errorcode.get(exc.errno or 0, "") + f" {exc.strerror}"
    return MappedFileCreateError(path, size, exc.errno, reason.strip())


def create_directories(directory: Path) -> list[Path]:
    """Create ``directory`` and its missing ancestors; return the ones this call created,
    outermost first (one made meanwhile by another thread is not among them)."""
    missing: list[Path] = []
    while not directory.is_dir():
        missing.append(directory)
        directory = directory.parent
    created: list[Path] = []
    for d in reversed(missing):
        try:
            d.mkdir()
        except FileExistsError:
            if not d.is_dir():
                raise
            continue
        created.append(d)
    return created


def remove_directories(created: list[Path]) -> None:
    """Undo :func:`create_directories` (innermost first), leaving any that are not empty."""
    for d in reversed(created):
        with contextlib.suppress(OSError):
            d.rmdir()


def entry_directories(path: Path, created: list[Path]) -> list[Path]:
    """The directories whose sync makes ``path``'s name durable, deepest first: its own, that
    one's parent, and the parent of each directory in ``created``."""
    wanted = {path.parent, path.parent.parent, *(d.parent for d in created)}
    return sorted(wanted, key=lambda d: len(d.parts), reverse=True)


def sync_directory_entries(created: list[Path]) -> None:
    """Make the names of the directories in ``created`` durable (sync each one's parent)."""
    for parent in sorted({d.parent for d in created}, key=lambda d: len(d.parts), reverse=True):
        fsync_directory(parent)


def remove_temp_files(directory: Path) -> None:
    """Delete half-made files a crash left behind during creation."""
    for p in directory.glob("*" + _TMP_SUFFIX):
        with contextlib.suppress(OSError):
            p.unlink()
