"""Unsigned decimal numbers in text that came from outside: properties, file names, headers.

``str.isdigit()`` accepts characters ``int()`` refuses (``"²"``, ``"①"``) and ``int()`` accepts
digits of other scripts (``"٣"``); a check with one and a parse with the other lets a crafted
value through the check and crash the parse. :func:`parse_uint` does both in one place: ASCII
digits only, and no more of them than a signed 64-bit number has.
"""

from __future__ import annotations

from typing import Final

MAX_DIGITS: Final = 19
"""Digits of the largest signed 64-bit number (Java's ``long``)."""


def parse_uint(text: str | None, *, max_digits: int = MAX_DIGITS) -> int | None:
    """``text`` as a non-negative int, or None unless it is 1 to ``max_digits`` ASCII digits."""
    if not text or len(text) > max_digits or not text.isascii() or not text.isdigit():
        return None
    return int(text)


__all__ = ["MAX_DIGITS", "parse_uint"]
