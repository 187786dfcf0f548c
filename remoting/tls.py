"""The TLS shell: SSL contexts from :mod:`remoting.tls_config` settings, and the handshakes.

RocketMQ's ``TlsHelper.buildSslContext`` plus the handshake part of ``NettyRemotingServer``'s
``TlsModeHandler`` and ``NettyRemotingClient``'s ``SslHandler``.

Rules:

- :func:`server_ssl_context` / :func:`client_ssl_context` return None when TLS is off, else a
  context built with :func:`ssl.create_default_context` (``Purpose.CLIENT_AUTH`` for servers,
  ``Purpose.SERVER_AUTH`` for clients), TLS 1.2 at least. A CA bundle given
  (``trustCertPath``) is the only one trusted (no system CAs mixed in).
- A missing, unreadable or unloadable file raises :class:`TlsSetupError` (an ``OSError``, so
  ``mqbroker`` / ``mqnamesrv`` report it as a startup failure) naming the key and the path.
- An encrypted private key (PEM, PKCS#8 or OpenSSL's traditional ``Proc-Type: 4,ENCRYPTED``)
  is decrypted with ``tls.server.keyPassword`` / ``tls.client.keyPassword``. OpenSSL is always
  handed a password callback, so it never prompts on a terminal: an encrypted key without a
  password, or one the password does not decrypt, raises TlsSetupError naming the key and
  the password key, never the password itself.
- :class:`ServerTlsReloader` watches a server's certificate, key and CA bundle
  (:class:`common.file_watch.FileWatch`) and installs a context rebuilt from them when they
  change; files that do not load are logged as an error and the context in force stays.
- :func:`accept_tls` runs the server side of a handshake under a deadline (a peer that spoke
  plaintext is sent a ``protocol_version`` alert first, see :data:`PROTOCOL_VERSION_ALERT`);
  :func:`dial_tls` the client side, with ``server_hostname`` when the context checks host
  names. A failed handshake raises :class:`TlsHandshakeError` with OpenSSL's reason; the
  transport is then closed (shielded and bounded), never left open. A client's handshake that
  met plaintext or a bare close raises :class:`ServerNotTlsError`, whose message says the
  server (likely) does not speak TLS; :class:`TlsRequiredError` is the reverse mismatch's
  error, raised by :class:`~remoting.client.RemotingClient`.
- :func:`with_tls_config_file` reads the file ``tls.config.file`` names, for the config loaders.
"""

from __future__ import annotations

import contextlib
import logging
import os
import ssl
from collections.abc import Callable, Mapping
from typing import Final

import trio

from common.file_watch import DEFAULT_WATCH_INTERVAL_S, FileWatch
from common.properties import load_properties
from remoting.errors import RemotingConnectError, RemotingSendRequestError
from remoting.tls_config import (
    TLS_CLIENT_CERTPATH,
    TLS_CLIENT_KEYPASSWORD,
    TLS_CLIENT_KEYPATH,
    TLS_CLIENT_TRUSTCERTPATH,
    TLS_CONFIG_FILE,
    TLS_KEYS,
    TLS_REQUIRED_HINT,
    TLS_SERVER_CERTPATH,
    TLS_SERVER_KEYPASSWORD,
    TLS_SERVER_KEYPATH,
    TLS_SERVER_TRUSTCERTPATH,
    ClientAuth,
    ClientTlsConfig,
    ServerTlsConfig,
    server_not_tls_hint,
)

log = logging.getLogger(__name__)

MINIMUM_VERSION: Final = ssl.TLSVersion.TLSv1_2
CLOSE_TIMEOUT_S: Final = 1.0
PROTOCOL_VERSION_ALERT: Final = b"\x15\x03\x03\x00\x02\x02\x46"
"""A fatal TLS ``protocol_version`` alert record. OpenSSL's own alert is lost when trio's
SSLStream breaks, so the server sends this to a peer that spoke plaintext: a minimq client
without TLS then reports that the server speaks TLS (:mod:`remoting.frame`'s hint) instead of a
bare closed connection."""
PLAINTEXT_PEER_REASONS: Final = frozenset({"wrong version number", "http request"})
"""OpenSSL's reasons when the first bytes were not a TLS record (a plaintext client)."""

