"""A client instance's consume figures per topic and group (RocketMQ's
``ConsumerStatsManager``), sent as the ``statusTable`` of a consumer's running info
(``mqadmin consumerStatus -g <group> -i <clientId>``).

::

    ConsumerStatsManager            one per ClientInstance; items keyed "topic@group"
    ├─ PULL_RT              value: ms from asking to the answer of a FOUND pull, times: pulls
    ├─ PULL_TPS             value: messages a FOUND pull brought, times: pulls
    ├─ CONSUME_RT           value: ms the handler calls took, times: calls (one per batch)
    ├─ CONSUME_OK_TPS       value: messages the handler acknowledged
    └─ CONSUME_FAILED_TPS   value: messages it did not (RECONSUME_LATER, an exception)

Rules (RocketMQ's ``consumeStatus``, on :mod:`common.stats_item` windows):

- ``pullRT`` = avgpt of PULL_RT over the minute, ``pullTPS`` = tps of PULL_TPS over the minute,
  ``consumeRT`` = avgpt of CONSUME_RT over the minute (over the hour when the minute's sum is
  0), ``consumeOKTPS`` and ``consumeFailedTPS`` = tps over the minute,
  ``consumeFailedMsgs`` = sum of CONSUME_FAILED_TPS over the hour.
- The topic is the queue's: messages of the retry topic count under ``%RETRY%<group>``.
- Counting is per pull (and per pull's handler calls), never per message; everything runs on
  the instance's trio loop, so nothing needs a lock. :meth:`ConsumerStatsManager.tick`
  samples every 10 s (the instance's stats loop); a group's items go when its consumer closes.
"""

from __future__ import annotations

from typing import Final

from common.stats_item import HOUR, MINUTE, StatsSnapshot, StatsTables, stats_key
from remoting.consumer_bodies import ConsumeStatus

PULL_RT: Final = "PULL_RT"
PULL_TPS: Final = "PULL_TPS"
CONSUME_RT: Final = "CONSUME_RT"
CONSUME_OK_TPS: Final = "CONSUME_OK_TPS"
CONSUME_FAILED_TPS: Final = "CONSUME_FAILED_TPS"
STATS_NAMES: Final = (PULL_RT, PULL_TPS, CONSUME_RT, CONSUME_OK_TPS, CONSUME_FAILED_TPS)
"""RocketMQ's ``ConsumerStatsManager`` stats names."""
SAMPLE_EVERY_S: Final = MINUTE.interval_s
"""How often the instance's stats loop calls :meth:`ConsumerStatsManager.tick`."""


class ConsumerStatsManager(StatsTables):
    """The consume figures of every consumer of one client instance (module rules)."""

    def __init__(self) -> None:
        super().__init__(STATS_NAMES)

    def inc_pull(self, group: str, topic: str, rt_ms: int, msgs: int) -> None:
        """A FOUND pull of ``group`` from a queue of ``topic`` took ``rt_ms`` and brought
        ``msgs`` messages (RocketMQ's ``incPullRT`` and ``incPullTPS``)."""
        key = stats_key(topic, group)
        self._add(PULL_RT, key, max(0, rt_ms))
        if msgs > 0:
            self._add(PULL_TPS, key, msgs)

    def inc_consume(
        self, group: str, topic: str, rt_ms: int, calls: int, ok: int, failed: int
    ) -> None:
        """``calls`` handler calls on messages of a queue of ``topic`` took ``rt_ms`` in all;
        ``ok`` messages were acknowledged and ``failed`` not (RocketMQ's ``incConsumeRT``,
        ``incConsumeOKTPS``, ``incConsumeFailedTPS``)."""
        key = stats_key(topic, group)
        if calls > 0:
            self._add(CONSUME_RT, key, max(0, rt_ms), calls)
        if ok > 0:
            self._add(CONSUME_OK_TPS, key, ok)
        if failed > 0:
            self._add(CONSUME_FAILED_TPS, key, failed)

    def consume_status(self, group: str, topic: str, now_s: float) -> ConsumeStatus:
        """``group``'s figures for ``topic`` at ``now_s`` (module rules; 0 for nothing
        counted)."""
        key = stats_key(topic, group)
        consume_rt = self._snapshot(CONSUME_RT, key, now_s)
        if consume_rt.sum == 0:
            consume_rt = self._snapshot(CONSUME_RT, key, now_s, hour=True)
        return ConsumeStatus(
            pull_rt=self._snapshot(PULL_RT, key, now_s).avgpt,
            pull_tps=self._snapshot(PULL_TPS, key, now_s).tps,
            consume_rt=consume_rt.avgpt,
            consume_ok_tps=self._snapshot(CONSUME_OK_TPS, key, now_s).tps,
            consume_failed_tps=self._snapshot(CONSUME_FAILED_TPS, key, now_s).tps,
            consume_failed_msgs=self._snapshot(CONSUME_FAILED_TPS, key, now_s, hour=True).sum,
        )

    def _snapshot(self, name: str, key: str, now_s: float, *, hour: bool = False) -> StatsSnapshot:
        item = self.tables[name].get(key)
        if item is None:
            return StatsSnapshot(0, 0.0, 0.0, 0)
        return item.snapshot(HOUR if hour else MINUTE, now_s)

    def forget_group(self, group: str) -> None:
        """Drop ``group``'s items (its consumer closed): a client that starts and closes
        consumers of many groups does not grow the tables."""
        suffix = f"@{group}"
        for table in self.tables.values():
            for key in [k for k in table if k.endswith(suffix)]:
                del table[key]
