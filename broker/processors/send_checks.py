"""What the send processor checks in a message before the store sees it: properties, batch bodies.

Pure functions of strings, maps and bytes. A malformed message raises
:class:`IllegalMessageError`, which the processor answers with MESSAGE_ILLEGAL.

A SEND_BATCH_MESSAGE body is **minimq's own encoding** (:mod:`common.batch_body`): a msgpack
array of ``[body, properties, flag]`` entries (or of the older ``{"body", "properties",
"flag"}`` maps). :func:`decode_batch_body` checks a whole batch with a few C-level passes (the
shape and types of every entry; all property names and values joined once) and walks it entry
by entry only when something is wrong, to say which entry and why.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from operator import itemgetter
from typing import Any

import msgpack

from common.batch_body import BatchEntry, entry_fields, plain_rows
from common.errors import caused_by
from common.record import (
    MAX_PROPERTIES_LENGTH,
    NAME_VALUE_SEPARATOR,
    PROPERTY_SEPARATOR,
    plain_properties_fit,
)

_properties_of = itemgetter(1)


class IllegalMessageError(ValueError):
    """The message itself is malformed (answered MESSAGE_ILLEGAL)."""


def parse_properties(raw: str) -> dict[str, str]:
    """Strictly parse RocketMQ's ``k\\x01v\\x02`` string; IllegalMessageError when malformed.

    Unlike :func:`common.record.decode_properties` nothing is skipped: every non-empty segment
    must be ``name\\x01value`` with a non-empty name and no second separator.
    """
    out: dict[str, str] = {}
    for item in raw.split(PROPERTY_SEPARATOR):
        if not item:
            continue
        name, sep, value = item.partition(NAME_VALUE_SEPARATOR)
        if not sep or not name or NAME_VALUE_SEPARATOR in value:
            raise IllegalMessageError(f"malformed properties segment {item!r}")
        out[name] = value
    return out


def check_properties(props: Mapping[str, Any]) -> dict[str, str]:
    """Properties as a str map of legal size; IllegalMessageError otherwise.

    All names and all values are joined once (a C-level type check too): a separator in either
    string or an empty name makes the map illegal, and for ASCII text their lengths give the
    encoded size without encoding anything. Only a bad map is walked to name the property.
    """
    try:
        names = "".join(props)
        values = "".join(props.values())
    except TypeError:
        raise caused_by(IllegalMessageError("properties must map str to str"), None)
    out = props if type(props) is dict else dict(props)
    if _has_separator(names, values) or "" in out:
        for k, v in out.items():
            if not k or any(s in k or s in v for s in (NAME_VALUE_SEPARATOR, PROPERTY_SEPARATOR)):
                raise IllegalMessageError(f"illegal property {k!r}")
    if names.isascii() and values.isascii():
        size = len(names) + len(values) + 2 * len(out)
    else:
        size = len(names.encode()) + len(values.encode()) + 2 * len(out)
    if size > MAX_PROPERTIES_LENGTH:
        raise IllegalMessageError(f"properties exceed {MAX_PROPERTIES_LENGTH} bytes")
    return out


def _has_separator(names: str, values: str) -> bool:
    return (
        NAME_VALUE_SEPARATOR in names
        or PROPERTY_SEPARATOR in names
        or NAME_VALUE_SEPARATOR in values
        or PROPERTY_SEPARATOR in values
    )


def decode_batch_body(body: bytes) -> list[BatchEntry]:
    """Entries ``(body, properties or None, flag or None)`` of a SEND_BATCH_MESSAGE body."""
    try:
        wire = msgpack.unpackb(body, raw=False)
    except (ValueError, TypeError, msgpack.UnpackException) as exc:
        raise caused_by(IllegalMessageError(f"batch body is not valid msgpack: {exc}"), None)
    if not isinstance(wire, list) or not wire:
        raise IllegalMessageError("batch body must be a non-empty list")
    entries = _legal_batch(wire)
    return entries if entries is not None else _checked_batch(wire)


def _legal_batch(wire: list[Any]) -> list[BatchEntry] | None:
    """The entries of ``wire`` if every one is plainly legal (a plain shape and types, ASCII
    properties whose total fits one message's limit); None when any needs a closer look."""
    rows = plain_rows(wire)
    if rows is None:
        return None
    maps = list(filter(None, map(_properties_of, rows)))  # the non-empty ones
    if maps and not plain_properties_fit(maps):
        return None
    return rows


def _checked_batch(wire: list[Any]) -> list[BatchEntry]:
    """:func:`decode_batch_body` entry by entry: raises naming the first bad entry."""
    out: list[BatchEntry] = []
    for i, entry in enumerate(wire):
        fields = entry_fields(entry)
        if fields is None or not isinstance(fields[0], bytes):
            raise IllegalMessageError(
                f"batch entry {i} must be [body, properties, flag] with a bytes body"
            )
        body, props, flag = fields
        if props is not None and not isinstance(props, dict):
            raise IllegalMessageError(f"batch entry {i}: 'properties' must be a map")
        if flag is not None and (not isinstance(flag, int) or isinstance(flag, bool)):
            raise IllegalMessageError(f"batch entry {i}: 'flag' must be an int")
        if props is not None:
            try:
                props = check_properties(props)
            except IllegalMessageError as exc:
                raise caused_by(IllegalMessageError(f"batch entry {i}: {exc}"), None)
        out.append((body, props, flag))
    return out


def encode_batch_body(entries: Iterable[Sequence[Any] | Mapping[str, Any]]) -> bytes:
    """A SEND_BATCH_MESSAGE body holding ``entries`` as given: ``(body, properties, flag)``
    rows (the current form) or ``{"body", "properties", "flag"}`` maps (the older one)."""
    data: bytes = msgpack.packb(list(entries), use_bin_type=True)
    return data


__all__ = [
    "BatchEntry",
    "IllegalMessageError",
    "check_properties",
    "decode_batch_body",
    "encode_batch_body",
    "parse_properties",
]