_VERIFY_MODES: Final = {
    ClientAuth.NONE: ssl.CERT_NONE,
    ClientAuth.OPTIONAL: ssl.CERT_OPTIONAL,
    ClientAuth.REQUIRE: ssl.CERT_REQUIRED,
}


class TlsSetupError(OSError):
    """A TLS file named by the configuration cannot be used (the message names key and path)."""


class TlsHandshakeError(RemotingConnectError):
    """The TLS handshake with ``addr`` failed; ``reason`` is OpenSSL's (or the timeout's)."""

    def __init__(self, addr: str, reason: str) -> None:
        super().__init__(addr)
        self.args = (f"TLS handshake with {addr} failed: {reason}",)
        self.reason = reason


class ServerNotTlsError(TlsHandshakeError):
    """A client's handshake failed because the server (likely) does not speak TLS: the
    message says so and what to change (:func:`~remoting.tls_config.server_not_tls_hint`)."""

    def __init__(self, addr: str, reason: str) -> None:
        super().__init__(addr, reason)
        hint = server_not_tls_hint(reason)
        if hint is not None:
            self.args = (f"{self.args[0]}: {hint}",)


class TlsRequiredError(RemotingSendRequestError):
    """A plaintext client's call to ``addr`` failed because the server answered with a TLS
    record: it speaks TLS, and likely requires it (the message says what to change)."""

    def __init__(self, addr: str) -> None:
        super().__init__(addr)
        self.args = (f"{self.args[0]}: {TLS_REQUIRED_HINT}",)


def client_handshake_error(addr: str, reason: str) -> TlsHandshakeError:
    """The error a client raises for a handshake with ``addr`` that failed for ``reason``:
    :class:`ServerNotTlsError` when the reason says the server does not speak TLS."""
    if server_not_tls_hint(reason) is not None:
        return ServerNotTlsError(addr, reason)
    return TlsHandshakeError(addr, reason)


def server_ssl_context(config: ServerTlsConfig) -> ssl.SSLContext | None:
    """The context a server wraps accepted connections with, or None when TLS is disabled."""
    if not config.enabled:
        return None
    assert config.cert_path is not None  # the config checked both
    assert config.key_path is not None
    trust = None
    if config.need_client_auth is not ClientAuth.NONE:
        trust = _readable(TLS_SERVER_TRUSTCERTPATH, config.trust_cert_path)
    context = _context(ssl.Purpose.CLIENT_AUTH, TLS_SERVER_TRUSTCERTPATH, trust)
    context.verify_mode = _VERIFY_MODES[config.need_client_auth]
    _load_chain(
        context,
        (TLS_SERVER_CERTPATH, config.cert_path),
        (TLS_SERVER_KEYPATH, config.key_path),
        _KeyPassword(TLS_SERVER_KEYPASSWORD, config.key_password),
    )
    return context


def client_ssl_context(config: ClientTlsConfig) -> ssl.SSLContext | None:
    """The context a client wraps its connections with, or None when ``tls.enable`` is off."""
    if not config.enable:
        return None
    trust = _readable(TLS_CLIENT_TRUSTCERTPATH, config.trust_cert_path)
    context = _context(ssl.Purpose.SERVER_AUTH, TLS_CLIENT_TRUSTCERTPATH, trust)
    if not config.auth_server:
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    if config.cert_path and config.key_path:
        _load_chain(
            context,
            (TLS_CLIENT_CERTPATH, config.cert_path),
            (TLS_CLIENT_KEYPATH, config.key_path),
            _KeyPassword(TLS_CLIENT_KEYPASSWORD, config.key_password),
        )
    return context


def _context(purpose: ssl.Purpose, trust_key: str, trust: str | None) -> ssl.SSLContext:
    try:
        context = ssl.create_default_context(purpose, cafile=trust)
    except (ssl.SSLError, OSError) as exc:
        raise TlsSetupError(f"{trust_key} {trust}: cannot load CA certificates: {exc}") from None
    context.minimum_version = MINIMUM_VERSION
    return context


