"""TopicConfigManager: the broker's topic table (RocketMQ's ``TopicConfigManager``).

Rules:

- The table maps a topic name to an immutable :class:`common.route.TopicConfig`.
- Every change bumps :attr:`TopicConfigManager.data_version` (sent with namesrv registration)
  and persists ``<config_dir>/topics.json`` at once via :mod:`broker.json_store`, in RocketMQ's
  shape ``{"topicConfigTable": {name: TopicConfig.to_wire()}, "dataVersion": {...}}``.
- System topics (``TBW102`` when auto-creation is on, ``SELF_TEST_TOPIC``, ``OFFSET_MOVED_EVENT``,
  ``SCHEDULE_TOPIC_XXXX``, the transaction topics) exist from the start; the file loaded at start
  overrides them.
- Topic names follow RocketMQ's ``TopicValidator``: ``^[%|a-zA-Z0-9_-]+$``, at most 127 chars.
- A topic's ``queue.type`` attribute (:mod:`common.topic_attributes`) reaches the store: every
  topic's at :meth:`TopicConfigManager.announce_queue_types` (broker start, before serving),
  and each created or updated topic's as it changes (``on_queue_type``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

from broker.json_store import (
    change_durably,
    load_json,
    next_version_timestamp_ms,
    write_json_atomic,
)
from common.clock import wall_clock_ms
from common.route import DataVersion, PermName, TopicConfig
from common.topic import (
    AUTO_CREATE_TOPIC_KEY_TOPIC,
    BENCHMARK_TOPIC,
    OFFSET_MOVED_EVENT,
    SCHEDULE_TOPIC,
    SELF_TEST_TOPIC,
    TRANS_CHECK_MAX_TIME_TOPIC,
    TRANS_HALF_TOPIC,
    TRANS_OP_HALF_TOPIC,
    is_not_allowed_send_topic,
    topic_problem,
)
from common.topic_attributes import CQType, queue_type_of

log = logging.getLogger(__name__)

SCHEDULE_DELAY_LEVELS = 18

TOPICS_FILE = "topics.json"


class TopicConfigManager:
    """Topic name -> :class:`TopicConfig`, persisted to ``<config_dir>/topics.json``."""

    def __init__(self, config_dir: Path, default_queue_nums: int, auto_create_enable: bool) -> None:
        if default_queue_nums <= 0:
            raise ValueError("default_queue_nums must be > 0")
        self.config_dir = Path(config_dir)
        self.default_queue_nums = default_queue_nums
        self.auto_create_enable = auto_create_enable
        self.data_version = 0
        self.data_version_timestamp_ms = wall_clock_ms()
        self._table: dict[str, TopicConfig] = {}
        self.on_queue_type: Callable[[str, CQType], None] | None = None
        """Told each created or updated topic's queue type (the store's ``set_queue_type``)
        once the change is on disk, before anything can be sent to the topic."""
        self._create_system_topics()
        self.load()

    @property
    def path(self) -> Path:
        """``<config_dir>/topics.json``."""
        return self.config_dir / TOPICS_FILE

    def _create_system_topics(self) -> None:
        rw = PermName.PERM_READ | PermName.PERM_WRITE
        system = [
            TopicConfig(SELF_TEST_TOPIC, 1, 1, rw),
            TopicConfig(BENCHMARK_TOPIC, 1024, 1024, rw),
            TopicConfig(OFFSET_MOVED_EVENT, 1, 1, rw),
            TopicConfig(SCHEDULE_TOPIC, SCHEDULE_DELAY_LEVELS, SCHEDULE_DELAY_LEVELS, rw),
            TopicConfig(TRANS_HALF_TOPIC, 1, 1, rw),
            TopicConfig(TRANS_OP_HALF_TOPIC, 1, 1, rw),
            TopicConfig(TRANS_CHECK_MAX_TIME_TOPIC, 1, 1, rw),
        ]
        if self.auto_create_enable:
            n = self.default_queue_nums
            system.append(
                TopicConfig(AUTO_CREATE_TOPIC_KEY_TOPIC, n, n, rw | PermName.PERM_INHERIT)
            )
        for config in system:
            self._table[config.topic_name] = config

    # ------------------------------------------------------------------ queries

    def select(self, topic: str) -> TopicConfig | None:
        """The topic's config, or None."""
        return self._table.get(topic)

    def topics(self) -> dict[str, TopicConfig]:
        """A copy of the whole table."""
        return dict(self._table)

    def __contains__(self, topic: object) -> bool:
        return topic in self._table

    def __len__(self) -> int:
        return len(self._table)

    # ------------------------------------------------------------------ changes

    def create_or_update(self, config: TopicConfig) -> None:
        """Add or replace ``config``; ValueError if its name is invalid."""
        reason = topic_problem(config.topic_name)
        if reason is not None:
            raise ValueError(reason)
        if self._table.get(config.topic_name) == config:
            return
        self._change(config.topic_name, config)

    def delete(self, topic: str) -> TopicConfig | None:
        """Remove ``topic``; the removed config, or None when it was absent."""
        removed = self._table.get(topic)
        if removed is not None:
            self._change(topic, None)
        return removed

    def create_on_send(
        self, topic: str, client_queue_nums: int | None = None
    ) -> TopicConfig | None:
        """The topic's config, auto-creating it if enabled: with the default queue count, at
        most ``client_queue_nums`` and TBW102's write queues when the producer sent its
        ``defaultTopicQueueNums`` (RocketMQ's ``createTopicInSendMessageMethod``; the default,
        which ``updateBrokerConfig`` changes at runtime, caps it too).

        None when the topic is absent and auto-creation is off, or the name is invalid or one
        clients may not send to.
        """
        existing = self._table.get(topic)
        if existing is not None:
            return existing
        if not self.auto_create_enable:
            return None
        if topic_problem(topic) is not None or is_not_allowed_send_topic(topic):
            return None
        n = self.default_queue_nums
        if client_queue_nums is not None and client_queue_nums > 0:
            template = self._table.get(AUTO_CREATE_TOPIC_KEY_TOPIC)
            n = min(client_queue_nums, n, template.write_queue_nums if template else n)
        config = TopicConfig(topic, n, n, PermName.PERM_READ | PermName.PERM_WRITE)
        self._change(topic, config)
        log.info("auto-created topic %s with %d queues", topic, n)
        return config

    def current_version(self) -> DataVersion:
        """The table's :class:`DataVersion` (sent with each name-server registration)."""
        return DataVersion(self.data_version_timestamp_ms, self.data_version)

    def next_version(self) -> None:
        """A new data version without a table change (RocketMQ's ``DataVersion.nextVersion``),
        in memory: at broker start (so this run's registrations are never older than a
        previous run's) and when ``brokerPermission`` changes what the routes advertise.
        Its timestamp is never earlier than the current one's, the wall clock may have
        stepped back (:func:`broker.json_store.next_version_timestamp_ms`)."""
        self.data_version += 1
        self.data_version_timestamp_ms = next_version_timestamp_ms(self.data_version_timestamp_ms)

    def announce_queue_types(self) -> None:
        """Tell :attr:`on_queue_type` the queue type of every topic (at broker start)."""
        if self.on_queue_type is not None:
            for name, config in self._table.items():
                self.on_queue_type(name, queue_type_of(config.attributes))

    def _change(self, topic: str, config: TopicConfig | None) -> None:
        change_durably(self, self._table, topic, config)
        if config is not None and self.on_queue_type is not None:
            self.on_queue_type(topic, queue_type_of(config.attributes))

    # ------------------------------------------------------------------ persistence

    def to_wire(self) -> dict[str, Any]:
        """RocketMQ's ``topics.json`` document."""
        return {
            "topicConfigTable": {name: c.to_wire() for name, c in sorted(self._table.items())},
            "dataVersion": {
                "timestamp": self.data_version_timestamp_ms,
                "counter": self.data_version,
            },
        }

    def persist(self) -> None:
        """Write ``topics.json`` atomically (previous file kept as ``topics.json.bak``)."""
        write_json_atomic(self.path, self.to_wire(), self._decode)

    def load(self) -> bool:
        """Merge ``topics.json`` into the table; False when neither it nor its ``.bak`` exists.

        A file that does not parse or is not a valid topics document is skipped for its
        ``.bak``; ValueError when neither loads.
        """
        loaded = load_json(self.path, self._decode)
        if loaded is None:
            return False
        table, counter, stamp = loaded
        self._table.update(table)
        if counter is not None:
            self.data_version = counter
        if stamp is not None:
            self.data_version_timestamp_ms = stamp
        return True

    @staticmethod
    def _decode(doc: object) -> tuple[dict[str, TopicConfig], int | None, int | None]:
        """A topics document -> (table, data version counter, its timestamp); ValueError if
        it has the wrong shape."""
        if not isinstance(doc, dict) or not isinstance(doc.get("topicConfigTable", {}), dict):
            raise ValueError("expected a map with a 'topicConfigTable' map")
        table: dict[str, TopicConfig] = {}
        for name, wire in doc.get("topicConfigTable", {}).items():
            config = TopicConfig.from_wire(wire)
            if config.topic_name != name:
                raise ValueError(f"entry {name!r} holds topic {config.topic_name!r}")
            table[name] = config
        version = doc.get("dataVersion", {})
        if not isinstance(version, dict):
            return table, None, None
        return table, _int_or_none(version.get("counter")), _int_or_none(version.get("timestamp"))


def _int_or_none(value: object) -> int | None:
    """``value`` if it is an int (not a bool), else None."""
    return value if isinstance(value, int) and not isinstance(value, bool) else None
