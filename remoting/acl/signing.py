"""Request signing: what a client adds to each request, and what a server recomputes.

RocketMQ's ``AclClientRPCHook`` adds ``AccessKey`` to the header fields, sorts them, joins the
*values only* and the body, and sends ``Signature`` = Base64(HMAC-SHA1(secret, that)). minimq
keeps the field names and fixes the weak points reliability-plan §4.1 lists:

- Signed bytes (:func:`signed_content`) = ``msgpack([code, [[key, value], ...] sorted by key
  without Signature, sha256(body)])``: canonical, with the keys in, so no two different
  headers give the same bytes (RocketMQ's ``"ab"+"c" == "a"+"bc"``); the request code and the
  body (by its hash) are bound too.
- ``Signature`` = Base64(HMAC-SHA256(secretKey, signed bytes)).
- ``ts`` (unix time in ms, decimal text) and ``nonce`` (32 hex digits, 128 random bits) are
  header fields like any other, so they are signed: a server refuses a request whose ``ts`` is
  outside its window and a ``(AccessKey, nonce)`` it has seen (:mod:`remoting.acl.validator`).
- Secrets and signatures are never logged nor put in an error: :class:`SessionCredentials`
  hides its secret from ``repr``.
"""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import hmac
import secrets
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from operator import itemgetter
from typing import Final

import msgpack

from remoting.command import ExtValue, RemotingCommand

ACCESS_KEY: Final = "AccessKey"
"""Header field of the access key (RocketMQ's ``SessionCredentials.ACCESS_KEY``)."""
SIGNATURE: Final = "Signature"
"""Header field of the signature (RocketMQ's ``SessionCredentials.SIGNATURE``)."""
TIMESTAMP: Final = "ts"
"""Header field of the signing time, unix ms as decimal text."""
NONCE: Final = "nonce"
"""Header field of the request's one-time random value (hex)."""

_FIRST: Final = itemgetter(0)


def wall_ms() -> int:
    """Unix time in ms: the clock signatures are dated by (it must agree across hosts)."""
    return time.time_ns() // 1_000_000


@dataclass(frozen=True, slots=True)
class SessionCredentials:
    """An account's keys (RocketMQ's ``SessionCredentials``); the secret stays out of repr."""

    access_key: str
    secret_key: str = field(repr=False)

    def __post_init__(self) -> None:
        if not self.access_key or not self.secret_key:
            raise ValueError("access_key and secret_key must both be given (non-empty)")


def signed_content(code: int, ext_fields: Mapping[str, ExtValue], body: bytes) -> bytes:
    """The canonical bytes a signature covers (see the module docstring)."""
    items = sorted(((k, v) for k, v in ext_fields.items() if k != SIGNATURE), key=_FIRST)
    packed: bytes = msgpack.packb([code, items, hashlib.sha256(body).digest()], use_bin_type=True)
    return packed


def compute_signature(secret_key: bytes, content: bytes) -> str:
    """Base64(HMAC-SHA256(``secret_key``, ``content``))."""
    return base64.b64encode(hmac.digest(secret_key, content, "sha256")).decode("ascii")


def signature_matches(secret_key: bytes, request: RemotingCommand) -> bool:
    """True when ``request``'s ``Signature`` is the one ``secret_key`` gives (constant time)."""
    given = request.ext_fields.get(SIGNATURE)
    if not isinstance(given, str):
        return False
    content = signed_content(request.code, request.ext_fields, request.body)
    return hmac.compare_digest(compute_signature(secret_key, content), given)


def new_nonce() -> str:
    """128 random bits as 32 hex digits."""
    return secrets.token_hex(16)


class RequestSigner:
    """Signs requests with one account's keys (RocketMQ's ``AclClientRPCHook``): a
    :class:`~remoting.client.RemotingClient` ``rpc_hook``."""

    def __init__(
        self,
        credentials: SessionCredentials,
        *,
        now_ms: Callable[[], int] = wall_ms,
        nonce: Callable[[], str] = new_nonce,
    ) -> None:
        self.access_key = credentials.access_key
        self._secret = credentials.secret_key.encode("utf-8")
        self._now_ms = now_ms
        self._nonce = nonce

    def __repr__(self) -> str:
        return f"RequestSigner(access_key={self.access_key!r})"

    def __call__(self, request: RemotingCommand) -> RemotingCommand:
        """A copy of ``request`` with ``AccessKey``, ``ts``, ``nonce`` and ``Signature``."""
        fields = dict(request.ext_fields)
        fields[ACCESS_KEY] = self.access_key
        fields[TIMESTAMP] = str(self._now_ms())
        fields[NONCE] = self._nonce()
        fields.pop(SIGNATURE, None)
        content = signed_content(request.code, fields, request.body)
        fields[SIGNATURE] = compute_signature(self._secret, content)
        return dataclasses.replace(request, ext_fields=fields)
