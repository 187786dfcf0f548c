"""Routing types shared by name server, broker and client (RocketMQ's ``route`` package).

Rules:

- Field and wire names follow RocketMQ: Python fields are snake_case, ``to_wire()`` produces the
  camelCase keys of RocketMQ's JSON (``queueDatas``, ``brokerName``, ``readQueueNums``, ...), so
  the maps travel unchanged inside msgpack bodies.
- ``from_wire()`` never trusts its input: every key is type-checked and a bad map raises
  :class:`ValueError` naming the offending key. Unknown keys are ignored (forward compatibility).
- ``brokerAddrs`` keys are broker ids as ints; broker id 0 (:data:`MASTER_ID`) is the master.
- All types are frozen dataclasses; "updating" one means building a new one.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final, TypeVar

MASTER_ID = 0
"""Broker id of a master (RocketMQ's ``MixAll.MASTER_ID``)."""

_T = TypeVar("_T")


class PermName:
    """Permission bits of a topic or broker (RocketMQ's ``PermName``)."""

    PERM_PRIORITY = 8
    PERM_READ = 4
    PERM_WRITE = 2
    PERM_INHERIT = 1

    @staticmethod
    def is_readable(perm: int) -> bool:
        """True when ``perm`` has the read bit."""
        return (perm & PermName.PERM_READ) == PermName.PERM_READ

    @staticmethod
    def is_writeable(perm: int) -> bool:
        """True when ``perm`` has the write bit."""
        return (perm & PermName.PERM_WRITE) == PermName.PERM_WRITE

    @staticmethod
    def is_inherited(perm: int) -> bool:
        """True when ``perm`` has the inherit bit."""
        return (perm & PermName.PERM_INHERIT) == PermName.PERM_INHERIT

    @staticmethod
    def is_valid(perm: int) -> bool:
        """True when ``perm`` is a combination of the four bits (``0 <= perm < 16``)."""
        return 0 <= perm < 2 * PermName.PERM_PRIORITY

    @staticmethod
    def perm_to_string(perm: int) -> str:
        """RocketMQ's ``perm2String``: ``"RWX"`` with ``-`` for a missing bit (X = inherit)."""
        return (
            ("R" if PermName.is_readable(perm) else "-")
            + ("W" if PermName.is_writeable(perm) else "-")
            + ("X" if PermName.is_inherited(perm) else "-")
        )


# --------------------------------------------------------------------------- wire validation


def _map(obj: object, what: str) -> Mapping[Any, Any]:
    if not isinstance(obj, Mapping):
        raise ValueError(f"{what}: expected a map, got {type(obj).__name__}")
    return obj


def _get(wire: Mapping[Any, Any], key: str, kind: type[_T], what: str, default: Any = ...) -> _T:
    """``wire[key]`` checked to be a ``kind`` (bools are not ints); ``default`` when absent."""
    if key not in wire:
        if default is ...:
            raise ValueError(f"{what}: missing key {key!r}")
        return default  # type: ignore[no-any-return]
    value = wire[key]
    if kind is int and isinstance(value, bool):
        raise ValueError(f"{what}: {key!r} must be an int, got bool")
    if not isinstance(value, kind):
        raise ValueError(f"{what}: {key!r} must be {kind.__name__}, got {type(value).__name__}")
    return value


def _non_negative(value: int, key: str, what: str) -> int:
    if value < 0:
        raise ValueError(f"{what}: {key!r} must be >= 0, got {value}")
    return value


NAMESPACE_ORDER_TOPIC_CONFIG: Final = "ORDER_TOPIC_CONFIG"
"""The name server's KV namespace of the topics' order confs, keyed by topic (RocketMQ's
``NamesrvUtil.NAMESPACE_ORDER_TOPIC_CONFIG``)."""

MAX_QUEUE_NUMS = 1024
"""The most queues a topic (or a group's retry topic) may have on one broker. RocketMQ sets
no bound; without one, a single request for 2**40 queues makes every per-queue loop (stats,
routes, rebalance) run for ever."""


def _queue_count(value: int, key: str, what: str) -> int:
    if not 0 <= value <= MAX_QUEUE_NUMS:
        raise ValueError(f"{what}: {key!r} must be in [0, {MAX_QUEUE_NUMS}], got {value}")
    return value


def _perm(wire: Mapping[Any, Any], what: str, default: Any = ...) -> int:
    perm = _get(wire, "perm", int, what, default)
    if not PermName.is_valid(perm):
        raise ValueError(f"{what}: 'perm' must be in [0, 16), got {perm}")
    return perm


# --------------------------------------------------------------------------- types


@dataclass(frozen=True, slots=True)
class QueueData:
    """Queue counts and permission of one topic on one broker (RocketMQ's ``QueueData``)."""

    broker_name: str
    read_queue_nums: int
    write_queue_nums: int
    perm: int
    topic_sys_flag: int = 0

    def to_wire(self) -> dict[str, Any]:
        """RocketMQ's JSON map."""
        return {
            "brokerName": self.broker_name,
            "readQueueNums": self.read_queue_nums,
            "writeQueueNums": self.write_queue_nums,
            "perm": self.perm,
            "topicSysFlag": self.topic_sys_flag,
        }

    @classmethod
    def from_wire(cls, obj: object) -> QueueData:
        """Parse and validate a map from :meth:`to_wire` (``topicSynFlag`` accepted too)."""
        what = "QueueData"
        wire = _map(obj, what)
        sys_flag_key = "topicSynFlag" if "topicSysFlag" not in wire else "topicSysFlag"
        return cls(
            broker_name=_get(wire, "brokerName", str, what),
            read_queue_nums=_non_negative(
                _get(wire, "readQueueNums", int, what), "readQueueNums", what
            ),
            write_queue_nums=_non_negative(
                _get(wire, "writeQueueNums", int, what), "writeQueueNums", what
            ),
            perm=_perm(wire, what),
            topic_sys_flag=_get(wire, sys_flag_key, int, what, 0),
        )


@dataclass(frozen=True, slots=True)
class BrokerData:
    """Addresses of one broker name (a master and its slaves) (RocketMQ's ``BrokerData``)."""

    cluster: str
    broker_name: str
    broker_addrs: dict[int, str] = field(default_factory=dict)

    def select_broker_addr(self) -> str | None:
        """The master's address if there is one, else the lowest-id slave's; None when empty.

        RocketMQ picks a random slave; picking the lowest id keeps tests deterministic.
        """
        if MASTER_ID in self.broker_addrs:
            return self.broker_addrs[MASTER_ID]
        if not self.broker_addrs:
            return None
        return self.broker_addrs[min(self.broker_addrs)]

    def to_wire(self) -> dict[str, Any]:
        """RocketMQ's JSON map; ``brokerAddrs`` keeps int keys (msgpack allows them)."""
        return {
            "cluster": self.cluster,
            "brokerName": self.broker_name,
            "brokerAddrs": dict(self.broker_addrs),
        }

    @classmethod
    def from_wire(cls, obj: object) -> BrokerData:
        """Parse and validate a map from :meth:`to_wire`."""
        what = "BrokerData"
        wire = _map(obj, what)
        addrs_wire = _map(_get(wire, "brokerAddrs", Mapping, what), f"{what}.brokerAddrs")  # type: ignore[type-abstract]
        addrs: dict[int, str] = {}
        for broker_id, addr in addrs_wire.items():
            if isinstance(broker_id, bool) or not isinstance(broker_id, int):
                raise ValueError(
                    f"{what}: 'brokerAddrs' keys must be int broker ids, got {broker_id!r}"
                )
            if not isinstance(addr, str):
                raise ValueError(f"{what}: 'brokerAddrs'[{broker_id}] must be str, got {addr!r}")
            addrs[broker_id] = addr
        return cls(
            cluster=_get(wire, "cluster", str, what),
            broker_name=_get(wire, "brokerName", str, what),
            broker_addrs=addrs,
        )


@dataclass(frozen=True, slots=True)
class TopicRouteData:
    """Everything a client needs to reach a topic (RocketMQ's ``TopicRouteData``).

    ``filter_server_table`` maps a broker address to its filter servers. ``order_topic_conf``
    is the topic's ``ORDER_TOPIC_CONFIG`` KV entry (``"brokerName:num;..."``), which a name
    server with ``orderMessageEnable`` adds to its answer; None otherwise (and absent from the
    map, as RocketMQ's JSON leaves a null field out).
    """

    queue_datas: list[QueueData] = field(default_factory=list)
    broker_datas: list[BrokerData] = field(default_factory=list)
    filter_server_table: dict[str, list[str]] = field(default_factory=dict)
    order_topic_conf: str | None = None

    def to_wire(self) -> dict[str, Any]:
        """RocketMQ's JSON map."""
        wire: dict[str, Any] = {
            "queueDatas": [qd.to_wire() for qd in self.queue_datas],
            "brokerDatas": [bd.to_wire() for bd in self.broker_datas],
            "filterServerTable": {k: list(v) for k, v in self.filter_server_table.items()},
        }
        if self.order_topic_conf is not None:
            wire["orderTopicConf"] = self.order_topic_conf
        return wire

    @classmethod
    def from_wire(cls, obj: object) -> TopicRouteData:
        """Parse and validate a map from :meth:`to_wire`."""
        what = "TopicRouteData"
        wire = _map(obj, what)
        queue_datas = [QueueData.from_wire(q) for q in _get(wire, "queueDatas", list, what)]
        broker_datas = [BrokerData.from_wire(b) for b in _get(wire, "brokerDatas", list, what)]
        table_wire = _map(_get(wire, "filterServerTable", Mapping, what, {}), what)  # type: ignore[type-abstract]
        table: dict[str, list[str]] = {}
        for addr, servers in table_wire.items():
            if not isinstance(addr, str) or not isinstance(servers, list):
                raise ValueError(f"{what}: 'filterServerTable' must map str to list of str")
            if not all(isinstance(s, str) for s in servers):
                raise ValueError(f"{what}: 'filterServerTable'[{addr!r}] must be a list of str")
            table[addr] = list(servers)
        return cls(
            queue_datas=queue_datas,
            broker_datas=broker_datas,
            filter_server_table=table,
            order_topic_conf=_get(wire, "orderTopicConf", str, what, None),
        )


@dataclass(frozen=True, slots=True)
class TopicConfig:
    """A topic as one broker holds it (RocketMQ's ``TopicConfig``, defaults included)."""

    topic_name: str
    read_queue_nums: int = 16
    write_queue_nums: int = 16
    perm: int = PermName.PERM_READ | PermName.PERM_WRITE
    topic_filter_type: str = "SINGLE_TAG"
    topic_sys_flag: int = 0
    order: bool = False
    attributes: Mapping[str, str] = field(default_factory=dict, hash=False)
    """RocketMQ 5's topic attributes (:mod:`common.topic_attributes`), e.g.
    ``{"queue.type": "BatchCQ"}``; treat as read-only."""

    def to_wire(self) -> dict[str, Any]:
        """RocketMQ's JSON map (``attributes`` only when there are some: older readers, and
        the topics files of topics without attributes, stay as they were)."""
        wire: dict[str, Any] = {
            "topicName": self.topic_name,
            "readQueueNums": self.read_queue_nums,
            "writeQueueNums": self.write_queue_nums,
            "perm": self.perm,
            "topicFilterType": self.topic_filter_type,
            "topicSysFlag": self.topic_sys_flag,
            "order": self.order,
        }
        if self.attributes:
            wire["attributes"] = dict(self.attributes)
        return wire

    @classmethod
    def from_wire(cls, obj: object) -> TopicConfig:
        """Parse and validate a map from :meth:`to_wire`; absent keys take the defaults."""
        what = "TopicConfig"
        wire = _map(obj, what)
        filter_type = _get(wire, "topicFilterType", str, what, "SINGLE_TAG")
        if filter_type not in ("SINGLE_TAG", "MULTI_TAG"):
            raise ValueError(f"{what}: 'topicFilterType' must be SINGLE_TAG or MULTI_TAG")
        return cls(
            topic_name=_get(wire, "topicName", str, what),
            read_queue_nums=_queue_count(
                _get(wire, "readQueueNums", int, what, 16), "readQueueNums", what
            ),
            write_queue_nums=_queue_count(
                _get(wire, "writeQueueNums", int, what, 16), "writeQueueNums", what
            ),
            perm=_perm(wire, what, 6),
            topic_filter_type=filter_type,
            topic_sys_flag=_get(wire, "topicSysFlag", int, what, 0),
            order=_get(wire, "order", bool, what, False),
            attributes=_attributes(wire, what),
        )


def _attributes(wire: Mapping[Any, Any], what: str) -> dict[str, str]:
    """The ``attributes`` map of a topic config (absent or null: none), str to str."""
    raw = wire.get("attributes")
    if raw is None:
        return {}
    attrs = _map(raw, f"{what}.attributes")
    if not all(isinstance(k, str) and isinstance(v, str) for k, v in attrs.items()):
        raise ValueError(f"{what}: 'attributes' must map str to str")
    return dict(attrs)


@dataclass(frozen=True, slots=True)
class DataVersion:
    """Version of a broker's topic table (RocketMQ's ``DataVersion``): ``counter`` goes up by
    one at every change, ``timestamp`` (ms) is the time of the latest change.

    A broker sends it with each registration, so the name server can tell an older table that
    arrives late from the current one (see :meth:`is_older_than`).
    """

    timestamp: int
    counter: int

    def to_wire(self) -> dict[str, Any]:
        """RocketMQ's JSON map (``stateVersion`` is not sent: minimq has no controller)."""
        return {"timestamp": self.timestamp, "counter": self.counter}

    @classmethod
    def from_wire(cls, obj: object) -> DataVersion:
        """Parse and validate a map from :meth:`to_wire` (``stateVersion`` is ignored)."""
        what = "DataVersion"
        wire = _map(obj, what)
        return cls(
            timestamp=_get(wire, "timestamp", int, what),
            counter=_get(wire, "counter", int, what),
        )

    def is_older_than(self, other: DataVersion) -> bool:
        """True when both fields say this version came before ``other``: a smaller counter
        and a timestamp no later. A broker restarted with a new counter base (its topics file
        lost) stamps a later timestamp, and a clock stepped back leaves a larger counter:
        neither is taken for older. A minimq broker never stamps a version earlier than the
        one before it, even when its clock steps back, so its earlier versions stay older by
        both fields (:func:`broker.json_store.next_version_timestamp_ms`)."""
        return self.counter < other.counter and self.timestamp <= other.timestamp


@dataclass(frozen=True, slots=True)
class ClusterInfo:
    """Answer to GET_BROKER_CLUSTER_INFO (RocketMQ's ``ClusterInfo``).

    ``broker_addr_table`` maps broker name to :class:`BrokerData`; ``cluster_addr_table`` maps a
    cluster name to its broker names.
    """

    broker_addr_table: dict[str, BrokerData] = field(default_factory=dict)
    cluster_addr_table: dict[str, set[str]] = field(default_factory=dict)

    def to_wire(self) -> dict[str, Any]:
        """RocketMQ's JSON map (broker-name sets as sorted lists)."""
        return {
            "brokerAddrTable": {k: v.to_wire() for k, v in self.broker_addr_table.items()},
            "clusterAddrTable": {k: sorted(v) for k, v in self.cluster_addr_table.items()},
        }

    @classmethod
    def from_wire(cls, obj: object) -> ClusterInfo:
        """Parse and validate a map from :meth:`to_wire`."""
        what = "ClusterInfo"
        wire = _map(obj, what)
        brokers_wire = _map(_get(wire, "brokerAddrTable", Mapping, what), what)  # type: ignore[type-abstract]
        clusters_wire = _map(_get(wire, "clusterAddrTable", Mapping, what), what)  # type: ignore[type-abstract]
        brokers = {str(k): BrokerData.from_wire(v) for k, v in brokers_wire.items()}
        clusters: dict[str, set[str]] = {}
        for name, members in clusters_wire.items():
            if not isinstance(members, list) or not all(isinstance(m, str) for m in members):
                raise ValueError(f"{what}: 'clusterAddrTable'[{name!r}] must be a list of str")
            clusters[str(name)] = set(members)
        return cls(broker_addr_table=brokers, cluster_addr_table=clusters)
