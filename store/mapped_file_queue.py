"""MappedFileQueue: the ordered files of one log (the commitlog, or one consume queue).

Offsets are global across the queue: the file holding ``offset`` starts at
``offset - offset % file_size``. Files are found by arithmetic, rolled, truncated and deleted here.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from store import mapped_file
from store.errors import CorruptFileError
from store.mapped_file import MappedFile, is_mapped_file_name, offset_to_name, remove_temp_files


class MappedFileQueue:
    """Ordered, contiguous mapped files of one fixed size."""

    def __init__(self, directory: Path, file_size: int) -> None:
        self.directory = Path(directory)
        self.file_size = file_size
        self.files: list[MappedFile] = []
        self._deletions_unsynced = False
        """Files were deleted since the directory was last synced (:meth:`sync_deletions`)."""

    # -- loading ---------------------------------------------------------------------------
    def load(self) -> bool:
        """Map the existing files; return False if the sequence has a gap (files after it dropped).

        A last file of the wrong size (a crash during creation before minimq made creation
        atomic) is removed; any other wrong size is a :class:`CorruptFileError`. Every file
        but the last is complete: it keeps only its mapping's descriptor.
        """
        if not self.directory.is_dir():
            return True
        remove_temp_files(self.directory)
        names = sorted(p.name for p in self.directory.iterdir() if is_mapped_file_name(p.name))
        contiguous = True
        for i, name in enumerate(names):
            path = self.directory / name
            size = path.stat().st_size
            if size != self.file_size:
                if i == len(names) - 1 and size < self.file_size:
                    path.unlink()
                    break
                raise CorruptFileError(path, f"size {size}, expected {self.file_size}")
            if self.files and int(name) != self.files[-1].file_from_offset + self.file_size:
                contiguous = False
                break
            if self.files:
                self.files[-1].release_descriptor()
            mf = MappedFile(path, self.file_size, create=False)
            mf.wrote_position = mf.flushed_position = self.file_size
            self.files.append(mf)
        return contiguous

    # -- lookup ----------------------------------------------------------------------------
    @property
    def min_offset(self) -> int:
        """Start offset of the first file (0 when empty)."""
        return self.files[0].file_from_offset if self.files else 0

    @property
    def max_offset(self) -> int:
        """Offset just past the last written byte (0 when empty)."""
        if not self.files:
            return 0
        last = self.files[-1]
        return last.file_from_offset + last.wrote_position

    @property
    def flushed_offset(self) -> int:
        """Offset up to which every file is flushed.

        Read from the flushed positions only: the write position of the last file may grow
        (an append from another thread) after it was compared, and what it added is not
        flushed.
        """
        files = self.files
        for mf in files:
            flushed = mf.flushed_position
            if flushed < mf.wrote_position:
                return mf.file_from_offset + flushed
        if not files:
            return 0
        last = files[-1]
        return last.file_from_offset + last.flushed_position

    def last_file(self) -> MappedFile | None:
        """The file being written, if any."""
        return self.files[-1] if self.files else None

    def find(self, offset: int) -> MappedFile | None:
        """The file whose range holds ``offset``, or None."""
        if not self.files:
            return None
        i = (offset - self.files[0].file_from_offset) // self.file_size
        if 0 <= i < len(self.files):
            mf = self.files[i]
            if mf.file_from_offset <= offset < mf.file_from_offset + self.file_size:
                return mf
        return None

    def file_start(self, offset: int) -> int:
        """Start offset of the file that would hold ``offset``."""
        return offset - offset % self.file_size

    # -- growth ----------------------------------------------------------------------------
    def create_file(self, start_offset: int) -> MappedFile:
        """Create, allocate and map the file starting at ``start_offset``, as the new last file.

        The file before it, if already flushed to its end (a full last file found on disk),
        keeps only its mapping's descriptor from now on.
        """
        if start_offset % self.file_size:
            raise ValueError(f"{start_offset} is not a multiple of {self.file_size}")
        if self.files and start_offset != self.files[-1].file_from_offset + self.file_size:
            raise ValueError(f"file at {start_offset} would not follow {self.files[-1]}")
        # the file creates the directory if missing; its first flush names both durably
        mf = MappedFile(self.directory / offset_to_name(start_offset), self.file_size, create=True)
        if self.files:
            self.files[-1].release_descriptor_if_complete()
        self.files.append(mf)
        return mf

    def writable_file(self, start_if_empty: int = 0) -> MappedFile:
        """The last file if it has room, else a new one after it (or at ``start_if_empty``)."""
        last = self.last_file()
        if last is None:
            return self.create_file(self.file_start(start_if_empty))
        if last.is_full:
            return self.create_file(last.file_from_offset + self.file_size)
        return last

    # -- shrinking -------------------------------------------------------------------------
    def truncate_dirty(self, offset: int) -> None:
        """Drop everything at or after ``offset``: later files are deleted, the tail zeroed.

        The cut is made durable before this returns (the zeroed file synced, the directory
        synced after deletions). Otherwise a power cut after new data was written past
        ``offset`` could bring back, behind the new data, what was cut: a consume queue would
        then hold units from before the cut, pointing at records that are gone.
        """
        keep: list[MappedFile] = []
        doomed: list[MappedFile] = []
        for mf in self.files:
            if mf.file_from_offset + self.file_size <= offset:
                mf.release_descriptor_if_complete()  # a full last file found on disk
                keep.append(mf)
            elif mf.file_from_offset <= offset:
                pos = offset - mf.file_from_offset
                if mf.zero_from(pos):
                    mf.sync()
                mf.wrote_position = pos
                mf.flushed_position = min(mf.flushed_position, pos)
                keep.append(mf)
            else:
                doomed.append(mf)
        for mf in reversed(doomed):  # newest first: a crash in between leaves no hole
            self._deletions_unsynced = True
            mf.destroy()
        self.files = keep
        self.sync_deletions()

    def delete_first_files(
        self, should_delete: Callable[[MappedFile], bool], max_count: int
    ) -> int:
        """Delete leading files (never the last one) while ``should_delete`` says so.

        A file leaves the list only once it is gone from the disk: when its unlink fails the
        ``OSError`` propagates with the file still first (readable through its mapping), so
        the next pass tries it again and the files on disk stay contiguous for the next load.
        The deletions are durable only after :meth:`sync_deletions` (one directory sync for a
        whole batch).
        """
        deleted = 0
        while deleted < max_count and len(self.files) > 1 and should_delete(self.files[0]):
            self._deletions_unsynced = True
            self.files[0].destroy()
            self.files.pop(0)
            deleted += 1
        return deleted

    def delete_last_file(self) -> None:
        """Delete the last file (RocketMQ's ``deleteLastMappedFile``); durable after
        :meth:`sync_deletions`."""
        self._deletions_unsynced = True
        self.files.pop().destroy()

    def destroy(self) -> None:
        """Delete every file (durable after :meth:`sync_deletions`)."""
        self._deletions_unsynced = bool(self.files) or self._deletions_unsynced
        for mf in self.files:
            mf.destroy()
        self.files = []

    def sync_deletions(self) -> None:
        """Sync the directory once if files were deleted since the last sync, so that a power
        cut cannot bring them back (an unlink is durable only once its directory is synced)."""
        if self._deletions_unsynced and self.directory.is_dir():
            mapped_file.fsync_directory(self.directory)
        self._deletions_unsynced = False

    # -- durability ------------------------------------------------------------------------
    def flush(self) -> int:
        """Flush every file with unflushed data; return the flushed offset."""
        for mf in list(self.files):
            if mf.flushed_position < mf.wrote_position and not mf.closed:
                mf.flush()
        return self.flushed_offset

    def close(self) -> None:
        """Unmap every file."""
        for mf in self.files:
            mf.close()
