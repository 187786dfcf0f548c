"""Writing the accounts file so that a crash never leaves it half written, nor readable by
others (it holds every account's secret).

:func:`write_atomic` = :func:`write_temp` then :func:`install`:

1. :func:`write_temp`: ``<name>.tmp`` in the same directory, created (or truncated) with mode
   0600 and ``fchmod`` to 0600 whatever the umask or a leftover file's mode, written in full
   and fsynced;
2. :func:`install`: renamed over ``<name>`` (:func:`os.replace`, atomic within a directory),
   then the directory is fsynced so the rename itself survives a power cut.

A crash before the rename leaves ``<name>`` as it was (the leftover ``.tmp`` is ignored by the
loader and the file watch, and replaced by the next write); after it, ``<name>`` is the new
file. A failed write removes its ``.tmp`` and raises OSError with ``<name>`` untouched.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Final

from common.json_store import temp_path

FILE_MODE: Final = stat.S_IRUSR | stat.S_IWUSR
"""0600: only the broker's user may read the secrets."""


def write_temp(path: Path, text: str) -> Path:
    """Step 1: ``text`` durably in ``<path>.tmp`` (mode 0600); that path."""
    tmp = temp_path(path)
    data = memoryview(text.encode("utf-8"))
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, FILE_MODE)
        try:
            os.fchmod(fd, FILE_MODE)
            while data:
                data = data[os.write(fd, data) :]
            os.fsync(fd)
        finally:
            os.close(fd)
    except OSError:
        tmp.unlink(missing_ok=True)
        raise
    return tmp


def install(tmp: Path, path: Path) -> None:
    """Step 2: rename ``tmp`` over ``path`` and fsync their directory."""
    os.replace(tmp, path)
    fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_atomic(path: Path, text: str) -> None:
    """Replace ``path`` by ``text`` atomically and durably, mode 0600 (module docstring)."""
    install(write_temp(path, text), path)


def mtime_ms(path: Path) -> int:
    """``path``'s modification time in ms (0 when it cannot be stat'ed)."""
    try:
        return path.stat().st_mtime_ns // 1_000_000
    except OSError:
        return 0
