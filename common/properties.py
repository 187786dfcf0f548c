"""Java ``.properties`` files: RocketMQ's configuration format, read and written by every process.

- :func:`parse_properties` / :func:`load_properties` read ``key=value`` text.
- :func:`convert_value` turns one raw value into a setting's type (bool, int, str, Path or an
  Enum), raising :class:`ValueError` that names the key; :func:`format_value` writes it back.
"""

from __future__ import annotations

import enum
from pathlib import Path
from typing import Any

_ESCAPES = {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}


def parse_properties(text: str) -> dict[str, str]:
    """Parse Java ``.properties`` text (``java.util.Properties#load`` rules, simplified).

    Handles ``key=value``, ``key: value`` and ``key value``; ``#`` and ``!`` comment lines;
    blank lines; trimming; a trailing odd backslash continuing the line; ``\\t \\n \\r \\f
    \\uXXXX`` escapes and escaped separators in keys. Later duplicates win.
    """
    props: dict[str, str] = {}
    for line in _logical_lines(text):
        key, value = _split_entry(line)
        props[key] = value
    return props


def load_properties(path: str | Path) -> dict[str, str]:
    """Read and parse a ``.properties`` file (UTF-8)."""
    return parse_properties(Path(path).read_text(encoding="utf-8"))


def _ends_with_continuation(line: str) -> bool:
    trailing = len(line) - len(line.rstrip("\\"))
    return trailing % 2 == 1


def _logical_lines(text: str) -> list[str]:
    """Join continued lines; drop blank and comment lines; strip leading whitespace."""
    out: list[str] = []
    pending: str | None = None
    for physical in text.splitlines():
        stripped = physical.lstrip(" \t\f")
        if pending is None:
            if not stripped or stripped[0] in "#!":
                continue
            current = stripped
        else:
            current = pending + stripped
        if _ends_with_continuation(current):
            pending = current[:-1]
            continue
        pending = None
        out.append(current)
    if pending is not None:
        out.append(pending)
    return out


def _split_entry(line: str) -> tuple[str, str]:
    """Split one logical line at the first unescaped ``=``, ``:`` or whitespace."""
    i = 0
    n = len(line)
    while i < n:
        ch = line[i]
        if ch == "\\":
            i += 2
            continue
        if ch in "=: \t\f":
            break
        i += 1
    key = line[:i]
    rest = line[i:].lstrip(" \t\f")
    if rest[:1] in ("=", ":"):
        rest = rest[1:].lstrip(" \t\f")
    return _unescape(key), _unescape(rest).rstrip()


def _unescape(text: str) -> str:
    out: list[str] = []
    i = 0
    while i < len(text):
        ch = text[i]
        if ch != "\\" or i + 1 == len(text):
            out.append(ch)
            i += 1
            continue
        nxt = text[i + 1]
        if nxt == "u":
            digits = text[i + 2 : i + 6]
            try:
                out.append(chr(int(digits, 16)))
            except ValueError:
                raise ValueError(f"malformed \\uXXXX escape: {text[i : i + 6]!r}") from None
            i += 6
            continue
        out.append(_ESCAPES.get(nxt, nxt))
        i += 2
    return "".join(out)


def format_value(value: object) -> str:
    """A setting as it appears in a ``.properties`` file (booleans lowercase, enums by value)."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, enum.Enum):
        return str(value.value)
    return str(value)


def convert_value(key: str, raw: str, kind: type) -> Any:
    """``raw`` as ``kind`` (bool, int, str, Path or an Enum); ValueError names ``key``."""
    text = raw.strip()
    if kind is bool:
        if text.lower() not in ("true", "false"):
            raise ValueError(f"property {key!r}: expected true or false, got {raw!r}")
        return text.lower() == "true"
    if kind is int:
        try:
            return int(text)
        except ValueError:
            raise ValueError(f"property {key!r}: expected an integer, got {raw!r}") from None
    if isinstance(kind, type) and issubclass(kind, enum.Enum):
        try:
            return kind(text)
        except ValueError:
            allowed = ", ".join(str(m.value) for m in kind)
            raise ValueError(f"property {key!r}: expected one of {allowed}, got {raw!r}") from None
    if issubclass(kind, Path):
        if not text:
            raise ValueError(f"property {key!r}: expected a path, got an empty string")
        return Path(text)
    return text
