"""ClientInstance: what producers and consumers of one process share (RocketMQ's
``MQClientInstance``): connections, topic routes and heartbeats.

Task tree (``async with ClientInstance(config) as instance:``)::

    ClientInstance
    ├─ RemotingClient            one connection per name server / broker, reader task each
    └─ nursery
       ├─ route_loop             refresh the routes of every topic in use every 30 s
       ├─ heartbeat_loop         HEART_BEAT to every known broker every 30 s, and at once
       │                         when woken (a producer or consumer started, a broker appeared)
       ├─ stats_loop             samples the consumers' figures every 10 s
       │                         (:mod:`client.consumer_stats`)
       └─ background tasks       started by producers (send_async) via :meth:`start_soon`

Rules:

- A route is fetched from the name servers on first use and cached; :meth:`topic_route` with
  ``refresh`` asks again. The name servers are tried in turn, starting with the last one that
  answered (a random one at first, as RocketMQ's ``namesrvIndex``: clients spread over the
  name servers, and a dead or hung first one does not cost every new client a timeout); only
  when all fail does the call fail.
- ``route_loop`` keeps asking for the route of a topic in use that the name servers no
  longer know (deleted), and keeps its last route, as RocketMQ's client; it warns once, when
  the topic goes missing, not every round, and logs at info level when its route is back.
- The broker address table (broker name -> {broker id: address}) is rebuilt from the cached
  routes after every change, so a broker the name servers dropped disappears with its routes.
- Broker calls never retry here; the producer and consumer decide what a failure means.
- Leaving the block unregisters the client from every broker (bounded), then cancels the loops
  and closes every connection.
"""

from __future__ import annotations

import contextlib
import logging
import os
import random
from collections.abc import Awaitable, Callable, Iterable, Mapping
from contextlib import AbstractAsyncContextManager
from contextvars import ContextVar
from types import TracebackType
from typing import TYPE_CHECKING, Any, TypeVar

import trio

from client import api
from client.config import ClientConfig
from client.consumer_stats import SAMPLE_EVERY_S, ConsumerStatsManager
from client.errors import (
    BrokerNotFoundError,
    ClientClosedError,
    MQClientError,
    RemotingFailedError,
    RequestTimeoutError,
    TopicRouteError,
)
from client.message import MessageQueue, from_record
from client.queue_selector import publish_queues
from client.running_info import DirectConsumer, RunningInfoSource, thread_stacks
from common.errors import caused_by
from common.message import MessageConst
from common.record import MessageRecord, RecordError, decode_record, decode_records
from common.route import MASTER_ID, TopicRouteData
from common.version import minimq_version
from remoting.admin_bodies import decode_reset_offset
from remoting.channel import Channel, Handler
from remoting.client import RemotingClient
from remoting.client_bodies import ConsumerData, HeartbeatData, encode_heartbeat
from remoting.codes import RequestCode, ResponseCode
from remoting.command import RemotingCommand
from remoting.consumer_bodies import (
    PROP_CLIENT_VERSION,
    PROP_CONSUME_TYPE,
    PROP_NAMESERVER_ADDR,
    encode_direct_result,
    encode_running_info,
)
from remoting.errors import RemotingError, RemotingTimeoutError
from remoting.headers import error
from remoting.tls import client_ssl_context

if TYPE_CHECKING:
    from client.producer import Producer

log = logging.getLogger(__name__)

CLIENT_INNER_PRODUCER_GROUP = "CLIENT_INNER_PRODUCER"
"""The group of the instance's own producer (RocketMQ's ``MixAll.CLIENT_INNER_PRODUCER_GROUP``)."""
UNREGISTER_TIMEOUT_S = 3.0
"""Upper bound of the UNREGISTER_CLIENT round when the instance closes."""

T = TypeVar("T")

_call_deadline: ContextVar[float | None] = ContextVar("minimq_call_deadline", default=None)
"""The trio deadline of the budgeted call in progress (see :func:`with_call_budget`)."""


