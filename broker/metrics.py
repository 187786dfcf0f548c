"""Prometheus metrics of one broker, with RocketMQ 5's names, served on ``metricsPort``.

::

    BrokerMetrics
    ├─ registry               a CollectorRegistry of its own (several brokers may share a
    │                         process): this collector + the process collector
    └─ serve                  a tiny HTTP/1.1 server on the trio loop: ``GET /metrics`` answers
                              ``generate_latest(registry)``; cancelled with the broker

Metrics (every sample also carries ``cluster``, ``node_type="broker"`` and ``node_id`` =
brokerName, as RocketMQ 5's native metrics do):

- ``rocketmq_messages_in_total{topic}``, ``rocketmq_throughput_in_total{topic}`` (bytes of the
  request bodies of stored sends; a batch counts its encoded body);
- ``rocketmq_messages_out_total{topic,consumer_group}``,
  ``rocketmq_throughput_out_total{topic,consumer_group}`` (records and bytes of FOUND pulls);
  these four are the running totals of :mod:`broker.broker_stats` (``TOPIC_PUT_NUMS``,
  ``TOPIC_PUT_SIZE``, ``GROUP_GET_NUMS``, ``GROUP_GET_SIZE``), counted by the send and pull
  processors whether metrics are served or not: one source for these and
  VIEW_BROKER_STATS_DATA;
- ``rocketmq_consumer_lag_messages{topic,consumer_group}``: computed at scrape time, the sum over
  the group's committed queues of ``max(0, max offset - committed offset)``, for groups with a
  subscription group config (RocketMQ's ``ConsumerLagCalculator`` walks that table, so a
  deleted group's committed offsets, which stay, are not exported);
- ``minimq_busy_poll_steps_total`` and ``minimq_busy_poll_spells_skipped_total`` (event-loop
  passes spent busy polling, and spells of it sat out; ``busyPollMicros``) and
  ``minimq_busy_poll_hit_ratio`` (the moving share of spells that saw a frame arrive), so the
  CPU the broker spends polling can be told from the CPU it spends working;
- ``minimq_commitlog_flushes_total`` and ``minimq_commitlog_flush_seconds_total`` (commitlog
  flushes that made something durable, and their time): with ``SYNC_FLUSH``, messages in over
  flushes is how many puts each group commit served;
- ``minimq_requests_pending`` (requests waiting for their answer: parked pulls, ``SYNC_FLUSH``
  sends), ``minimq_requests_rejected_busy_total`` (answered ``SYSTEM_BUSY`` past
  ``serverMaxPendingRequests[PerConnection]``) and ``minimq_connections_refused_total``
  (closed at once past ``serverMaxConnections``); with ``aclEnable``, ``minimq_acl_denied_total``
  (requests answered NO_PERMISSION by the ACL check);
- ``minimq_connections`` (client connections open now), ``minimq_connections_top_ip`` (the
  most any one client IP address holds now, to compare with ``serverMaxConnectionsPerIp``;
  one number, not a series per address, which peers could multiply) and
  ``minimq_connections_refused_per_ip_total`` (closed at once past
  ``serverMaxConnectionsPerIp``);
- ``minimq_pull_requests_held`` (pulls parked by long polling, or held by short polling, now:
  RocketMQ's ``PullRequestHoldService`` table, which it does not export) and
  ``minimq_trio_tasks`` (live tasks of the broker's trio event loop, counted on the loop by the
  broker's once-a-second sampling task every :data:`TASK_COUNT_INTERVAL_S`, never at scrape
  time);
- ``rocketmq_producer_connections`` (producer clients, all groups),
  ``rocketmq_consumer_connections{consumer_group}``, ``rocketmq_topic_number``,
  ``rocketmq_consumer_group_number`` (subscription group configs), and
  ``rocketmq_broker_info{broker_addr,version}`` = 1.

Rules:

- Everything runs on the broker's event loop thread (requests and scrapes alike), so the
  counters need no lock.
- Counters start at zero when the broker starts (Prometheus handles resets).
- A deleted topic's series go, and so do a deleted group's (:mod:`broker.broker_stats` forgets
  them, as RocketMQ's ``BrokerStatsManager`` ``onTopicDeleted`` / ``onGroupDeleted``): churn
  does not grow the tables, and a topic or group created again under the name starts at zero.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable, Iterator, Mapping
from typing import Protocol

import trio
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    InfoMetricFamily,
    Metric,
)
from prometheus_client.process_collector import ProcessCollector
from prometheus_client.registry import Collector

from broker.broker_stats import (
    GROUP_GET_NUMS,
    GROUP_GET_SIZE,
    TOPIC_PUT_NUMS,
    TOPIC_PUT_SIZE,
    BrokerStatsManager,
)
from broker.config import BrokerConfig
from broker.consumer_offset import ConsumerOffsetManager
from broker.long_polling import PullHoldTable
from broker.processors.client import ClientService
from broker.subscription_group import SubscriptionGroupManager
from broker.topic_config import TopicConfigManager
from common.net import open_listeners
from common.version import minimq_version
from remoting.acl.service import AclService
from remoting.busy_poll import BusyPoll
from remoting.server import RemotingServer
from store import MessageStore
from store.services import StoreServices

log = logging.getLogger(__name__)

VERSION = f"minimq-{minimq_version()}"
"""The ``version`` label of ``rocketmq_broker_info``."""
REQUEST_TIMEOUT_S = 10.0
"""A scrape connection must send its request head within this time."""
MAX_HEAD_BYTES = 8192
"""Longest accepted HTTP request head."""
_HEAD_END = re.compile(rb"\r?\n\r?\n")
"""The blank line ending a request head (CRLF or bare LF line ends)."""
TASK_COUNT_INTERVAL_S = 5.0
"""How often the broker counts its trio tasks for ``minimq_trio_tasks`` (a walk of the task
tree: cheap, but not done per scrape)."""


class MetricsSource(Protocol):
    """What the collector reads at scrape time (a :class:`broker.controller.BrokerController`)."""

    config: BrokerConfig
    store: MessageStore | None
    topics: TopicConfigManager | None
    offsets: ConsumerOffsetManager | None
    groups: SubscriptionGroupManager | None
    clients: ClientService
    busy_poll: BusyPoll | None
    services: StoreServices | None
    server: RemotingServer | None
    holds: PullHoldTable
    trio_tasks: int | None
    """Live trio tasks at the last count (None before the first)."""
    broker_stats: BrokerStatsManager
    """The per-topic and per-group message counts."""
    acl: AclService | None
    """The ACL with ``aclEnable`` (None without)."""

    @property
    def broker_addr(self) -> str:
        """``brokerIP1:port``."""
        ...


def _plain_counters(
    names: list[str], values: list[str], *rows: tuple[str, str, float]
) -> Iterator[Metric]:
    """One counter family per ``(name, doc, number)``, each with the broker's labels only."""
    for name, doc, number in rows:
        counter = CounterMetricFamily(name, doc, labels=names)
        counter.add_metric(values, number)
        yield counter


