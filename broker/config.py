"""BrokerConfig: the broker's knobs, with RocketMQ's property names and defaults.

Rules:

- Broker fields are snake_case; each carries its RocketMQ camelCase key in ``metadata["key"]``
  (``brokerName``, ``listenPort``, ...) and its value type in ``metadata["type"]``.
- Store settings use :class:`store.config.StoreConfig`'s field names; their keys are derived
  from those names (``mapped_file_size_commit_log`` -> ``mappedFileSizeCommitLog``), with the few
  irregular RocketMQ spellings in ``_STORE_KEY_EXCEPTIONS``. Settings given explicitly are kept in
  ``store_settings``; :meth:`BrokerConfig.store_config` builds the ``StoreConfig``.
- ``.properties`` files are read with :func:`common.properties.load_properties`;
  :meth:`BrokerConfig.to_properties` escapes what it writes, so its output reads back.
- Settings, lowest first (:meth:`BrokerConfig.load`): defaults, of which ``NAMESRV_ADDR`` and
  ``MINIMQ_BUSY_POLL_US`` set ``namesrvAddr`` and ``busyPollMicros`` (as RocketMQ's
  ``NAMESRV_ADDR``); the ``-c`` file; ``-n``; ``--<key>`` overrides.
- Unknown keys and bad values raise :class:`ValueError` naming the key and the value, one check
  per key. Optional values (``namesrvAddr``, ``metricsPort``) are written as an empty string
  when unset.
- RocketMQ's clamps: the disk ratios (:data:`store.config.DISK_RATIO_BOUNDS`) are clamped,
  ``mappedFileSizeConsumeQueue`` is rounded up to a multiple of 20 (its unit), and
  :meth:`BrokerConfig.clamped_settings` says which; ``registerNameServerPeriod`` must be in
  [:data:`MIN_REGISTER_PERIOD_MS`, :data:`MAX_REGISTER_PERIOD_MS`].
- ``brokerRole`` is accepted for RocketMQ's stock ``broker.conf``: only ``ASYNC_MASTER``, what
  every minimq broker is (there is no replication).
- RocketMQ keys of its sample ``broker.conf`` files that minimq has no use for are accepted so
  that such a file starts a broker (:data:`NO_EFFECT_KEYS`, with a startup warning naming each,
  see :meth:`BrokerConfig.compat_warnings`); the path keys RocketMQ derives from
  ``storePathRootDir`` (:data:`DERIVED_PATH_KEYS`) are accepted when they name minimq's path
  (``storePathCommitLog`` elsewhere is refused, the others are warned about, as RocketMQ
  ignores them); ``enableDLegerCommitLog`` / ``enableControllerMode`` are accepted only when
  false. Any other unknown key is refused, naming the closest known key.
- TLS keys (RocketMQ's ``tls.server.*`` for the listening port, ``tls.enable`` and
  ``tls.client.*`` for the broker's own connections to the name servers; see
  :mod:`remoting.tls_config`) are read like the others, and ``tls.config.file`` names a
  ``tls.properties`` file whose keys apply where none is given directly.
"""

from __future__ import annotations

import dataclasses
import difflib
import ipaddress
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from broker.long_polling import MAX_SUSPEND_MS, SHORT_POLLING_MS
from common.digits import parse_uint
from common.net import primary_ipv4
from common.properties import convert_value, format_entry, load_properties
from common.route import MASTER_ID, MAX_QUEUE_NUMS, PermName
from remoting.acl.config import PLAIN_ACL_FILE
from remoting.busy_poll import default_window_us
from remoting.flow_control import DEFAULT_MAX_PENDING, DEFAULT_MAX_PENDING_PER_CONNECTION
from remoting.server import (
    DEFAULT_FRAME_READ_TIMEOUT_S,
    DEFAULT_IDLE_TIMEOUT_S,
    DEFAULT_MAX_CONNECTIONS_PER_IP,
)
from remoting.tls import with_tls_config_file
from remoting.tls_config import (
    ClientTlsConfig,
    ServerTlsConfig,
    parse_client_tls,
    parse_server_tls,
    split_tls_properties,
)
from store.config import (
    DISK_RATIO_BOUNDS,
    StoreConfig,
    effective_consume_queue_file_size,
    effective_disk_ratio,
)

