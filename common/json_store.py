"""Crash-safe JSON files for broker and client state (RocketMQ's ``ConfigManager`` persistence).

Rules:

- :func:`write_json_atomic` writes ``<name>.tmp`` in the same directory, fsyncs it, renames it
  over ``<name>`` with :func:`os.replace` and fsyncs the directory, so ``<name>`` is always
  either the old or the new complete document; a directory it has to create is named durably
  the same way (its parent synced). Before that, the previous ``<name>`` is saved
  the same way as ``<name>.bak`` if it still loads (parses as JSON, and the caller's decoder
  accepts it), so a corrupt file never replaces a good backup.
- :func:`write_file_atomic` writes any bytes the same way (tmp, fsync, rename, directory
  fsync), the previous file kept as ``<name>.bak`` whatever it holds (RocketMQ's
  ``MixAll.string2File``: the name server's ``configStorePath``).
- :func:`load_json` reads ``<name>``; if it is missing, empty, not JSON or JSON of the wrong
  shape (its decoder refuses it) it logs a warning and falls back to ``<name>.bak``. A
  leftover ``<name>.tmp`` (a crashed writer) is ignored.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar, overload

log = logging.getLogger(__name__)

T = TypeVar("T")


def backup_path(path: Path) -> Path:
    """``<path>.bak``."""
    return path.with_name(path.name + ".bak")


def temp_path(path: Path) -> Path:
    """``<path>.tmp``: where :func:`write_json_atomic` writes before renaming."""
    return path.with_name(path.name + ".tmp")


def _fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _make_directories(directory: Path) -> None:
    """Create ``directory`` and its missing ancestors, each named durably (its parent synced
    after it appeared): a file synced into a directory whose own name a power cut can take
    is not durable either."""
    missing: list[Path] = []
    while not directory.is_dir():
        missing.append(directory)
        directory = directory.parent
    for d in reversed(missing):
        d.mkdir(exist_ok=True)
        _fsync_dir(d.parent)


def _replace_with(path: Path, data: bytes) -> None:
    tmp = temp_path(path)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        try:
            view = memoryview(data)
            while view:
                written = os.write(fd, view)
                view = view[written:]
            os.fsync(fd)
        finally:
            os.close(fd)
    except OSError:
        tmp.unlink(missing_ok=True)  # a part-written file would hold space on a full disk
        raise
    os.replace(tmp, path)
    _fsync_dir(path.parent)


def _parse(data: bytes) -> Any:
    if not data.strip():
        raise ValueError("empty file")
    return json.loads(data)


def write_json_atomic(path: Path, obj: Any, decode: Callable[[Any], object] | None = None) -> None:
    """Write ``obj`` as pretty JSON to ``path`` atomically, keeping the old file as ``.bak``.

    The old file becomes the backup only if it loads: it parses and ``decode`` (the same
    decoder :func:`load_json` is given) accepts it. A file that :func:`load_json` refused, and
    so loaded the backup instead, must not then overwrite that backup.
    """
    _make_directories(path.parent)
    data = (json.dumps(obj, indent=4, ensure_ascii=False) + "\n").encode("utf-8")
    try:
        old = path.read_bytes()
    except FileNotFoundError:
        old = None
    if old is not None:
        try:
            doc = _parse(old)
            if decode is not None:
                decode(doc)
        except (ValueError, TypeError, KeyError):
            log.warning("%s is corrupt; not copying it over %s", path, backup_path(path))
        else:
            _replace_with(backup_path(path), old)
    _replace_with(path, data)


def write_file_atomic(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` atomically (see the module rules), the old file kept as
    ``<path>.bak``; OSError when it cannot be written (``path`` is then unchanged)."""
    _make_directories(path.parent)
    try:
        old = path.read_bytes()
    except FileNotFoundError:
        old = None
    if old is not None:
        _replace_with(backup_path(path), old)
    _replace_with(path, data)


@overload
def load_json(path: Path) -> Any | None: ...


@overload
def load_json(path: Path, decode: Callable[[Any], T]) -> T | None: ...


def load_json(path: Path, decode: Callable[[Any], Any] | None = None) -> Any | None:
    """``decode`` of the JSON in ``path``, else of the JSON in its ``.bak``; None when neither
    file exists.

    A file counts as corrupt when it does not parse or when ``decode`` raises ValueError,
    TypeError or KeyError (valid JSON of the wrong shape): as RocketMQ's ``ConfigManager``,
    the backup is tried next. Raises :class:`ValueError` naming the file and each reason
    when no candidate loads.
    """
    reasons: list[str] = []
    for candidate in (path, backup_path(path)):
        try:
            data = candidate.read_bytes()
        except FileNotFoundError:
            continue
        try:
            doc = _parse(data)  # json.JSONDecodeError and UnicodeDecodeError are ValueErrors
            return doc if decode is None else decode(doc)
        except (ValueError, TypeError, KeyError) as exc:
            reason = str(exc) if not isinstance(exc, KeyError) else f"missing key {exc}"
            reasons.append(f"{candidate.name}: {reason}")
            log.warning("cannot load %s (%s); trying the backup", candidate, reason)
    if not reasons:
        return None
    detail = "; ".join(reasons)
    if len(reasons) == 2:
        raise ValueError(f"{path} and its backup are both corrupt ({detail})")
    if path.exists():
        raise ValueError(f"{path} is corrupt and has no backup ({detail})")
    raise ValueError(f"{path} is missing and its backup is corrupt ({detail})")
