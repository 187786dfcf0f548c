"""ClientConfig: what one client instance needs (RocketMQ's ``ClientConfig``), and the client id.

The name-server list comes from the ``namesrv`` argument (``"host:port;host:port"`` or a
list), else from the ``NAMESRV_ADDR`` environment variable, as in RocketMQ. The client id is
``clientIP@instanceName`` where the instance name defaults to ``<pid>#<nanotime>``, so two
instances in one process never share an id.

With ``access_key`` and ``secret_key`` (RocketMQ's ``SessionCredentials``, which its clients
pass as an ``AclClientRPCHook``) the instance signs every request it sends
(:mod:`remoting.acl.signing`), for brokers and name servers with ACL on. The secret stays out
of the config's ``repr``.

TLS (RocketMQ's ``ClientConfig#useTLS`` and ``tls.client.*``, :mod:`remoting.tls_config`) is off
by default. :meth:`ClientConfig.create` takes its defaults from the environment, as RocketMQ's
clients take them from ``-Dtls.enable`` and ``-Dtls.config.file``: ``MINIMQ_TLS_CONFIG_FILE``
names a ``tls.properties`` file (``tls.enable``, ``tls.client.*``) and ``MINIMQ_TLS_ENABLE``
(``true``/``false``) overrides its ``tls.enable``; keyword arguments override both. That is how
``mqadmin``, ``mqbench`` and the Spark connector are given TLS.
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from client.errors import CLIENT_ERROR, MQClientError
from common.digits import parse_uint
from common.net import primary_ipv4
from remoting.acl.signing import RequestSigner, SessionCredentials
from remoting.busy_poll import default_window_us
from remoting.tls import with_tls_config_file
from remoting.tls_config import TLS_CONFIG_FILE, TLS_ENABLE, ClientTlsConfig, parse_client_tls

NAMESRV_ADDR_ENV = "NAMESRV_ADDR"
TLS_ENABLE_ENV = "MINIMQ_TLS_ENABLE"
"""Environment variable turning TLS on for clients built by :meth:`ClientConfig.create`."""
TLS_CONFIG_FILE_ENV = "MINIMQ_TLS_CONFIG_FILE"
"""Environment variable naming the clients' ``tls.properties`` file (``tls.config.file``)."""


def check_intervals(**seconds: float) -> None:
    """ValueError naming the first interval that is not a number of seconds > 0 (0 made a
    loop that never waits, a negative one crashed the consumer once started; a string or a
    bool was taken and failed later, away from the call that gave it)."""
    for name, value in seconds.items():
        if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
            raise ValueError(f"{name} must be a number of seconds > 0, got {value!r}")


def check_whole_numbers(low: int, high: int, **values: int) -> None:
    """ValueError naming the first value that is not a whole number in ``[low, high]``."""
    for name, value in values.items():
        if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
            raise ValueError(f"{name} must be a whole number in [{low}, {high}], got {value!r}")


def parse_namesrv(namesrv: str | Sequence[str] | None) -> tuple[str, ...]:
    """The name-server addresses; ``NAMESRV_ADDR`` when ``namesrv`` is None or empty."""
    if namesrv is None or not namesrv:
        namesrv = os.environ.get(NAMESRV_ADDR_ENV, "")
    parts = namesrv.split(";") if isinstance(namesrv, str) else list(namesrv)
    addrs = tuple(p.strip() for p in parts if p and p.strip())
    if not addrs:
        raise MQClientError(
            CLIENT_ERROR,
            f"no name server address: pass namesrv='host:port' or set {NAMESRV_ADDR_ENV}",
        )
    for addr in addrs:
        host, sep, port = addr.rpartition(":")
        if not sep or not host or not 0 < (parse_uint(port, max_digits=5) or 0) < 65536:
            raise MQClientError(CLIENT_ERROR, f"illegal name server address {addr!r}")
    return addrs


def _default_busy_poll_us() -> int:
    try:
        return default_window_us()
    except ValueError as exc:
        raise MQClientError(CLIENT_ERROR, str(exc)) from None


def default_instance_name() -> str:
    """A fresh ``pid#monotonic_ns``: unique per client instance, and per process."""
    return f"{os.getpid()}#{time.monotonic_ns()}"


