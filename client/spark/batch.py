"""Batch reads: ``spark.read.format("minimq")``; one partition per queue's offset range."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

from pyspark.sql.datasource import DataSourceReader, InputPartition

from client.blocking import SharedInstance
from client.spark import brokers
from client.spark.offsets import OffsetMap, QueueKey, resolve, unknown_queues
from client.spark.options import OptionError, ReadOptions
from client.spark.pulling import QueueRange, read_range

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
    return read_range(
        opts.namesrv,
        qr,
        tags=opts.tags,
        pull_batch_size=opts.pull_batch_size,
        fail_on_data_loss=opts.fail_on_data_loss,
        group=opts.group,
    )


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
    return resolve(spec, bounds, default="earliest")


def check_known(spec: str | OffsetMap, bounds: brokers.Bounds, option: str) -> None:
    """OptionError when a JSON offset names a queue the topics do not have."""
    if isinstance(spec, str):
        return
    missing = unknown_queues(spec, bounds)
    if missing:
        names = ", ".join(f"{t}/{b}/{q}" for t, b, q in missing)
        raise OptionError(f"option '{option}' names queues the topics do not have: {names}")


def plan_ranges(opts: ReadOptions) -> list[QueueRange]:
    """The non-empty ``[start, end)`` range of every queue of the topics, now."""
    with SharedInstance(opts.namesrv) as client:
        bounds = client.call(brokers.queue_bounds, list(opts.topics), timeout=DRIVER_TIMEOUT_S)
        start = starting_offsets(client, opts, bounds, "earliest")
    ending = opts.ending if opts.ending is not None else "latest"
    check_known(ending, bounds, "endingOffsets")
    end = resolve(ending, bounds, default="latest")
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
