"""BrokerController: one broker's task tree (RocketMQ's ``BrokerController``), design §2.4.

::

    run                          open the store in a worker thread, load the managers
    └─ store nursery
       ├─ StoreServices.run      in its own shielded scope: outer cancellation does not reach
       │                         it; it is cancelled explicitly once the net scope has closed
       └─ net nursery            (the body of the store nursery)
          ├─ RemotingServer.run  send, pull, client and admin handlers on host:listenPort;
          │                      parked (long-polling) pulls live in their request tasks
          ├─ metrics.serve       GET /metrics on host:metricsPort (only when metricsPort is
          │                      set and not 0; see broker.metrics), bound before registering
          ├─ register_loop       REGISTER_BROKER to every name server every
          │                      registerNameServerPeriod ms (first round before started());
          │                      topic admin requests also run a round at once (register_now)
          ├─ persist_loop        consumer offsets every flushConsumerOffsetInterval ms
          ├─ stats_loop          samples message totals every second (broker.stats: putTps),
          │                      ticks broker.broker_stats (statsAll's figures); with
          │                      metrics on, counts the trio tasks every few seconds
          ├─ scan_loop           drops clients silent for channelExpiredTimeout ms (every 10 s)
          ├─ notify_loop         NOTIFY_CONSUMER_IDS_CHANGED to the members of changed groups
          ├─ acl.watch           with aclEnable: reloads the accounts file when it changes
          │                      (every 5 s; see remoting.acl.service)
          ├─ tls.watch           with tls.server.mode=enforcing: reloads the certificate
          │                      when its files change (every 5 s; remoting.tls)
          ├─ schedule.run        delayed-message delivery, one task per delay level, plus
          │                      delayOffset.json every flushDelayOffsetInterval ms
          └─ transactions.run    transaction check service every transactionCheckInterval ms
                                 (broker.transaction; progress = CID_SYS_RMQ_TRANS offsets)

Rules:

- ``task_status.started(port)`` comes once both ports are bound and one registration round
  (to every name server, concurrently) has been attempted. A port that cannot be bound ends
  the start before any name server hears of the broker (the error names ``listenPort`` or
  ``metricsPort``); a broker stopped after its first registration attempt unregisters.
- A failed registration is logged and retried next period; it never stops the broker.
- Each registration carries the topic table's ``dataVersion`` (RocketMQ's
  ``TopicConfigSerializeWrapper.dataVersion``), so a name server never takes a late, older
  table over a newer one. The version moves on at every topic change, at each start (so a
  restarted broker is never older than its previous run) and when ``brokerPermission``
  changes.
- A round after a topic change (``register_now``) holds up the request that changed it only
  until one name server has accepted it (or every one has failed); the rest of the round runs
  on in the net nursery, so a hung name server costs that request nothing.
- ``store.arrival_listener`` wakes parked pulls and the schedule service's levels (chained
  after any listener already set) for as long as the net nursery runs; a closed connection
  drops its clients at once (RemotingServer's ``on_close`` hook) and its parked pulls (their
  tasks are cancelled).
- A consumer group in a heartbeat gets its subscription config (auto-created when
  ``autoCreateSubscriptionGroup``) and its ``%RETRY%<group>`` topic (``retryQueueNums`` queues,
  read|write); a newly created retry topic triggers one registration round at once. One that
  cannot be written (a full disk) is logged and tried at the next heartbeat: the consumer joins.
- With ``aclEnable`` the accounts file is loaded when the controller is built (a missing or
  malformed file raises ValueError: the broker does not start) and every handler of the table
  runs the ACL check first (:func:`remoting.acl.guard.guard_handlers`; END_TRANSACTION and
  VIEW_MESSAGE_BY_ID also by the topic of the stored message they name,
  :mod:`broker.acl_lookups`); without it the table is served as it is. The ACL admin
  requests (:mod:`broker.processors.acl_admin`) change the accounts file over the wire (admin
  accounts only); without ``aclEnable`` they are answered with an error. With ``accessKey`` /
  ``secretKey`` set, REGISTER_BROKER and UNREGISTER_BROKER are signed with that account (name
  servers with ACL on need an admin one).
- With ``tls.server.mode=enforcing`` the listening port's certificate, key (and CA bundle
  when client certificates are checked) are watched (RocketMQ's ``FileWatchService``): a
  change rebuilds the SSL context for new connections (:class:`~remoting.tls.ServerTlsReloader`);
  open connections keep theirs; files that do not load are logged and the old context stays.
- Shutdown is cancellation. Order: the net nursery stops (accepting, requests, loops), then
  UNREGISTER_BROKER goes to every name server (shielded, at most ``UNREGISTER_TIMEOUT_S``), then
  the store services are cancelled (they drain under their own bounded shield), then consumer
  and delay offsets are persisted and ``store.close()`` runs in a worker thread, shielded so
  that a second cancellation cannot interrupt it (``to_thread.run_sync`` never abandons its
  thread).
"""

