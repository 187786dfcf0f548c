"""TLS settings with RocketMQ's keys (``TlsSystemConfig``), parsed and checked: no I/O, no trio.

RocketMQ reads these keys from JVM system properties and from the ``tls.properties`` file that
``tls.config.file`` names. Here they are ordinary keys of ``broker.conf`` / the name server's
``-c`` file (and ``--<key> <value>`` overrides of ``mqbroker``); clients take them as
:class:`~client.config.ClientConfig` fields or from the environment (:mod:`client.config`).

Rules:

- Server side: ``tls.server.mode`` is ``disabled`` (the default) or ``enforcing``: every
  connection must open with a TLS handshake. RocketMQ's ``permissive`` (sniff the first byte,
  serve TLS and plaintext on one port; its default) is refused: a port that also speaks
  plaintext gives an attacker on the path a downgrade to plaintext, and its default lets a
  deployment believe it is encrypted when it is not.
- ``enforcing`` needs ``tls.server.certPath`` and ``tls.server.keyPath`` (PEM);
  ``tls.server.keyPassword`` decrypts an encrypted key.
  ``tls.server.need.client.auth`` is ``none`` (default), ``optional`` or ``require``; the
  latter two need ``tls.server.trustCertPath``, the CA bundle client certificates are verified
  against (always: RocketMQ's ``tls.server.authClient=false``, accept any client certificate
  unverified, is not offered).
- Client side: ``tls.enable`` (RocketMQ's client switch, ``ClientConfig#useTLS``) turns TLS on
  for every connection the client opens. ``tls.client.authServer`` defaults to **true** here
  (RocketMQ: false): the server's certificate is verified against ``tls.client.trustCertPath``
  (the system's CAs when unset) and must name the host dialled (an IP address for brokers,
  which are reached at their ``brokerIP1``). ``tls.client.certPath`` / ``tls.client.keyPath``
  give a client certificate for servers that ask for one; one without the other is refused,
  as is ``tls.client.keyPassword`` (an encrypted key's password) without a key.
- The key passwords (``tls.server.keyPassword``, ``tls.client.keyPassword``) are secrets:
  kept out of the configs' ``repr`` and shown as :data:`MASKED_PASSWORD` by ``properties()``
  (what ``-p`` and config queries print) unless a caller asks for them. A value is taken as
  given (blanks included); empty is unset.
- ``tls.test.mode.enable`` (RocketMQ's default true: self-signed server certificate, nothing
  verified) is accepted only as ``false``. ``tls.config.file`` names a properties file whose
  TLS keys apply unless the configuration gives the same key itself (read by the shell,
  :func:`remoting.tls.with_tls_config_file`).
- Bad values raise :class:`ValueError` naming the key and the value (never a password).
- :func:`server_not_tls_hint` turns the reason a client's handshake failed into what it says
  about the server (it answered plaintext, or closed without a TLS word: it does not speak
  TLS); :data:`TLS_REQUIRED_HINT` is the reverse mismatch's advice.
"""

from __future__ import annotations

import enum
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Final, TypeVar

TLS_SERVER_MODE: Final = "tls.server.mode"
TLS_ENABLE: Final = "tls.enable"
TLS_CONFIG_FILE: Final = "tls.config.file"
TLS_TEST_MODE_ENABLE: Final = "tls.test.mode.enable"
TLS_SERVER_NEED_CLIENT_AUTH: Final = "tls.server.need.client.auth"
TLS_SERVER_KEYPATH: Final = "tls.server.keyPath"
TLS_SERVER_KEYPASSWORD: Final = "tls.server.keyPassword"
TLS_SERVER_CERTPATH: Final = "tls.server.certPath"
TLS_SERVER_TRUSTCERTPATH: Final = "tls.server.trustCertPath"
TLS_CLIENT_KEYPATH: Final = "tls.client.keyPath"
TLS_CLIENT_KEYPASSWORD: Final = "tls.client.keyPassword"
TLS_CLIENT_CERTPATH: Final = "tls.client.certPath"
TLS_CLIENT_AUTHSERVER: Final = "tls.client.authServer"
TLS_CLIENT_TRUSTCERTPATH: Final = "tls.client.trustCertPath"

