"""Exceptions for broken invariants and environment failures in the store.

Expected outcomes (a full disk on put, an offset out of range) are statuses in ``store.status``;
these exceptions are for callers that must stop or repair something.
"""

from __future__ import annotations

from pathlib import Path


class StoreError(Exception):
    """Base of every store exception."""


class MappedFileCreateError(StoreError):
    """A mapped file could not be created: usually the disk is full or a size limit is hit."""

    def __init__(self, path: Path, size: int, errno: int | None, reason: str) -> None:
        super().__init__(f"cannot create {path} ({size} bytes): {reason}")
        self.path = path
        self.size = size
        self.errno = errno
        self.reason = reason
        """Why, without the path (e.g. ``ENOSPC No space left on device``)."""


class StoreLockedError(StoreError):
    """Another process holds the store directory open."""

    def __init__(self, root: Path) -> None:
        super().__init__(f"store {root} is locked by another process")
        self.root = root


class CorruptFileError(StoreError):
    """A store file has an impossible size or name; the caller must not guess."""

    def __init__(self, path: Path, reason: str) -> None:
        super().__init__(f"{path}: {reason}")
        self.path = path
        self.reason = reason
