"""Which of some files changed since they were last looked at (RocketMQ's ``FileWatchService``,
polling ``stat`` instead of hashing the contents): no trio, no threads.

Rules:

- A file's stamp is its ``(st_mtime_ns, st_size, st_ino)``: rewriting it in place (new mtime or
  size) and replacing it by a rename (new inode, the safe way to swap a certificate) both
  change it.
- :meth:`FileWatch.changed` returns the watched paths whose stamp differs from the one seen
  last, in the order they were given, and remembers the new stamps: each change is reported
  once.
- A file that is missing or cannot be stat'ed keeps its last stamp and is not reported (as
  RocketMQ's ``FileWatchService`` ignores deletions): while an operator deletes a file and
  copies a new one in its place, nothing is reloaded from a half-done swap; the new file is
  reported once it is there.
- The caller polls (every :data:`DEFAULT_WATCH_INTERVAL_S`, say) and decides what a change
  means.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from typing import Final, TypeAlias

DEFAULT_WATCH_INTERVAL_S: Final = 5.0
"""How often the servers look at the files they reload (RocketMQ's ACL file watch, 5 s)."""

Stamp: TypeAlias = tuple[int, int, int]
"""``(st_mtime_ns, st_size, st_ino)`` of a file."""


def file_stamp(path: str | os.PathLike[str]) -> Stamp | None:
    """The stamp of ``path``, or None when it cannot be stat'ed (missing, no permission)."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_mtime_ns, st.st_size, st.st_ino


class FileWatch:
    """The stamps of some files, and which of them changed (see the module rules)."""

    def __init__(self, paths: Iterable[str]) -> None:
        self.paths = tuple(dict.fromkeys(paths))
        """The watched files, each once, in the order given."""
        self._stamps = {path: file_stamp(path) for path in self.paths}

    def changed(self) -> list[str]:
        """The watched paths whose stamp changed since the last call (or since the watch was
        made); a missing file is not a change."""
        out = []
        for path in self.paths:
            stamp = file_stamp(path)
            if stamp is not None and stamp != self._stamps[path]:
                self._stamps[path] = stamp
                out.append(path)
        return out