SERVER_KEYS: Final = (
    TLS_SERVER_MODE,
    TLS_SERVER_NEED_CLIENT_AUTH,
    TLS_SERVER_KEYPATH,
    TLS_SERVER_KEYPASSWORD,
    TLS_SERVER_CERTPATH,
    TLS_SERVER_TRUSTCERTPATH,
)
CLIENT_KEYS: Final = (
    TLS_ENABLE,
    TLS_CLIENT_AUTHSERVER,
    TLS_CLIENT_TRUSTCERTPATH,
    TLS_CLIENT_CERTPATH,
    TLS_CLIENT_KEYPATH,
    TLS_CLIENT_KEYPASSWORD,
)
TLS_KEYS: Final = frozenset((*SERVER_KEYS, *CLIENT_KEYS, TLS_CONFIG_FILE, TLS_TEST_MODE_ENABLE))
"""Every TLS key a configuration may hold."""
MASKED_PASSWORD: Final = "******"
"""What a set password is shown as (``mqbroker -p``, ``mqnamesrv -p``, config queries)."""

E = TypeVar("E", bound=enum.StrEnum)

TLS_RECORD_TYPES: Final = frozenset({0x15, 0x16})
"""First byte of a TLS alert (0x15) or handshake (0x16) record."""
TLS_MAJOR_VERSION: Final = 0x03
"""Second byte of every SSL 3.0 / TLS 1.x record."""

NOT_TLS_ANSWER_REASONS: Final = frozenset(
    {"wrong version number", "packet length too long", "record layer failure", "http request"}
)
"""OpenSSL's reasons (lower case, blanks for ``_``) for a handshake whose peer answered with
bytes that are not TLS records."""
CLOSED_IN_HANDSHAKE_REASONS: Final = frozenset(
    {
        "unexpected eof while reading",
        "eof occurred in violation of protocol",
        "connection closed during the handshake",
    }
)
"""The reasons for a handshake the peer closed without a word (a plaintext minimq server,
which drops a connection whose first bytes are a TLS record)."""
RESET_REASON_PREFIXES: Final = ("ConnectionResetError", "BrokenPipeError")
"""How :func:`remoting.tls.handshake_failure_reason` words a transport the peer reset."""
TLS_OFF_ADVICE: Final = (
    "turn TLS off for this client (tls.enable=false) or on for the server "
    "(tls.server.mode=enforcing)"
)
TLS_REQUIRED_HINT: Final = (
    "the server speaks TLS and this client does not: it likely requires TLS "
    "(tls.server.mode=enforcing): turn TLS on for this client (tls.enable=true, "
    "MINIMQ_TLS_ENABLE=true or ClientConfig(use_tls=True))"
)


class TlsMode(enum.StrEnum):
    """``tls.server.mode`` (RocketMQ's ``TlsMode`` without ``permissive``)."""

    DISABLED = "disabled"
    ENFORCING = "enforcing"


class ClientAuth(enum.StrEnum):
    """``tls.server.need.client.auth`` (Netty's ``ClientAuth``)."""

    NONE = "none"
    OPTIONAL = "optional"
    REQUIRE = "require"


