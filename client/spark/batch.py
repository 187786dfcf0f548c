"""Batch reads: ``spark.read.format("minimq")``; one partition per queue's offset range."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

from pyspark.sql.datasource import DataSourceReader, InputPartition

from client.blocking import SharedInstance
from client.spark import brokers
from client.spark.offsets import OffsetMap, QueueKey, resolve, unknown_queues
from client.spark.options import OptionError, ReadOptions
from client.spark.pulling import QueueRange, check_pull_group, open_shared_instance, read_range

DRIVER_TIMEOUT_S = 30.0


class QueuePartition(InputPartition):
    """One Spark partition: a :class:`QueueRange` (plain fields, picklable)."""

    def __init__(self, qr: QueueRange) -> None:
        super().__init__(qr)
        self.qr = qr


def read_partition(opts: ReadOptions, partition: Any) -> Iterator[Any]:
    """Pull a partition's range in a Spark worker (Arrow record batches). Spark replaces an
    empty partition list by one ``InputPartition(None)``: nothing to read."""
    qr: QueueRange | None = getattr(partition, "qr", None)
    if qr is None:
        return iter(())
    return _explained(
        opts,
        read_range(
            opts.namesrv,
            qr,
            expression=opts.expression,
            pull_batch_size=opts.pull_batch_size,
            fail_on_data_loss=opts.fail_on_data_loss,
            group=opts.group,
            security=opts.security,
        ),
    )


def _explained(opts: ReadOptions, batches: Iterator[Any]) -> Iterator[Any]:
    """``batches``, with an ACL refusal explained (see :func:`brokers.acl_refusals_explained`)."""
    with brokers.acl_refusals_explained(opts.security):
        yield from batches


def check_group(client: SharedInstance, opts: ReadOptions, bounds: brokers.Bounds) -> None:
    """Fail when the query starts, not in the executors' first pull, if a broker of the
    topics refuses pulls naming the ``group`` option, or the ``sql`` option's SQL92 selector
    (see :func:`check_pull_group`)."""
    client.call(check_pull_group, bounds, opts.group, opts.expression, timeout=DRIVER_TIMEOUT_S)


def starting_offsets(
    client: SharedInstance, opts: ReadOptions, bounds: brokers.Bounds, default: str
) -> OffsetMap:
    """Where each queue starts: startingTimestamp, else startingOffsets (else ``default``)."""
    if opts.starting_timestamp is not None:
        return client.call(
            brokers.offsets_for_time,
            list(bounds),
            opts.starting_timestamp,
            timeout=DRIVER_TIMEOUT_S,
        )
    spec = opts.starting if opts.starting is not None else default
    check_known(spec, bounds, "startingOffsets")
    check_in_bounds(spec, bounds, "startingOffsets")
    return resolve(spec, bounds, default="earliest")


def check_known(spec: str | OffsetMap, bounds: brokers.Bounds, option: str) -> None:
    """OptionError when a JSON offset names a queue the topics do not have."""
    if isinstance(spec, str):
        return
    missing = unknown_queues(spec, bounds)
    if missing:
        names = ", ".join(f"{t}/{b}/{q}" for t, b, q in missing)
        raise OptionError(f"option '{option}' names queues the topics do not have: {names}")


def _where(key: QueueKey) -> str:
    return f"topic {key[0]} broker {key[1]} queue {key[2]}"


def check_in_bounds(spec: str | OffsetMap, bounds: brokers.Bounds, option: str) -> None:
    """OptionError naming every queue whose JSON offset (not -2/-1) is above the queue's max
    offset (the next offset it will store)."""
    if isinstance(spec, str):
        return
    beyond = [
        f"{value} for {_where(key)}, which holds offsets {bounds[key][0]}..{bounds[key][1]}"
        for key, value in sorted(spec.items())
        if key in bounds and value > bounds[key][1]
    ]
    if beyond:
        raise OptionError(
            f"option '{option}' is beyond the queue's max offset: {'; '.join(beyond)} "
            "(the max offset is the next one to be stored; -2 means earliest, -1 latest)"
        )


def check_order(start: OffsetMap, end: OffsetMap, bounds: brokers.Bounds, what: str) -> None:
    """OptionError naming every queue whose start ``what`` resolved to is after its end."""
    crossed = [
        f"{_where(key)} starts at {start[key]}, after its end {hi} (the queue holds offsets "
        f"{bounds[key][0]}..{bounds[key][1]})"
        for key, hi in sorted(end.items())
        if key in start and start[key] > hi
    ]
    if crossed:
        raise OptionError(f"options '{what}' and 'endingOffsets': {'; '.join(crossed)}")


def plan_ranges(opts: ReadOptions) -> list[QueueRange]:
    """The non-empty ``[start, end)`` range of every queue of the topics, now (OptionError for
    an explicit end above a queue's max offset, or a start after its end)."""
    ending = opts.ending if opts.ending is not None else "latest"
    with (
        brokers.acl_refusals_explained(opts.security),
        open_shared_instance(opts.namesrv, opts.security) as client,
    ):
        bounds = client.call(brokers.queue_bounds, list(opts.topics), timeout=DRIVER_TIMEOUT_S)
        check_group(client, opts, bounds)
        start = starting_offsets(client, opts, bounds, "earliest")
    check_known(ending, bounds, "endingOffsets")
    check_in_bounds(ending, bounds, "endingOffsets")
    end = resolve(ending, bounds, default="latest")
    what = "startingTimestamp" if opts.starting_timestamp is not None else "startingOffsets"
    check_order(start, end, bounds, what)
    return ranges(start, end)


def ranges(start: OffsetMap, end: OffsetMap) -> list[QueueRange]:
    """Ranges with ``end > start`` (queues missing from ``start`` are skipped)."""
    out: list[QueueRange] = []
    for key, hi in sorted(end.items()):
        lo = start.get(key)
        if lo is not None and hi > lo:
            out.append(_range(key, lo, hi))
    return out


def _range(key: QueueKey, lo: int, hi: int) -> QueueRange:
    return QueueRange(key[0], key[1], key[2], lo, hi)


class BatchReader(DataSourceReader):
    """Reads every queue's ``[startingOffsets, endingOffsets)`` once."""

    def __init__(self, opts: ReadOptions) -> None:
        self.opts = opts

    def partitions(self) -> Sequence[QueuePartition]:
        """One partition per queue with messages in range."""
        return [QueuePartition(qr) for qr in plan_ranges(self.opts)]

    def read(self, partition: Any) -> Iterator[Any]:
        """The partition's messages as Arrow record batches."""
        return read_partition(self.opts, partition)