def _connection_gauges(
    names: list[str], values: list[str], server: RemotingServer
) -> Iterator[Metric]:
    """``minimq_connections`` and ``minimq_connections_top_ip`` of ``server`` now."""
    by_ip = server.connections_by_ip()
    for name, doc, number in (
        ("minimq_connections", "Client connections open now.", len(server.channels)),
        (
            "minimq_connections_top_ip",
            "Most connections any one client IP address holds now.",
            max(by_ip.values(), default=0),
        ),
    ):
        gauge = GaugeMetricFamily(name, doc, labels=names)
        gauge.add_metric(values, number)
        yield gauge


def count_trio_tasks() -> int:
    """Live tasks of the running trio loop, its root task included: a walk from
    ``trio.lowlevel.current_root_task()`` through every task's child nurseries. Call it on the
    loop's own thread (a task of it), never from another thread."""
    root = trio.lowlevel.current_root_task()
    stack = [] if root is None else [root]
    count = 0
    while stack:
        task = stack.pop()
        count += 1
        for nursery in task.child_nurseries:
            stack.extend(nursery.child_tasks)
    return count


def _by_topic_group(stats: BrokerStatsManager, name: str) -> dict[tuple[str, str], int]:
    return {(topic, group): value for topic, group, value in stats.group_totals(name)}