@dataclass(frozen=True, slots=True)
class ServerTlsConfig:
    """What a listening server needs for TLS (see the module rules)."""

    mode: TlsMode = TlsMode.DISABLED
    need_client_auth: ClientAuth = ClientAuth.NONE
    key_path: str | None = None
    cert_path: str | None = None
    trust_cert_path: str | None = None
    key_password: str | None = field(default=None, repr=False)
    """Decrypts an encrypted ``key_path`` (``tls.server.keyPassword``); never shown."""

    def __post_init__(self) -> None:
        """ValueError naming the missing key when the settings cannot work together."""
        if self.mode is TlsMode.DISABLED:
            return
        for key, value in (
            (TLS_SERVER_CERTPATH, self.cert_path),
            (TLS_SERVER_KEYPATH, self.key_path),
        ):
            if not value:
                raise ValueError(f"{TLS_SERVER_MODE}=enforcing needs {key} (a PEM file)")
        if self.need_client_auth is not ClientAuth.NONE and not self.trust_cert_path:
            raise ValueError(
                f"{TLS_SERVER_NEED_CLIENT_AUTH}={self.need_client_auth} needs "
                f"{TLS_SERVER_TRUSTCERTPATH} (the CA certificates client certificates are "
                "verified against)"
            )

    @property
    def enabled(self) -> bool:
        """True when connections must speak TLS."""
        return self.mode is TlsMode.ENFORCING

    def properties(self, *, reveal_password: bool = False) -> Iterator[tuple[str, str]]:
        """``(key, value)`` pairs that read back to this config (unset paths as ``""``), the
        key password as :data:`MASKED_PASSWORD` unless ``reveal_password``."""
        yield TLS_SERVER_MODE, str(self.mode)
        yield TLS_SERVER_NEED_CLIENT_AUTH, str(self.need_client_auth)
        yield TLS_SERVER_KEYPATH, self.key_path or ""
        yield TLS_SERVER_KEYPASSWORD, _shown(self.key_password, reveal_password)
        yield TLS_SERVER_CERTPATH, self.cert_path or ""
        yield TLS_SERVER_TRUSTCERTPATH, self.trust_cert_path or ""


@dataclass(frozen=True, slots=True)
class ClientTlsConfig:
    """What a dialling client needs for TLS (see the module rules)."""

    enable: bool = False
    auth_server: bool = True
    trust_cert_path: str | None = None
    cert_path: str | None = None
    key_path: str | None = None
    key_password: str | None = field(default=None, repr=False)
    """Decrypts an encrypted ``key_path`` (``tls.client.keyPassword``); never shown."""

    def __post_init__(self) -> None:
        """ValueError when a client certificate is given without its key or the reverse, or
        a key password without a key."""
        if bool(self.cert_path) != bool(self.key_path):
            given, missing = (
                (TLS_CLIENT_CERTPATH, TLS_CLIENT_KEYPATH)
                if self.cert_path
                else (TLS_CLIENT_KEYPATH, TLS_CLIENT_CERTPATH)
            )
            raise ValueError(f"{given} is set but {missing} is not: give both or neither")
        if self.key_password and not self.key_path:
            raise ValueError(
                f"{TLS_CLIENT_KEYPASSWORD} is set but {TLS_CLIENT_KEYPATH} is not: the password "
                "decrypts the client's private key"
            )

    def properties(self, *, reveal_password: bool = False) -> Iterator[tuple[str, str]]:
        """``(key, value)`` pairs that read back to this config (unset paths as ``""``), the
        key password as :data:`MASKED_PASSWORD` unless ``reveal_password``."""
        yield TLS_ENABLE, _bool_text(self.enable)
        yield TLS_CLIENT_AUTHSERVER, _bool_text(self.auth_server)
        yield TLS_CLIENT_TRUSTCERTPATH, self.trust_cert_path or ""
        yield TLS_CLIENT_CERTPATH, self.cert_path or ""
        yield TLS_CLIENT_KEYPATH, self.key_path or ""
        yield TLS_CLIENT_KEYPASSWORD, _shown(self.key_password, reveal_password)


def split_tls_properties(props: Mapping[str, str]) -> tuple[dict[str, str], dict[str, str]]:
    """``props`` split into its TLS keys and the others."""
    tls = {key: value for key, value in props.items() if key in TLS_KEYS}
    rest = {key: value for key, value in props.items() if key not in TLS_KEYS}
    return tls, rest


def parse_server_tls(props: Mapping[str, str]) -> ServerTlsConfig:
    """The server settings among ``props`` (absent keys keep their defaults)."""
    _check_test_mode(props)
    return ServerTlsConfig(
        mode=_parse_enum(props, TLS_SERVER_MODE, TlsMode, TlsMode.DISABLED),
        need_client_auth=_parse_enum(
            props, TLS_SERVER_NEED_CLIENT_AUTH, ClientAuth, ClientAuth.NONE
        ),
        key_path=_path(props, TLS_SERVER_KEYPATH),
        cert_path=_path(props, TLS_SERVER_CERTPATH),
        trust_cert_path=_path(props, TLS_SERVER_TRUSTCERTPATH),
        key_password=_password(props, TLS_SERVER_KEYPASSWORD),
    )


