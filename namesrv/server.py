"""The name server's trio shell (RocketMQ's ``NamesrvController``).

``NameServer.run`` is a task tree::

    run                    one nursery; task_status.started(bound port)
    ├─ RemotingServer.run  serves the NamesrvProcessor handlers on bindAddress:listenPort
    ├─ acl.watch           with aclEnable: reloads the accounts file when it changes
    ├─ tls.watch           with tls.server.mode=enforcing: reloads the certificate when its
    │                      files change (every 5 s; see remoting.tls.ServerTlsReloader)
    └─ expire_loop         every scanNotActiveBrokerInterval: drop brokers silent for longer
                           than brokerChannelExpiredTime (RocketMQ's scanNotActiveBroker);
                           both read afresh each round (UPDATE_NAMESRV_CONFIG changes them)

Rules:

- One clock, :func:`trio_now_ms` (``trio.current_time()`` in ms), stamps registrations and drives
  expiry, so tests can run both under trio's ``MockClock`` / ``autojump_clock``. It is not wall
  time; the name server only ever compares two readings of it.
- Every route table call happens on the trio thread, so :class:`RouteInfoManager` needs no lock.
- Cancelling :meth:`NameServer.run` stops the server (see :mod:`remoting.server`) and the loop.
- The KV config (:class:`~namesrv.kv_config.KVConfigManager`) is loaded from ``kvConfigPath``
  when the :class:`NameServer` is built (ValueError when the file and its backup are corrupt).
- An accepted UPDATE_NAMESRV_CONFIG is saved to ``configStorePath`` before it takes effect
  (RocketMQ's ``Configuration#update`` then ``#persist``): the whole config as ``key=value``
  lines, written atomically (:func:`common.json_store.write_file_atomic`, the previous file
  kept as ``.bak``). What is saved is ``file_config`` (the config as read at start, before
  command-line overrides) with the runtime keys changed (:func:`namesrv.config.stored_config`).
  When the file cannot be written the update raises :class:`OSError` and nothing changes
  (RocketMQ logs the failure and keeps the change in memory only, lost at restart).
- With ``aclEnable`` the accounts file is loaded when the :class:`NameServer` is built (a
  missing or malformed file raises ValueError) and the handlers of
  :data:`~remoting.acl.resource.ADMIN_CODES` (REGISTER_BROKER, UNREGISTER_BROKER, config, KV
  and topic writes) run the ACL check first: they need an admin account's signed request.
  Route and config queries stay open, as clients read routes before anything else.
- With ``tls.server.mode=enforcing`` the certificate, key (and CA bundle when client
  certificates are checked) are watched as RocketMQ's ``NamesrvController`` does with its
  ``FileWatchService``: on a change the SSL context is rebuilt and new connections use it;
  open ones keep theirs; files that do not load are logged and the old context stays.
- As in RocketMQ, the name server never reads ``configStorePath`` itself: ``mqnamesrv -c FILE``
  makes FILE the ``configStorePath`` (RocketMQ's ``NamesrvStartup``), so a restart with the
  same ``-c`` reads the saved updates back, with the command line still overriding them.
"""

from __future__ import annotations

import logging
import ssl
from collections.abc import Callable
from pathlib import Path

import trio

from common.file_watch import DEFAULT_WATCH_INTERVAL_S
from common.json_store import write_file_atomic
from namesrv.config import NamesrvConfig, stored_config
from namesrv.kv_config import KVConfigManager
from namesrv.processor import NamesrvProcessor
from namesrv.route_info import RouteInfoManager
from remoting.acl.guard import guard_handlers
from remoting.acl.resource import ADMIN_CODES
from remoting.acl.service import WATCH_INTERVAL_S, AclService
from remoting.server import RemotingServer
from remoting.tls import ServerTlsReloader, server_ssl_context

log = logging.getLogger(__name__)


def trio_now_ms() -> int:
    """``trio.current_time()`` in whole milliseconds."""
    return int(trio.current_time() * 1000)