class _KeyPassword:
    """The password callback handed to OpenSSL for one private key: it notes that the key
    asked for a password, and refuses (TlsSetupError) when none is configured, so OpenSSL
    never prompts on a terminal."""

    def __init__(self, key: str, password: str | None) -> None:
        self.key = key
        self._password = password
        self.asked = False

    @property
    def given(self) -> bool:
        """True when a password is configured."""
        return bool(self._password)

    def __call__(self) -> str:
        self.asked = True
        if not self._password:
            raise _KeyEncrypted
        return self._password


class _KeyEncrypted(Exception):
    """The key asked for a password and none is configured."""


def _load_chain(
    context: ssl.SSLContext,
    cert: tuple[str, str],
    key: tuple[str, str],
    password: _KeyPassword,
) -> None:
    cert_file = _readable(*cert)
    key_file = _readable(*key)
    try:
        context.load_cert_chain(cert_file, key_file, password=password)  # type: ignore[arg-type]
    except _KeyEncrypted:
        raise TlsSetupError(
            f"{key[0]} {key[1]}: the private key is encrypted and {password.key} is not set"
        ) from None
    except (ssl.SSLError, OSError) as exc:
        raise TlsSetupError(_chain_failure(cert, key, password, exc)) from None


def _chain_failure(
    cert: tuple[str, str], key: tuple[str, str], password: _KeyPassword, exc: Exception
) -> str:
    """Why ``load_cert_chain`` failed, naming the keys and paths (never the password)."""
    mismatch = isinstance(exc, ssl.SSLError) and exc.reason == "KEY_VALUES_MISMATCH"
    if password.asked and password.given and not mismatch:
        return (
            f"{key[0]} {key[1]}: cannot decrypt the private key with {password.key} "
            "(wrong password?)"
        )
    return (
        f"{cert[0]} {cert[1]} / {key[0]} {key[1]}: cannot load the certificate and its "
        f"private key (PEM, a key matching the certificate, encrypted keys need "
        f"{password.key}): {exc}"
    )


def _readable(key: str, path: str | None) -> str | None:
    """``path`` when it names a readable file (None stays None); TlsSetupError otherwise."""
    if path is None:
        return None
    if not os.path.isfile(path):
        raise TlsSetupError(f"{key} {path}: no such file")
    if not os.access(path, os.R_OK):
        raise TlsSetupError(f"{key} {path}: not readable")
    return path


class ServerTlsReloader:
    """Rebuilds a server's SSL context when its ``tls.server.*`` files change (RocketMQ's
    ``FileWatchService`` on ``certPath``, ``keyPath`` and ``trustCertPath``) and hands it to
    ``install`` (which makes it the one new connections are wrapped with; connections already
    open keep theirs). A context that cannot be built from the new files is logged as an error
    and the one in force stays."""

    def __init__(self, config: ServerTlsConfig, install: Callable[[ssl.SSLContext], None]) -> None:
        self.config = config
        self._install = install
        self.files = FileWatch(_server_files(config))
        """The files watched: the certificate, the key, and the CA bundle when it is used."""
        self.reloads = 0
        """Contexts rebuilt and installed since start."""
        self.failures = 0
        """Changes whose files did not load (the context in force stayed)."""

    def reload(self) -> bool:
        """Build a context from the files now and install it; False (logged) when they do
        not load."""
        try:
            context = server_ssl_context(self.config)
        except TlsSetupError as exc:
            self.failures += 1
            log.error("TLS files not reloaded, the certificate in force stays: %s", exc)
            return False
        assert context is not None  # only enforcing configs are watched
        self._install(context)
        self.reloads += 1
        log.info("TLS certificate reloaded from %s: new connections use it", self.config.cert_path)
        return True

    def reload_if_changed(self) -> bool:
        """Reload when a watched file changed since the last look; True if a new context was
        installed."""
        changed = self.files.changed()
        if not changed:
            return False
        log.info("TLS files changed (%s): reloading the certificate", ", ".join(changed))
        return self.reload()

    async def watch(self, interval_s: float = DEFAULT_WATCH_INTERVAL_S) -> None:
        """Look at the files every ``interval_s`` and reload on a change; never returns."""
        while True:
            await trio.sleep(interval_s)
            self.reload_if_changed()


