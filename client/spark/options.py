"""Options of the ``minimq`` Spark data source: parsing and validation, pure (no Spark).

Spark passes options as a case-insensitive map of strings; every check here raises
:class:`OptionError` naming the option, so a bad query fails when it starts.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from client.spark.offsets import OffsetError, OffsetMap, parse_spec
from common.subscription import parse_tags
from common.topic import group_problem

_NAMES = (
    "namesrv",
    "topic",
    "startingOffsets",
    "endingOffsets",
    "startingTimestamp",
    "maxOffsetsPerTrigger",
    "tags",
    "failOnDataLoss",
    "pullBatchSize",
    "group",
    "batchSize",
)
CANONICAL = {n.lower(): n for n in _NAMES}
"""Spark lower-cases option names; messages use the documented spelling."""
READ_OPTIONS = frozenset(n.lower() for n in _NAMES if n != "batchSize")
WRITE_OPTIONS = frozenset({"namesrv", "topic", "group", "batchsize"})
SPARK_OPTIONS = frozenset({"checkpointlocation", "queryname"})
"""Options Spark itself passes on to a data source (ignored): a streaming sink gets the
checkpoint location and the query's name (``writeStream.queryName(...)``)."""

DEFAULT_PULL_BATCH = 32
DEFAULT_SINK_GROUP = "minimq-spark-sink"
DEFAULT_SINK_BATCH = 32
MAX_SINK_BATCH = 1024


class OptionError(ValueError):
    """An unknown, missing or malformed option (the message names it)."""


@dataclass(frozen=True, slots=True)
class ReadOptions:
    """What a reader needs; picklable."""

    namesrv: str
    topics: tuple[str, ...]
    starting: str | OffsetMap | None = None
    ending: str | OffsetMap | None = None
    starting_timestamp: int | None = None
    max_offsets_per_trigger: int | None = None
    tags: str = "*"
    fail_on_data_loss: bool = True
    pull_batch_size: int = DEFAULT_PULL_BATCH
    group: str | None = None


@dataclass(frozen=True, slots=True)
class WriteOptions:
    """What a writer needs; picklable."""

    namesrv: str
    topic: str | None = None
    group: str = DEFAULT_SINK_GROUP
    batch_size: int = DEFAULT_SINK_BATCH


def _lower(options: Mapping[str, str]) -> dict[str, str]:
    return {str(k).lower(): str(v) for k, v in options.items()}


def _check_known(opts: Mapping[str, str], known: frozenset[str], what: str) -> None:
    unknown = sorted(set(opts) - known - SPARK_OPTIONS)
    if unknown:
        names = ", ".join(CANONICAL.get(u, u) for u in unknown)
        raise OptionError(
            f"unknown option(s) for the minimq {what}: {names} "
            f"(known: {', '.join(CANONICAL[k] for k in sorted(known))})"
        )


def _required(opts: Mapping[str, str], name: str) -> str:
    value = opts.get(name.lower(), "").strip()
    if not value:
        raise OptionError(f"option '{name}' is required")
    return value


def _int(opts: Mapping[str, str], name: str, lo: int, hi: int | None = None) -> int | None:
    raw = opts.get(name.lower())
    if raw is None:
        return None
    try:
        value = int(raw.strip())
    except ValueError:
        raise OptionError(f"option '{name}' must be an integer, got {raw!r}") from None
    if value < lo or (hi is not None and value > hi):
        bound = f">= {lo}" if hi is None else f"in [{lo}, {hi}]"
        raise OptionError(f"option '{name}' must be {bound}, got {value}")
    return value


def _bool(opts: Mapping[str, str], name: str, default: bool) -> bool:
    raw = opts.get(name.lower())
    if raw is None:
        return default
    value = raw.strip().lower()
    if value not in ("true", "false"):
        raise OptionError(f"option '{name}' must be true or false, got {raw!r}")
    return value == "true"


def _spec(opts: Mapping[str, str], name: str) -> str | OffsetMap | None:
    raw = opts.get(name.lower())
    if raw is None:
        return None
    try:
        return parse_spec(raw, f"option '{name}'")
    except OffsetError as exc:
        raise OptionError(str(exc)) from None


def _group(opts: Mapping[str, str]) -> str | None:
    """The ``group`` option (None when absent or blank), checked by the broker's naming rule."""
    group = opts.get("group", "").strip() or None
    if group is not None:
        problem = group_problem(group)
        if problem is not None:
            raise OptionError(f"option 'group': {problem}")
    return group


def _topics(raw: str) -> tuple[str, ...]:
    topics = tuple(t.strip() for t in raw.split(","))
    if any(not t for t in topics):
        raise OptionError(f"option 'topic' has an empty name in {raw!r}")
    return tuple(dict.fromkeys(topics))


def parse_read(options: Mapping[str, str], *, streaming: bool) -> ReadOptions:
    """Validate reader options (``streaming`` rejects ``endingOffsets``)."""
    opts = _lower(options)
    _check_known(opts, READ_OPTIONS, "source")
    namesrv = _required(opts, "namesrv")
    topics = _topics(_required(opts, "topic"))
    starting = _spec(opts, "startingOffsets")
    ending = _spec(opts, "endingOffsets")
    if streaming and ending is not None:
        raise OptionError("option 'endingOffsets' is for batch queries only")
    if ending == "earliest":
        raise OptionError("option 'endingOffsets' cannot be 'earliest'")
    timestamp = _int(opts, "startingTimestamp", 0)
    if timestamp is not None and starting is not None:
        raise OptionError("options 'startingTimestamp' and 'startingOffsets' exclude each other")
    tags = opts.get("tags", "*").strip() or "*"
    try:
        parse_tags(tags)
    except ValueError as exc:
        raise OptionError(f"option 'tags': {exc}") from None
    group = _group(opts)
    return ReadOptions(
        namesrv=namesrv,
        topics=topics,
        starting=starting,
        ending=ending,
        starting_timestamp=timestamp,
        max_offsets_per_trigger=_int(opts, "maxOffsetsPerTrigger", 1),
        tags=tags,
        fail_on_data_loss=_bool(opts, "failOnDataLoss", True),
        pull_batch_size=_int(opts, "pullBatchSize", 1, 1024) or DEFAULT_PULL_BATCH,
        group=group,
    )


def parse_write(options: Mapping[str, str]) -> WriteOptions:
    """Validate sink options."""
    opts = _lower(options)
    _check_known(opts, WRITE_OPTIONS, "sink")
    topic = opts.get("topic", "").strip() or None
    if topic is not None and "," in topic:
        raise OptionError(f"option 'topic' of the sink names one topic, got {topic!r}")
    return WriteOptions(
        namesrv=_required(opts, "namesrv"),
        topic=topic,
        group=_group(opts) or DEFAULT_SINK_GROUP,
        batch_size=_int(opts, "batchSize", 1, MAX_SINK_BATCH) or DEFAULT_SINK_BATCH,
    )
