"""Streaming reads: ``spark.readStream.format("minimq")`` with admission control and
``Trigger.AvailableNow``.

The offset of a micro-batch is every queue's next offset (:mod:`client.spark.offsets`). The
driver-side methods run in Spark's long-lived source process, which keeps one shared client
instance until :meth:`StreamReader.stop`; the reader pickled to executors carries options only.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from typing import Any

from pyspark.sql.datasource import DataSourceStreamReader
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)

from client.blocking import SharedInstance
from client.errors import MQClientError
from client.spark import brokers
from client.spark.batch import (
    DRIVER_TIMEOUT_S,
    QueuePartition,
    _range,
    read_partition,
    starting_offsets,
)
from client.spark.offsets import NestedOffsets, OffsetMap, from_nested, split_limit, to_nested
from client.spark.options import ReadOptions

log = logging.getLogger(__name__)


class StreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Micro-batches of every queue of the topics, from the checkpointed offsets on."""

    def __init__(self, opts: ReadOptions) -> None:
        self.opts = opts
        self._client: SharedInstance | None = None
        self._targets: OffsetMap | None = None

    def __getstate__(self) -> dict[str, Any]:
        return {"opts": self.opts, "_client": None, "_targets": self._targets}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)

    def _c(self) -> SharedInstance:
        if self._client is None:
            self._client = SharedInstance(self.opts.namesrv).start()
        return self._client

    def _bounds(self) -> brokers.Bounds:
        return self._c().call(
            brokers.queue_bounds, list(self.opts.topics), timeout=DRIVER_TIMEOUT_S
        )

    def initialOffset(self) -> NestedOffsets:
        """startingOffsets (default latest) or startingTimestamp, resolved now."""
        bounds = self._bounds()
        return to_nested(starting_offsets(self._c(), self.opts, bounds, "latest"))

    def getDefaultReadLimit(self) -> ReadLimit:
        """``ReadMaxRows(maxOffsetsPerTrigger)``, or everything available."""
        limit = self.opts.max_offsets_per_trigger
        return ReadAllAvailable() if limit is None else ReadMaxRows(limit)

    def prepareForTriggerAvailableNow(self) -> None:
        """Remember the max offsets now: an availableNow query reads up to them and stops."""
        self._targets = {k: hi for k, (_, hi) in self._bounds().items()}

    def latestOffset(self, start: NestedOffsets, limit: ReadLimit) -> NestedOffsets:
        """The end of the next micro-batch: the queues' max offsets (capped by the
        availableNow targets), admitted by ``limit``; new queues start at their min offset."""
        begin = from_nested(start, "start offset")
        bounds = self._bounds()
        base: OffsetMap = dict(begin)
        latest: OffsetMap = dict(begin)
        for key, (lo, hi) in bounds.items():
            first = begin.get(key, lo)
            base[key] = first
            top = hi if self._targets is None else min(hi, self._targets.get(key, first))
            latest[key] = max(first, top)
        if isinstance(limit, ReadMaxRows):
            latest = split_limit(base, latest, limit.max_rows)
        return to_nested(latest)

    def partitions(self, start: NestedOffsets, end: NestedOffsets) -> Sequence[QueuePartition]:
        """One partition per queue that moved; a queue new since ``start`` starts at its min."""
        begin = from_nested(start, "start offset")
        finish = from_nested(end, "end offset")
        new = [k for k in finish if k not in begin]
        if new:
            lows = {k: lo for k, (lo, _) in self._bounds().items()}
            for key in new:
                begin[key] = lows.get(key, 0)
        return [
            QueuePartition(_range(key, begin[key], hi))
            for key, hi in sorted(finish.items())
            if hi > begin[key]
        ]

    def read(self, partition: Any) -> Iterator[Any]:
        """The partition's messages as Arrow record batches."""
        return read_partition(self.opts, partition)

    def commit(self, end: NestedOffsets) -> None:
        """Advisory: store ``end`` as the ``group`` option's consumer offsets (lags a batch)."""
        if self.opts.group is None:
            return
        try:
            self._c().call(
                brokers.commit_group,
                self.opts.group,
                from_nested(end, "end offset"),
                timeout=DRIVER_TIMEOUT_S,
            )
        except MQClientError as exc:
            log.warning("committing the progress of group %s failed: %s", self.opts.group, exc)

    def stop(self) -> None:
        """Close the driver-side client."""
        if self._client is not None:
            self._client.close()
            self._client = None