HIDDEN_SECRET: Final = "******"
"""What GET_BROKER_CONFIG shows for a set ``secretKey``."""
MAX_REGISTER_PERIOD_MS: Final = 60_000
"""RocketMQ's upper clamp of ``registerNameServerPeriod``: well inside the name servers' 120 s."""
MIN_REGISTER_PERIOD_MS: Final = 100
"""Smallest ``registerNameServerPeriod``: below it a broker re-registers without pause.
RocketMQ clamps to 10000; the tests' brokers register every 200-300 ms to see routes soon."""
NAMESRV_ADDR_ENV: Final = "NAMESRV_ADDR"
"""Environment variable holding the default ``namesrvAddr`` (RocketMQ's)."""
BROKER_ROLE: Final = "ASYNC_MASTER"
"""The only ``brokerRole``: a master whose writes are not replicated."""
_REPLICATED_ROLES = frozenset({"SYNC_MASTER", "SLAVE"})

_NO_REPLICATION = "minimq brokers have no replication"
_ONE_LOOP = "minimq's broker serves every request on one event loop, without thread pools"
NO_EFFECT_KEYS: Final = {
    "sendMessageThreadPoolNums": _ONE_LOOP,
    "pullMessageThreadPoolNums": _ONE_LOOP,
    "flushCommitLogLeastPages": "minimq flushes all it wrote every flushIntervalCommitLog",
    "flushCommitLogThoroughInterval": "minimq flushes all it wrote every flushIntervalCommitLog",
    "flushConsumeQueueLeastPages": "minimq flushes all it wrote every flushIntervalConsumeQueue",
    "flushConsumeQueueThoroughInterval": (
        "minimq flushes all it wrote every flushIntervalConsumeQueue"
    ),
    "brokerIP2": f"{_NO_REPLICATION} (it is the address slaves replicate from)",
    "haListenPort": f"{_NO_REPLICATION} (it is the port slaves replicate from)",
}
"""RocketMQ keys, common in its sample ``broker.conf`` files, for behaviour minimq lacks and
whose absence loses nothing -> why: accepted (any value), each logged as a warning at start."""
DERIVED_PATH_KEYS: Final = {
    "storePathCommitLog": "commitlog_dir",
    "storePathConsumeQueue": "consume_queue_dir",
    "storePathIndex": "index_dir",
    "storeCheckpoint": "checkpoint_path",
    "abortFile": "abort_path",
}
"""RocketMQ path keys -> the :class:`StoreConfig` property of the path minimq uses, always
under ``storePathRootDir``. RocketMQ honours only ``storePathCommitLog`` (the others are
derived from ``storePathRootDir`` whatever a file says)."""
REPLICATION_SWITCHES: Final = ("enableDLegerCommitLog", "enableControllerMode")
"""RocketMQ switches of replicated modes: accepted when false, refused when true."""
_COMPAT_KEYS = frozenset(NO_EFFECT_KEYS) | frozenset(DERIVED_PATH_KEYS) | set(REPLICATION_SWITCHES)

_NO_STORE_KEY = frozenset({"store_host"})
"""StoreConfig fields not settable by key (``store_host``: ``brokerIP1``, advertised port)."""

_STORE_KEY_EXCEPTIONS = {
    "check_crc_on_recover": "checkCRCOnRecover",
    "enabled_append_prop_crc": "enabledAppendPropCRC",
}


DEFAULT_MESSAGE_DELAY_LEVEL = "1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h"
"""RocketMQ's ``messageDelayLevel``: delay levels 1..18."""
_DELAY_UNITS_MS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}
_DELAY_LEVEL = re.compile(r"^(\d+)(ms|s|m|h|d)$")


