"""One request checked end to end (RocketMQ's ``PlainAccessValidator`` +
``PlainPermissionManager#validate``), pure: the clock is a function given to it.

Order of the checks, each failure a reason for ``NO_PERMISSION`` (the first that fails):

1. ``AccessKey`` present and naming an account of the file;
2. the peer address within ``globalWhiteRemoteAddresses`` when that list is not empty, and
   within the account's ``whiteRemoteAddress`` when set. Unlike RocketMQ 4.x, where a match
   *skips* the signature (anyone on a listed host is trusted, whoever they claim to be), an
   address list here only restricts: the request must still be signed;
3. ``ts`` within ``window_ms`` (300 s) of the server's clock, either way;
4. ``Signature`` recomputed with the account's secret and compared in constant time;
5. ``(AccessKey, nonce)`` never seen within the window (:class:`NonceCache`), so a captured
   request cannot be sent again;
6. admin for :data:`~remoting.acl.resource.ADMIN_CODES`, then each resource's permission:
   the account's explicit one for that resource, else its default for topics or groups
   (``%RETRY%`` resources); DENY wins (:func:`~remoting.acl.permission.check_permission`). An
   admin account with no explicit permission may use every resource, as in RocketMQ. The
   resources are the request's own (:func:`~remoting.acl.resource.needed_perms`) and those the
   server's lookup for its code finds in the store: the lookup runs only here, after the
   signature and the nonce passed, so an unsigned request never makes the server read.

Reasons name the access key, the request code, the resource and the permission, never a
secret or a signature.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Final

from common.topic import RETRY_GROUP_TOPIC_PREFIX
from remoting.acl.config import Account, AclConfig
from remoting.acl.permission import check_permission, perm_name
from remoting.acl.resource import ADMIN_CODES, NeedsLookup, needed_perms
from remoting.acl.signing import ACCESS_KEY, NONCE, TIMESTAMP, signature_matches, wall_ms
from remoting.command import RemotingCommand

DEFAULT_WINDOW_MS: Final = 300_000
"""How far a request's ``ts`` may be from the server's clock, either way (±300 s)."""
DEFAULT_NONCE_CAPACITY: Final = 200_000
"""Nonces remembered at most; past it the oldest are forgotten and requests dated at or
before the newest forgotten one are refused (see :class:`NonceCache`)."""


class NonceCache:
    """The ``(access key, nonce)`` pairs seen within the window, bounded.

    Pairs are forgotten once their ``ts`` left the window (the timestamp check refuses them
    then). When ``capacity`` pairs are held, the oldest is forgotten early and :attr:`floor_ms`
    rises to its ``ts``: a request dated at or before the floor is refused, so a forgotten
    pair still cannot be replayed (a client retries with a fresh ``ts``)."""

    def __init__(self, capacity: int = DEFAULT_NONCE_CAPACITY, window_ms: int = DEFAULT_WINDOW_MS):
        if capacity < 1:
            raise ValueError(f"nonce capacity must be >= 1, got {capacity}")
        self.capacity = capacity
        self.window_ms = window_ms
        self.floor_ms = -1
        """Requests dated at or before this are refused (a pair of that age was forgotten)."""
        self._seen: dict[tuple[str, str], int] = {}

    def __len__(self) -> int:
        return len(self._seen)

    def admit(self, key: tuple[str, str], ts_ms: int, now_ms: int) -> str | None:
        """Remember ``key`` dated ``ts_ms``; the reason to refuse it, or None."""
        self._forget_expired(now_ms)
        if ts_ms <= self.floor_ms:
            return "request dated before the oldest nonce still remembered (replay cache full)"
        if key in self._seen:
            return "nonce already used (replayed request)"
        if len(self._seen) >= self.capacity:
            oldest = next(iter(self._seen))
            self.floor_ms = max(self.floor_ms, self._seen.pop(oldest))
        self._seen[key] = ts_ms
        return None

    def _forget_expired(self, now_ms: int) -> None:
        """Drop pairs (oldest first) whose ``ts`` left the window."""
        seen = self._seen
        oldest_kept = now_ms - self.window_ms
        while seen:
            key = next(iter(seen))
            if seen[key] >= oldest_kept:
                return
            del seen[key]


class AclValidator:
    """Checks requests against one :class:`AclConfig`; :meth:`reload` swaps the config."""

    def __init__(
        self,
        config: AclConfig,
        *,
        now_ms: Callable[[], int] = wall_ms,
        window_ms: int = DEFAULT_WINDOW_MS,
        nonce_capacity: int = DEFAULT_NONCE_CAPACITY,
    ) -> None:
        self.config = config
        self.now_ms = now_ms
        """The server's clock (unix ms), injectable."""
        self.window_ms = window_ms
        self.nonces = NonceCache(nonce_capacity, window_ms)
        self.denied = 0
        """Requests refused so far."""

    def reload(self, config: AclConfig) -> None:
        """Use ``config`` from now on (the remembered nonces stay)."""
        self.config = config

    def check(
        self, request: RemotingCommand, remote_addr: str, lookup: NeedsLookup | None = None
    ) -> str | None:
        """Why ``request`` from ``remote_addr`` (``host:port``) is refused, or None;
        ``lookup`` adds the resources the server finds in its store (module rule 6)."""
        reason = self._reason(request, remote_addr, lookup)
        if reason is not None:
            self.denied += 1
        return reason

    def _reason(
        self, request: RemotingCommand, remote_addr: str, lookup: NeedsLookup | None
    ) -> str | None:
        code = request.code
        access_key = request.ext_fields.get(ACCESS_KEY)
        if not isinstance(access_key, str) or not access_key:
            return f"request code {code} needs a signed request (AccessKey missing; ACL is on)"
        account = self.config.accounts.get(access_key)
        if account is None:
            return f"no ACL account for accessKey {access_key!r}"
        ip = peer_ip(remote_addr)
        reason = self._address_reason(account, ip)
        if reason is None:
            reason = self._timestamp_reason(request)
        if reason is None and not signature_matches(account.secret_key.encode(), request):
            reason = "signature check failed"
        if reason is None:
            reason = self._nonce_reason(request, access_key)
        if reason is None:
            reason = permission_reason(account, request, lookup)
        if reason is None:
            return None
        return f"accessKey {access_key!r}, request code {code}: {reason}"

    def _address_reason(self, account: Account, ip: str) -> str | None:
        patterns = self.config.global_white_remote_addresses
        if patterns and not any(p.matches(ip) for p in patterns):
            return f"address {ip} is not in globalWhiteRemoteAddresses"
        white = account.white_remote_address
        if white is not None and not white.matches(ip):
            return f"address {ip} is not in the account's whiteRemoteAddress"
        return None

    def _timestamp_reason(self, request: RemotingCommand) -> str | None:
        ts = parse_ts(request.ext_fields.get(TIMESTAMP))
        if ts is None:
            return f"missing or bad {TIMESTAMP} field (unix ms)"
        skew = ts - self.now_ms()
        if abs(skew) > self.window_ms:
            return (
                f"timestamp {ts} is {skew / 1000:+.0f} s from the server's clock "
                f"(allowed: ±{self.window_ms // 1000} s)"
            )
        return None

    def _nonce_reason(self, request: RemotingCommand, access_key: str) -> str | None:
        nonce = request.ext_fields.get(NONCE)
        if not isinstance(nonce, str) or not 16 <= len(nonce) <= 128:
            return f"missing or bad {NONCE} field"
        ts = parse_ts(request.ext_fields.get(TIMESTAMP))
        assert ts is not None  # checked before
        return self.nonces.admit((access_key, nonce), ts, self.now_ms())