def parse_client_tls(props: Mapping[str, str]) -> ClientTlsConfig:
    """The client settings among ``props`` (absent keys keep their defaults)."""
    _check_test_mode(props)
    return ClientTlsConfig(
        enable=parse_bool(props, TLS_ENABLE, default=False),
        auth_server=parse_bool(props, TLS_CLIENT_AUTHSERVER, default=True),
        trust_cert_path=_path(props, TLS_CLIENT_TRUSTCERTPATH),
        cert_path=_path(props, TLS_CLIENT_CERTPATH),
        key_path=_path(props, TLS_CLIENT_KEYPATH),
        key_password=_password(props, TLS_CLIENT_KEYPASSWORD),
    )


def parse_bool(props: Mapping[str, str], key: str, *, default: bool) -> bool:
    """``props[key]`` as ``true``/``false`` (any case, blanks around; empty: ``default``)."""
    raw = props.get(key, "").strip().lower()
    if not raw:
        return default
    if raw not in ("true", "false"):
        raise ValueError(f"{key} must be true or false, got {props[key]!r}")
    return raw == "true"


def looks_like_tls_record(prefix: bytes) -> bool:
    """True when ``prefix`` (a stream's first bytes, at least 2) starts like a TLS record: the
    peer speaks TLS where plaintext frames were expected."""
    return len(prefix) >= 2 and prefix[0] in TLS_RECORD_TYPES and prefix[1] == TLS_MAJOR_VERSION


def server_not_tls_hint(reason: str) -> str | None:
    """What a client's failed handshake, failed for ``reason``, says about the server: that it
    does not speak TLS (it answered with plaintext), or likely does not (it closed or reset
    the connection without a TLS alert); None for any other reason (an untrusted
    certificate, a protocol version both ends do not share, ...)."""
    if reason in NOT_TLS_ANSWER_REASONS:
        return (
            f"the server answered with bytes that are not TLS: it does not speak TLS; "
            f"{TLS_OFF_ADVICE}"
        )
    if reason in CLOSED_IN_HANDSHAKE_REASONS or reason.startswith(RESET_REASON_PREFIXES):
        return (
            "the server closed the connection without a TLS answer: it likely does not speak "
            f"TLS; {TLS_OFF_ADVICE}"
        )
    return None


def _check_test_mode(props: Mapping[str, str]) -> None:
    if parse_bool(props, TLS_TEST_MODE_ENABLE, default=False):
        raise ValueError(
            f"{TLS_TEST_MODE_ENABLE}=true is not supported (RocketMQ's test mode verifies "
            "nothing): give certificates and set it to false or leave it out"
        )


def _parse_enum(props: Mapping[str, str], key: str, kind: type[E], default: E) -> E:
    raw = props.get(key, "").strip().lower()
    if not raw:
        return default
    try:
        return kind(raw)
    except ValueError:
        pass
    choices = " | ".join(str(member) for member in kind)
    why = (
        " (permissive, TLS and plaintext on one port, is not offered: it allows a downgrade "
        "to plaintext)"
        if raw == "permissive"
        else ""
    )
    raise ValueError(f"{key} must be {choices}, got {props[key]!r}{why}")


def _path(props: Mapping[str, str], key: str) -> str | None:
    value = props.get(key, "").strip()
    return value or None


def _password(props: Mapping[str, str], key: str) -> str | None:
    """``props[key]`` as given (blanks are part of a password); empty or absent: None (as
    RocketMQ's ``isNullOrEmpty``)."""
    return props.get(key) or None


def _shown(password: str | None, reveal: bool) -> str:
    """``password`` as a config listing shows it: masked when set, unless ``reveal``."""
    if not password:
        return ""
    return password if reveal else MASKED_PASSWORD


def _bool_text(value: bool) -> str:
    return "true" if value else "false"