def parse_delay_levels(text: str) -> tuple[int, ...]:
    """Parse ``messageDelayLevel`` ("1s 5s 2m 1h ...", units ms/s/m/h/d) into milliseconds.

    ValueError (naming the key) when empty or when a level is not ``<positive int><unit>``.
    """
    out = []
    for token in text.split():
        match = _DELAY_LEVEL.fullmatch(token)
        if match is None or int(match[1]) <= 0:
            raise ValueError(f"messageDelayLevel: bad level {token!r} (expected e.g. 5s, 2m)")
        out.append(int(match[1]) * _DELAY_UNITS_MS[match[2]])
    if not out:
        raise ValueError("messageDelayLevel must name at least one level")
    return tuple(out)


def parse_namesrv_addrs(text: str, source: str = "namesrvAddr") -> list[str]:
    """The ``host:port`` addresses of ``text`` (``;``-separated, blanks skipped).

    ValueError naming ``source`` (the key, or ``NAMESRV_ADDR``) and the bad address.
    """
    out = []
    for part in text.split(";"):
        addr = part.strip()
        if not addr:
            continue
        host, sep, port = addr.rpartition(":")
        if not sep or not host or not 0 < (parse_uint(port, max_digits=5) or 0) <= 65535:
            raise ValueError(f"{source}: expected host:port, got {addr!r}")
        out.append(addr)
    return out


def _meta(key: str, kind: type) -> dict[str, Any]:
    return {"key": key, "type": kind}


def _camel(name: str) -> str:
    if name in _STORE_KEY_EXCEPTIONS:
        return _STORE_KEY_EXCEPTIONS[name]
    head, *rest = name.split("_")
    return head + "".join(part[:1].upper() + part[1:] for part in rest)


_STORE_DEFAULTS = StoreConfig()
STORE_KEYS: dict[str, str] = {
    _camel(f.name): f.name for f in dataclasses.fields(StoreConfig) if f.name not in _NO_STORE_KEY
}
"""RocketMQ key -> StoreConfig field name, for every store setting."""