async def with_call_budget(seconds: float, fn: Callable[..., Awaitable[T]], *args: Any) -> T:
    """``await fn(*args)``; a request it makes without a timeout of its own may take what is
    left of ``seconds`` when that is more than the client's ``request_timeout_s``.

    A blocking call's ``timeout=`` is its whole budget (Kafka's ``committed(timeout)``): a
    broker that answers after ``request_timeout_s`` but within it still counts. It never
    shortens a request (bound the call with ``trio.fail_after`` for that), and it ends with
    the budget: a task the call started (a fetch loop, say) is not given more time later.
    """
    token = _call_deadline.set(trio.current_time() + seconds)
    try:
        return await fn(*args)
    finally:
        _call_deadline.reset(token)


def _budgeted_timeout(default_s: float) -> float | None:
    """What is left of the budgeted call's time when it is more than ``default_s``."""
    deadline = _call_deadline.get()
    if deadline is None:
        return None
    left = deadline - trio.current_time()
    return left if left > default_s else None


TransactionCheckHandler = Callable[[MessageRecord, RemotingCommand, str], Awaitable[None]]
"""``handler(half record, CHECK_TRANSACTION_STATE request, broker address)`` of a
transactional producer group (see :meth:`ClientInstance.register_transaction_checker`)."""