from __future__ import annotations

import dataclasses
import logging
import ssl
from collections.abc import Callable

import trio

from broker.acl_lookups import stored_message_lookups
from broker.broker_stats import BrokerStatsManager
from broker.client_manager import ClientManager
from broker.config import BrokerConfig
from broker.consumer_filter import ConsumerFilterManager
from broker.consumer_offset import ConsumerOffsetManager
from broker.long_polling import CHECK_INTERVAL_S, PullHoldTable
from broker.metrics import TASK_COUNT_INTERVAL_S, BrokerMetrics, count_trio_tasks
from broker.processors.acl_admin import AclAdminProcessor
from broker.processors.admin import AdminProcessor
from broker.processors.admin_stats import AdminStatsProcessor
from broker.processors.client import ClientService
from broker.processors.consumer_call import ConsumerCallProcessor
from broker.processors.end_transaction import EndTransactionProcessor
from broker.processors.group_admin import GroupAdminProcessor
from broker.processors.lock import LockProcessor
from broker.processors.pull import make_pull_handlers
from broker.processors.queue_query import ConsumeQueueQueryProcessor
from broker.processors.send import SendProcessor
from broker.processors.send_back import RETRY_PERM, SendBackProcessor, create_topic_in_send_back
from broker.rebalance_lock import RebalanceLockManager
from broker.schedule import ScheduleMessageService
from broker.stats import StoreStats, Totals
from broker.subscription_group import SubscriptionGroupManager
from broker.topic_config import TopicConfigManager
from broker.transaction import TransactionService, to_half_message
from common.file_watch import DEFAULT_WATCH_INTERVAL_S
from common.record import MessageRecord
from common.route import PermName, TopicConfig
from common.topic import retry_topic
from remoting.acl.guard import guard_handlers
from remoting.acl.service import WATCH_INTERVAL_S, AclService
from remoting.acl.signing import RequestSigner, SessionCredentials
from remoting.busy_poll import BusyPoll
from remoting.client import RemotingClient
from remoting.client_bodies import ConsumerData, LockedQueue
from remoting.codes import RequestCode, ResponseCode
from remoting.command import ExtValue, RemotingCommand
from remoting.errors import RemotingError
from remoting.route_bodies import encode_register_body
from remoting.server import RemotingServer
from remoting.tls import ServerTlsReloader, client_ssl_context, server_ssl_context
from store.message_store import ArrivalListener, MessageStore
from store.services import StoreServices

log = logging.getLogger(__name__)
_READ_WRITE = PermName.PERM_READ | PermName.PERM_WRITE

REGISTER_TIMEOUT_S = 3.0
"""Upper bound of one REGISTER_BROKER call (connect + response)."""
UNREGISTER_TIMEOUT_S = 3.0
"""Upper bound of the whole UNREGISTER_BROKER round at shutdown."""
STATS_SAMPLE_S = 1.0
"""How often the message totals behind ``putTps`` are sampled (RocketMQ: every second)."""