async def expire_loop(
    route_info: RouteInfoManager,
    interval_ms: int | Callable[[], int],
    now_ms: Callable[[], int] = trio_now_ms,
) -> None:
    """Every ``interval_ms`` (a number, or a function read before each wait), expire silent
    brokers and log each one dropped; never returns."""
    interval = interval_ms if callable(interval_ms) else lambda: interval_ms
    while True:
        await trio.sleep(interval() / 1000)
        for addr in route_info.expire_brokers(now_ms()):
            log.warning(
                "broker %s expired: no registration for more than %d ms; removed from routes",
                addr,
                route_info.broker_channel_expired_time_ms,
            )


class NameServer:
    """Routing tables served over the remoting protocol; see the module docstring."""

    def __init__(self, config: NamesrvConfig, *, file_config: NamesrvConfig | None = None) -> None:
        self.config = config
        """The effective config; UPDATE_NAMESRV_CONFIG replaces it (:meth:`apply_config`)."""
        self.file_config = file_config if file_config is not None else config
        """The config as read at start, before command-line overrides: the base of what an
        update saves to ``configStorePath``."""
        self.route_info = RouteInfoManager(config.broker_channel_expired_time_ms)
        self.kv_config = KVConfigManager(config.kv_config_path)
        self.kv_config.load()
        self.processor = NamesrvProcessor(
            self.route_info,
            trio_now_ms,
            kv_config=self.kv_config,
            config=lambda: self.config,
            apply_config=self.apply_config,
        )
        self.port: int | None = None
        """The bound port once :meth:`run` has started."""
        self.acl = AclService(config.acl_file()) if config.acl_enable else None
        """The accounts and the request check with ``aclEnable`` (None without)."""
        self.acl_watch_interval_s = WATCH_INTERVAL_S
        """How often the accounts file is checked for changes (set before :meth:`run`)."""
        self.tls_watch_interval_s = DEFAULT_WATCH_INTERVAL_S
        """How often the TLS files are checked for changes (set before :meth:`run`)."""
        self.tls_reloader: ServerTlsReloader | None = None
        """Reloads the certificate while the server runs with TLS (None without)."""
        self._server: RemotingServer | None = None

    def apply_config(self, config: NamesrvConfig) -> None:
        """Save ``config`` (changed only in its runtime keys) to ``configStorePath``, then make
        it the effective one; OSError (nothing changed) when it cannot be saved."""
        stored = stored_config(self.file_config, config)
        path = Path(self.config.config_store_path).expanduser()
        write_file_atomic(path, stored.to_stored_properties().encode("utf-8"))
        log.info("namesrv config saved to %s", path)
        self.file_config = stored
        self.config = config
        self.route_info.broker_channel_expired_time_ms = config.broker_channel_expired_time_ms

    def _use_ssl_context(self, context: ssl.SSLContext) -> None:
        """Make a reloaded certificate's context the one new connections are accepted with."""
        if self._server is not None:
            self._server.use_ssl_context(context)

    async def run(self, *, task_status: trio.TaskStatus[int] = trio.TASK_STATUS_IGNORED) -> None:
        """Serve until cancelled; ``task_status.started`` gets the bound port."""
        tls = self.config.tls_server
        if tls.enabled:  # watched from before the files are read: no change is missed
            self.tls_reloader = ServerTlsReloader(tls, self._use_ssl_context)
        handlers = self.processor.handlers()
        if self.acl is not None:
            handlers = guard_handlers(handlers, self.acl.validator, codes=ADMIN_CODES)
        server = self._server = RemotingServer(
            handlers,
            host=self.config.bind_address,
            port=self.config.listen_port,
            idle_timeout_s=self.config.server_channel_max_idle_time_seconds,
            frame_read_timeout_s=self.config.server_frame_read_timeout_seconds,
            max_connections=self.config.server_max_connections or None,
            max_connections_per_ip=self.config.server_max_connections_per_ip,
            on_close=self.processor.channel_closed,
            ssl_context=server_ssl_context(tls),
        )
        async with trio.open_nursery() as nursery:
            port: int = await nursery.start(server.run)
            self.port = port
            if self.acl is not None:
                nursery.start_soon(self.acl.watch, self.acl_watch_interval_s)
            if self.tls_reloader is not None:
                nursery.start_soon(self.tls_reloader.watch, self.tls_watch_interval_s)
            nursery.start_soon(
                expire_loop, self.route_info, lambda: self.config.scan_not_active_broker_interval_ms
            )
            log.info("name server listening on %s:%d", self.config.bind_address, port)
            task_status.started(port)