@dataclass(frozen=True, slots=True)
class BrokerConfig:
    """Broker settings (RocketMQ's ``BrokerConfig`` + ``NettyServerConfig`` port + store keys)."""

    broker_cluster_name: str = field(
        default="DefaultCluster", metadata=_meta("brokerClusterName", str)
    )
    broker_name: str = field(default="broker-a", metadata=_meta("brokerName", str))
    broker_id: int = field(default=0, metadata=_meta("brokerId", int))
    """The id given; the broker registers :attr:`registered_broker_id` (0) whatever it is."""
    broker_role: str = field(default=BROKER_ROLE, metadata=_meta("brokerRole", str))
    """RocketMQ's role; only ``ASYNC_MASTER`` (minimq brokers have no replication)."""
    listen_port: int = field(default=10911, metadata=_meta("listenPort", int))
    bind_address: str = field(default="0.0.0.0", metadata=_meta("bindAddress", str))
    """The address the broker (and its metrics endpoint) listens on."""
    namesrv_addr: str | None = field(default=None, metadata=_meta("namesrvAddr", str))
    broker_ip1: str = field(default_factory=primary_ipv4, metadata=_meta("brokerIP1", str))
    advertised_port: int = field(default=0, metadata=_meta("advertisedPort", int))
    """The port clients are told to use with ``brokerIP1`` (0: the port the broker listens on).
    Set it when a NAT, a proxy or a published container port stands between clients and the
    broker; the broker still listens on ``listenPort``."""
    broker_permission: int = field(
        default=PermName.PERM_READ | PermName.PERM_WRITE, metadata=_meta("brokerPermission", int)
    )
    auto_create_topic_enable: bool = field(
        default=True, metadata=_meta("autoCreateTopicEnable", bool)
    )
    default_topic_queue_nums: int = field(default=8, metadata=_meta("defaultTopicQueueNums", int))
    auto_create_subscription_group: bool = field(
        default=True, metadata=_meta("autoCreateSubscriptionGroup", bool)
    )
    flush_consumer_offset_interval_ms: int = field(
        default=5000, metadata=_meta("flushConsumerOffsetInterval", int)
    )
    register_name_server_period_ms: int = field(
        default=30_000, metadata=_meta("registerNameServerPeriod", int)
    )
    channel_expired_timeout_ms: int = field(
        default=120_000, metadata=_meta("channelExpiredTimeout", int)
    )
    long_polling_enable: bool = field(default=True, metadata=_meta("longPollingEnable", bool))
    enable_property_filter: bool = field(
        default=False, metadata=_meta("enablePropertyFilter", bool)
    )
    """Serve SQL92 subscriptions (RocketMQ's ``MessageSelector.bySql``): pulls keep the
    messages whose properties match the expression. Off: such pulls are refused."""
    short_polling_time_ms: int = field(
        default=SHORT_POLLING_MS, metadata=_meta("shortPollingTimeMills", int)
    )
    """With ``longPollingEnable=false``, how long an empty pull is held, whatever its suspend
    time (RocketMQ's short polling); at most :data:`broker.long_polling.MAX_SUSPEND_MS`."""
    message_delay_level: str = field(
        default=DEFAULT_MESSAGE_DELAY_LEVEL, metadata=_meta("messageDelayLevel", str)
    )
    flush_delay_offset_interval_ms: int = field(
        default=10_000, metadata=_meta("flushDelayOffsetInterval", int)
    )
    metrics_port: int | None = field(default=None, metadata=_meta("metricsPort", int))
    transaction_timeout_ms: int = field(default=6000, metadata=_meta("transactionTimeOut", int))
    """Minimum age (from the born timestamp) of a half message before it is checked."""
    transaction_check_max: int = field(default=15, metadata=_meta("transactionCheckMax", int))
    """Checks of one half message before it is moved to TRANS_CHECK_MAX_TIME_TOPIC."""
    transaction_check_interval_ms: int = field(
        default=30_000, metadata=_meta("transactionCheckInterval", int)
    )
    """Period of the transaction check service."""
    busy_poll_us: int = field(
        default_factory=default_window_us, metadata=_meta("busyPollMicros", int)
    )
    """How long the broker keeps polling after a frame before it sleeps (µs; 0: never)."""
    server_max_connections: int = field(default=0, metadata=_meta("serverMaxConnections", int))
    """Client connections served at once; more are closed as they come (0: half the
    process's file-descriptor limit, leaving the rest for the store's files)."""
    server_max_connections_per_ip: int = field(
        default=DEFAULT_MAX_CONNECTIONS_PER_IP, metadata=_meta("serverMaxConnectionsPerIp", int)
    )
    """Connections one client IP address may hold at once; more from it are closed as they
    come, so one host cannot take every ``serverMaxConnections`` slot (0: no per-IP cap;
    Kafka's ``max.connections.per.ip``, RocketMQ has none)."""
    server_channel_max_idle_time_seconds: int = field(
        default=int(DEFAULT_IDLE_TIMEOUT_S), metadata=_meta("serverChannelMaxIdleTimeSeconds", int)
    )
    """A connection with no frame received or sent and no request in flight for this long is
    closed (RocketMQ's; 0: never)."""
    server_frame_read_timeout_seconds: int = field(
        default=int(DEFAULT_FRAME_READ_TIMEOUT_S),
        metadata=_meta("serverFrameReadTimeoutSeconds", int),
    )
    """A frame whose first bytes arrived must arrive whole within this, else its connection is
    closed (against peers dribbling a frame, slowloris; 0: no limit)."""
    server_max_pending_requests: int = field(
        default=DEFAULT_MAX_PENDING, metadata=_meta("serverMaxPendingRequests", int)
    )
    """Requests waiting for their answer (long polls, SYNC_FLUSH sends) over every connection;
    more are answered SYSTEM_BUSY."""
    server_max_pending_requests_per_connection: int = field(
        default=DEFAULT_MAX_PENDING_PER_CONNECTION,
        metadata=_meta("serverMaxPendingRequestsPerConnection", int),
    )
    """The same, on one connection."""
    acl_enable: bool = field(default=False, metadata=_meta("aclEnable", bool))
    """Check every request against the accounts file (RocketMQ's ``aclEnable``; see
    :mod:`remoting.acl`)."""
    acl_file_full_path: str = field(default="", metadata=_meta("aclFileFullPath", str))
    """The accounts file (RocketMQ's ``plain_acl.yml`` shape); empty: ``plain_acl.yml`` in the
    store's config directory, ``<storePathRootDir>/config``."""
    access_key: str = field(default="", metadata=_meta("accessKey", str))
    """The broker's own account, signing its requests to the name servers (their ACL);
    empty: not signed."""
    secret_key: str = field(default="", metadata=_meta("secretKey", str))
    """That account's secret key (never shown by GET_BROKER_CONFIG)."""
    tls_server: ServerTlsConfig = field(default=ServerTlsConfig(), metadata={})
    """The listening port's TLS (``tls.server.*``; off by default)."""
    tls_client: ClientTlsConfig = field(default=ClientTlsConfig(), metadata={})
    """TLS of the broker's connections to the name servers (``tls.enable``, ``tls.client.*``)."""
    store_settings: tuple[tuple[str, Any], ...] = field(default=(), metadata={})
    """Explicit store settings as ``(StoreConfig field name, value)`` pairs."""
    compat_settings: tuple[tuple[str, str], ...] = field(default=(), metadata={})
    """RocketMQ keys accepted for its ``broker.conf`` files only (:data:`NO_EFFECT_KEYS`,
    :data:`DERIVED_PATH_KEYS`, :data:`REPLICATION_SWITCHES`), as ``(key, raw value)`` pairs."""

    def __post_init__(self) -> None:
        """Validate every setting; ValueError names the key and the bad value."""
        self._check_identity()
        self._check_ports()
        self._check_limits()
        self._check_intervals()
        parse_namesrv_addrs(self.namesrv_addr or "")
        parse_delay_levels(self.message_delay_level)
        self._check_store_settings()
        self._check_compat_settings()

    def _check_identity(self) -> None:
        for key, name in (
            ("brokerClusterName", self.broker_cluster_name),
            ("brokerName", self.broker_name),
        ):
            if not name:
                raise ValueError(f"{key} must not be empty, got {name!r}")
        if self.broker_id < 0:
            raise ValueError(f"brokerId must be >= 0, got {self.broker_id}")
        if bool(self.access_key) != bool(self.secret_key):
            raise ValueError("accessKey and secretKey must be given together (or neither)")
        if self.broker_role in _REPLICATED_ROLES:
            raise ValueError(
                f"brokerRole {self.broker_role} is not supported: minimq brokers have no "
                f"replication (use {BROKER_ROLE})"
            )
        if self.broker_role != BROKER_ROLE:
            raise ValueError(f"brokerRole must be {BROKER_ROLE}, got {self.broker_role!r}")
        try:
            ipaddress.ip_address(self.broker_ip1)
        except ValueError:
            raise ValueError(
                f"brokerIP1 must be an IP address clients can reach, got {self.broker_ip1!r}"
            ) from None
        if not 0 <= self.broker_permission < 8:
            raise ValueError(f"brokerPermission must be in [0, 8), got {self.broker_permission}")

    def _check_ports(self) -> None:
        for key, port in (
            ("listenPort", self.listen_port),
            ("advertisedPort", self.advertised_port),
            ("metricsPort", self.metrics_port),
        ):
            if port is not None and not 0 <= port <= 65535:
                raise ValueError(f"{key} must be in [0, 65535], got {port}")
        if not self.bind_address:
            raise ValueError(f"bindAddress must not be empty, got {self.bind_address!r}")

    def _check_limits(self) -> None:
        for key, value, low in (
            ("busyPollMicros", self.busy_poll_us, 0),
            ("serverMaxConnections", self.server_max_connections, 0),
            ("serverMaxConnectionsPerIp", self.server_max_connections_per_ip, 0),
            ("serverChannelMaxIdleTimeSeconds", self.server_channel_max_idle_time_seconds, 0),
            ("serverFrameReadTimeoutSeconds", self.server_frame_read_timeout_seconds, 0),
            ("serverMaxPendingRequests", self.server_max_pending_requests, 1),
            (
                "serverMaxPendingRequestsPerConnection",
                self.server_max_pending_requests_per_connection,
                1,
            ),
            ("transactionTimeOut", self.transaction_timeout_ms, 0),
            ("transactionCheckMax", self.transaction_check_max, 0),
        ):
            if value < low:
                raise ValueError(f"{key} must be >= {low}, got {value}")
        if not 0 < self.default_topic_queue_nums <= MAX_QUEUE_NUMS:
            raise ValueError(
                f"defaultTopicQueueNums must be in [1, {MAX_QUEUE_NUMS}], "
                f"got {self.default_topic_queue_nums}"
            )

    def _check_intervals(self) -> None:
        period = self.register_name_server_period_ms
        if period > MAX_REGISTER_PERIOD_MS:
            raise ValueError(
                f"registerNameServerPeriod must be at most {MAX_REGISTER_PERIOD_MS} ms (name "
                f"servers drop a broker silent for 120 s), got {period}"
            )
        if 0 < period < MIN_REGISTER_PERIOD_MS:
            raise ValueError(
                f"registerNameServerPeriod must be at least {MIN_REGISTER_PERIOD_MS} ms (else "
                f"the broker re-registers without pause), got {period}"
            )
        for key, value in (
            ("flushConsumerOffsetInterval", self.flush_consumer_offset_interval_ms),
            ("registerNameServerPeriod", period),
            ("channelExpiredTimeout", self.channel_expired_timeout_ms),
            ("flushDelayOffsetInterval", self.flush_delay_offset_interval_ms),
            ("transactionCheckInterval", self.transaction_check_interval_ms),
        ):
            if value <= 0:
                raise ValueError(f"{key} must be > 0 ms, got {value}")
        if not 0 < self.short_polling_time_ms <= MAX_SUSPEND_MS:
            raise ValueError(
                f"shortPollingTimeMills must be in [1, {MAX_SUSPEND_MS}] ms (no pull is held "
                f"longer than a long poll), got {self.short_polling_time_ms}"
            )

    def _check_store_settings(self) -> None:
        known = set(STORE_KEYS.values())
        for name, _ in self.store_settings:
            if name not in known:
                raise ValueError(f"unknown store setting {name!r}")
        try:
            self.store_config()
        except ValueError as exc:
            raise ValueError(f"bad store settings: {_rename_store_fields(str(exc))}") from None

    def _check_compat_settings(self) -> None:
        for key, raw in self.compat_settings:
            if key not in _COMPAT_KEYS:
                raise ValueError(f"unknown broker property {key!r}")
            _check_replication_switch(key, raw)
            if key == "storePathCommitLog" and not self._is_own_path(key, raw):
                raise ValueError(
                    f"storePathCommitLog must be storePathRootDir's commitlog directory "
                    f"{self.store_config().commitlog_dir} (minimq keeps every store file under "
                    f"storePathRootDir: set that instead), got {raw!r}"
                )

    def _is_own_path(self, key: str, raw: str) -> bool:
        """True when ``raw`` (a :data:`DERIVED_PATH_KEYS` value) names the path minimq uses."""
        own: Path = getattr(self.store_config(), DERIVED_PATH_KEYS[key])
        return Path(raw.strip()) == own

    @property
    def registered_broker_id(self) -> int:
        """The ``brokerId`` registered with the name servers: always ``MASTER_ID`` (0), as
        RocketMQ's ``BrokerStartup`` sets an ``ASYNC_MASTER``'s id whatever the file says
        (clients send only to a broker name's id 0)."""
        return MASTER_ID

    def compat_warnings(self) -> list[str]:
        """One line per accepted RocketMQ setting that has no effect here (for the broker's
        startup warnings): a ``brokerId`` other than 0, every :data:`NO_EFFECT_KEYS` key
        given, and each path key naming another path than minimq's."""
        out = []
        if self.broker_id != self.registered_broker_id:
            out.append(
                f"brokerId={self.broker_id} is used as {self.registered_broker_id}: an "
                f"{BROKER_ROLE} broker is its broker name's master, as in RocketMQ"
            )
        for key, raw in self.compat_settings:
            if key in NO_EFFECT_KEYS:
                out.append(f"{key}={raw} has no effect: {NO_EFFECT_KEYS[key]}")
            elif key in DERIVED_PATH_KEYS and not self._is_own_path(key, raw):
                own = getattr(self.store_config(), DERIVED_PATH_KEYS[key])
                out.append(
                    f"{key}={raw} has no effect: the file is {own}, under storePathRootDir "
                    "(RocketMQ derives it from storePathRootDir too)"
                )
        return out

    # ------------------------------------------------------------------ derived values

    @property
    def delay_levels_ms(self) -> tuple[int, ...]:
        """``messageDelayLevel`` in milliseconds; level ``n`` is ``delay_levels_ms[n - 1]``."""
        return parse_delay_levels(self.message_delay_level)

    @property
    def namesrv_addrs(self) -> list[str]:
        """The ``host:port`` name server addresses of ``namesrvAddr`` (``;``-separated)."""
        return parse_namesrv_addrs(self.namesrv_addr or "")

    def advertised(self, bound_port: int | None = None) -> int:
        """The port advertised to clients: ``advertisedPort`` when set, else ``bound_port``
        (the port actually bound), else ``listenPort``."""
        if self.advertised_port:
            return self.advertised_port
        return self.listen_port if bound_port is None else bound_port

    @property
    def broker_addr(self) -> str:
        """``brokerIP1:<advertised port>``, the address registered with the name server."""
        return f"{self.broker_ip1}:{self.advertised()}"

    def acl_file(self) -> Path:
        """The accounts file: ``aclFileFullPath``, else ``plain_acl.yml`` in the store's
        config directory."""
        if self.acl_file_full_path:
            return Path(self.acl_file_full_path).expanduser()
        return self.store_config().config_dir / PLAIN_ACL_FILE

    def store_config(self) -> StoreConfig:
        """A fresh :class:`StoreConfig` with the store settings; ``store_host`` = broker addr."""
        return StoreConfig(
            **dict(self.store_settings), store_host=(self.broker_ip1, self.advertised())
        )

    # ------------------------------------------------------------------ properties

    @classmethod
    def property_keys(cls) -> dict[str, str]:
        """Broker RocketMQ key -> field name, in declaration order (store keys excluded)."""
        return {f.metadata["key"]: f.name for f in dataclasses.fields(cls) if "key" in f.metadata}

    @classmethod
    def from_properties(cls, props: Mapping[str, str]) -> BrokerConfig:
        """Build a config from RocketMQ-named string properties; absent keys keep defaults."""
        kinds = {f.name: f.metadata["type"] for f in dataclasses.fields(cls) if f.metadata}
        keys = cls.property_keys()
        kwargs: dict[str, Any] = {}
        store: dict[str, Any] = {}
        compat: dict[str, str] = {}
        for key in REPLICATION_SWITCHES:  # first: the rest of such a file is for that mode
            _check_replication_switch(key, props.get(key, "false"))
        tls, props = split_tls_properties(props)
        try:
            kwargs["tls_server"] = parse_server_tls(tls)
            kwargs["tls_client"] = parse_client_tls(tls)
        except ValueError as exc:
            raise ValueError(f"bad broker properties: {exc}") from None
        for key, raw in props.items():
            if key in keys:
                name = keys[key]
                optional = name in ("namesrv_addr", "metrics_port")
                if optional and not raw.strip():
                    kwargs[name] = None
                else:
                    kwargs[name] = convert_value(key, raw, kinds[name])
            elif key in STORE_KEYS:
                name = STORE_KEYS[key]
                store[name] = convert_value(key, raw, type(getattr(_STORE_DEFAULTS, name)))
            elif key in _COMPAT_KEYS:
                compat[key] = raw
            else:
                raise ValueError(_unknown_key(key, [*keys, *STORE_KEYS, *_COMPAT_KEYS]))
        kwargs["store_settings"] = tuple(store.items())
        kwargs["compat_settings"] = tuple(compat.items())
        try:
            return cls(**kwargs)
        except ValueError as exc:
            raise ValueError(f"bad broker properties: {exc}") from None

    @classmethod
    def load(
        cls,
        config_file: Path | None,
        namesrv_arg: str | None,
        env: Mapping[str, str],
        overrides: Mapping[str, str],
    ) -> BrokerConfig:
        """Merge, lowest first: defaults (``NAMESRV_ADDR`` and ``MINIMQ_BUSY_POLL_US`` in ``env``
        set those of ``namesrvAddr`` and ``busyPollMicros``), ``config_file``, ``-n``
        (``namesrv_arg``), ``overrides``. A bad environment value is named as such.

        An empty ``-n`` or ``--namesrvAddr`` clears what the file and ``NAMESRV_ADDR`` set (as
        RocketMQ's ``commandLine2Properties``, which passes an empty option value on): the
        broker then registers with no name server."""
        props: dict[str, str] = dict(load_properties(config_file)) if config_file else {}
        if namesrv_arg is not None:
            props["namesrvAddr"] = namesrv_arg
        props.update(overrides)
        env_namesrv = env.get(NAMESRV_ADDR_ENV)
        if env_namesrv and "namesrvAddr" not in props:
            parse_namesrv_addrs(env_namesrv, NAMESRV_ADDR_ENV)
            props["namesrvAddr"] = env_namesrv
        if "busyPollMicros" not in props:
            props["busyPollMicros"] = str(default_window_us(env))
        return cls.from_properties(with_tls_config_file(props))

    def to_properties(self, *, hide_secrets: bool = False) -> str:
        """``key=value`` lines (as ``mqbroker -p`` prints): broker keys then every store key,
        escaped as ``Properties#store`` does, so that the text reads back to this config.
        ``hide_secrets`` writes a set ``secretKey`` as :data:`HIDDEN_SECRET` (for answers to
        peers)."""
        lines = []
        for f in dataclasses.fields(self):
            if "key" in f.metadata:
                value = getattr(self, f.name)
                if hide_secrets and f.name == "secret_key" and value:
                    value = HIDDEN_SECRET
                lines.append(format_entry(f.metadata["key"], value))
        store = self.store_config()
        for key, name in STORE_KEYS.items():
            lines.append(format_entry(key, getattr(store, name)))
        for key, raw in self.compat_settings:
            lines.append(format_entry(key, raw))
        for key, raw in (*self.tls_server.properties(), *self.tls_client.properties()):
            lines.append(format_entry(key, raw))
        return "\n".join(lines) + "\n"

    def clamped_settings(self) -> list[str]:
        """One line per disk ratio set outside RocketMQ's bounds, and for a consume queue file
        size that is not a whole number of units: its key, the value configured and the value
        used (for the broker's startup warnings)."""
        out = []
        for name, value in self.store_settings:
            if name == "mapped_file_size_consume_queue":
                used = effective_consume_queue_file_size(value)
                if used != value:
                    out.append(
                        f"{_camel(name)}={value} is not a multiple of the 20-byte consume queue "
                        f"unit: using {used}"
                    )
                continue
            if name not in DISK_RATIO_BOUNDS or effective_disk_ratio(name, value) == value:
                continue
            low, high = DISK_RATIO_BOUNDS[name]
            out.append(
                f"{_camel(name)}={value} is outside RocketMQ's range [{low}, {high}]: "
                f"using {effective_disk_ratio(name, value)}"
            )
        return out


def _check_replication_switch(key: str, raw: str) -> None:
    """ValueError when ``key``, a :data:`REPLICATION_SWITCHES` key, is true (or not a bool)."""
    if key in REPLICATION_SWITCHES and convert_value(key, raw, bool):
        raise ValueError(
            f"{key}=true is not supported: {_NO_REPLICATION} (remove it or set it to false)"
        )


def _unknown_key(key: str, known: list[str]) -> str:
    """The error for an unknown ``key``, naming the closest of ``known`` (a misspelling, or
    an old RocketMQ spelling such as ``mapedFileSizeCommitLog``)."""
    close = difflib.get_close_matches(key, known, n=1, cutoff=0.8)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    return f"unknown broker property {key!r}{hint}"


def _rename_store_fields(message: str) -> str:
    """``message`` with StoreConfig field names replaced by their RocketMQ keys."""
    for key, name in sorted(STORE_KEYS.items(), key=lambda kv: -len(kv[1])):
        message = re.sub(rf"\b{name}\b", key, message)
    return message