class BrokerController:
    """Runs one broker; see the module docstring."""

    def __init__(self, config: BrokerConfig, *, host: str | None = None) -> None:
        self.config = config
        self.host = config.bind_address if host is None else host
        """The address to listen on: ``host``, else the config's ``bindAddress``."""
        self.port: int | None = None
        """The bound port once :meth:`run` has started."""
        self.store: MessageStore | None = None
        self.topics: TopicConfigManager | None = None
        self.offsets: ConsumerOffsetManager | None = None
        self.holds = PullHoldTable()
        """Parked long-polling pulls."""
        self.hold_check_interval_s = CHECK_INTERVAL_S
        """Safety-net re-check period of parked pulls (set before :meth:`run`)."""
        self.clients = ClientService(ClientManager(config.channel_expired_timeout_ms))
        """Producer and consumer groups seen in heartbeats."""
        self.clients.on_consumer_group = self._consumer_group_seen
        self.consumer_filters = ConsumerFilterManager() if config.enable_property_filter else None
        """Compiled SQL92 subscriptions (None: ``enablePropertyFilter`` off)."""
        if self.consumer_filters is not None:
            self.clients.on_group_vanished = self.consumer_filters.unregister_group
        self.groups: SubscriptionGroupManager | None = None
        self.schedule: ScheduleMessageService | None = None
        self.consumer_calls: ConsumerCallProcessor | None = None
        """The admin calls forwarded to consumers (its ``call_timeout_s`` bounds each)."""
        self.transactions: TransactionService | None = None
        """Half messages, END_TRANSACTION and the check service (set by :meth:`run`)."""
        self.locks: RebalanceLockManager[LockedQueue] = RebalanceLockManager()
        """Queue locks of orderly consumers (LOCK_BATCH_MQ / UNLOCK_BATCH_MQ)."""
        self._client: RemotingClient | None = None
        self.server_ssl_context: ssl.SSLContext | None = None
        """TLS of the listening port (``tls.server.*``; None: plain TCP), set by :meth:`run`."""
        self.namesrv_ssl_context: ssl.SSLContext | None = None
        """TLS of the connections to the name servers (``tls.enable``; None: plain TCP)."""
        self._net: trio.Nursery | None = None
        self.server: RemotingServer | None = None
        """The request server while the broker runs (its open connections: ``channels``)."""
        self.busy_poll: BusyPoll | None = None
        """The remoting server's busy poller (set by :meth:`run`; see ``busyPollMicros``)."""
        self.services: StoreServices | None = None
        """The store's background services (set by :meth:`run`)."""
        self.metrics = BrokerMetrics(self) if config.metrics_port else None
        """Prometheus metrics, served on ``metricsPort`` (None when it is unset or 0)."""
        self.stats = StoreStats()
        """Samples behind ``putTps`` / ``getTransferedTps`` (:mod:`broker.stats`)."""
        self.broker_stats = BrokerStatsManager()
        """Per-topic and per-group message counts (:mod:`broker.broker_stats`)."""
        self.trio_tasks: int | None = None
        """Live trio tasks at the last count (``minimq_trio_tasks``; counted only with
        metrics on, by :meth:`stats_loop`)."""
        self.send_processor: SendProcessor | None = None
        """The send handlers' processor while the broker serves."""
        self.acl = AclService(config.acl_file()) if config.acl_enable else None
        """The accounts and the request check with ``aclEnable`` (None without)."""
        self.acl_watch_interval_s = WATCH_INTERVAL_S
        """How often the accounts file is checked for changes (set before :meth:`run`)."""
        self.tls_watch_interval_s = DEFAULT_WATCH_INTERVAL_S
        """How often the TLS files are checked for changes (set before :meth:`run`)."""
        self.tls_reloader: ServerTlsReloader | None = None
        """Reloads the listening port's certificate while the broker serves with TLS."""

    def _use_server_ssl_context(self, context: ssl.SSLContext) -> None:
        """Make a reloaded certificate's context the one new connections are accepted with."""
        self.server_ssl_context = context
        if self.server is not None:
            self.server.use_ssl_context(context)

    def _identity(self) -> tuple[str, str, str]:
        """``(brokerName, broker address, brokerClusterName)`` (GET_BROKER_CLUSTER_ACL_INFO)."""
        return self.config.broker_name, self.broker_addr, self.config.broker_cluster_name

    @property
    def broker_addr(self) -> str:
        """``brokerIP1:<advertised port>``: ``advertisedPort`` when set, else the bound port
        (the configured ``listenPort`` before :meth:`run` binds)."""
        return f"{self.config.broker_ip1}:{self.config.advertised(self.port)}"

    async def run(self, *, task_status: trio.TaskStatus[int] = trio.TASK_STATUS_IGNORED) -> None:
        """Serve until cancelled; ``task_status.started`` gets the bound port."""
        # TLS files are checked before the store opens (TlsSetupError, an OSError, names them);
        # they are watched from before they are read, so no change is missed
        if self.config.tls_server.enabled:
            self.tls_reloader = ServerTlsReloader(
                self.config.tls_server, self._use_server_ssl_context
            )
        self.server_ssl_context = server_ssl_context(self.config.tls_server)
        self.namesrv_ssl_context = client_ssl_context(self.config.tls_client)
        store = MessageStore(self.config.store_config())
        # the topics first: the store knows each topic's queue type before it recovers
        topics = TopicConfigManager(
            store.config.config_dir,
            self.config.default_topic_queue_nums,
            self.config.auto_create_topic_enable,
        )
        topics.on_queue_type = store.set_queue_type
        topics.announce_queue_types()
        await trio.to_thread.run_sync(store.open)
        self.store = store
        try:
            config_dir = store.config.config_dir
            self.topics = topics
            self.topics.next_version()  # this run's registrations are newer than the last's
            self.offsets = ConsumerOffsetManager(config_dir)
            self.groups = SubscriptionGroupManager(
                config_dir, auto_create=self.config.auto_create_subscription_group
            )
            services = self.services = StoreServices(store)
            self.schedule = ScheduleMessageService(
                store,
                services,
                self.config.delay_levels_ms,
                config_dir,
                flush_interval_ms=self.config.flush_delay_offset_interval_ms,
            )
            self.transactions = TransactionService(
                store,
                services,
                self.offsets,
                self.clients.manager,
                timeout_ms=self.config.transaction_timeout_ms,
                check_max=self.config.transaction_check_max,
                check_interval_ms=self.config.transaction_check_interval_ms,
                transform=self.schedule.transform,
            )
            async with trio.open_nursery() as store_nursery:
                store_scope: trio.CancelScope = await store_nursery.start(_run_shielded, services)
                try:
                    await self._serve(services, task_status)
                finally:
                    store_scope.cancel()
        finally:
            with trio.CancelScope(shield=True):
                await trio.to_thread.run_sync(self._close_sync)
            log.info("broker %s stopped", self.config.broker_name)

    def _close_sync(self) -> None:
        """Persist offsets (if loaded) and close the store; runs in a worker thread. A file
        that cannot be written (a full disk) is logged by name and the rest still runs: the
        store closes, and the broker still exits 0 (it served; nothing failed to start)."""
        if self.offsets is not None:
            self._persist_on_close("consumer offsets", self.offsets.persist_if_dirty)
        schedule = self.schedule
        if schedule is not None and schedule.dirty:
            self._persist_on_close("delay offsets", schedule.persist)
        assert self.store is not None
        self.store.close()

    @staticmethod
    def _persist_on_close(what: str, persist: Callable[[], object]) -> None:
        try:
            persist()
        except OSError as exc:
            log.error("%s not persisted on shutdown (the last saved ones stay): %s", what, exc)

    async def _serve(self, services: StoreServices, task_status: trio.TaskStatus[int]) -> None:
        """The net nursery; unregisters from the name servers when it ends."""
        assert self.store is not None
        assert self.topics is not None
        assert self.offsets is not None
        assert self.groups is not None
        assert self.schedule is not None
        assert self.transactions is not None
        schedule = self.schedule
        send_back = SendBackProcessor(
            self.store,
            services,
            self.topics,
            self.groups,
            self.config,
            schedule.transform,
            self.register_now,
            stats=self.broker_stats,
        )
        admin = AdminProcessor(
            self.store,
            self.topics,
            self.config,
            self.register_now,
            rates=self._rates,
            flow=self._flow_figures,
            offsets=self.offsets,
            on_topic_deleted=self._topic_deleted,
        )
        self.send_processor = SendProcessor(
            self.store,
            services,
            self.topics,
            self.config,
            self.register_now,
            _send_transform(schedule),
            self.groups,
            stats=self.broker_stats,
        )
        self.consumer_calls = ConsumerCallProcessor(
            self.store, self.clients, self.config.broker_name
        )
        handlers = {
            **self.send_processor.handlers(),
            **make_pull_handlers(
                self.store,
                self.offsets,
                self.topics,
                self.holds,
                long_polling=self.config.long_polling_enable,
                short_polling_ms=self.config.short_polling_time_ms,
                check_interval_s=self.hold_check_interval_s,
                groups=self.groups,
                broker_config=self.config,
                stats=self.broker_stats,
                consumer_filters=self.consumer_filters,
            ),
            **self.clients.handlers(),
            **admin.handlers(),
            **AdminStatsProcessor(
                self.store,
                self.topics,
                self.offsets,
                self.groups,
                self.clients,
                self.config,
                on_permission_changed=self._permission_changed,
                broker_stats=self.broker_stats,
            ).handlers(),
            **send_back.handlers(),
            **GroupAdminProcessor(
                self.groups,
                self.broker_stats.on_group_deleted,
                offsets=self.offsets,
            ).handlers(),
            **LockProcessor(self.locks).handlers(),
            **schedule.handlers(),
            **EndTransactionProcessor(self.transactions).handlers(),
            **self.consumer_calls.handlers(),
            **ConsumeQueueQueryProcessor(self.store, self.topics, self.clients).handlers(),
            **AclAdminProcessor(self.acl, self._identity).handlers(),
        }
        if self.acl is not None:
            handlers = guard_handlers(
                handlers, self.acl.validator, lookups=stored_message_lookups(self.store)
            )
        server = self.server = RemotingServer(
            handlers,
            host=self.host,
            port=self.config.listen_port,
            on_close=self.clients.channel_closed,
            idle_timeout_s=self.config.server_channel_max_idle_time_seconds,
            frame_read_timeout_s=self.config.server_frame_read_timeout_seconds,
            busy_poll_s=self.config.busy_poll_us / 1e6,
            max_connections=self.config.server_max_connections or None,
            max_connections_per_ip=self.config.server_max_connections_per_ip,
            max_pending=self.config.server_max_pending_requests,
            max_pending_per_connection=self.config.server_max_pending_requests_per_connection,
            ssl_context=self.server_ssl_context,
        )
        self.busy_poll = server.busy_poll
        previous_listener = self.store.arrival_listener
        self.store.arrival_listener = _chain(
            _chain(previous_listener, self.holds.notify), schedule.notify
        )
        registering = False
        async with RemotingClient(
            default_timeout_s=REGISTER_TIMEOUT_S,
            rpc_hook=self._signer(),
            ssl_context=self.namesrv_ssl_context,
        ) as client:
            self._client = client
            try:
                async with trio.open_nursery() as net:
                    self._net = net
                    self.port = await net.start(server.run)
                    # no await before this: no request is handled with the wrong address
                    self.store.set_store_host(
                        self.config.broker_ip1, self.config.advertised(self.port)
                    )
                    if self.metrics is not None:  # every port bound before the name servers
                        await net.start(self.metrics.serve, self.host, self.config.metrics_port)
                    registering = True
                    await self.register_all(client)
                    net.start_soon(self.register_loop, client)
                    net.start_soon(self.persist_loop)
                    net.start_soon(self.stats_loop)
                    net.start_soon(self.clients.scan_loop)
                    net.start_soon(self.clients.notify_loop)
                    if self.acl is not None:
                        net.start_soon(self.acl.watch, self.acl_watch_interval_s)
                    if self.tls_reloader is not None:
                        net.start_soon(self.tls_reloader.watch, self.tls_watch_interval_s)
                    await net.start(schedule.run)
                    await net.start(self.transactions.run)
                    log.info(
                        "broker %s serving on port %d as %s",
                        self.config.broker_name,
                        self.port,
                        self.broker_addr,
                    )
                    task_status.started(self.port)
            finally:
                self._client = None
                self._net = None
                self.store.arrival_listener = previous_listener
                if registering:
                    await self.unregister_all()

    def _topic_deleted(self, topic: str) -> None:
        """DELETE_TOPIC_IN_BROKER hook: drop what the send path and the metrics keep per topic
        (RocketMQ's ``BrokerStatsManager.onTopicDeleted``)."""
        if self.send_processor is not None:
            self.send_processor.forget_topic(topic)
        self.broker_stats.on_topic_deleted(topic)

    async def _consumer_group_seen(self, consumer: ConsumerData) -> None:
        """Heartbeat hook: the group's SQL92 subscriptions are compiled (with
        ``enablePropertyFilter``), and its config and retry topic exist afterwards (when
        allowed).

        A retry topic that cannot be written (a full disk) is logged and left to the next
        heartbeat or send-back: the consumer still joins its group and reads, as in RocketMQ,
        whose ``TopicConfigManager#persist`` logs the failure."""
        if self.consumer_filters is not None:
            self.consumer_filters.register_group(consumer.group_name, consumer.subscriptions)
        if self.groups is None or self.topics is None:
            return
        config = self.groups.find(consumer.group_name)
        if config is None or config.retry_queue_nums <= 0:
            return
        topic = retry_topic(consumer.group_name)
        try:
            _, created = create_topic_in_send_back(
                self.topics, topic, config.retry_queue_nums, RETRY_PERM
            )
        except OSError as exc:
            log.warning("retry topic %s not created yet (%s); the next heartbeat tries", topic, exc)
            return
        if created:
            log.info("created retry topic %s", topic)
            await self.register_now()

    def _flow_figures(self) -> dict[str, str]:
        """Flow control, for GET_BROKER_RUNTIME_INFO (minimq's keys)."""
        server = self.server
        if server is None:
            return {}
        limit = server.pending_limit
        return {
            "pendingRequests": str(limit.pending),
            "pendingRequestsLimit": f"{limit.total} ({limit.per_connection} a connection)",
            "rejectedBusyRequests": str(limit.rejected),
            "connections": f"{len(server.channels)} of {server.max_connections}",
            "refusedConnections": str(server.refused),
            "refusedConnectionsPerIp": str(server.refused_per_ip),
        }

    # ------------------------------------------------------------------ name servers

    def _signer(self) -> RequestSigner | None:
        """Signs the broker's requests to the name servers with ``accessKey`` / ``secretKey``
        (None when unset)."""
        if not self.config.access_key:
            return None
        return RequestSigner(SessionCredentials(self.config.access_key, self.config.secret_key))

    def _header(self) -> dict[str, ExtValue]:
        return {
            "brokerName": self.config.broker_name,
            "brokerAddr": self.broker_addr,
            "clusterName": self.config.broker_cluster_name,
            "brokerId": str(self.config.registered_broker_id),
        }

    async def register_all(self, client: RemotingClient) -> None:
        """One REGISTER_BROKER round to every name server, concurrently; failures are logged."""
        await self._register_round(client, self._register_body(), trio.Event())

    def _register_body(self) -> bytes:
        """The REGISTER_BROKER body: the topic table as it is now, with its data version."""
        assert self.topics is not None
        return encode_register_body(
            self._advertised_topics(), data_version=self.topics.current_version()
        )

    async def _register_round(self, client: RemotingClient, body: bytes, taken: trio.Event) -> None:
        """REGISTER_BROKER with ``body`` to every name server, concurrently (each call bounded
        by ``REGISTER_TIMEOUT_S``); ``taken`` is set once one name server has accepted it, or
        every one has failed, and when the round ends however it ends."""
        header = {**self._header(), "haServerAddr": ""}
        addrs = self.config.namesrv_addrs
        left = len(addrs)

        async def register_with(addr: str) -> None:
            nonlocal left
            cmd = RemotingCommand.request(RequestCode.REGISTER_BROKER, header, body, opaque=0)
            accepted = await _call_logged(client, addr, cmd, "register")
            left -= 1
            if accepted or left == 0:
                taken.set()

        try:
            async with trio.open_nursery() as nursery:
                for addr in addrs:
                    nursery.start_soon(register_with, addr)
        finally:
            taken.set()

    def _advertised_topics(self) -> dict[str, TopicConfig]:
        """The topic table as routed: each topic's perm within ``brokerPermission`` (a broker
        drained with ``updateBrokerConfig -k brokerPermission -v 4`` takes no new sends)."""
        assert self.topics is not None
        table = self.topics.topics()
        mask = self.config.broker_permission
        if mask & _READ_WRITE == _READ_WRITE:
            return table
        return {name: dataclasses.replace(c, perm=c.perm & mask) for name, c in table.items()}

    async def register_now(self) -> None:
        """One registration round now (after a topic change); no-op when not serving.

        It returns once one name server has accepted the registration (or every one has
        failed); the others are left to finish in the background, each within
        ``REGISTER_TIMEOUT_S``. So the route exists when the request that changed a topic is
        answered, and a hung name server does not hold that request up past the client's
        timeout (a send to a new topic, the first heartbeat of a group, updateTopic).
        """
        client, net = self._client, self._net
        if client is None or net is None:
            return
        taken = trio.Event()
        net.start_soon(self._register_round, client, self._register_body(), taken)
        await taken.wait()

    async def _permission_changed(self) -> None:
        """``brokerPermission`` changed the advertised perms: a new data version (as RocketMQ's
        ``updateBrokerConfig``) so the name servers take it over the older registrations."""
        assert self.topics is not None
        self.topics.next_version()
        await self.register_now()

    async def unregister_all(self) -> None:
        """One UNREGISTER_BROKER round to every name server: shielded, bounded, concurrent.

        It uses a fresh client opened inside the shield: the serving client's reader tasks
        are already cancelled when this runs, so they could not receive the responses.
        """
        with trio.move_on_after(UNREGISTER_TIMEOUT_S, shield=True):
            async with RemotingClient(
                default_timeout_s=UNREGISTER_TIMEOUT_S,
                rpc_hook=self._signer(),
                ssl_context=self.namesrv_ssl_context,
            ) as client:
                await self._unregister_round(client)

    async def _unregister_round(self, client: RemotingClient) -> None:
        async with trio.open_nursery() as nursery:
            for addr in self.config.namesrv_addrs:
                cmd = RemotingCommand.request(
                    RequestCode.UNREGISTER_BROKER, self._header(), opaque=0
                )
                nursery.start_soon(_call_logged, client, addr, cmd, "unregister")

    async def register_loop(self, client: RemotingClient) -> None:
        """Re-register every ``registerNameServerPeriod`` ms; never returns.

        The period is read again at least every second, so a shorter one set at runtime
        (``updateBrokerConfig``) applies without waiting out the longer one."""
        last = trio.current_time()
        while True:
            due = last + self.config.register_name_server_period_ms / 1000
            now = trio.current_time()
            if now < due:
                await trio.sleep(min(due - now, 1.0))
                continue
            await self.register_all(client)
            last = trio.current_time()

    def _totals(self) -> Totals:
        assert self.store is not None
        store = self.store
        return Totals(trio.current_time(), store.messages_put, store.messages_transferred)

    def _rates(self) -> dict[str, str]:
        """``putTps`` and ``getTransferedTps`` (see :mod:`broker.stats`)."""
        return self.stats.runtime_fields(self._totals())

    async def stats_loop(self) -> None:
        """Sample the store's totals every ``STATS_SAMPLE_S`` (see :mod:`broker.stats`); with
        metrics on, count the trio tasks at once and then every ``TASK_COUNT_INTERVAL_S``. Tick
        :attr:`broker_stats` too (it samples when a window's interval has passed)."""
        next_count = trio.current_time()
        while True:
            self.stats.sample(self._totals())
            self.broker_stats.tick(trio.current_time())
            if self.metrics is not None and trio.current_time() >= next_count:
                self.trio_tasks = count_trio_tasks()  # on the loop: its task tree holds still
                next_count = trio.current_time() + TASK_COUNT_INTERVAL_S
            await trio.sleep(STATS_SAMPLE_S)

    async def persist_loop(self) -> None:
        """Persist changed consumer offsets every ``flushConsumerOffsetInterval`` ms."""
        assert self.offsets is not None
        while True:
            await trio.sleep(self.config.flush_consumer_offset_interval_ms / 1000)
            doc = self.offsets.take_dirty_snapshot()  # on the event loop: a consistent copy
            if doc is None:
                continue
            try:  # the fsyncs run in a worker thread, never on the event loop
                await trio.to_thread.run_sync(self.offsets.write_snapshot, doc)
            except OSError:
                self.offsets.dirty = True
                log.exception("persisting consumer offsets failed; retrying next period")


