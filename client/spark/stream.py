"""Streaming reads: ``spark.readStream.format("minimq")`` with admission control and
``Trigger.AvailableNow``.

The offset of a micro-batch is every queue's next offset (:mod:`client.spark.offsets`). The
driver-side methods run in Spark's long-lived source process, which keeps one shared client
instance until :meth:`StreamReader.stop`; the reader pickled to executors carries options only.
"""

from __future__ import annotations

import contextlib
import logging
import time
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
    check_group,
    read_partition,
    starting_offsets,
)
from client.spark.offsets import (
    NestedOffsets,
    OffsetMap,
    QueueKey,
    from_nested,
    split_limit,
    to_nested,
)
from client.spark.options import ReadOptions
from client.spark.pulling import DataLossError, open_shared_instance

log = logging.getLogger(__name__)

FETCH_ATTEMPTS = 3
"""Tries of a trigger's offset requests when no broker answers (Kafka's fetchOffset.numRetries
counts retries the same way, plus one)."""
RETRY_INTERVAL_S = 1.0
"""Pause between those tries."""


class SourceUnavailableError(RuntimeError):
    """No broker of the query's topics answered a trigger's offset requests (the message names
    each broker and its error); the query fails with this."""


def _raise_if_refused(failures: brokers.Failures) -> None:
    """Raise the failures of a trigger's offset requests at once (no retry can help) when the
    brokers refused them for lack of permission (the reader explains the refusal)."""
    error = brokers.OffsetsUnavailableError("could not get the queues' offsets", failures)
    if brokers.refused_for_permission(error):
        raise error


class StreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Micro-batches of every queue of the topics, from the checkpointed offsets on."""

    def __init__(self, opts: ReadOptions) -> None:
        self.opts = opts
        self._client: SharedInstance | None = None
        self._targets: OffsetMap | None = None
        self._group_checked = False
        self._available: NestedOffsets | None = None

    def __getstate__(self) -> dict[str, Any]:
        return {
            "opts": self.opts,
            "_client": None,
            "_targets": self._targets,
            "_group_checked": False,
            "_available": None,
        }

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)

    def _c(self) -> SharedInstance:
        """The driver-side client, opened on first use; it keeps the topics' routes (see
        :class:`brokers.KeptRoutes`) until :meth:`stop`."""
        if self._client is None:
            client = open_shared_instance(self.opts.namesrv, self.opts.security).start()
            try:
                client.call(brokers.keep_routes, self.opts.topics, timeout=DRIVER_TIMEOUT_S)
            except BaseException:
                client.close()
                raise
            self._client = client
        return self._client

    def _probe(self) -> brokers.Probe:
        """The live bounds; a route that cannot be refreshed comes from the cache."""
        return self._c().call(
            brokers.probe_bounds, list(self.opts.topics), True, timeout=DRIVER_TIMEOUT_S
        )

    def _live_bounds(self) -> brokers.Bounds:
        """The bounds of the queues whose brokers answer. A queue that does not answer is
        left out with a warning, so it keeps its offset for this trigger. When no queue
        answers, or the routes cannot be had (no name server answers and no route is cached),
        retry ``FETCH_ATTEMPTS`` times, then :class:`SourceUnavailableError`."""
        topics = ", ".join(self.opts.topics)
        problem = ""
        for attempt in range(1, FETCH_ATTEMPTS + 1):
            try:
                probe = self._probe()
            except MQClientError as exc:
                problem = f"could not get the routes of topic(s) {topics}: {exc}"
                log.warning("minimq source: getting the routes failed (try %d): %s", attempt, exc)
            else:
                if probe.bounds or not probe.failures:
                    if probe.failures:
                        log.warning(
                            "minimq source: leaving out queues that did not answer, they keep "
                            "their offsets for this trigger: %s",
                            brokers.describe(probe.failures),
                        )
                    return probe.bounds
                _raise_if_refused(probe.failures)
                problem = f"no broker of topic(s) {topics} answered: "
                problem += brokers.describe(probe.failures)
            if attempt < FETCH_ATTEMPTS:
                time.sleep(RETRY_INTERVAL_S)
        raise SourceUnavailableError(
            f"minimq source: {problem} ({FETCH_ATTEMPTS} attempts, {RETRY_INTERVAL_S:g} s apart)"
        )

    def _explained(self) -> contextlib.AbstractContextManager[None]:
        """A refusal for lack of permission in a driver-side step, explained as the batch
        reader and the executors explain it (:func:`brokers.acl_refusals_explained`)."""
        return brokers.acl_refusals_explained(self.opts.security)

    def initialOffset(self) -> NestedOffsets:
        """startingOffsets (default latest) or startingTimestamp, resolved now (every broker
        of the topics must answer: OffsetsUnavailableError names those that do not)."""
        with self._explained():
            bounds = self._c().call(
                brokers.queue_bounds, list(self.opts.topics), timeout=DRIVER_TIMEOUT_S
            )
            self._check_group_once(bounds)
            return to_nested(starting_offsets(self._c(), self.opts, bounds, "latest"))

    def _check_group_once(self, bounds: brokers.Bounds) -> None:
        """At the query's first trigger (new or restarted): fail if the brokers refuse the
        executors' pulls for the ``group`` option (see :func:`check_group`)."""
        if not self._group_checked:
            check_group(self._c(), self.opts, bounds)
            self._group_checked = True

    def getDefaultReadLimit(self) -> ReadLimit:
        """``ReadMaxRows(maxOffsetsPerTrigger)``, or everything available."""
        limit = self.opts.max_offsets_per_trigger
        return ReadAllAvailable() if limit is None else ReadMaxRows(limit)

    def prepareForTriggerAvailableNow(self) -> None:
        """Remember the max offsets now: an availableNow query reads up to them and stops."""
        with self._explained():
            self._targets = {k: hi for k, (_, hi) in self._live_bounds().items()}

    def latestOffset(self, start: NestedOffsets, limit: ReadLimit) -> NestedOffsets:
        """The end of the next micro-batch: the queues' max offsets (capped by the
        availableNow targets), admitted by ``limit``; new queues start at their min offset.

        Queues that do not answer keep their start offset. A queue whose max offset went
        below its start offset (topic deleted and recreated) is data loss: DataLossError, or
        with failOnDataLoss=false a warning and a restart at its min offset (its end offset
        is then below its start offset, which :meth:`partitions` reads as such a restart).
        """
        begin = from_nested(start, "start offset")
        base: OffsetMap = dict(begin)
        latest: OffsetMap = dict(begin)
        with self._explained():
            bounds = self._live_bounds()
            self._check_group_once(bounds)
        for key, (lo, hi) in bounds.items():
            first = begin.get(key, lo)
            if hi < first:
                first = self._offsets_went_back(key, first, lo, hi)
            base[key] = first
            top = hi if self._targets is None else min(hi, self._targets.get(key, first))
            latest[key] = max(first, top)
        self._available = to_nested(latest)
        if isinstance(limit, ReadMaxRows):
            latest = split_limit(base, latest, limit.max_rows)
        return to_nested(latest)

    def reportLatestOffset(self) -> NestedOffsets | None:
        """The offsets available at the last :meth:`latestOffset` (before ``limit`` cut them;
        availableNow: up to its targets), or None before the first: the query progress's
        ``latestOffset``, which shows how far the query is behind, as Kafka's source does."""
        return self._available

    def _offsets_went_back(self, key: QueueKey, was: int, lo: int, hi: int) -> int:
        """Report a queue whose max offset ``hi`` is below its start ``was``; its new start."""
        topic, broker, qid = key
        text = (
            f"minimq: the offsets of topic {topic} broker {broker} queue {qid} went back "
            f"from {was} to {hi} (the topic was deleted and recreated, or the broker's store "
            f"was replaced): messages may have been missed"
        )
        if self.opts.fail_on_data_loss:
            raise DataLossError(
                f"{text}. Set failOnDataLoss=false to restart the queue at its earliest offset."
            )
        log.warning("%s; restarting the queue at its earliest offset %d", text, lo)
        return lo

    def partitions(self, start: NestedOffsets, end: NestedOffsets) -> Sequence[QueuePartition]:
        """One partition per queue that moved. A queue new since ``start``, or whose end is
        below its start (restarted by :meth:`latestOffset`), is read from its min offset."""
        begin = from_nested(start, "start offset")
        finish = from_nested(end, "end offset")
        restart = [k for k, hi in finish.items() if k not in begin or hi < begin[k]]
        if restart:
            with self._explained():
                lows = {k: lo for k, (lo, _) in self._live_bounds().items()}
            for key in restart:
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
        """Advisory: store ``end`` as the ``group`` option's consumer offsets (lags a batch).
        A failure (a broker down, a refused update) is logged and never fails the query."""
        group = self.opts.group
        if group is None:
            return
        try:
            failed = self._c().call(
                brokers.commit_group,
                group,
                from_nested(end, "end offset"),
                timeout=DRIVER_TIMEOUT_S,
            )
        except Exception as exc:  # noqa: BLE001 - advisory: the checkpoint is the truth
            log.warning("minimq source: committing the progress of group %s failed: %s", group, exc)
            return
        if failed:
            log.warning(
                "minimq source: committing the progress of group %s failed for %s",
                group,
                brokers.describe(failed),
            )

    def stop(self) -> None:
        """Close the driver-side client (releasing the routes it kept)."""
        client, self._client = self._client, None
        if client is not None:
            try:
                client.call(brokers.release_routes, self.opts.topics, timeout=DRIVER_TIMEOUT_S)
            except Exception as exc:  # noqa: BLE001 - stopping goes on; the client closes
                log.warning("minimq source: releasing the topics' routes failed: %s", exc)
            finally:
                client.close()
