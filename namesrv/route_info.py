"""RouteInfoManager: the name server's routing tables (RocketMQ's ``RouteInfoManager``).

Rules:

- Pure and synchronous: no I/O, no clock, no locks. Whatever depends on time takes ``now_ms``;
  one trio task drives every call, so no method needs to be atomic against another.
- Tables, as in RocketMQ:

  - ``topic_queue_table``: topic -> broker name -> :class:`QueueData`
  - ``broker_addr_table``: broker name -> :class:`BrokerData` (broker id -> address)
  - ``cluster_addr_table``: cluster name -> set of broker names
  - ``broker_live_table``: broker address -> :class:`BrokerLiveInfo` (last heartbeat)
  - ``filter_server_table``: broker address -> filter server addresses

- Only a master (broker id 0) writes queue data; a slave registers its address and liveness.
- A broker name disappears when its last address does; then its queue data goes from every
  topic, topics left without queue data go, and the name leaves its cluster. Unregister and
  expiry share this path.
- A broker is expired when ``last_update_ms + broker_channel_expired_time_ms < now_ms``
  (strictly older than the window, as RocketMQ's ``scanNotActiveBroker``); the server also
  drops it at once when the connection it registered over closes (``on_channel_destroy``).
- One address is one broker: a registration takes its address away from any other broker
  name (a broker restarted on the same address under another name), and a broker name lives
  in one cluster. An unregister forgets the address it names, never another id's address (a
  replacement already registered under the same id stays).
- A registration carries the broker's topic-table :class:`~common.route.DataVersion`, kept in
  the address's :class:`BrokerLiveInfo` (as RocketMQ's ``BrokerLiveInfo.dataVersion``). One
  whose version is older than the kept one (:meth:`DataVersion.is_older_than`: a late delivery
  from the same broker run) refreshes the address's liveness only: an older topic table never
  replaces a newer one. The kept version goes with the address (unregister, expiry, closed
  connection), so a broker that comes back is registered afresh; a registration without a
  version is always applied.
- As RocketMQ's ``registerBroker``, a master's topics are applied only when its registration
  is the first of its address under that broker name and id, or its version differs from the
  kept one; a registration with the kept version (the periodic one when no topic changed)
  refreshes liveness and adds only the topics the tables lack for that broker (one deleted
  from the name server comes back). So what the name server changed on its own
  (:meth:`RouteInfoManager.wipe_write_perm_of_broker`) lasts until the broker's topic table
  changes (a topic created, updated or deleted, ``brokerPermission`` changed), the broker
  restarts, or its address is dropped (closed connection, expiry, unregister).
- ``wipe_write_perm_of_broker`` / ``add_write_perm_of_broker`` (RocketMQ's
  ``operateWritePermOfBroker``) change the perm of every topic's queue data of a broker name:
  wipe clears the write bit, add sets read and write (6), whatever the perm was; each returns
  the number of topics it went through (0 for a broker name the tables do not hold).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace

from common.route import (
    MASTER_ID,
    BrokerData,
    ClusterInfo,
    DataVersion,
    PermName,
    QueueData,
    TopicConfig,
    TopicRouteData,
)

DEFAULT_BROKER_CHANNEL_EXPIRED_TIME_MS = 120_000
"""RocketMQ's ``RouteInfoManager.DEFAULT_BROKER_CHANNEL_EXPIRED_TIME``."""


@dataclass(frozen=True, slots=True)
class BrokerLiveInfo:
    """When a broker address was last heard from, its HA address, and the version of the
    topic table its registrations last applied (None: it sent none)."""

    last_update_ms: int
    ha_server_addr: str
    data_version: DataVersion | None = None


@dataclass(frozen=True, slots=True)
class RegisterResult:
    """Reply to a registration (RocketMQ's ``RegisterBrokerResult``).

    For a slave whose master is registered: the master's address and HA address; else None.
    ``stale`` (minimq's): the registration was older than the one applied before, so only the
    address's liveness was refreshed.
    """

    master_addr: str | None = None
    ha_server_addr: str | None = None
    stale: bool = False


