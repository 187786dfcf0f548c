"""Per-topic and per-group message figures of one broker (RocketMQ's ``BrokerStatsManager``,
``StatsItemSet`` and ``StatsItem``), behind VIEW_BROKER_STATS_DATA (``mqadmin statsAll``) and
the ``rocketmq_messages_*`` / ``rocketmq_throughput_*`` Prometheus counters.

::

    BrokerStatsManager
    ├─ tables              stats name -> {stats key -> StatsItem}
    │    TOPIC_PUT_NUMS    "topic"        messages stored by sends (value), sends (times)
    │    TOPIC_PUT_SIZE    "topic"        bytes of the sent bodies stored, sends
    │    GROUP_GET_NUMS    "topic@group"  messages handed out by FOUND pulls, pulls
    │    GROUP_GET_SIZE    "topic@group"  bytes of those records, pulls
    │    SNDBCK_PUT_NUMS   "topic@group"  CONSUMER_SEND_MSG_BACK stored (topic = the one the
    │                                     group consumed the message from), send-backs
    ├─ inc_*               the hot paths: one request adds its whole count and size at once
    ├─ tick(now)           the broker's once-a-second loop: samples every item when a window's
    │                      interval has passed
    └─ snapshot(...)       StatsSnapshot(sum, tps, avgpt, times) over a minute, hour or day

Rules:

- An item keeps two running totals, ``value`` (messages or bytes) and ``times`` (requests),
  plus three rings of samples ``(at_s, times, value)``: every 10 s (7 kept: a minute), every
  10 min (7 kept: an hour) and every hour (25 kept: a day), RocketMQ's ``samplingInSeconds`` /
  ``samplingInMinutes`` / ``samplingInHour``. A ring's first sample is preceded by a made-up
  ``(at - interval, 0, 0)``, so every window is at least one interval long.
- A snapshot runs from the oldest sample of the ring to *now* and the running totals (RocketMQ
  ends it at the newest sample, up to one interval old): ``sum`` = value gained, ``tps`` =
  sum / seconds, ``times`` = requests, ``avgpt`` = sum / times (messages per request for a
  ``*_NUMS`` item, bytes per request for a ``*_SIZE`` one; 0 without requests). An item not
  sampled yet counts from ``now - interval``. So figures are exact at once, and a window spans
  between one and one-plus-an-interval of its length (60-70 s, 60-70 min, 24-25 h).
- Counting is O(1) dict work per request, never per message. Sampling walks every item, once
  per 10 s.
- Pure: times come in as arguments (seconds of any monotonic clock); everything runs on the
  broker's event loop, so nothing needs a lock.
- A deleted topic's items go, and so do a deleted group's (RocketMQ's ``onTopicDeleted`` /
  ``onGroupDeleted``): churn does not grow the tables, and a name created again starts at 0.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Final

from common.stats_item import (
    DAY,
    HOUR,
    MINUTE,
    WINDOWS,
    StatsItem,
    StatsSnapshot,
    StatsTables,
    Window,
    stats_key,
)

TOPIC_PUT_NUMS: Final = "TOPIC_PUT_NUMS"
TOPIC_PUT_SIZE: Final = "TOPIC_PUT_SIZE"
GROUP_GET_NUMS: Final = "GROUP_GET_NUMS"
GROUP_GET_SIZE: Final = "GROUP_GET_SIZE"
SNDBCK_PUT_NUMS: Final = "SNDBCK_PUT_NUMS"
STATS_NAMES: Final = (
    TOPIC_PUT_NUMS,
    TOPIC_PUT_SIZE,
    GROUP_GET_NUMS,
    GROUP_GET_SIZE,
    SNDBCK_PUT_NUMS,
)
"""The stats names VIEW_BROKER_STATS_DATA knows (RocketMQ's ``Stats`` constants of the same
names)."""
_GROUP_KEYED: Final = (GROUP_GET_NUMS, GROUP_GET_SIZE, SNDBCK_PUT_NUMS)


class BrokerStatsManager(StatsTables):
    """The broker's stats tables (see the module docstring)."""

    def __init__(self) -> None:
        super().__init__(STATS_NAMES)

    # ------------------------------------------------------------------ counting

    def inc_topic_put(self, topic: str, nums: int, size: int) -> None:
        """One send (or batch) stored ``nums`` messages of ``size`` body bytes in ``topic``."""
        self._add(TOPIC_PUT_NUMS, topic, nums)
        self._add(TOPIC_PUT_SIZE, topic, size)

    def inc_group_get(self, group: str, topic: str, nums: int, size: int) -> None:
        """One FOUND pull of ``group`` handed out ``nums`` records of ``size`` bytes."""
        key = stats_key(topic, group)
        self._add(GROUP_GET_NUMS, key, nums)
        self._add(GROUP_GET_SIZE, key, size)

    def inc_send_back(self, group: str, topic: str) -> None:
        """``group`` sent back one message it consumed from ``topic``."""
        self._add(SNDBCK_PUT_NUMS, stats_key(topic, group), 1)

    # ------------------------------------------------------------------ sampling

    # ------------------------------------------------------------------ reading

    def snapshots(self, name: str, key: str, now_s: float) -> dict[str, StatsSnapshot] | None:
        """``{"minute", "hour", "day"}`` snapshots of an item at ``now_s``; None if unknown."""
        found = self.item(name, key)
        if found is None:
            return None
        return {w.name: found.snapshot(w, now_s) for w in WINDOWS}

    def totals(self, name: str) -> Mapping[str, int]:
        """Key -> running value of every item of ``name`` (the Prometheus counters)."""
        return {key: item.value for key, item in self.tables[name].items()}

    def group_totals(self, name: str) -> Iterator[tuple[str, str, int]]:
        """``(topic, group, value)`` of every item of a ``topic@group``-keyed ``name``."""
        for key, item in self.tables[name].items():
            topic, _, group = key.partition("@")
            yield topic, group, item.value

    # ------------------------------------------------------------------ forgetting

    def on_topic_deleted(self, topic: str) -> None:
        """Drop ``topic``'s items (its put items, and every group's items of it)."""
        self.tables[TOPIC_PUT_NUMS].pop(topic, None)
        self.tables[TOPIC_PUT_SIZE].pop(topic, None)
        prefix = f"{topic}@"
        for name in _GROUP_KEYED:
            table = self.tables[name]
            for key in [k for k in table if k.startswith(prefix)]:
                del table[key]

    def on_group_deleted(self, group: str) -> None:
        """Drop ``group``'s items, of every topic."""
        suffix = f"@{group}"
        for name in _GROUP_KEYED:
            table = self.tables[name]
            for key in [k for k in table if k.endswith(suffix)]:
                del table[key]


__all__ = [
    "DAY",
    "GROUP_GET_NUMS",
    "GROUP_GET_SIZE",
    "HOUR",
    "MINUTE",
    "SNDBCK_PUT_NUMS",
    "STATS_NAMES",
    "TOPIC_PUT_NUMS",
    "TOPIC_PUT_SIZE",
    "WINDOWS",
    "BrokerStatsManager",
    "StatsItem",
    "StatsSnapshot",
    "Window",
    "stats_key",
]
