"""SubscriptionGroupManager: per consumer group settings (RocketMQ's ``SubscriptionGroupManager``).

Rules:

- The table maps a group name to an immutable :class:`SubscriptionGroupConfig` with RocketMQ's
  fields and defaults (``retryQueueNums`` 1, ``retryMaxTimes`` 16, consume / broadcast enabled,
  ``brokerId`` 0, ``whichBrokerWhenConsumeSlowly`` 1, ``notifyConsumerIdsChangedEnable``).
- Every change bumps the data version and persists ``<config_dir>/subscriptionGroup.json`` at
  once via :mod:`broker.json_store`, in RocketMQ's shape
  ``{"subscriptionGroupTable": {name: config}, "dataVersion": {"timestamp", "counter"}}``.
- :meth:`SubscriptionGroupManager.find` auto-creates an unknown group with the defaults when
  ``autoCreateSubscriptionGroup`` is on (RocketMQ's ``findSubscriptionGroupConfig``), else
  answers None.
- RocketMQ's built-in groups (``TOOLS_CONSUMER``, ``FILTERSRV_CONSUMER``, ``SELF_TEST_C_GROUP``,
  ``CID_ONS-HTTP-PROXY``, ``CID_ONSAPI_PULL``, ``CID_ONSAPI_PERMISSION``, ``CID_ONSAPI_OWNER``,
  ``CID_SYS_RMQ_TRANS``) exist from the start with broadcasting disabled, as RocketMQ's; the file
  loaded at start overrides them.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from broker.json_store import (
    change_durably,
    load_json,
    next_version_timestamp_ms,
    write_json_atomic,
)
from common.clock import wall_clock_ms
from common.route import MAX_QUEUE_NUMS
from common.topic import group_problem

log = logging.getLogger(__name__)

SUBSCRIPTION_GROUP_FILE = "subscriptionGroup.json"
BUILTIN_GROUPS = (
    "TOOLS_CONSUMER",
    "FILTERSRV_CONSUMER",
    "SELF_TEST_C_GROUP",
    "CID_ONS-HTTP-PROXY",
    "CID_ONSAPI_PULL",
    "CID_ONSAPI_PERMISSION",
    "CID_ONSAPI_OWNER",
    "CID_SYS_RMQ_TRANS",
)
"""Groups RocketMQ's ``SubscriptionGroupManager.init`` creates (broadcasting disabled)."""


def _wire(key: str) -> dict[str, Any]:
    return {"key": key}


@dataclass(frozen=True, slots=True)
class SubscriptionGroupConfig:
    """One group's settings (RocketMQ's ``SubscriptionGroupConfig``, 4.9 fields)."""

    group_name: str = field(metadata=_wire("groupName"))
    consume_enable: bool = field(default=True, metadata=_wire("consumeEnable"))
    consume_from_min_enable: bool = field(default=True, metadata=_wire("consumeFromMinEnable"))
    consume_broadcast_enable: bool = field(default=True, metadata=_wire("consumeBroadcastEnable"))
    retry_queue_nums: int = field(default=1, metadata=_wire("retryQueueNums"))
    retry_max_times: int = field(default=16, metadata=_wire("retryMaxTimes"))
    broker_id: int = field(default=0, metadata=_wire("brokerId"))
    which_broker_when_consume_slowly: int = field(
        default=1, metadata=_wire("whichBrokerWhenConsumeSlowly")
    )
    notify_consumer_ids_changed_enable: bool = field(
        default=True, metadata=_wire("notifyConsumerIdsChangedEnable")
    )

    def __post_init__(self) -> None:
        reason = group_problem(self.group_name)
        if reason is not None:
            raise ValueError(reason)
        if not 0 <= self.retry_queue_nums <= MAX_QUEUE_NUMS:
            raise ValueError(
                f"retryQueueNums must be in [0, {MAX_QUEUE_NUMS}], got {self.retry_queue_nums}"
            )
        if self.broker_id < 0 or self.which_broker_when_consume_slowly < 0:
            raise ValueError("brokerId and whichBrokerWhenConsumeSlowly must be >= 0")

    def to_wire(self) -> dict[str, Any]:
        """The camelCase map RocketMQ's JSON (and our msgpack bodies) use."""
        return {f.metadata["key"]: getattr(self, f.name) for f in dataclasses.fields(self)}

    @classmethod
    def from_wire(cls, wire: Mapping[str, Any]) -> SubscriptionGroupConfig:
        """Parse a camelCase map; absent keys keep their defaults, unknown keys are ignored.

        ValueError naming the key when a value has the wrong type or the name is invalid.
        """
        kwargs: dict[str, Any] = {}
        for f in dataclasses.fields(cls):
            key = f.metadata["key"]
            if key not in wire:
                continue
            value = wire[key]
            kind = bool if f.type in ("bool", bool) else int if f.type in ("int", int) else str
            if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
                raise ValueError(f"subscription group {key!r} must be {kind.__name__}")
            kwargs[f.name] = value
        if "group_name" not in kwargs:
            raise ValueError("subscription group: missing 'groupName'")
        return cls(**kwargs)