def permission_reason(
    account: Account, request: RemotingCommand, lookup: NeedsLookup | None = None
) -> str | None:
    """Why ``account`` may not send ``request`` (admin, then each resource of the request and
    of ``lookup``), or None."""
    if request.code in ADMIN_CODES and not account.admin:
        return "needs an admin account"
    if account.admin and not account.resource_perms:
        return None
    needs = needed_perms(request, lookup)
    if needs is None:
        return "what it names in the store is not a message the server can check"
    for resource, needed in needs.items():
        owned = account.resource_perms.get(resource)
        if owned is None:
            is_group = resource.startswith(RETRY_GROUP_TOPIC_PREFIX)
            owned = account.default_group_perm if is_group else account.default_topic_perm
        if not check_permission(needed, owned):
            return f"no {perm_name(needed)} permission on {resource_name(resource)}"
    return None


def resource_name(resource: str) -> str:
    """``topic:T`` or ``group:G`` (RocketMQ's ``PlainAccessResource.printStr``)."""
    if resource.startswith(RETRY_GROUP_TOPIC_PREFIX):
        return f"group:{resource[len(RETRY_GROUP_TOPIC_PREFIX) :]}"
    return f"topic:{resource}"


def parse_ts(value: object) -> int | None:
    """A ``ts`` field (decimal text or int) as an int, or None."""
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, str) and value.isascii() and value.isdigit() and len(value) <= 19:
        return int(value)
    return None


def peer_ip(remote_addr: str) -> str:
    """The address part of ``host:port`` (``[v6]:port`` too)."""
    host = remote_addr.rsplit(":", 1)[0] if ":" in remote_addr else remote_addr
    return host.strip("[]")
