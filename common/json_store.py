"""Crash-safe JSON files for broker and client state (RocketMQ's ``ConfigManager`` persistence).

Rules:

- :func:`write_json_atomic` writes ``<name>.tmp`` in the same directory, fsyncs it, renames it
  over ``<name>`` with :func:`os.replace` and fsyncs the directory, so ``<name>`` is always
  either the old or the new complete document. Before that, the previous ``<name>`` (if it
  parses as JSON) is saved the same way as ``<name>.bak``.
- :func:`load_json` reads ``<name>``; if it is missing, empty or not JSON it logs a warning and
  falls back to ``<name>.bak``. A leftover ``<name>.tmp`` (a crashed writer) is ignored.
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)


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


def write_json_atomic(path: Path, obj: Any) -> None:
    """Write ``obj`` as pretty JSON to ``path`` atomically, keeping the old file as ``.bak``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    data = (json.dumps(obj, indent=4, ensure_ascii=False) + "\n").encode("utf-8")
    try:
        old = path.read_bytes()
    except FileNotFoundError:
        old = None
    if old is not None:
        try:
            _parse(old)
        except ValueError:
            log.warning("%s is corrupt; not copying it over %s", path, backup_path(path))
        else:
            _replace_with(backup_path(path), old)
    _replace_with(path, data)


def load_json(path: Path) -> Any | None:
    """The JSON in ``path``, else in its ``.bak``; None when neither file exists.

    Raises :class:`ValueError` when a file exists but neither parses.
    """
    for candidate in (path, backup_path(path)):
        try:
            data = candidate.read_bytes()
        except FileNotFoundError:
            continue
        try:
            return _parse(data)
        except ValueError as exc:  # json.JSONDecodeError and UnicodeDecodeError included
            log.warning("cannot parse %s (%s); trying the backup", candidate, exc)
    if path.exists() or backup_path(path).exists():
        raise ValueError(f"{path} and its backup are both corrupt")
    return None
