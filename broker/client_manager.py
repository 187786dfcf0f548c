"""Who is connected: producer and consumer groups (RocketMQ's ``ProducerManager`` +
``ConsumerManager``), as a pure table.

Rules:

- Each group maps a client id to a :class:`ClientChannelInfo` (the connection it last used, its
  language and version, and when it was last heard from). A heartbeat on a new connection with
  the same client id replaces the connection; that is not a membership change.
- A consumer group also keeps its :class:`~remoting.client_bodies.ConsumerData` (subscriptions,
  consume type, message model, consume-from); the newest heartbeat wins.
- Every change of consumers returns whether the group's *membership* (its set of client ids)
  changed, so the caller can send NOTIFY_CONSUMER_IDS_CHANGED; an emptied group disappears.
- A client silent for longer than ``expired_ms`` (RocketMQ's ``channelExpiredTimeout``, 120 s),
  or whose connection ``is_closed`` says is gone, is dropped by :meth:`ClientManager.scan`.
- No I/O and no clock of its own: callers pass ``now_ms``; the channel type is generic (the
  broker stores :class:`remoting.channel.Channel`, tests may store anything).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from remoting.client_bodies import ConsumerData

C = TypeVar("C")

CHANNEL_EXPIRED_MS = 120_000
"""RocketMQ's default ``channelExpiredTimeout``."""


@dataclass(slots=True)
class ClientChannelInfo(Generic[C]):
    """One client instance as seen in one group."""

    channel: C
    client_id: str
    language: int
    version: int
    last_update_ms: int


@dataclass(slots=True)
class ConsumerGroupInfo(Generic[C]):
    """A consumer group: its members and the subscription data of its newest heartbeat."""

    data: ConsumerData
    clients: dict[str, ClientChannelInfo[C]] = field(default_factory=dict)


class ClientManager(Generic[C]):
    """Producer and consumer groups; see the module rules."""

    def __init__(self, expired_ms: int = CHANNEL_EXPIRED_MS) -> None:
        self.expired_ms = expired_ms
        self.producers: dict[str, dict[str, ClientChannelInfo[C]]] = {}
        self.consumers: dict[str, ConsumerGroupInfo[C]] = {}

    # ------------------------------------------------------------------ registration

    def register_producer(self, group: str, info: ClientChannelInfo[C]) -> None:
        """Add or refresh a producer of ``group``."""
        self.producers.setdefault(group, {})[info.client_id] = info

    def register_consumer(self, data: ConsumerData, info: ClientChannelInfo[C]) -> bool:
        """Add or refresh a consumer; True when the group's membership changed."""
        group = self.consumers.get(data.group_name)
        if group is None:
            group = self.consumers[data.group_name] = ConsumerGroupInfo(data)
        group.data = data
        joined = info.client_id not in group.clients
        group.clients[info.client_id] = info
        return joined

    def unregister_producer(self, group: str, client_id: str) -> None:
        """Remove a producer of ``group`` (no-op when absent)."""
        clients = self.producers.get(group)
        if clients is not None and clients.pop(client_id, None) is not None and not clients:
            del self.producers[group]

    def unregister_consumer(self, group: str, client_id: str) -> bool:
        """Remove a consumer of ``group``; True when it was a member."""
        info = self.consumers.get(group)
        if info is None or info.clients.pop(client_id, None) is None:
            return False
        if not info.clients:
            del self.consumers[group]
        return True

    # ------------------------------------------------------------------ removal

    def scan(self, now_ms: int, is_closed: Callable[[C], bool] = lambda _: False) -> set[str]:
        """Drop expired or closed clients; the consumer groups whose membership changed."""

        def dead(info: ClientChannelInfo[C]) -> bool:
            return now_ms - info.last_update_ms > self.expired_ms or is_closed(info.channel)

        return self._drop(dead)

    def drop_channel(self, channel: C) -> set[str]:
        """Drop every client on ``channel``; the consumer groups whose membership changed."""
        return self._drop(lambda info: info.channel is channel)

    def _drop(self, dead: Callable[[ClientChannelInfo[C]], bool]) -> set[str]:
        for group, clients in list(self.producers.items()):
            for client_id in [cid for cid, info in clients.items() if dead(info)]:
                self.unregister_producer(group, client_id)
        changed: set[str] = set()
        for group, consumers in list(self.consumers.items()):
            for client_id in [cid for cid, info in consumers.clients.items() if dead(info)]:
                if self.unregister_consumer(group, client_id):
                    changed.add(group)
        return changed

    # ------------------------------------------------------------------ queries

    def consumer_ids(self, group: str) -> list[str]:
        """The sorted client ids of a consumer group (empty when it has none)."""
        info = self.consumers.get(group)
        return sorted(info.clients) if info else []

    def consumer_channels(self, group: str) -> list[C]:
        """The connections of a consumer group's members."""
        info = self.consumers.get(group)
        return [c.channel for c in info.clients.values()] if info else []

    def find_consumer(self, group: str, client_id: str) -> ClientChannelInfo[C] | None:
        """The member ``client_id`` of a consumer group, or None (RocketMQ's ``findChannel``)."""
        info = self.consumers.get(group)
        return info.clients.get(client_id) if info else None

    def consumer_data(self, group: str) -> ConsumerData | None:
        """The group's subscriptions etc. from its newest heartbeat, or None."""
        info = self.consumers.get(group)
        return info.data if info else None

    def producer_ids(self, group: str) -> list[str]:
        """The sorted client ids of a producer group."""
        return sorted(self.producers.get(group, {}))