@dataclass(frozen=True, slots=True)
class ClientConfig:
    """Settings of one client instance; intervals in seconds, RocketMQ's defaults."""

    namesrv_addrs: tuple[str, ...]
    client_ip: str = field(default_factory=primary_ipv4)
    instance_name: str = ""
    """The part of the client id after ``ip@``; empty (the default): a fresh ``pid#n`` for each
    client instance, taken again when it starts in another process than it was made in (a
    config built before a fork, or pickled to worker processes, must not give every worker
    one id: the brokers would see one member)."""
    poll_name_server_interval_s: float = 30.0
    heartbeat_broker_interval_s: float = 30.0
    request_timeout_s: float = 3.0
    connect_timeout_s: float = 3.0
    busy_poll_us: int = field(default_factory=_default_busy_poll_us)
    """How long a request waiting for its answer keeps the client polling before it sleeps
    (µs; 0: never); the default is ``$MINIMQ_BUSY_POLL_US``, else 200 on two or more cores; see
    :mod:`remoting.busy_poll`."""
    access_key: str = ""
    """The ACL account's access key (empty: requests are not signed)."""
    secret_key: str = field(default="", repr=False)
    """The ACL account's secret key; given together with ``access_key``."""

    use_tls: bool = False
    """Every connection speaks TLS (RocketMQ's ``useTLS`` / ``tls.enable``)."""
    tls_auth_server: bool = True
    """Verify the server's certificate and that it names the host dialled
    (``tls.client.authServer``; RocketMQ's default is false)."""
    tls_trust_cert_path: str | None = None
    """CA certificates (PEM) servers are verified against (``tls.client.trustCertPath``;
    None: the system's)."""
    tls_cert_path: str | None = None
    """This client's certificate (PEM), for servers that ask for one (``tls.client.certPath``)."""
    tls_key_path: str | None = None
    """Its private key (PEM; ``tls.client.keyPath``)."""
    tls_key_password: str | None = field(default=None, repr=False)
    """The password of an encrypted ``tls_key_path`` (``tls.client.keyPassword``)."""

    def __post_init__(self) -> None:
        if bool(self.access_key) != bool(self.secret_key):
            raise MQClientError(
                CLIENT_ERROR, "access_key and secret_key must be given together (ACL)"
            )
        try:
            self.tls()
        except ValueError as exc:
            raise MQClientError(CLIENT_ERROR, str(exc)) from None
        if self.busy_poll_us < 0:
            raise MQClientError(CLIENT_ERROR, f"busy_poll_us must be >= 0, got {self.busy_poll_us}")
        for name in (
            "poll_name_server_interval_s",
            "heartbeat_broker_interval_s",
            "request_timeout_s",
            "connect_timeout_s",
        ):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
                raise MQClientError(
                    CLIENT_ERROR, f"{name} must be a number of seconds > 0, got {value!r}"
                )

    def rpc_hook(self) -> RequestSigner | None:
        """The signer of this config's account, or None when it has none."""
        if not self.access_key:
            return None
        return RequestSigner(SessionCredentials(self.access_key, self.secret_key))

    def tls(self) -> ClientTlsConfig:
        """The TLS settings as :mod:`remoting.tls_config` takes them."""
        return ClientTlsConfig(
            enable=self.use_tls,
            auth_server=self.tls_auth_server,
            trust_cert_path=self.tls_trust_cert_path,
            cert_path=self.tls_cert_path,
            key_path=self.tls_key_path,
            key_password=self.tls_key_password,
        )

    def client_id(self) -> str:
        """``clientIP@instanceName``, a fresh default name each call when none is set."""
        return f"{self.client_ip}@{self.instance_name or default_instance_name()}"

    @classmethod
    def create(cls, namesrv: str | Sequence[str] | None = None, **kwargs: object) -> ClientConfig:
        """Build from a name-server string or list (or ``NAMESRV_ADDR``); the TLS settings
        default to the environment's (see the module docstring)."""
        settings = {**tls_settings_from_env(os.environ), **kwargs}
        return cls(parse_namesrv(namesrv), **settings)  # type: ignore[arg-type]


def tls_settings_from_env(env: Mapping[str, str]) -> dict[str, object]:
    """:class:`ClientConfig` TLS keyword arguments from ``MINIMQ_TLS_CONFIG_FILE`` and
    ``MINIMQ_TLS_ENABLE`` (none when neither is set); MQClientError for a bad value or file."""
    props = {TLS_CONFIG_FILE: env.get(TLS_CONFIG_FILE_ENV, "")}
    try:
        props = with_tls_config_file(props)
        if env.get(TLS_ENABLE_ENV, "").strip():
            props[TLS_ENABLE] = env[TLS_ENABLE_ENV]
        tls = parse_client_tls(props)
    except (ValueError, OSError) as exc:
        raise MQClientError(CLIENT_ERROR, f"TLS settings from the environment: {exc}") from None
    if tls == ClientTlsConfig():
        return {}
    return {
        "use_tls": tls.enable,
        "tls_auth_server": tls.auth_server,
        "tls_trust_cert_path": tls.trust_cert_path,
        "tls_cert_path": tls.cert_path,
        "tls_key_path": tls.key_path,
        "tls_key_password": tls.key_password,
    }
