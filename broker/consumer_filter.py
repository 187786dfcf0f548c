"""Compiled SQL92 subscriptions per consumer group and topic (RocketMQ's
``ConsumerFilterManager`` / ``ConsumerFilterData``) and the commit-log match of a record
(``ExpressionMessageFilter.isMatchedByCommitLog``). Used only with ``enablePropertyFilter=true``.

Rules:

- One :class:`ConsumerFilterData` per ``(topic, group)``: the expression, its type, the client's
  ``subVersion`` and the compiled :class:`common.sql_filter.SqlSelector`.
- :meth:`ConsumerFilterManager.register` is RocketMQ's ``FilterDataMapByTopic.register``: a new
  ``(topic, group)`` is compiled and kept; an older or equal version never replaces a newer one
  (an equal version revives a dead entry); a newer version with the same expression only takes
  the version, with another expression is compiled again, and if that fails the old entry is
  dropped (the client sees the parse error at its pulls).
- :meth:`ConsumerFilterManager.register_group` is what a heartbeat does: register each SQL92
  subscription of the group, and mark dead (RocketMQ's ``deadTime``) the group's entries of topics
  it no longer subscribes; entries dead longer than :data:`FILTER_DATA_CLEAN_TIME_SPAN_MS`
  (RocketMQ's ``filterDataCleanTimeSpan``, 24 h) are dropped then.
- :meth:`ConsumerFilterManager.unregister_group` is RocketMQ's ``ConsumerFilterManager.unRegister``
  on a group's ``UNREGISTER`` event (its last consumer left, expired or disconnected): every
  entry of the group is marked dead, so it is dropped a day later like the above, and a group
  that comes back within the day keeps its compiled filters.
- :meth:`ConsumerFilterManager.selector_for_pull` serves a pull: the entry's selector when the
  pull's expression is the registered one, else the pull's expression is compiled (through the
  parse cache) and registered under the pull's version. So an expression is compiled once per
  ``(group, topic, version)``, not per pull.
- :func:`commit_log_matcher` tests a raw record's properties with a selector; a record whose
  properties cannot be read does not match.

Not kept from RocketMQ: the bloom filter over consume-queue extension bitmaps
(``enableCalcFilterBitMap``) and the ``consumerFilter.json`` file that persists it.
"""

from __future__ import annotations

import logging
import struct
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Final

from common.clock import monotonic_ms
from common.record import record_properties
from common.sql_filter import EXPRESSION_SQL92, SqlSelector, compile_sql, compile_sql_cached
from common.subscription import SubscriptionData

log = logging.getLogger(__name__)

FILTER_DATA_CLEAN_TIME_SPAN_MS: Final = 24 * 3600 * 1000
"""How long a dead entry is kept (RocketMQ's ``BrokerConfig.filterDataCleanTimeSpan``)."""


@dataclass(slots=True)
class ConsumerFilterData:
    """One group's compiled subscription of one topic (RocketMQ's ``ConsumerFilterData``)."""

    consumer_group: str
    topic: str
    expression: str
    expression_type: str
    client_version: int
    selector: SqlSelector
    born_time: int
    dead_time: int = 0

    @property
    def is_dead(self) -> bool:
        """True once the group stopped subscribing the topic."""
        return self.dead_time >= self.born_time and self.dead_time > 0


