"""NamesrvConfig: the name server's knobs, with RocketMQ's property names and defaults.

Rules:

- Fields are snake_case; each carries its RocketMQ camelCase key in ``metadata["key"]``
  (``listenPort``, ``scanNotActiveBrokerInterval``, ...), used by :meth:`from_properties` and
  :meth:`to_properties`.
- Intervals are in milliseconds and named ``*_ms``.
- :func:`common.properties.load_properties` reads the file; :meth:`NamesrvConfig.from_properties`
  converts values by the field's type and raises :class:`ValueError` naming the key (and the
  value) on an unknown key or a bad value, one check per key.
- :meth:`NamesrvConfig.to_properties` escapes what it writes, so its output reads back.
- :func:`updated_config` applies UPDATE_NAMESRV_CONFIG: only :data:`RUNTIME_KEYS` change at
  runtime; :data:`CONFIG_BLACK_LIST` keys (RocketMQ's ``configBlackList``) and the other known
  keys are refused with :class:`ConfigUpdateRefused`, as are unknown keys and bad values.
- ``configStorePath`` is where an accepted update is saved (RocketMQ's ``Configuration``
  persisting to ``NamesrvConfig#configStorePath``): ``~/namesrv/namesrv.properties`` by
  default, the ``-c`` file when ``mqnamesrv`` was given one (:mod:`namesrv.server`).
  :func:`stored_config` says what is saved.
- TLS keys (``tls.server.*``, ``tls.config.file``; :mod:`remoting.tls_config`) are read like
  the others and only at start; the client keys (``tls.enable``, ``tls.client.*``) of a shared
  ``tls.properties`` are accepted and unused (the name server dials nobody).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from common.properties import convert_value, format_entry
from remoting.acl.config import PLAIN_ACL_FILE
from remoting.server import (
    DEFAULT_FRAME_READ_TIMEOUT_S,
    DEFAULT_IDLE_TIMEOUT_S,
    DEFAULT_MAX_CONNECTIONS_PER_IP,
)
from remoting.tls_config import (
    TLS_KEYS,
    ServerTlsConfig,
    parse_client_tls,
    parse_server_tls,
    split_tls_properties,
)


def _key(name: str) -> dict[str, str]:
    return {"key": name}


@dataclass(frozen=True, slots=True)
class NamesrvConfig:
    """Name server settings (RocketMQ's ``NamesrvConfig`` plus the ``NettyServerConfig`` port)."""

    listen_port: int = field(default=9876, metadata=_key("listenPort"))
    bind_address: str = field(default="0.0.0.0", metadata=_key("bindAddress"))
    server_channel_max_idle_time_seconds: int = field(
        default=int(DEFAULT_IDLE_TIMEOUT_S), metadata=_key("serverChannelMaxIdleTimeSeconds")
    )
    """A connection with no traffic for this long is closed (RocketMQ's; 0: never)."""
    server_frame_read_timeout_seconds: int = field(
        default=int(DEFAULT_FRAME_READ_TIMEOUT_S), metadata=_key("serverFrameReadTimeoutSeconds")
    )
    """A frame whose first bytes arrived must arrive whole within this, else its connection is
    closed (0: no limit)."""
    server_max_connections: int = field(default=0, metadata=_key("serverMaxConnections"))
    """Connections served at once; more are closed as they come (0: a quarter of the
    process's file-descriptor limit), as the broker's key of the same name."""
    server_max_connections_per_ip: int = field(
        default=DEFAULT_MAX_CONNECTIONS_PER_IP, metadata=_key("serverMaxConnectionsPerIp")
    )
    """Connections one client IP address may hold at once; more from it are closed as they
    come (0: no per-IP cap), as the broker's key of the same name."""
    scan_not_active_broker_interval_ms: int = field(
        default=5000, metadata=_key("scanNotActiveBrokerInterval")
    )
    broker_channel_expired_time_ms: int = field(
        default=120_000, metadata=_key("brokerChannelExpiredTime")
    )
    rocketmq_home: str = field(default="", metadata=_key("rocketmqHome"))
    kv_config_path: str = field(
        default_factory=lambda: str(Path.home() / "namesrv" / "kvConfig.json"),
        metadata=_key("kvConfigPath"),
    )
    config_store_path: str = field(
        default_factory=lambda: str(Path.home() / "namesrv" / "namesrv.properties"),
        metadata=_key("configStorePath"),
    )
    """Where UPDATE_NAMESRV_CONFIG saves the config (``mqnamesrv -c FILE`` makes it FILE)."""
    product_env_name: str = field(default="center", metadata=_key("productEnvName"))
    cluster_test: bool = field(default=False, metadata=_key("clusterTest"))
    order_message_enable: bool = field(default=False, metadata=_key("orderMessageEnable"))
    acl_enable: bool = field(default=False, metadata=_key("aclEnable"))
    """Requests that change the name server (REGISTER_BROKER, UNREGISTER_BROKER, config, KV
    and topic writes) need a signed request of an admin account; route queries stay open.
    RocketMQ's name server had no ACL 1.0 (5.3's has ``authenticationEnabled``); the key is
    the broker's."""
    acl_file_full_path: str = field(default="", metadata=_key("aclFileFullPath"))
    """The accounts file; empty: ``<rocketmqHome>/conf/plain_acl.yml`` when ``rocketmqHome`` is
    set (RocketMQ's place), else ``plain_acl.yml`` next to ``kvConfigPath``."""
    tls_server: ServerTlsConfig = field(default=ServerTlsConfig(), metadata={})
    """The listening port's TLS (``tls.server.*``; off by default)."""
    file_tls_properties: tuple[tuple[str, str], ...] | None = field(
        default=None, metadata={}, compare=False, repr=False
    )
    """The TLS keys as the ``-c`` file itself gives them (``tls.config.file`` not read in):
    what a saved update writes in place of the effective TLS keys (see
    :meth:`to_stored_properties`); None for a config not read from a file."""

    def __post_init__(self) -> None:
        if not 0 <= self.listen_port <= 65535:
            raise ValueError(f"listenPort must be in [0, 65535], got {self.listen_port}")
        for key, value in (
            ("scanNotActiveBrokerInterval", self.scan_not_active_broker_interval_ms),
            ("brokerChannelExpiredTime", self.broker_channel_expired_time_ms),
        ):
            if value <= 0:
                raise ValueError(f"{key} must be > 0 ms, got {value}")
        for key, value in (
            ("serverChannelMaxIdleTimeSeconds", self.server_channel_max_idle_time_seconds),
            ("serverFrameReadTimeoutSeconds", self.server_frame_read_timeout_seconds),
        ):
            if value < 0:
                raise ValueError(f"{key} must be >= 0 s (0: no limit), got {value}")
        for key, value in (
            ("serverMaxConnections", self.server_max_connections),
            ("serverMaxConnectionsPerIp", self.server_max_connections_per_ip),
        ):
            if value < 0:
                raise ValueError(f"{key} must be >= 0, got {value}")

    def acl_file(self) -> Path:
        """The accounts file (see ``acl_file_full_path``)."""
        if self.acl_file_full_path:
            return Path(self.acl_file_full_path).expanduser()
        if self.rocketmq_home:
            return Path(self.rocketmq_home).expanduser() / "conf" / PLAIN_ACL_FILE
        return Path(self.kv_config_path).expanduser().parent / PLAIN_ACL_FILE

    @classmethod
    def property_keys(cls) -> dict[str, str]:
        """RocketMQ key -> field name, in declaration order."""
        return {f.metadata["key"]: f.name for f in dataclasses.fields(cls) if f.metadata}

    @classmethod
    def from_properties(cls, props: dict[str, str]) -> NamesrvConfig:
        """Build a config from RocketMQ-named string properties; absent keys keep defaults."""
        keys = cls.property_keys()
        types = {f.name: type(getattr(_DEFAULTS, f.name)) for f in dataclasses.fields(cls)}
        kwargs: dict[str, Any] = {}
        tls, props = split_tls_properties(props)
        try:
            kwargs["tls_server"] = parse_server_tls(tls)
            parse_client_tls(tls)  # checked, unused
        except ValueError as exc:
            raise ValueError(f"bad namesrv properties: {exc}") from None
        for key, raw in props.items():
            if key not in keys:
                known = ", ".join(sorted(keys))
                raise ValueError(f"unknown namesrv property {key!r} (known: {known})")
            name = keys[key]
            kwargs[name] = convert_value(key, raw, types[name])
        try:
            return cls(**kwargs)
        except ValueError as exc:
            raise ValueError(f"bad namesrv properties: {exc}") from None

    def to_stored_properties(self) -> str:
        """What ``configStorePath`` gets: :meth:`to_properties`'s keys, but the TLS keys only as
        the ``-c`` file gave them (:attr:`file_tls_properties`; a config not read from a file
        writes its effective ones, the password in clear, as it must read back). So a saved
        update neither copies the keys of ``tls.config.file`` (a password among them) into the
        ``-c`` file nor stops later edits of that file from taking effect."""
        if self.file_tls_properties is None:
            return self.to_properties(reveal_password=True)
        lines = []
        for f in dataclasses.fields(self):
            if f.metadata:
                lines.append(format_entry(f.metadata["key"], getattr(self, f.name)))
        for key, raw in self.file_tls_properties:
            lines.append(format_entry(key, raw))
        return "\n".join(lines) + "\n"

    def to_properties(self, *, reveal_password: bool = False) -> str:
        """``key=value`` lines (as ``mqnamesrv -p`` prints), one per field, booleans lowercase,
        escaped as ``Properties#store`` does; ``tls.server.keyPassword`` masked unless
        ``reveal_password`` (the copy saved to ``configStorePath``, read at the next start)."""
        lines = []
        for f in dataclasses.fields(self):
            if f.metadata:
                lines.append(format_entry(f.metadata["key"], getattr(self, f.name)))
        for key, raw in self.tls_server.properties(reveal_password=reveal_password):
            lines.append(format_entry(key, raw))
        return "\n".join(lines) + "\n"


_DEFAULTS = NamesrvConfig()


CONFIG_BLACK_LIST = (
    "configBlackList",
    "configStorePath",
    "kvConfigPath",
    "rocketmqHome",
    "aclEnable",
    "aclFileFullPath",
)
"""Keys UPDATE_NAMESRV_CONFIG never changes (RocketMQ's ``DefaultRequestProcessor``
``configBlackList``; it answers NO_PERMISSION)."""

RUNTIME_KEYS = (
    "scanNotActiveBrokerInterval",
    "brokerChannelExpiredTime",
    "productEnvName",
    "clusterTest",
    "orderMessageEnable",
)
"""Keys UPDATE_NAMESRV_CONFIG changes: the expiry scan reads its interval and expiry time
afresh each round; the other three are kept and shown but steer nothing in minimq. The
socket settings (``listenPort``, ``bindAddress``, the server timeouts) are read once at start."""


class ConfigUpdateRefused(ValueError):
    """An UPDATE_NAMESRV_CONFIG that changes nothing; ``black_listed`` when a key is in
    :data:`CONFIG_BLACK_LIST`."""

    def __init__(self, reason: str, *, black_listed: bool = False) -> None:
        super().__init__(reason)
        self.black_listed = black_listed


def stored_config(started: NamesrvConfig, live: NamesrvConfig) -> NamesrvConfig:
    """What ``configStorePath`` gets after an update: ``started`` (the config as read at start,
    before command-line overrides) with ``live``'s values of :data:`RUNTIME_KEYS`. So a value
    given on the command line for one run (``--listenPort``) is not written into the file."""
    names = NamesrvConfig.property_keys()
    return dataclasses.replace(
        started, **{names[key]: getattr(live, names[key]) for key in RUNTIME_KEYS}
    )


def updated_config(config: NamesrvConfig, props: dict[str, str]) -> NamesrvConfig:
    """``config`` with ``props`` (RocketMQ-named string values) applied, all or nothing;
    :class:`ConfigUpdateRefused` naming the first key that may not change or the bad value."""
    black = [key for key in props if key in CONFIG_BLACK_LIST]
    if black:
        raise ConfigUpdateRefused(
            f"Can not update config in black list: {', '.join(black)}", black_listed=True
        )
    fixed = [key for key in props if key not in RUNTIME_KEYS]
    if fixed:
        key = fixed[0]
        known = key in NamesrvConfig.property_keys() or key in TLS_KEYS
        what = "is read only at start" if known else "is unknown"
        raise ConfigUpdateRefused(
            f"namesrv property {key!r} {what}; the keys that change at runtime are "
            + ", ".join(RUNTIME_KEYS)
        )
    try:
        changes = NamesrvConfig.from_properties(props)
    except ValueError as exc:
        raise ConfigUpdateRefused(str(exc)) from None
    names = NamesrvConfig.property_keys()
    try:
        return dataclasses.replace(
            config, **{names[key]: getattr(changes, names[key]) for key in props}
        )
    except ValueError as exc:
        raise ConfigUpdateRefused(f"bad namesrv properties: {exc}") from None