class RouteInfoManager:
    """In-memory routing registry; see the module docstring for the rules."""

    def __init__(
        self, broker_channel_expired_time_ms: int = DEFAULT_BROKER_CHANNEL_EXPIRED_TIME_MS
    ) -> None:
        self.broker_channel_expired_time_ms = broker_channel_expired_time_ms
        self.topic_queue_table: dict[str, dict[str, QueueData]] = {}
        self.broker_addr_table: dict[str, BrokerData] = {}
        self.cluster_addr_table: dict[str, set[str]] = {}
        self.broker_live_table: dict[str, BrokerLiveInfo] = {}
        self.filter_server_table: dict[str, list[str]] = {}

    # ------------------------------------------------------------------ registration

    def register_broker(
        self,
        cluster: str,
        broker_addr: str,
        broker_name: str,
        broker_id: int,
        ha_server_addr: str,
        topic_configs: Mapping[str, TopicConfig],
        now_ms: int,
        filter_server_list: list[str] | None = None,
        data_version: DataVersion | None = None,
    ) -> RegisterResult:
        """Record a broker's heartbeat and (from a master) its topics' queue data; a
        registration older than the last one applied from ``broker_addr`` refreshes only
        its liveness (``stale`` in the result), and one with the kept version adds only the
        topics the tables lack for ``broker_name`` (see the module rules)."""
        live = self.broker_live_table.get(broker_addr)
        if live is not None and _is_stale(data_version, live.data_version):
            self.broker_live_table[broker_addr] = replace(live, last_update_ms=now_ms)
            return replace(self._master_of(broker_name, broker_id), stale=True)
        self._release_address(broker_addr, broker_name)
        old = self.broker_addr_table.get(broker_name)
        topics_changed = (
            old is None
            or old.broker_addrs.get(broker_id) != broker_addr  # RocketMQ's registerFirst
            or _topics_changed(data_version, live)
        )
        if old is not None and old.cluster != cluster:
            self._leave_cluster(old.cluster, broker_name)
        self.cluster_addr_table.setdefault(cluster, set()).add(broker_name)

        addrs = dict(old.broker_addrs) if old is not None else {}
        # One address holds one id: a slave promoted to master drops its old <id, addr> entry.
        for other_id, addr in list(addrs.items()):
            if addr == broker_addr and other_id != broker_id:
                del addrs[other_id]
        addrs[broker_id] = broker_addr
        self.broker_addr_table[broker_name] = BrokerData(cluster, broker_name, addrs)

        if broker_id == MASTER_ID:
            for topic, config in topic_configs.items():
                if topics_changed or broker_name not in self.topic_queue_table.get(topic, {}):
                    self._update_queue_data(topic, broker_name, config)

        self.broker_live_table[broker_addr] = BrokerLiveInfo(now_ms, ha_server_addr, data_version)
        if filter_server_list is not None:
            if filter_server_list:
                self.filter_server_table[broker_addr] = list(filter_server_list)
            else:
                self.filter_server_table.pop(broker_addr, None)
        return self._master_of(broker_name, broker_id)

    def _master_of(self, broker_name: str, broker_id: int) -> RegisterResult:
        """For a slave whose master is registered and live: the master's addresses."""
        data = self.broker_addr_table.get(broker_name)
        if broker_id == MASTER_ID or data is None:
            return RegisterResult()
        master_addr = data.broker_addrs.get(MASTER_ID)
        if master_addr is None:
            return RegisterResult()
        master_live = self.broker_live_table.get(master_addr)
        if master_live is None:
            return RegisterResult()
        return RegisterResult(master_addr, master_live.ha_server_addr)

    def _release_address(self, broker_addr: str, keeper: str) -> None:
        """Take ``broker_addr`` away from every broker name but ``keeper``."""
        for data in list(self.broker_addr_table.values()):
            if data.broker_name != keeper and broker_addr in data.broker_addrs.values():
                self._forget_address(data, broker_addr)

    def _update_queue_data(self, topic: str, broker_name: str, config: TopicConfig) -> None:
        self.topic_queue_table.setdefault(topic, {})[broker_name] = QueueData(
            broker_name=broker_name,
            read_queue_nums=config.read_queue_nums,
            write_queue_nums=config.write_queue_nums,
            perm=config.perm,
            topic_sys_flag=config.topic_sys_flag,
        )

    def unregister_broker(
        self, cluster: str, broker_addr: str, broker_name: str, broker_id: int
    ) -> None:
        """Forget the broker address ``broker_addr``; the broker name goes with its last
        address. ``broker_id`` is not used to find it: another process may hold that id now."""
        self.broker_live_table.pop(broker_addr, None)
        self.filter_server_table.pop(broker_addr, None)
        data = self.broker_addr_table.get(broker_name)
        if data is not None:
            self._forget_address(data, broker_addr)

    def _forget_address(self, data: BrokerData, broker_addr: str) -> None:
        addrs = {k: v for k, v in data.broker_addrs.items() if v != broker_addr}
        if len(addrs) == len(data.broker_addrs):
            return
        if addrs:
            self.broker_addr_table[data.broker_name] = BrokerData(
                data.cluster, data.broker_name, addrs
            )
            return
        del self.broker_addr_table[data.broker_name]
        self._remove_broker_name(data.cluster, data.broker_name)

    def _leave_cluster(self, cluster: str, broker_name: str) -> None:
        names = self.cluster_addr_table.get(cluster)
        if names is not None:
            names.discard(broker_name)
            if not names:
                del self.cluster_addr_table[cluster]

    def _remove_broker_name(self, cluster: str, broker_name: str) -> None:
        self._leave_cluster(cluster, broker_name)
        for topic in list(self.topic_queue_table):
            queue_datas = self.topic_queue_table[topic]
            queue_datas.pop(broker_name, None)
            if not queue_datas:
                del self.topic_queue_table[topic]

    # ------------------------------------------------------------------ write permission

    def wipe_write_perm_of_broker(self, broker_name: str) -> int:
        """Clear the write bit of every topic's queue data of ``broker_name`` (RocketMQ's
        ``wipeWritePermOfBroker``): producers stop choosing its queues at their next route
        refresh, consumers still read them. Returns the number of topics (0 when the name
        is unknown)."""
        return self._operate_write_perm(broker_name, lambda perm: perm & ~PermName.PERM_WRITE)

    def add_write_perm_of_broker(self, broker_name: str) -> int:
        """Set the perm of every topic's queue data of ``broker_name`` to read and write
        (RocketMQ's ``addWritePermOfBroker``: 6, whatever it was). Returns the number of
        topics (0 when the name is unknown)."""
        return self._operate_write_perm(
            broker_name, lambda _: PermName.PERM_READ | PermName.PERM_WRITE
        )

    def _operate_write_perm(self, broker_name: str, new_perm: Callable[[int], int]) -> int:
        """Replace the perm of each topic's queue data of ``broker_name`` by ``new_perm`` of
        it (RocketMQ's ``operateWritePermOfBroker``); the number of topics gone through."""
        count = 0
        for queue_map in self.topic_queue_table.values():
            queue_data = queue_map.get(broker_name)
            if queue_data is not None:
                queue_map[broker_name] = replace(queue_data, perm=new_perm(queue_data.perm))
                count += 1
        return count

    # ------------------------------------------------------------------ expiry

    def is_expired(self, broker_addr: str, now_ms: int) -> bool:
        """True when ``broker_addr`` is registered and not heard from within the window."""
        live = self.broker_live_table.get(broker_addr)
        return live is not None and (
            live.last_update_ms + self.broker_channel_expired_time_ms < now_ms
        )

    def expire_brokers(self, now_ms: int) -> list[str]:
        """Unregister every broker address past the window; returns them, sorted."""
        expired = sorted(a for a in self.broker_live_table if self.is_expired(a, now_ms))
        for addr in expired:
            self.on_channel_destroy(addr)
        return expired

    def on_channel_destroy(self, broker_addr: str) -> None:
        """Unregister ``broker_addr`` knowing only the address (lost connection or expiry)."""
        for data in list(self.broker_addr_table.values()):
            if broker_addr in data.broker_addrs.values():
                self._forget_address(data, broker_addr)
        self.broker_live_table.pop(broker_addr, None)
        self.filter_server_table.pop(broker_addr, None)

    # ------------------------------------------------------------------ queries

    def pick_topic_route(self, topic: str) -> TopicRouteData | None:
        """The route for ``topic``, or None when it has no queue data or no live broker."""
        queue_map = self.topic_queue_table.get(topic)
        if not queue_map:
            return None
        queue_datas = [queue_map[name] for name in sorted(queue_map)]
        broker_datas: list[BrokerData] = []
        filter_servers: dict[str, list[str]] = {}
        for qd in queue_datas:
            data = self.broker_addr_table.get(qd.broker_name)
            if data is None:
                continue
            broker_datas.append(BrokerData(data.cluster, data.broker_name, dict(data.broker_addrs)))
            for addr in data.broker_addrs.values():
                if addr in self.filter_server_table:
                    filter_servers[addr] = list(self.filter_server_table[addr])
        if not broker_datas:
            return None
        return TopicRouteData(queue_datas, broker_datas, filter_servers)

    def get_all_cluster_info(self) -> ClusterInfo:
        """Copies of the broker address and cluster tables."""
        return ClusterInfo(
            broker_addr_table=dict(self.broker_addr_table),
            cluster_addr_table={k: set(v) for k, v in self.cluster_addr_table.items()},
        )

    def get_all_topic_list(self) -> list[str]:
        """Every topic with queue data, sorted."""
        return sorted(self.topic_queue_table)

    def get_topics_by_cluster(self, cluster: str) -> list[str]:
        """Topics with queue data on at least one broker of ``cluster``, sorted."""
        names = self.cluster_addr_table.get(cluster, set())
        return sorted(
            topic
            for topic, queue_map in self.topic_queue_table.items()
            if any(name in names for name in queue_map)
        )

    def delete_topic(self, topic: str, cluster: str | None = None) -> bool:
        """Drop ``topic`` from the route tables (only the queue data of ``cluster``'s brokers
        when given, as RocketMQ 5); True when there was something to drop."""
        if cluster is None:
            return self.topic_queue_table.pop(topic, None) is not None
        queue_map = self.topic_queue_table.get(topic)
        names = self.cluster_addr_table.get(cluster, set())
        if queue_map is None or not names & queue_map.keys():
            return False
        for name in names:
            queue_map.pop(name, None)
        if not queue_map:
            del self.topic_queue_table[topic]
        return True


def _topics_changed(version: DataVersion | None, live: BrokerLiveInfo | None) -> bool:
    """True unless a registration's ``version`` is the one kept in ``live`` (RocketMQ's
    ``isBrokerTopicConfigChanged``); a registration without a version always counts as a
    change."""
    return version is None or live is None or version != live.data_version


def _is_stale(version: DataVersion | None, applied: DataVersion | None) -> bool:
    """True when a registration's ``version`` is older than the ``applied`` one."""
    return version is not None and applied is not None and version.is_older_than(applied)
