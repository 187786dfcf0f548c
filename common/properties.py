"""Java ``.properties`` files: RocketMQ's configuration format, read and written by every process.

- :func:`parse_properties` / :func:`load_properties` read text as ``java.util.Properties#load``
  does; :func:`format_entry` writes one ``key=value`` line that reads back to the same strings
  (``Properties#store``'s escaping).
- :func:`convert_value` turns one raw value into a setting's type (bool, int, str, Path or an
  Enum), raising :class:`ValueError` that names the key; :func:`format_value` writes it back.

Rules (``Properties#load``):

- Physical lines end at ``\\r\\n``, ``\\r`` or ``\\n`` only; spaces, tabs and form feeds
  (``\\f``) are whitespace. Leading whitespace of every physical line is dropped.
- A line whose first non-whitespace character is ``#`` or ``!`` is a comment (unless it
  continues a line). An odd number of trailing backslashes continues the line.
- The key ends at the first unescaped ``=``, ``:`` or whitespace; whitespace and at most one
  ``=`` or ``:`` follow it. Values keep their trailing whitespace (:func:`convert_value` trims).
- Escapes: ``\\t \\n \\r \\f``, ``\\uXXXX`` with exactly four hex digits (anything else is an
  error naming the line), and a backslash before any other character is dropped.
- Logical lines that are empty after joining continuations are skipped (Java makes a ``""``
  key of one at the end of the file). Later duplicates win.
- Files are UTF-8; a file that is not valid UTF-8 is read as ISO-8859-1, as RocketMQ's
  ``Properties#load(InputStream)`` reads every file.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from common.errors import caused_by

_ESCAPES = {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}
_WHITESPACE = " \t\f"
_LINE_BREAK = re.compile(r"\r\n|\r|\n")
_HEX4 = re.compile(r"[0-9a-fA-F]{4}")
_INTEGER = re.compile(r"[+-]?[0-9]+")
_STORE_ESCAPES = {"\\": "\\\\", "\t": "\\t", "\n": "\\n", "\r": "\\r", "\f": "\\f"}


@dataclass(frozen=True, slots=True)
class _Line:
    """One logical line: its text and, per joined physical line, (offset in text, line no)."""

    text: str
    starts: tuple[tuple[int, int], ...]

    def number_at(self, offset: int) -> int:
        """The physical line number holding ``offset`` of :attr:`text`."""
        return max(n for start, n in self.starts if start <= offset)


class _MalformedEscape(ValueError):
    """A ``\\u`` escape without four hex digits, at ``offset`` of its logical line."""

    def __init__(self, offset: int, escape: str) -> None:
        super().__init__(f'malformed \\uXXXX escape "{escape}" (four hex digits expected)')
        self.offset = offset


def parse_properties(text: str, source: str | None = None) -> dict[str, str]:
    """Parse ``.properties`` text as ``java.util.Properties#load`` (see the module rules).

    A malformed ``\\uXXXX`` escape raises ValueError starting ``<source>:<line>:`` (``line
    <n>:`` without a ``source``).
    """
    props: dict[str, str] = {}
    for line in _logical_lines(text):
        try:
            key, value = _split_entry(line.text)
        except _MalformedEscape as exc:
            where = f"{source}:" if source else "line "
            raise caused_by(ValueError(f"{where}{line.number_at(exc.offset)}: {exc}"), None)
        props[key] = value
    return props


def load_properties(path: str | Path) -> dict[str, str]:
    """Read and parse a ``.properties`` file (UTF-8, else ISO-8859-1); errors name the file."""
    data = Path(path).read_bytes()
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        text = data.decode("iso-8859-1")
    return parse_properties(text, str(path))


def _continues(segment: str) -> bool:
    """True when ``segment`` ends with an odd number of backslashes."""
    return (len(segment) - len(segment.rstrip("\\"))) % 2 == 1


def _logical_lines(text: str) -> Iterator[_Line]:
    """Join continued lines; drop blank and comment lines and leading whitespace."""
    buf = ""
    starts: list[tuple[int, int]] = []
    for number, physical in enumerate(_LINE_BREAK.split(text), 1):
        segment = physical.lstrip(_WHITESPACE)
        if not buf:
            starts = []  # a new logical line (also after a line holding only a backslash)
            if not segment or segment[0] in "#!":
                continue
        if not segment:  # an empty line ends the continued one
            yield _Line(buf, tuple(starts))
            buf = ""
            continue
        starts.append((len(buf), number))
        if _continues(segment):
            buf += segment[:-1]
            continue
        yield _Line(buf + segment, tuple(starts))
        buf = ""
    if buf:
        yield _Line(buf, tuple(starts))


def _split_entry(line: str) -> tuple[str, str]:
    """Split one logical line into its unescaped key and value (``Properties#load0``)."""
    end = 0
    while end < len(line) and line[end] not in "=:" + _WHITESPACE:
        end += 2 if line[end] == "\\" else 1
    end = min(end, len(line))
    start = end
    while start < len(line) and line[start] in _WHITESPACE:
        start += 1
    if start < len(line) and line[start] in "=:":
        start += 1
        while start < len(line) and line[start] in _WHITESPACE:
            start += 1
    return _unescape(line, 0, end), _unescape(line, start, len(line))


def _unescape(line: str, start: int, end: int) -> str:
    """``line[start:end]`` with its escapes resolved; :class:`_MalformedEscape` on a bad ``\\u``."""
    out: list[str] = []
    i = start
    while i < end:
        ch = line[i]
        if ch != "\\" or i + 1 == end:
            out.append(ch)
            i += 1
            continue
        nxt = line[i + 1]
        if nxt == "u":
            digits = line[i + 2 : min(i + 6, end)]
            if not _HEX4.fullmatch(digits):
                raise _MalformedEscape(i, line[i : min(i + 6, end)])
            out.append(chr(int(digits, 16)))
            i += 6
            continue
        out.append(_ESCAPES.get(nxt, nxt))
        i += 2
    return "".join(out)


def escape_key(key: str) -> str:
    """``key`` as ``Properties#store`` writes it: backslashes, whitespace and ``= : # !``
    escaped."""
    out = []
    for ch in key:
        if ch in _STORE_ESCAPES:
            out.append(_STORE_ESCAPES[ch])
        elif ch in " =:#!":
            out.append("\\" + ch)
        else:
            out.append(ch)
    return "".join(out)


def escape_value(value: str) -> str:
    """``value`` as ``Properties#store`` writes it: backslashes, ``\\t \\n \\r \\f`` and a
    leading space escaped, so that :func:`parse_properties` reads back the same string."""
    text = "".join(_STORE_ESCAPES.get(ch, ch) for ch in value)
    return "\\" + text if text.startswith(" ") else text


def format_entry(key: str, value: object) -> str:
    """One ``key=value`` line (no newline) for ``value`` (see :func:`format_value`), escaped."""
    return f"{escape_key(key)}={escape_value(format_value(value))}"


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
    """``raw`` (trimmed) as ``kind`` (bool, int, str, Path or an Enum); ValueError names ``key``.

    Integers are ``[+-]digits`` as Java's ``Integer.parseInt`` reads them (no ``1_000``).
    """
    text = raw.strip()
    if kind is bool:
        if text.lower() not in ("true", "false"):
            raise ValueError(f"property {key!r}: expected true or false, got {raw!r}")
        return text.lower() == "true"
    if kind is int:
        if not _INTEGER.fullmatch(text):
            raise ValueError(f"property {key!r}: expected an integer, got {raw!r}")
        return int(text)
    if isinstance(kind, type) and issubclass(kind, enum.Enum):
        try:
            return kind(text)
        except ValueError:
            allowed = ", ".join(str(m.value) for m in kind)
            raise caused_by(
                ValueError(f"property {key!r}: expected one of {allowed}, got {raw!r}"), None
            )
    if issubclass(kind, Path):
        if not text:
            raise ValueError(f"property {key!r}: expected a path, got an empty string")
        return Path(text)
    return text
