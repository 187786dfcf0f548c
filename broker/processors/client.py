"""Client management requests (RocketMQ's ``ClientManageProcessor`` and the consumer-list part of
``ConsumerManageProcessor``) plus the tasks that keep the client table honest.

::

    HEART_BEAT                  34  body = HeartbeatData (remoting.client_bodies) -> SUCCESS
    UNREGISTER_CLIENT           35  clientID [producerGroup] [consumerGroup] -> SUCCESS
    GET_CONSUMER_LIST_BY_GROUP  38  consumerGroup -> body {"consumerIdList": sorted ids}
                                    | SYSTEM_ERROR "no consumer for this group, <group>"

Rules:

- The table is :class:`broker.client_manager.ClientManager` over live :class:`Channel` objects.
- A heartbeat awaits :attr:`ClientService.on_consumer_group` (when set) for each consumer group
  first: the controller ensures the group's subscription config and ``%RETRY%<group>`` topic.
- When a consumer group's membership changes (join, leave, expiry, closed connection) every
  remaining member gets a oneway NOTIFY_CONSUMER_IDS_CHANGED (header ``consumerGroup``) on its
  own connection. Handlers and close hooks only queue the group; :meth:`ClientService.notify_loop`
  sends, each send bounded by :data:`NOTIFY_TIMEOUT_S`; failures are logged, never raised.
- :meth:`ClientService.scan_loop` drops clients silent for ``channelExpiredTimeout`` or whose
  connection closed, every :data:`SCAN_INTERVAL_S`; :meth:`ClientService.channel_closed` (the
  server's close hook) drops a closed connection's clients at once.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Final

import trio

from broker.client_manager import ClientChannelInfo, ClientManager
from common.clock import monotonic_ms
from remoting.channel import Channel, Handler
from remoting.client_bodies import ConsumerData, decode_heartbeat, encode_consumer_list
from remoting.codes import RequestCode, ResponseCode
from remoting.command import ExtValue, RemotingCommand
from remoting.errors import RemotingError
from remoting.headers import error, guarded, header_str, opt_str

log = logging.getLogger(__name__)

SCAN_INTERVAL_S: Final = 10.0
"""How often expired clients are looked for (RocketMQ's ``ClientHousekeepingService``)."""
NOTIFY_TIMEOUT_S: Final = 3.0
"""Upper bound of one NOTIFY_CONSUMER_IDS_CHANGED send."""


class ClientService:
    """Handles the client requests over one :class:`ClientManager`; see the module rules."""

    def __init__(
        self,
        manager: ClientManager[Channel] | None = None,
        *,
        clock_ms: Callable[[], int] = monotonic_ms,
    ) -> None:
        self.manager: ClientManager[Channel] = manager or ClientManager()
        self.clock_ms = clock_ms
        self.on_consumer_group: Callable[[ConsumerData], Awaitable[None]] | None = None
        """Awaited for every consumer group in a heartbeat, before it is registered (the
        controller creates the group's config and retry topic there)."""
        self.on_group_vanished: Callable[[str], None] | None = None
        """Called for a consumer group whose last member left, expired or disconnected
        (RocketMQ's ``ConsumerGroupEvent.UNREGISTER``; the controller retires its filters)."""
        self._to_notify: set[str] = set()
        self._notify_wakeup = trio.Event()

    # ------------------------------------------------------------------ requests

    async def heartbeat(self, request: RemotingCommand, channel: Channel) -> RemotingCommand:
        """HEART_BEAT: register the client's producer and consumer groups."""
        data = decode_heartbeat(request.body)
        now = self.clock_ms()

        def info() -> ClientChannelInfo[Channel]:
            lang, version = int(request.language), int(request.version)
            return ClientChannelInfo(channel, data.client_id, lang, version, now)

        for group in data.producer_groups:
            self.manager.register_producer(group, info())
        for consumer in data.consumers:
            if self.on_consumer_group is not None:
                await self.on_consumer_group(consumer)
            if self.manager.register_consumer(consumer, info()):
                log.info("consumer %s joined group %s", data.client_id, consumer.group_name)
                self._queue_notify({consumer.group_name})
        return RemotingCommand.response_to(request, ResponseCode.SUCCESS)

    async def unregister_client(
        self, request: RemotingCommand, channel: Channel
    ) -> RemotingCommand:
        """UNREGISTER_CLIENT: remove the client from the named groups."""
        client_id = header_str(request, "clientID")
        producer_group = opt_str(request, "producerGroup", "")
        consumer_group = opt_str(request, "consumerGroup", "")
        if producer_group:
            self.manager.unregister_producer(producer_group, client_id)
        if consumer_group and self.manager.unregister_consumer(consumer_group, client_id):
            log.info("consumer %s left group %s", client_id, consumer_group)
            self._groups_changed({consumer_group})
        return RemotingCommand.response_to(request, ResponseCode.SUCCESS)

    async def consumer_list(self, request: RemotingCommand, channel: Channel) -> RemotingCommand:
        """GET_CONSUMER_LIST_BY_GROUP: the sorted client ids of the group."""
        group = header_str(request, "consumerGroup")
        ids = self.manager.consumer_ids(group)
        if not ids:
            return error(request, ResponseCode.SYSTEM_ERROR, f"no consumer for this group, {group}")
        return RemotingCommand.response_to(
            request, ResponseCode.SUCCESS, body=encode_consumer_list(ids)
        )

    def handlers(self) -> dict[int, Handler]:
        """The ``{request code: handler}`` table."""
        return {
            int(RequestCode.HEART_BEAT): guarded(self.heartbeat),
            int(RequestCode.UNREGISTER_CLIENT): guarded(self.unregister_client),
            int(RequestCode.GET_CONSUMER_LIST_BY_GROUP): guarded(self.consumer_list),
        }

    # ------------------------------------------------------------------ housekeeping

    def channel_closed(self, channel: Channel) -> None:
        """Close hook: drop the connection's clients now (runs synchronously, never raises)."""
        changed = self.manager.drop_channel(channel)
        if changed:
            log.info("connection %s closed: groups %s changed", channel.remote_addr, changed)
            self._groups_changed(changed)

    def scan_once(self) -> set[str]:
        """Drop expired and closed clients; the consumer groups that changed (queued too)."""
        changed = self.manager.scan(self.clock_ms(), lambda ch: ch.closed)
        if changed:
            log.info("expired clients removed from groups %s", changed)
            self._groups_changed(changed)
        return changed

    async def scan_loop(self) -> None:
        """:meth:`scan_once` every :data:`SCAN_INTERVAL_S`; never returns."""
        while True:
            await trio.sleep(SCAN_INTERVAL_S)
            self.scan_once()

    def _groups_changed(self, groups: set[str]) -> None:
        """Members left ``groups``: tell :attr:`on_group_vanished` of those left empty, and
        queue the notification to the others' remaining members."""
        if self.on_group_vanished is not None:
            for group in groups:
                if group not in self.manager.consumers:
                    self.on_group_vanished(group)
        self._queue_notify(groups)

    def _queue_notify(self, groups: set[str]) -> None:
        self._to_notify |= groups
        self._notify_wakeup.set()

    async def notify_loop(self) -> None:
        """Send NOTIFY_CONSUMER_IDS_CHANGED for every queued group; never returns."""
        while True:
            await self._notify_wakeup.wait()
            self._notify_wakeup = trio.Event()
            groups, self._to_notify = self._to_notify, set()
            async with trio.open_nursery() as nursery:
                for group in sorted(groups):
                    for channel in self.manager.consumer_channels(group):
                        nursery.start_soon(_notify, channel, group)


async def _notify(channel: Channel, group: str) -> None:
    """One oneway NOTIFY_CONSUMER_IDS_CHANGED; a failure is logged."""
    fields: dict[str, ExtValue] = {"consumerGroup": group}
    cmd = RemotingCommand.request(RequestCode.NOTIFY_CONSUMER_IDS_CHANGED, fields, opaque=0)
    try:
        with trio.fail_after(NOTIFY_TIMEOUT_S):
            await channel.invoke_oneway(cmd)
    except (
        RemotingError,
        OSError,
        trio.TooSlowError,
        trio.BrokenResourceError,
        trio.ClosedResourceError,
    ) as exc:
        log.warning("notifying %s of group %s change failed: %r", channel.remote_addr, group, exc)