class ClientInstance:
    """Connections, routes and heartbeats shared by a process's producers and consumers."""

    def __init__(
        self, config: ClientConfig, *, handlers: Mapping[int, Handler] | None = None
    ) -> None:
        self.config = config
        self.client_id = config.client_id()
        self._made_in_pid = os.getpid()
        self.consumer_ids_changed: list[Callable[[str], None]] = []
        """Called with the group when a broker says its member list changed (rebalance)."""
        self.offset_reset: list[Callable[[str, str, dict[MessageQueue, int]], None]] = []
        """Called with ``(group, topic, {queue: offset})`` when a broker says an admin reset
        the group's offsets (RESET_CONSUMER_CLIENT_OFFSET)."""
        table: dict[int, Handler] = {
            int(RequestCode.NOTIFY_CONSUMER_IDS_CHANGED): self._on_consumer_ids_changed,
            int(RequestCode.RESET_CONSUMER_CLIENT_OFFSET): self._on_reset_offset,
            int(RequestCode.CHECK_TRANSACTION_STATE): self._on_check_transaction_state,
            int(RequestCode.GET_CONSUMER_RUNNING_INFO): self._on_running_info,
            int(RequestCode.CONSUME_MESSAGE_DIRECTLY): self._on_consume_directly,
        }
        table.update(handlers or {})
        self._remoting = RemotingClient(
            handlers=table,
            default_timeout_s=config.request_timeout_s,
            connect_timeout_s=config.connect_timeout_s,
            busy_poll_s=config.busy_poll_us / 1e6,
            rpc_hook=config.rpc_hook(),
            ssl_context=client_ssl_context(config.tls()),
        )
        self._routes: dict[str, TopicRouteData] = {}
        self._publish: dict[str, list[MessageQueue]] = {}
        self._broker_addrs: dict[str, dict[int, str]] = {}
        self._route_locks: dict[str, trio.Lock] = {}
        self._vanished: set[str] = set()
        """Cached topics the name servers no longer know (deleted), warned about once."""
        self._namesrv_index = random.randrange(max(1, len(config.namesrv_addrs)))
        self._producer_groups: dict[str, int] = {}
        self._consumers: dict[str, Callable[[], ConsumerData]] = {}
        self._running_infos: dict[str, RunningInfoSource] = {}
        self._direct_consumers: dict[str, DirectConsumer] = {}
        self._transaction_checkers: dict[str, TransactionCheckHandler] = {}
        self.published_topics: list[Callable[[], Iterable[str]]] = []
        """One per running producer: the topics it has sent to, whose routes
        :meth:`refresh_routes` keeps (a consumer's topics come from its heartbeat data); and
        the Spark source's topics (:class:`client.spark.brokers.KeptRoutes`)."""
        self._heartbeat_wakeup = trio.Event()
        self._stop_requested = trio.Event()
        self.stopped = trio.Event()
        """Set when :meth:`run` has ended."""
        self._nursery: trio.Nursery | None = None
        self._nursery_cm: AbstractAsyncContextManager[trio.Nursery] | None = None
        self._closed = False
        self._inner_producer: Producer | None = None
        self.consumer_stats = ConsumerStatsManager()
        """The consumers' pull and consume figures (RocketMQ's ``ConsumerStatsManager``)."""

    # ------------------------------------------------------------------ lifecycle

    async def __aenter__(self) -> ClientInstance:
        if self._nursery_cm is not None:
            raise RuntimeError("a ClientInstance can be entered only once")
        try:
            trio.lowlevel.current_task()
        except RuntimeError:
            raise caused_by(
                RuntimeError(
                    "client.aio runs under trio (trio.run); from asyncio or plain code use the "
                    "blocking client (from client import Producer, PushConsumer, ...)"
                ),
                None,
            )
        if not self.config.instance_name and os.getpid() != self._made_in_pid:
            self.client_id = self.config.client_id()  # made before a fork: an id of its own
        await self._remoting.__aenter__()
        self._nursery_cm = trio.open_nursery()
        self._nursery = await self._nursery_cm.__aenter__()
        self._nursery.start_soon(self.route_loop)
        self._nursery.start_soon(self.heartbeat_loop)
        self._nursery.start_soon(self.stats_loop)
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        assert self._nursery is not None
        assert self._nursery_cm is not None
        try:
            with trio.move_on_after(UNREGISTER_TIMEOUT_S, shield=True):
                await self._unregister_everywhere()
            self._closed = True
            self._nursery.cancel_scope.cancel()
            await self._nursery_cm.__aexit__(None, None, None)
        finally:
            self._closed = True
            await self._remoting.__aexit__(None, None, None)

    async def run(self, *, task_status: trio.TaskStatus[ClientInstance]) -> None:
        """Enter the instance, report it started, and serve until :meth:`shutdown` (or
        cancellation); the blocking facade runs it as a service of its loop thread."""
        try:
            async with self:
                task_status.started(self)
                await self._stop_requested.wait()
        finally:
            self.stopped.set()

    async def shutdown(self) -> None:
        """Make :meth:`run` leave its block (unregistering while connections still work) and
        wait until it has."""
        self._stop_requested.set()
        await self.stopped.wait()

    @property
    def running(self) -> bool:
        """True between entering and leaving the ``async with`` block."""
        return self._nursery is not None and not self._closed

    def start_soon(self, fn: Callable[..., Awaitable[Any]], *args: Any) -> None:
        """Run ``fn(*args)`` as a background task of the instance."""
        if self._nursery is None or self._closed:
            raise ClientClosedError("client instance")
        self._nursery.start_soon(fn, *args)

    async def _on_consumer_ids_changed(
        self, request: RemotingCommand, channel: Channel
    ) -> RemotingCommand | None:
        """NOTIFY_CONSUMER_IDS_CHANGED (oneway, header consumerGroup)."""
        group = str(request.ext_fields.get("consumerGroup", ""))
        log.debug("consumer ids of %s changed (from %s)", group, channel.remote_addr)
        for listener in self.consumer_ids_changed:
            try:
                listener(group)
            except Exception:
                log.exception("consumer-ids-changed listener failed")
        return None

    async def _on_reset_offset(
        self, request: RemotingCommand, channel: Channel
    ) -> RemotingCommand | None:
        """RESET_CONSUMER_CLIENT_OFFSET (oneway, headers topic group, body ResetOffsetBody)."""
        group = str(request.ext_fields.get("group", ""))
        topic = str(request.ext_fields.get("topic", ""))
        try:
            entries = decode_reset_offset(request.body)
        except ValueError as exc:
            log.warning("bad offset reset from %s: %s", channel.remote_addr, exc)
            return None
        offsets = {
            MessageQueue(e.topic, e.broker_name, e.queue_id): e.offset
            for e in entries
            if e.topic == topic
        }
        log.info("offsets of %s on %s reset by %s: %s", group, topic, channel.remote_addr, offsets)
        for listener in self.offset_reset:
            try:
                listener(group, topic, offsets)
            except Exception:
                log.exception("offset-reset listener failed")
        return None

    async def _on_check_transaction_state(
        self, request: RemotingCommand, channel: Channel
    ) -> RemotingCommand | None:
        """CHECK_TRANSACTION_STATE (oneway; body: the half record): hand it to the checker of
        the record's producer group (PGROUP), which answers with END_TRANSACTION."""
        try:
            record = decode_record(request.body)
        except RecordError as exc:
            log.warning("bad transaction check from %s: %s", channel.remote_addr, exc)
            return None
        group = record.properties.get(MessageConst.PGROUP, "")
        handler = self._transaction_checkers.get(group)
        if handler is None:
            log.warning("transaction check for unknown producer group %r", group)
            return None
        await handler(record, request, channel.remote_addr)
        return None

    def _on_running_info(self, request: RemotingCommand, channel: Channel) -> RemotingCommand:
        """GET_CONSUMER_RUNNING_INFO (header consumerGroup clientId jstackEnable): the group's
        consumer's running info plus the instance's properties (RocketMQ's
        ``MQClientInstance.consumerRunningInfo``), and with ``jstackEnable`` the stacks of
        the process's threads (RocketMQ's ``jstack``); SYSTEM_ERROR when no consumer of the
        group runs here."""
        group = str(request.ext_fields.get("consumerGroup", ""))
        source = self._running_infos.get(group)
        describe = self._consumers.get(group)
        if source is None or describe is None:
            return _group_not_here(request, group)
        info = source().with_properties(
            {
                PROP_NAMESERVER_ADDR: ";".join(self.config.namesrv_addrs),
                PROP_CONSUME_TYPE: describe().consume_type.name,
                PROP_CLIENT_VERSION: minimq_version(),
            }
        )
        if str(request.ext_fields.get("jstackEnable", "")).lower() == "true":
            info = info.with_jstack(thread_stacks())
        body = encode_running_info(info)
        return RemotingCommand.response_to(request, ResponseCode.SUCCESS, body=body)

    async def _on_consume_directly(
        self, request: RemotingCommand, channel: Channel
    ) -> RemotingCommand:
        """CONSUME_MESSAGE_DIRECTLY (header consumerGroup clientId msgId brokerName, body: the
        raw record): the group's consumer runs its handler on the message once and the answer
        is a ConsumeMessageDirectlyResult (:mod:`client.running_info`); SYSTEM_ERROR when no
        push consumer of the group runs here or the message cannot be read."""
        group = str(request.ext_fields.get("consumerGroup", ""))
        consume = self._direct_consumers.get(group)
        if consume is None and group in self._consumers:
            return error(
                request,
                ResponseCode.SYSTEM_ERROR,
                f"this {self.client_id} client is not push consumer, not support direct push "
                f"(group {group} is consumed by a pull consumer here)",
            )
        if consume is None:
            return _group_not_here(request, group)
        broker_name = str(request.ext_fields.get("brokerName", ""))
        try:
            records = decode_records(request.body)
        except RecordError as exc:
            return error(request, ResponseCode.SYSTEM_ERROR, f"bad message body: {exc}")
        if not records:
            return error(request, ResponseCode.SYSTEM_ERROR, "no message in the request")
        try:
            result = await consume(from_record(records[0], broker_name))
        except MQClientError as exc:
            return error(request, ResponseCode.SYSTEM_ERROR, exc.reason)
        body = encode_direct_result(result)
        return RemotingCommand.response_to(request, ResponseCode.SUCCESS, body=body)

    def register_transaction_checker(self, group: str, handler: TransactionCheckHandler) -> None:
        """Route the brokers' CHECK_TRANSACTION_STATE for ``group`` to ``handler`` (one
        transactional producer per group and instance, as in RocketMQ)."""
        if group in self._transaction_checkers:
            raise MQClientError(
                ResponseCode.SYSTEM_ERROR,
                f"the producer group[{group}] has been created before, specify another name",
            )
        self._transaction_checkers[group] = handler

    def unregister_transaction_checker(self, group: str) -> None:
        """Stop answering transaction checks for ``group``."""
        self._transaction_checkers.pop(group, None)

    # ------------------------------------------------------------------ calls

    async def invoke(
        self, addr: str, cmd: RemotingCommand, timeout_s: float | None = None
    ) -> RemotingCommand:
        """Send a request to ``addr`` and return the response (remoting errors propagate).

        ``timeout_s`` None: ``request_timeout_s``, or what is left of a longer budget given by
        :func:`with_call_budget`.
        """
        if self._closed:
            raise ClientClosedError("client instance")
        if timeout_s is None:
            timeout_s = _budgeted_timeout(self.config.request_timeout_s)
        # the tasks a request starts (a new connection's reader, the handlers of what the
        # broker sends on it) serve everyone: they must not inherit the call's budget
        token = _call_deadline.set(None)
        try:
            return await self._remoting.invoke(addr, cmd, timeout_s=timeout_s)
        except RemotingTimeoutError as exc:
            raise caused_by(RequestTimeoutError(f"request {cmd.code} to {addr}", exc.timeout), exc)
        except RemotingError as exc:
            raise caused_by(RemotingFailedError(addr, str(exc)), exc)
        finally:
            _call_deadline.reset(token)

    async def invoke_oneway(self, addr: str, cmd: RemotingCommand) -> None:
        """Send a oneway request to ``addr``."""
        if self._closed:
            raise ClientClosedError("client instance")
        token = _call_deadline.set(None)  # as in :meth:`invoke`
        try:
            await self._remoting.invoke_oneway(addr, cmd)
        except RemotingError as exc:
            raise caused_by(RemotingFailedError(addr, str(exc)), exc)
        finally:
            _call_deadline.reset(token)

    async def invoke_namesrv(self, cmd: RemotingCommand) -> tuple[RemotingCommand, str]:
        """Send ``cmd`` to a name server: the last good one first, then the others in turn."""
        addrs = self.config.namesrv_addrs
        errors: list[str] = []
        for i in range(len(addrs)):
            index = (self._namesrv_index + i) % len(addrs)
            addr = addrs[index]
            try:
                resp = await self.invoke(addr, cmd)
            except (RemotingFailedError, RequestTimeoutError) as exc:
                errors.append(f"{addr}: {exc}")
                continue
            self._namesrv_index = index
            return resp, addr
        raise MQClientError(
            ResponseCode.SYSTEM_ERROR, f"no name server answered ({'; '.join(errors)})"
        )

    # ------------------------------------------------------------------ routes

    async def topic_route(self, topic: str, *, refresh: bool = False) -> TopicRouteData:
        """The topic's route (cached unless ``refresh``); TopicRouteError if none exists."""
        route = self._routes.get(topic)
        if route is not None and not refresh:
            return route
        lock = self._route_locks.setdefault(topic, trio.Lock())
        async with lock:
            route = self._routes.get(topic)
            if route is not None and not refresh:
                return route
            resp, addr = await self.invoke_namesrv(api.route_request(topic))
            route = api.parse_route(resp, topic, addr)
            self._set_route(topic, route)
            return route

    def _set_route(self, topic: str, route: TopicRouteData) -> None:
        """Cache a route just fetched. It goes last, so its brokers' addresses win over those
        of older routes (a vanished topic's keeps a broker's address from before it moved)."""
        if self._routes.get(topic) != route:
            self._publish[topic] = publish_queues(topic, route)
        elif next(reversed(self._routes)) == topic:
            return
        self._routes.pop(topic, None)
        self._routes[topic] = route
        old = set(self.broker_addresses())
        self._rebuild_broker_addrs()
        if set(self.broker_addresses()) - old:
            self.heartbeat_soon()

    def forget_route(self, topic: str) -> None:
        """Drop a cached route (the topic no longer exists, or nobody here uses it)."""
        self._routes.pop(topic, None)
        self._publish.pop(topic, None)
        self._vanished.discard(topic)
        self._rebuild_broker_addrs()

    def cached_topics(self) -> list[str]:
        """The topics whose routes are cached now, sorted."""
        return sorted(self._routes)

    def topics_in_use(self) -> set[str]:
        """What this instance's clients use (RocketMQ's ``updateTopicRouteInfoFromNameServer``
        set): the topics its consumers subscribe to or are assigned (retry topics included) and
        those its running producers have sent to."""
        topics = {
            sub.topic for describe in self._consumers.values() for sub in describe().subscriptions
        }
        for published in self.published_topics:
            topics.update(published())
        return topics

    def _rebuild_broker_addrs(self) -> None:
        """Each broker's addresses from the newest route naming it (routes are kept oldest
        fetched first)."""
        table: dict[str, dict[int, str]] = {}
        for route in self._routes.values():
            for bd in route.broker_datas:
                table[bd.broker_name] = dict(bd.broker_addrs)
        self._broker_addrs = table

    async def publish_queues(self, topic: str) -> list[MessageQueue]:
        """The writable queues of ``topic`` (fetching its route on first use)."""
        queues = self._publish.get(topic)
        if queues is None:
            await self.topic_route(topic)
            queues = self._publish[topic]
        return queues

    async def subscribe_queues(self, topic: str) -> list[MessageQueue]:
        """The readable queues of ``topic``, freshly asked of the name servers, sorted."""
        return api.subscribe_queues(topic, await self.topic_route(topic, refresh=True))

    def broker_addr(self, broker_name: str) -> str | None:
        """The master address of ``broker_name`` from the cached routes, or None."""
        return self._broker_addrs.get(broker_name, {}).get(MASTER_ID)

    async def find_broker_addr(self, mq: MessageQueue) -> str:
        """The master address of the queue's broker, refreshing the topic's route if needed
        (BrokerNotFoundError when it still has none)."""
        addr = self.broker_addr(mq.broker_name)
        if addr is None:
            with contextlib.suppress(TopicRouteError):  # the broker may be known from elsewhere
                await self.topic_route(mq.topic, refresh=True)
            addr = self.broker_addr(mq.broker_name)
        if addr is None:
            raise BrokerNotFoundError(mq.broker_name, ResponseCode.SYSTEM_ERROR)
        return addr

    def broker_name_of(self, addr: str) -> str | None:
        """The name of the broker at ``addr`` (any role) from the cached routes, or None."""
        for name, addrs in self._broker_addrs.items():
            if addr in addrs.values():
                return name
        return None

    async def broker_offset(
        self, code: RequestCode, mq: MessageQueue, timestamp_ms: int = 0
    ) -> int:
        """GET_MIN_OFFSET / GET_MAX_OFFSET / SEARCH_OFFSET_BY_TIMESTAMP of ``mq`` on its broker."""
        addr = await self.find_broker_addr(mq)
        resp = await self.invoke(addr, api.offset_request(code, mq, timestamp_ms))
        return api.parse_offset(resp, addr)

    def broker_addresses(self) -> list[str]:
        """Every known broker address (masters and slaves), sorted."""
        return sorted({a for addrs in self._broker_addrs.values() for a in addrs.values()})

    async def refresh_routes(self) -> None:
        """Ask again for the route of every cached topic in use (:meth:`topics_in_use`); a
        vanished topic keeps its old route. The routes of topics no client here uses any more
        (a closed consumer's retry topic, a closed producer's topics) are forgotten, not asked
        for again for the instance's lifetime: they are fetched anew if needed.

        A topic still in use that the name servers no longer know (deleted) is asked for again
        every round, as RocketMQ's ``updateTopicRouteInfoFromNameServer`` does, so its route
        comes back if it is created again; that is warned about once, not every round (see
        :meth:`_route_vanished`)."""
        self._forget_unused_routes()
        for topic in list(self._routes):
            try:
                await self.topic_route(topic, refresh=True)
            except TopicRouteError as exc:
                self._route_vanished(topic, exc)
            except MQClientError as exc:
                log.warning("refreshing the route of %s failed: %s", topic, exc)
            else:
                self._route_back(topic)

    def _route_vanished(self, topic: str, exc: TopicRouteError) -> None:
        """Log that the name servers no longer know ``topic``: a warning the first round, a
        debug line the rounds after, until its route is back."""
        if topic in self._vanished:
            log.debug("the route of %s is still missing: %s", topic, exc)
            return
        self._vanished.add(topic)
        log.warning(
            "the name servers no longer know topic %s (%s): its last route is kept and asked "
            "for again every %g s (not warned again until it is back)",
            topic,
            exc,
            self.config.poll_name_server_interval_s,
        )

    def _route_back(self, topic: str) -> None:
        """A topic warned about by :meth:`_route_vanished` has a route again."""
        if topic in self._vanished:
            self._vanished.discard(topic)
            log.info("the route of topic %s is back", topic)

    def _forget_unused_routes(self) -> None:
        in_use = self.topics_in_use()
        unused = [t for t in self._routes if t not in in_use]
        for topic in unused:
            self._routes.pop(topic, None)
            self._publish.pop(topic, None)
        if unused:
            self._rebuild_broker_addrs()  # once, not once per forgotten route
        for topic, lock in list(self._route_locks.items()):
            if topic not in self._routes and not lock.locked():
                del self._route_locks[topic]
        self._vanished.intersection_update(self._routes)

    async def inner_producer(self) -> Producer:
        """The instance's own producer (group ``CLIENT_INNER_PRODUCER``; RocketMQ's
        ``MQClientInstance#getDefaultMQProducer``), started on first use and ended with the
        instance. A push consumer sends a failed message to its retry topic with it when the
        broker that stored the message did not take it back."""
        if self._inner_producer is None:
            from client.producer import Producer  # deferred: client.producer imports this module

            producer = Producer(CLIENT_INNER_PRODUCER_GROUP, instance=self)
            await producer.__aenter__()  # a shared instance: registers the group, no I/O
            self._inner_producer = producer
        return self._inner_producer

    async def route_loop(self) -> None:
        """Refresh the routes every ``poll_name_server_interval_s``; never returns."""
        while True:
            await trio.sleep(self.config.poll_name_server_interval_s)
            await self.refresh_routes()

    # ------------------------------------------------------------------ heartbeats

    def register_producer(self, group: str) -> None:
        """Count a producer of ``group`` in the heartbeats."""
        self._producer_groups[group] = self._producer_groups.get(group, 0) + 1
        self.heartbeat_soon()

    def unregister_producer(self, group: str) -> bool:
        """Forget one producer of ``group``; True when it was the group's last one here."""
        left = self._producer_groups.get(group, 0) - 1
        if left > 0:
            self._producer_groups[group] = left
            return False
        self._producer_groups.pop(group, None)
        return True

    def register_consumer(
        self,
        group: str,
        describe: Callable[[], ConsumerData],
        *,
        running_info: RunningInfoSource | None = None,
        consume_directly: DirectConsumer | None = None,
    ) -> None:
        """Add a consumer group; ``describe`` gives its current subscriptions for heartbeats,
        ``running_info`` and ``consume_directly`` answer the brokers' GET_CONSUMER_RUNNING_INFO
        and CONSUME_MESSAGE_DIRECTLY for the group (when given)."""
        if group in self._consumers:
            raise MQClientError(
                ResponseCode.SYSTEM_ERROR,
                f"the consumer group[{group}] has been created before, specify another name",
            )
        self._consumers[group] = describe
        if running_info is not None:
            self._running_infos[group] = running_info
        if consume_directly is not None:
            self._direct_consumers[group] = consume_directly
        self.heartbeat_soon()

    def unregister_consumer(self, group: str) -> None:
        """Forget a consumer group (and its figures)."""
        self._consumers.pop(group, None)
        self._running_infos.pop(group, None)
        self._direct_consumers.pop(group, None)
        self.consumer_stats.forget_group(group)

    async def stats_loop(self) -> None:
        """Sample the consumers' figures every :data:`SAMPLE_EVERY_S`; never returns."""
        while True:
            self.consumer_stats.tick(trio.current_time())
            await trio.sleep(SAMPLE_EVERY_S)

    def heartbeat_data(self) -> HeartbeatData:
        """The current heartbeat body."""
        return HeartbeatData(
            client_id=self.client_id,
            producer_groups=tuple(sorted(self._producer_groups)),
            consumers=tuple(describe() for describe in self._consumers.values()),
        )

    def heartbeat_soon(self) -> None:
        """Wake the heartbeat loop now instead of at the next period."""
        self._heartbeat_wakeup.set()

    async def heartbeat_all(self) -> None:
        """One HEART_BEAT to every known broker, concurrently; failures are logged."""
        data = self.heartbeat_data()
        if not data.producer_groups and not data.consumers:
            return
        body = encode_heartbeat(data)
        async with trio.open_nursery() as nursery:
            for addr in self.broker_addresses():
                cmd = RemotingCommand.request(RequestCode.HEART_BEAT, {}, body, opaque=0)
                nursery.start_soon(self._call_logged, addr, cmd, "heartbeat")

    async def heartbeat_loop(self) -> None:
        """Heartbeat every ``heartbeat_broker_interval_s`` or when woken; never returns."""
        while True:
            with trio.move_on_after(self.config.heartbeat_broker_interval_s):
                await self._heartbeat_wakeup.wait()
            self._heartbeat_wakeup = trio.Event()
            await self.heartbeat_all()

    async def unregister_client(
        self, producer_group: str | None = None, consumer_group: str | None = None
    ) -> None:
        """UNREGISTER_CLIENT for one group on every known broker (bounded, failures logged)."""
        header: dict[str, str | int | bool] = {"clientID": self.client_id}
        if producer_group is not None:
            header["producerGroup"] = producer_group
        if consumer_group is not None:
            header["consumerGroup"] = consumer_group
        with trio.move_on_after(UNREGISTER_TIMEOUT_S):
            async with trio.open_nursery() as nursery:
                for addr in self.broker_addresses():
                    cmd = RemotingCommand.request(RequestCode.UNREGISTER_CLIENT, header, opaque=0)
                    nursery.start_soon(self._call_logged, addr, cmd, "unregister")

    async def _unregister_everywhere(self) -> None:
        groups = [(g, None) for g in self._producer_groups] + [(None, g) for g in self._consumers]
        for producer_group, consumer_group in groups:
            await self.unregister_client(producer_group, consumer_group)

    async def _call_logged(self, addr: str, cmd: RemotingCommand, what: str) -> None:
        try:
            api.check_success(await self.invoke(addr, cmd), addr)
        except MQClientError as exc:
            log.warning("%s to %s failed: %s", what, addr, exc)


def _group_not_here(request: RemotingCommand, group: str) -> RemotingCommand:
    """RocketMQ's answer for a group with no consumer in this client instance."""
    return error(
        request,
        ResponseCode.SYSTEM_ERROR,
        f"The Consumer Group <{group}> not exist in this consumer",
    )
