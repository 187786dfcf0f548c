"""Offsets of the Spark connector, pure (no Spark, no I/O).

Spark stores a source's offset as JSON in the checkpoint; ours is the *next* offset to read of
every queue, nested by topic, broker and queue id (string keys, because JSON object keys are
strings and Spark hands the offset back through ``json.loads``)::

    {"Orders": {"broker-a": {"0": 120, "1": 118}, "broker-b": {"0": 97}}}

In ``startingOffsets``/``endingOffsets`` JSON, ``-2`` means the queue's earliest offset and
``-1`` its latest, as in Spark's Kafka source.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping
from typing import Any

QueueKey = tuple[str, str, int]
"""(topic, broker name, queue id)."""
OffsetMap = dict[QueueKey, int]
NestedOffsets = dict[str, dict[str, dict[str, int]]]

EARLIEST = -2
LATEST = -1


class OffsetError(ValueError):
    """A malformed offset specification."""


def to_nested(offsets: Mapping[QueueKey, int]) -> NestedOffsets:
    """``{(topic, broker, qid): n}`` as Spark's checkpoint JSON shape (sorted, string ids)."""
    out: NestedOffsets = {}
    for (topic, broker, qid), value in sorted(offsets.items()):
        out.setdefault(topic, {}).setdefault(broker, {})[str(qid)] = int(value)
    return out


def from_nested(nested: Any, what: str = "offset") -> OffsetMap:
    """The inverse of :func:`to_nested`; OffsetError naming ``what`` on a bad shape."""
    if not isinstance(nested, Mapping):
        raise OffsetError(f"{what}: expected a JSON object of topics, got {nested!r}")
    out: OffsetMap = {}
    for topic, brokers in nested.items():
        if not isinstance(brokers, Mapping):
            raise OffsetError(f"{what}: topic {topic!r} must map broker names to queues")
        for broker, queues in brokers.items():
            if not isinstance(queues, Mapping):
                raise OffsetError(f"{what}: {topic}/{broker} must map queue ids to offsets")
            for qid, value in queues.items():
                out[(str(topic), str(broker), _queue_id(qid, what))] = _offset(value, what)
    return out


def _queue_id(raw: Any, what: str) -> int:
    try:
        qid = int(raw)
    except (TypeError, ValueError):
        raise OffsetError(f"{what}: queue id {raw!r} is not an integer") from None
    if qid < 0:
        raise OffsetError(f"{what}: queue id {raw!r} is negative")
    return qid


def _offset(raw: Any, what: str) -> int:
    if isinstance(raw, bool) or not isinstance(raw, int):
        raise OffsetError(f"{what}: offset {raw!r} is not an integer")
    if raw < EARLIEST:
        raise OffsetError(f"{what}: offset {raw} is below -2 (-2 earliest, -1 latest)")
    return raw


def parse_spec(text: str, what: str) -> str | OffsetMap:
    """``"earliest"``, ``"latest"`` or a JSON offset map (with -2/-1 allowed)."""
    stripped = text.strip()
    if stripped.lower() in ("earliest", "latest"):
        return stripped.lower()
    try:
        nested = json.loads(stripped)
    except ValueError:
        raise OffsetError(
            f"{what}: expected 'earliest', 'latest' or JSON like "
            f'{{"topic": {{"broker": {{"0": 42}}}}}}, got {text!r}'
        ) from None
    return from_nested(nested, what)


def resolve(
    spec: str | Mapping[QueueKey, int],
    bounds: Mapping[QueueKey, tuple[int, int]],
    *,
    default: str,
) -> OffsetMap:
    """Concrete offsets for every queue of ``bounds`` (``{queue: (min, max)}``).

    ``spec`` is ``"earliest"``/``"latest"`` or a map; queues a map does not name take
    ``default``; -2/-1 become the queue's min/max. Offsets for queues not in ``bounds`` are
    dropped (the topic no longer has them).
    """
    out: OffsetMap = {}
    for key, (lo, hi) in bounds.items():
        if isinstance(spec, str):
            value = EARLIEST if spec == "earliest" else LATEST
        else:
            value = spec.get(key, EARLIEST if default == "earliest" else LATEST)
        out[key] = lo if value == EARLIEST else hi if value == LATEST else value
    return out


def unknown_queues(spec: Mapping[QueueKey, int], known: Iterable[QueueKey]) -> list[QueueKey]:
    """Queues named in ``spec`` that the topics do not have (sorted)."""
    known_set = set(known)
    return sorted(k for k in spec if k not in known_set)


def split_limit(
    start: Mapping[QueueKey, int], latest: Mapping[QueueKey, int], max_rows: int
) -> OffsetMap:
    """End offsets admitting about ``max_rows`` messages, shared by backlog.

    Each queue gets ``max_rows * backlog / total`` of its backlog (Spark's Kafka source rule):
    rounded down, except that a share below one message is rounded up, so every queue with a
    backlog makes progress (the sum may then pass ``max_rows`` by a few). With a total backlog
    within ``max_rows`` the end is ``latest``. Queues missing from ``start`` start at 0.
    """
    if max_rows <= 0:
        raise OffsetError(f"max_rows must be positive, got {max_rows}")
    backlog = {k: max(0, hi - start.get(k, 0)) for k, hi in latest.items()}
    total = sum(backlog.values())
    if total <= max_rows:
        return dict(latest)
    out: OffsetMap = {}
    for key in latest:
        begin = start.get(key, 0)
        size = backlog[key]
        if size == 0:
            out[key] = begin
            continue
        share = max_rows * size / total
        take = math.ceil(share) if share < 1 else math.floor(share)
        out[key] = begin + min(size, take)
    return out


def dumps(offsets: Mapping[QueueKey, int]) -> str:
    """Compact JSON of :func:`to_nested`."""
    return json.dumps(to_nested(offsets), separators=(",", ":"))
