"""The SEND_BATCH_MESSAGE body (minimq's own encoding), as pure functions of bytes and lists.

A batch body is a msgpack array with one entry per message. An entry is a 3-element array
``[body, properties, flag]``:

- ``body``: the message body (msgpack bin);
- ``properties``: a map of str to str, or nil for the request header's;
- ``flag``: an int, or nil for the header's.

Positional entries decode in about half the time of maps with named fields (no key strings to
build for every message), on the broker's send path and in every consumer's unwrap of a
BatchCQ record. Decoders also take the map form ``{"body", "properties", "flag"}`` (the last
two optional) that minimq sent before 0.1, which BatchCQ records written then still hold.

The helpers here only reshape: :func:`plain_rows` gives the ``(body, properties, flag)`` rows of
a batch when every entry has one of the two shapes and plainly right types, checked with a few
C-level passes; :func:`entry_fields` takes one entry apart for a walk that names a bad one.
What makes properties legal is the caller's rule.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, Final

import msgpack

ENTRY_LEN: Final = 3
"""Elements of an array entry: body, properties, flag."""

BatchEntry = Sequence[Any]
"""One message of a batch, ``(body, properties, flag)``: bytes, its own properties (None: the
header's) and flag (None: the header's). The rows of an array-form body are the 3-element lists
msgpack decoded (checked, not copied), so the type says only what every row is: a sequence."""

_LIST: Final = {list}
_DICT: Final = {dict}
_ENTRY_LENS: Final = {ENTRY_LEN}
_NONE_TYPE = type(None)
_BODY_TYPES: Final = {bytes}
_PROPERTIES_TYPES: Final = {dict, _NONE_TYPE}
_FLAG_TYPES: Final = {int, _NONE_TYPE}


def encode_batch_entries(entries: Iterable[Sequence[Any]]) -> bytes:
    """A batch body from ``(body, properties or None, flag or None)`` rows."""
    data: bytes = msgpack.packb(list(entries), use_bin_type=True)
    return data


def plain_rows(wire: list[Any]) -> list[Any] | None:
    """The ``(body, properties, flag)`` rows of a decoded batch body when every entry is plainly
    well formed: all 3-element arrays or all maps with a ``body``, with bytes bodies, map or nil
    properties and int or nil flags (not bool). None when any entry needs a closer look
    (:func:`entry_fields`). The property maps' contents are not looked at."""
    shapes = set(map(type, wire))
    if shapes == _LIST:
        if set(map(len, wire)) != _ENTRY_LENS:
            return None
        rows: list[Any] = wire
    elif shapes == _DICT:
        try:
            rows = [(e["body"], e.get("properties"), e.get("flag")) for e in wire]
        except KeyError:
            return None
    else:
        return None
    bodies, props, flags = zip(*rows, strict=True)
    if (
        set(map(type, bodies)) != _BODY_TYPES
        or not set(map(type, props)) <= _PROPERTIES_TYPES
        or not set(map(type, flags)) <= _FLAG_TYPES
    ):
        return None
    return rows


def entry_fields(entry: Any) -> tuple[Any, Any, Any] | None:
    """``(body, properties, flag)`` of one entry of either shape, as sent (types unchecked;
    a map's missing properties or flag is None); None when it has neither shape (an array
    of another length, a map without ``body``, anything else)."""
    if type(entry) is list:
        if len(entry) != ENTRY_LEN:
            return None
        body, props, flag = entry
        return body, props, flag
    if type(entry) is dict and "body" in entry:
        return entry["body"], entry.get("properties"), entry.get("flag")
    return None


__all__ = [
    "ENTRY_LEN",
    "BatchEntry",
    "encode_batch_entries",
    "entry_fields",
    "plain_rows",
]