def _server_files(config: ServerTlsConfig) -> list[str]:
    """The files a server's context is built from."""
    files = [config.cert_path, config.key_path]
    if config.need_client_auth is not ClientAuth.NONE:
        files.append(config.trust_cert_path)
    return [path for path in files if path]


def with_tls_config_file(props: Mapping[str, str]) -> dict[str, str]:
    """``props`` with the TLS keys of the file ``tls.config.file`` names added where ``props``
    has none of its own (RocketMQ's ``tls.properties``); OSError if the file cannot be read."""
    out = dict(props)
    path = out.get(TLS_CONFIG_FILE, "").strip()
    if not path:
        return out
    try:
        loaded = load_properties(path)
    except OSError as exc:
        raise TlsSetupError(f"{TLS_CONFIG_FILE} {path}: {exc.strerror or exc}") from None
    for key, value in loaded.items():
        if key in TLS_KEYS and key != TLS_CONFIG_FILE:
            out.setdefault(key, value)
    return out


# ---------------------------------------------------------------------- handshakes


async def accept_tls(
    stream: trio.abc.Stream, context: ssl.SSLContext, addr: str, timeout_s: float
) -> trio.SSLStream[trio.abc.Stream]:
    """The server side of the handshake on ``stream``, within ``timeout_s``; on failure the
    transport is closed and :class:`TlsHandshakeError` raised."""
    tls = trio.SSLStream(stream, context, server_side=True)
    try:
        await _handshake(tls, stream, addr, timeout_s)
    except TlsHandshakeError as exc:
        if exc.reason in PLAINTEXT_PEER_REASONS:
            await _send_alert(stream)
        await close_transport(stream)
        raise
    return tls


async def dial_tls(
    stream: trio.abc.Stream, context: ssl.SSLContext, host: str, addr: str
) -> trio.SSLStream[trio.abc.Stream]:
    """The client side of the handshake with ``host`` (checked against its certificate when
    the context checks host names), under the caller's deadline; TlsHandshakeError on failure."""
    hostname = host if context.check_hostname else None
    tls = trio.SSLStream(stream, context, server_hostname=hostname)
    try:
        await _handshake(tls, stream, addr, float("inf"))
    except TlsHandshakeError as exc:
        await close_transport(stream)
        raise client_handshake_error(addr, exc.reason) from None
    return tls


async def _handshake(
    tls: trio.SSLStream[trio.abc.Stream], transport: trio.abc.Stream, addr: str, timeout_s: float
) -> None:
    """``tls.do_handshake()`` within ``timeout_s``; TlsHandshakeError on failure (the caller
    closes ``transport``), the transport closed here when the caller is cancelled."""
    reason: str | None = None
    try:
        with trio.move_on_after(timeout_s) as scope:
            await tls.do_handshake()
    except trio.BrokenResourceError as exc:
        reason = handshake_failure_reason(exc)
    except BaseException:
        await close_transport(transport)
        raise
    if scope.cancelled_caught:
        reason = f"no handshake within {timeout_s:g} s"
    if reason is not None:
        raise TlsHandshakeError(addr, reason)


def handshake_failure_reason(exc: BaseException) -> str:
    """What OpenSSL (or the transport) said about a failed handshake, in one line."""
    cause = exc.__cause__
    if isinstance(cause, ssl.SSLCertVerificationError):
        return f"certificate verify failed: {cause.verify_message}"
    if isinstance(cause, ssl.SSLError) and cause.reason:
        return f"{cause.reason.lower().replace('_', ' ')}"
    if cause is not None:
        return f"{type(cause).__name__}: {cause}" if str(cause) else type(cause).__name__
    return "connection closed during the handshake"


async def _send_alert(stream: trio.abc.Stream) -> None:
    """Send :data:`PROTOCOL_VERSION_ALERT`, bounded; a peer already gone is ignored."""
    with trio.move_on_after(CLOSE_TIMEOUT_S, shield=True):
        with contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError):
            await stream.send_all(PROTOCOL_VERSION_ALERT)


async def close_transport(stream: trio.abc.Stream) -> None:
    """Close ``stream`` shielded and bounded (an SSLStream's transport: no close_notify)."""
    with trio.move_on_after(CLOSE_TIMEOUT_S, shield=True):
        await stream.aclose()