class SubscriptionGroupManager:
    """Group name -> :class:`SubscriptionGroupConfig`, persisted to ``subscriptionGroup.json``."""

    def __init__(self, config_dir: Path, *, auto_create: bool = True) -> None:
        self.config_dir = Path(config_dir)
        self.auto_create = auto_create
        self.data_version = 0
        self.data_version_timestamp_ms = wall_clock_ms()
        self._table: dict[str, SubscriptionGroupConfig] = {
            name: SubscriptionGroupConfig(name, consume_broadcast_enable=False)
            for name in BUILTIN_GROUPS
        }
        self.load()

    @property
    def path(self) -> Path:
        """``<config_dir>/subscriptionGroup.json``."""
        return self.config_dir / SUBSCRIPTION_GROUP_FILE

    # ------------------------------------------------------------------ queries

    def select(self, group: str) -> SubscriptionGroupConfig | None:
        """The group's config, or None (never creates)."""
        return self._table.get(group)

    def find(self, group: str) -> SubscriptionGroupConfig | None:
        """The group's config, auto-created with the defaults when allowed; else None."""
        existing = self._table.get(group)
        if existing is not None:
            return existing
        if not self.auto_create or group_problem(group) is not None:
            return None
        config = SubscriptionGroupConfig(group)
        self._table[group] = config
        self._bump_version()
        try:
            self.persist()
        except OSError as exc:  # the defaults it holds are what an absent group gets anyway
            log.warning(
                "auto-created subscription group %s not persisted yet (%s); the next change "
                "writes it",
                group,
                exc,
            )
        log.info("auto-created subscription group %s", group)
        return config

    def groups(self) -> dict[str, SubscriptionGroupConfig]:
        """A copy of the whole table."""
        return dict(self._table)

    def __contains__(self, group: object) -> bool:
        return group in self._table

    # ------------------------------------------------------------------ changes

    def create_or_update(self, config: SubscriptionGroupConfig) -> None:
        """Add or replace ``config`` (persisted at once)."""
        if self._table.get(config.group_name) == config:
            return
        self._change(config.group_name, config)

    def delete(self, group: str) -> SubscriptionGroupConfig | None:
        """Remove ``group``; the removed config, or None when it was absent."""
        removed = self._table.get(group)
        if removed is not None:
            self._change(group, None)
        return removed

    def _bump_version(self) -> None:
        self.data_version += 1
        self.data_version_timestamp_ms = next_version_timestamp_ms(self.data_version_timestamp_ms)

    def _change(self, group: str, config: SubscriptionGroupConfig | None) -> None:
        change_durably(self, self._table, group, config)

    # ------------------------------------------------------------------ persistence

    def to_wire(self) -> dict[str, Any]:
        """RocketMQ's ``subscriptionGroup.json`` document."""
        return {
            "subscriptionGroupTable": {
                name: c.to_wire() for name, c in sorted(self._table.items())
            },
            "dataVersion": {
                "timestamp": self.data_version_timestamp_ms,
                "counter": self.data_version,
            },
        }

    def persist(self) -> None:
        """Write the file atomically (previous one kept as ``.bak``)."""
        write_json_atomic(self.path, self.to_wire(), self._decode)

    def load(self) -> bool:
        """Merge the file into the table; False when neither it nor its ``.bak`` exists.

        A file that does not parse or is not a valid subscription group document is skipped
        for its ``.bak``; ValueError when neither loads.
        """
        loaded = load_json(self.path, self._decode)
        if loaded is None:
            return False
        table, counter = loaded
        self._table.update(table)
        if counter is not None:
            self.data_version = counter
        return True

    @staticmethod
    def _decode(doc: object) -> tuple[dict[str, SubscriptionGroupConfig], int | None]:
        """A subscription group document -> (table, data version counter); ValueError if it
        has the wrong shape."""
        table = doc.get("subscriptionGroupTable", {}) if isinstance(doc, dict) else None
        if not isinstance(doc, dict) or not isinstance(table, dict):
            raise ValueError("expected a map with a 'subscriptionGroupTable' map")
        out: dict[str, SubscriptionGroupConfig] = {}
        for name, wire in table.items():
            if not isinstance(wire, dict):
                raise ValueError(f"entry {name!r} is not a map")
            config = SubscriptionGroupConfig.from_wire(wire)
            if config.group_name != name:
                raise ValueError(f"entry {name!r} holds group {config.group_name!r}")
            out[name] = config
        version = doc.get("dataVersion", {})
        counter = version.get("counter") if isinstance(version, dict) else None
        valid = isinstance(counter, int) and not isinstance(counter, bool)
        return out, counter if valid else None