class BrokerMetrics(Collector):
    """Counters, the scrape-time collector and the HTTP endpoint of one broker."""

    def __init__(self, source: MetricsSource) -> None:
        self.source = source
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(self)
        ProcessCollector(registry=self.registry)
        self.port: int | None = None
        """The bound metrics port once :meth:`serve` has started."""

    # ------------------------------------------------------------------ counters

    @property
    def messages_in(self) -> Mapping[str, int]:
        """Topic -> messages stored (``TOPIC_PUT_NUMS`` of :mod:`broker.broker_stats`)."""
        return self.source.broker_stats.totals(TOPIC_PUT_NUMS)

    @property
    def bytes_in(self) -> Mapping[str, int]:
        """Topic -> bytes of the sent bodies stored (``TOPIC_PUT_SIZE``)."""
        return self.source.broker_stats.totals(TOPIC_PUT_SIZE)

    @property
    def messages_out(self) -> Mapping[tuple[str, str], int]:
        """``(topic, group)`` -> messages delivered by pulls (``GROUP_GET_NUMS``)."""
        return _by_topic_group(self.source.broker_stats, GROUP_GET_NUMS)

    @property
    def bytes_out(self) -> Mapping[tuple[str, str], int]:
        """``(topic, group)`` -> bytes delivered by pulls (``GROUP_GET_SIZE``)."""
        return _by_topic_group(self.source.broker_stats, GROUP_GET_SIZE)

    # ------------------------------------------------------------------ collecting

    def _base(self) -> tuple[list[str], list[str]]:
        config = self.source.config
        return ["cluster", "node_type", "node_id"], [
            config.broker_cluster_name,
            "broker",
            config.broker_name,
        ]

    def collect(self) -> Iterable[Metric]:
        """Every metric of the module docstring (called by the registry at scrape time)."""
        names, values = self._base()
        info = InfoMetricFamily("rocketmq_broker", "Broker identity.", labels=names)
        info.add_metric(values, {"broker_addr": self.source.broker_addr, "version": VERSION})
        yield info
        yield from self._counters(names, values)
        yield from self._gauges(names, values)
        yield from self._busy_poll(names, values)
        yield from self._flushes(names, values)
        yield from self._flow_control(names, values)
        yield from self._event_loop(names, values)
        yield self._lag(names, values)

    def _event_loop(self, names: list[str], values: list[str]) -> Iterator[Metric]:
        held = GaugeMetricFamily(
            "minimq_pull_requests_held",
            "Pull requests held by long (or short) polling, waiting for a message.",
            labels=names,
        )
        held.add_metric(values, self.source.holds.parked_count())
        yield held
        tasks = self.source.trio_tasks
        if tasks is None:  # not counted yet
            return
        gauge = GaugeMetricFamily(
            "minimq_trio_tasks", "Live tasks of the broker's trio event loop.", labels=names
        )
        gauge.add_metric(values, tasks)
        yield gauge

    def _flow_control(self, names: list[str], values: list[str]) -> Iterator[Metric]:
        server = self.source.server
        if server is None:  # not serving yet
            return
        limit = server.pending_limit
        gauge = GaugeMetricFamily(
            "minimq_requests_pending",
            "Requests waiting for their answer (parked pulls, SYNC_FLUSH sends).",
            labels=names,
        )
        gauge.add_metric(values, limit.pending)
        yield gauge
        yield from _plain_counters(
            names,
            values,
            (
                "minimq_requests_rejected_busy",
                "Requests answered SYSTEM_BUSY: too many were waiting for their answer.",
                limit.rejected,
            ),
            (
                "minimq_connections_refused",
                "Connections closed at once: serverMaxConnections were open.",
                server.refused,
            ),
            (
                "minimq_connections_refused_per_ip",
                "Connections closed at once: their IP held serverMaxConnectionsPerIp.",
                server.refused_per_ip,
            ),
        )
        yield from _connection_gauges(names, values, server)
        acl = self.source.acl
        if acl is not None:
            yield from _plain_counters(
                names,
                values,
                (
                    "minimq_acl_denied",
                    "Requests answered NO_PERMISSION by the ACL check (aclEnable).",
                    acl.validator.denied,
                ),
            )

    def _busy_poll(self, names: list[str], values: list[str]) -> Iterator[Metric]:
        poll = self.source.busy_poll
        if poll is None:  # not serving yet
            return
        yield from _plain_counters(
            names,
            values,
            ("minimq_busy_poll_steps", "Event-loop passes spent busy polling.", poll.spins),
            (
                "minimq_busy_poll_spells_skipped",
                "Spells of busy polling sat out because too few saw a frame arrive.",
                poll.spells_skipped,
            ),
        )
        gauge = GaugeMetricFamily(
            "minimq_busy_poll_hit_ratio",
            "Moving share of busy-polling spells that saw a frame arrive.",
            labels=names,
        )
        gauge.add_metric(values, poll.budget.hit_rate)
        yield gauge

    def _flushes(self, names: list[str], values: list[str]) -> Iterator[Metric]:
        services = self.source.services
        if services is None:  # the store is not open yet
            return
        yield from _plain_counters(
            names,
            values,
            (
                "minimq_commitlog_flushes",
                "Commitlog flushes that made something durable (group commits with SYNC_FLUSH).",
                services.commitlog_flushes,
            ),
            (
                "minimq_commitlog_flush_seconds",
                "Time spent in those flushes.",
                services.commitlog_flush_seconds,
            ),
        )

    def _counters(self, names: list[str], values: list[str]) -> Iterator[Metric]:
        tables: list[
            tuple[str, str, Mapping[str, int] | Mapping[tuple[str, str], int], list[str]]
        ] = [
            ("rocketmq_messages_in", "Messages stored.", self.messages_in, ["topic"]),
            ("rocketmq_throughput_in", "Bytes of sent bodies stored.", self.bytes_in, ["topic"]),
            (
                "rocketmq_messages_out",
                "Messages delivered by pulls.",
                self.messages_out,
                ["topic", "consumer_group"],
            ),
            (
                "rocketmq_throughput_out",
                "Bytes delivered by pulls.",
                self.bytes_out,
                ["topic", "consumer_group"],
            ),
        ]
        for name, doc, table, labels in tables:
            family = CounterMetricFamily(name, doc, labels=[*names, *labels])
            for key, value in table.items():
                key_labels = list(key) if isinstance(key, tuple) else [key]
                family.add_metric([*values, *key_labels], value)
            yield family

    def _gauges(self, names: list[str], values: list[str]) -> Iterator[Metric]:
        manager = self.source.clients.manager
        producers = sum(len(clients) for clients in manager.producers.values())
        family = GaugeMetricFamily(
            "rocketmq_producer_connections", "Connected producer clients.", labels=names
        )
        family.add_metric(values, producers)
        yield family
        family = GaugeMetricFamily(
            "rocketmq_consumer_connections",
            "Connected consumer clients per group.",
            labels=[*names, "consumer_group"],
        )
        for group, info in manager.consumers.items():
            family.add_metric([*values, group], len(info.clients))
        yield family
        topics = self.source.topics
        groups = self.source.groups
        for name, doc, number in (
            ("rocketmq_topic_number", "Topics on this broker.", len(topics or ())),
            (
                "rocketmq_consumer_group_number",
                "Subscription groups on this broker.",
                len(groups.groups()) if groups is not None else 0,
            ),
        ):
            family = GaugeMetricFamily(name, doc, labels=names)
            family.add_metric(values, number)
            yield family

    def _lag(self, names: list[str], values: list[str]) -> Metric:
        family = GaugeMetricFamily(
            "rocketmq_consumer_lag_messages",
            "Messages not yet consumed (max offset - committed offset).",
            labels=[*names, "topic", "consumer_group"],
        )
        store, offsets, groups = self.source.store, self.source.offsets, self.source.groups
        if store is None or offsets is None or groups is None:
            return family
        for key, queues in offsets.to_wire()["offsetTable"].items():
            topic, _, group = key.rpartition("@")
            if group not in groups:  # deleted (its offsets stay): as RocketMQ, not exported
                continue
            lag = sum(
                max(0, store.get_max_offset_in_queue(topic, int(qid)) - committed)
                for qid, committed in queues.items()
            )
            family.add_metric([*values, topic, group], lag)
        return family

    # ------------------------------------------------------------------ serving

    async def serve(
        self, host: str, port: int, *, task_status: trio.TaskStatus[int] = trio.TASK_STATUS_IGNORED
    ) -> None:
        """Serve ``GET /metrics`` on ``host:port`` until cancelled; ``started`` gets the port."""
        listeners = await open_listeners(port, host, "metricsPort")
        self.port = listeners[0].socket.getsockname()[1]
        log.info("metrics on http://%s:%s/metrics", host, self.port)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(trio.serve_listeners, self._handle, listeners)
            task_status.started(self.port)

    async def _handle(self, stream: trio.SocketStream) -> None:
        try:
            with trio.move_on_after(REQUEST_TIMEOUT_S):
                head = await _read_head(stream)
                if head is not None:
                    await stream.send_all(self.respond(head))
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass
        finally:
            await stream.aclose()

    def respond(self, head: bytes) -> bytes:
        """The HTTP response to a request head (``GET /metrics``; 404/405 otherwise)."""
        request_line = head.split(b"\n", 1)[0].decode("latin-1")
        parts = request_line.split()
        if len(parts) != 3:
            return _http(400, "Bad Request", b"bad request\n")
        method, target = parts[0], parts[1].split("?", 1)[0]
        if method not in ("GET", "HEAD"):
            return _http(405, "Method Not Allowed", b"GET only\n")
        if target != "/metrics":
            return _http(404, "Not Found", b"see /metrics\n")
        body = generate_latest(self.registry)
        return _http(200, "OK", body, CONTENT_TYPE_LATEST, head_only=method == "HEAD")


async def _read_head(stream: trio.SocketStream) -> bytes | None:
    """The request head up to the blank line; None if the peer closed or sent too much.

    Lines may end with a bare LF as well as CRLF (RFC 9112 section 2.2), as ``nc`` sends them."""
    buf = b""
    while _HEAD_END.search(buf) is None:
        if len(buf) > MAX_HEAD_BYTES:
            return None
        chunk = await stream.receive_some(4096)
        if not chunk:
            return None
        buf += chunk
    return buf


def _http(
    status: int,
    reason: str,
    body: bytes,
    content_type: str = "text/plain",
    *,
    head_only: bool = False,
) -> bytes:
    head = (
        f"HTTP/1.1 {status} {reason}\r\nContent-Type: {content_type}\r\n"
        f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
    )
    return head.encode("latin-1") + (b"" if head_only else body)