async def _run_shielded(
    services: StoreServices, *, task_status: trio.TaskStatus[trio.CancelScope]
) -> None:
    """Run ``services`` in a shielded scope; ``started`` hands that scope to the caller."""
    with trio.CancelScope(shield=True) as scope:
        async with trio.open_nursery() as nursery:
            await nursery.start(services.run)
            task_status.started(scope)


def _send_transform(schedule: ScheduleMessageService) -> Callable[[MessageRecord], None]:
    """The send path's hook: delay levels (never for prepared messages), then half messages."""

    def transform(msg: MessageRecord) -> None:
        schedule.transform(msg)
        to_half_message(msg)

    return transform


def _chain(first: ArrivalListener | None, second: ArrivalListener) -> ArrivalListener:
    """A listener calling ``first`` (if any) then ``second``."""
    if first is None:
        return second

    def both(topic: str, queue_id: int, next_offset: int) -> None:
        first(topic, queue_id, next_offset)
        second(topic, queue_id, next_offset)

    return both


async def _call_logged(client: RemotingClient, addr: str, cmd: RemotingCommand, what: str) -> bool:
    """Invoke ``cmd`` on ``addr``; log (never raise) a failure or a non-SUCCESS answer. True
    when the name server answered SUCCESS."""
    try:
        resp = await client.invoke(addr, cmd)
    except (RemotingError, OSError) as exc:
        log.warning("%s with name server %s failed: %s", what, addr, exc)
        return False
    if resp.code != ResponseCode.SUCCESS:
        log.warning("%s with name server %s: code %s %s", what, addr, resp.code, resp.remark)
        return False
    return True