class ConsumerFilterManager:
    """``topic -> group -> ConsumerFilterData`` (see the module rules)."""

    def __init__(self, clock_ms: Callable[[], int] = monotonic_ms) -> None:
        self.clock_ms = clock_ms
        self._by_topic: dict[str, dict[str, ConsumerFilterData]] = {}

    def get(self, topic: str, group: str) -> ConsumerFilterData | None:
        """The group's entry for ``topic``, or None."""
        return self._by_topic.get(topic, {}).get(group)

    def register(
        self, topic: str, group: str, expression: str, expression_type: str, client_version: int
    ) -> bool:
        """Keep ``expression`` as the group's filter of ``topic`` (RocketMQ's rules, see the
        module); True if the entry changed. A TAG expression or an empty one is ignored."""
        if expression_type != EXPRESSION_SQL92 or not expression:
            return False
        old = self.get(topic, group)
        if old is not None and client_version <= old.client_version:
            if client_version == old.client_version and old.is_dead:
                old.dead_time = 0
                return True
            return False
        if old is not None and old.expression == expression:
            old.client_version, old.dead_time = client_version, 0
            return False
        data = self._build(topic, group, expression, expression_type, client_version)
        groups = self._by_topic.setdefault(topic, {})
        if data is None:
            groups.pop(group, None)
            return False
        groups[group] = data
        log.info(
            "consumer filter of %s on %s: %r (version %d)", group, topic, expression, client_version
        )
        return True

    def register_group(self, group: str, subscriptions: Iterable[SubscriptionData]) -> None:
        """A heartbeat's subscriptions of ``group``: register the SQL92 ones, mark the group's
        other topics dead, and drop entries dead for too long."""
        topics = set()
        for sub in subscriptions:
            topics.add(sub.topic)
            self.register(sub.topic, group, sub.sub_string, sub.expression_type, sub.sub_version)
        now = self.clock_ms()
        for topic, groups in self._by_topic.items():
            data = groups.get(group)
            if data is not None and topic not in topics and not data.is_dead:
                data.dead_time = now
        self.clean(now)

    def unregister_group(self, group: str) -> None:
        """The group has no consumer left: mark its entries dead, and drop entries dead for
        too long."""
        now = self.clock_ms()
        for groups in self._by_topic.values():
            data = groups.get(group)
            if data is not None and not data.is_dead:
                data.dead_time = now
        self.clean(now)

    def clean(self, now_ms: int) -> None:
        """Drop entries dead for :data:`FILTER_DATA_CLEAN_TIME_SPAN_MS` or more, and topics
        left without entries."""
        for topic in list(self._by_topic):
            groups = self._by_topic[topic]
            for group in [g for g, d in groups.items() if _dead_too_long(d, now_ms)]:
                del groups[group]
            if not groups:
                del self._by_topic[topic]

    def selector_for_pull(
        self, topic: str, group: str, expression: str, client_version: int
    ) -> SqlSelector:
        """The compiled selector of a pull's SQL92 ``expression``; raises
        :class:`common.sql_filter.SelectorParseError` if it does not parse."""
        data = self.get(topic, group)
        if data is not None and data.expression == expression:
            if client_version > data.client_version:
                data.client_version = client_version
            return data.selector
        selector = compile_sql_cached(expression)
        if data is None or client_version >= data.client_version:
            self._by_topic.setdefault(topic, {})[group] = ConsumerFilterData(
                group,
                topic,
                expression,
                EXPRESSION_SQL92,
                client_version,
                selector,
                self.clock_ms(),
            )
        return selector

    def _build(
        self, topic: str, group: str, expression: str, expression_type: str, client_version: int
    ) -> ConsumerFilterData | None:
        """RocketMQ's ``ConsumerFilterManager.build``: None if the expression does not parse."""
        try:
            selector = compile_sql(expression)
        except ValueError as exc:
            log.warning("consumer filter of %s on %s does not parse: %s", group, topic, exc)
            return None
        return ConsumerFilterData(
            group, topic, expression, expression_type, client_version, selector, self.clock_ms()
        )


def _dead_too_long(data: ConsumerFilterData, now_ms: int) -> bool:
    return data.is_dead and now_ms - data.dead_time >= FILTER_DATA_CLEAN_TIME_SPAN_MS


def commit_log_matcher(selector: SqlSelector) -> Callable[[bytes], bool]:
    """Whether a raw commit-log record's properties satisfy ``selector`` (RocketMQ's
    ``isMatchedByCommitLog``); a record whose properties cannot be decoded does not match."""
    matches = selector.matches

    def matched(record: bytes) -> bool:
        try:
            properties = record_properties(record)
        except (ValueError, IndexError, struct.error):
            return False
        return matches(properties)

    return matched
