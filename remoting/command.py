"""The unit of the remoting protocol: one request or response (RocketMQ's ``RemotingCommand``).

Rules:

- ``flag`` bit 0 (:data:`RPC_TYPE`) set means *response*; bit 1 (:data:`RPC_ONEWAY`) set means a
  *oneway* request (no response expected). So request = 0, response = 1, oneway request = 2.
- ``opaque`` is the request id chosen by the requester; a response copies it.
- ``code``, ``opaque``, ``flag``, ``language`` and ``version`` are Java ``int`` values: they must
  fit in a signed 32-bit integer. ``code`` stays a plain ``int`` so unknown codes survive decoding.
- ``ext_fields`` are the request/response header fields. Keys are ``str``; values are ``str``,
  ``int``, ``float``, ``bool``, ``bytes`` or ``None`` (RocketMQ sends only strings; msgpack lets us
  keep the type).
- :meth:`RemotingCommand.to_wire` and :meth:`RemotingCommand.from_wire` convert to and from the
  msgpack map carried by a frame (keys ``code``, ``language``, ``version``, ``opaque``, ``flag``,
  ``remark``, ``extFields``, ``body``; an empty remark, extFields or body is omitted). Invalid
  values raise :class:`~remoting.errors.LocalProtocolError` from ``to_wire`` (we would send them)
  and :class:`~remoting.errors.RemoteProtocolError` from ``from_wire`` (the peer sent them).
  Unknown keys in a wire map are ignored, so peers can add fields.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final, TypeAlias

from remoting.codes import LanguageCode
from remoting.errors import LocalProtocolError, ProtocolError, RemoteProtocolError

RPC_TYPE: Final = 0  # flag bit: response
RPC_ONEWAY: Final = 1  # flag bit: oneway request
_RESPONSE_FLAG: Final = 1 << RPC_TYPE
_ONEWAY_FLAG: Final = 1 << RPC_ONEWAY

INT32_MIN: Final = -(2**31)
INT32_MAX: Final = 2**31 - 1

#: Protocol version this implementation speaks (sent in every command).
CURRENT_VERSION: Final = 0

ExtValue: TypeAlias = str | int | float | bool | bytes | None
_EXT_VALUE_TYPES: Final = (str, int, float, bool, bytes, type(None))


@dataclass(frozen=True, slots=True)
class RemotingCommand:
    """One request or response; build them with :meth:`request` and :meth:`response_to`."""

    code: int
    opaque: int
    flag: int = 0
    remark: str = ""
    ext_fields: dict[str, ExtValue] = field(default_factory=dict, hash=False)
    body: bytes = b""
    language: int = LanguageCode.PYTHON
    version: int = CURRENT_VERSION

    @property
    def is_response(self) -> bool:
        """True when the response bit (``RPC_TYPE``) is set."""
        return bool(self.flag & _RESPONSE_FLAG)

    @property
    def is_oneway(self) -> bool:
        """True when the oneway bit (``RPC_ONEWAY``) is set."""
        return bool(self.flag & _ONEWAY_FLAG)

    @classmethod
    def request(
        cls,
        code: int,
        ext_fields: Mapping[str, ExtValue] | None = None,
        body: bytes = b"",
        *,
        opaque: int,
        oneway: bool = False,
    ) -> RemotingCommand:
        """Return a request with ``code``; ``oneway`` sets the ``RPC_ONEWAY`` bit."""
        return cls(
            code=int(code),
            opaque=opaque,
            flag=_ONEWAY_FLAG if oneway else 0,
            ext_fields=dict(ext_fields or {}),
            body=body,
        )

    @classmethod
    def response_to(
        cls,
        request: RemotingCommand,
        code: int,
        *,
        remark: str = "",
        ext_fields: Mapping[str, ExtValue] | None = None,
        body: bytes = b"",
    ) -> RemotingCommand:
        """Return the response to ``request``: same ``opaque``, response bit set."""
        return cls(
            code=int(code),
            opaque=request.opaque,
            flag=_RESPONSE_FLAG,
            remark=remark,
            ext_fields=dict(ext_fields or {}),
            body=body,
        )

    def with_opaque(self, opaque: int, flag: int) -> RemotingCommand:
        """This command with another ``opaque`` and ``flag`` (what a channel sends)."""
        return RemotingCommand(
            self.code,
            opaque,
            flag,
            self.remark,
            self.ext_fields,
            self.body,
            self.language,
            self.version,
        )

    def to_wire(self) -> dict[str, Any]:
        """Return the msgpack-ready map for this command; raise LocalProtocolError if invalid."""
        if not _valid(
            self.code, self.opaque, self.flag, self.language, self.version, self.remark,
            self.ext_fields, self.body,
        ):  # fmt: skip
            _check_wire(self._raw_fields(), LocalProtocolError)  # raises, naming the field
        wire: dict[str, Any] = {
            "code": int(self.code),
            "language": int(self.language),
            "version": int(self.version),
            "opaque": int(self.opaque),
            "flag": int(self.flag),
        }
        if self.remark:
            wire["remark"] = self.remark
        if self.ext_fields:
            wire["extFields"] = self.ext_fields  # packed at once by the caller, never kept
        if self.body:
            wire["body"] = self.body
        return wire

    @classmethod
    def from_wire(cls, wire: object) -> RemotingCommand:
        """Build a command from a decoded map; raise RemoteProtocolError if it is malformed."""
        if not isinstance(wire, dict):
            raise RemoteProtocolError(f"command must be a map, got {type(wire).__name__}")
        get = wire.get
        code = get("code")
        opaque = get("opaque")
        flag = get("flag", 0)
        language = get("language", LanguageCode.OTHER)
        version = get("version", 0)
        remark = get("remark", "")
        ext = get("extFields", _NO_FIELDS)
        body = get("body", b"")
        if code is None or opaque is None:
            raise RemoteProtocolError(
                f"command has no {'code' if code is None else 'opaque'!r} field"
            )
        if not _valid(code, opaque, flag, language, version, remark, ext, body):
            _check_wire(  # raises, naming the field
                {
                    "code": code, "opaque": opaque, "flag": flag, "language": language,
                    "version": version, "remark": remark, "extFields": ext, "body": body,
                },
                RemoteProtocolError,
            )  # fmt: skip
        return cls(
            code,
            opaque,
            flag,
            remark,
            ext if ext is not _NO_FIELDS else {},  # the decoded map is ours: no copy
            body,
            _LANGUAGES.get(language, language),  # type: ignore[arg-type]  # checked by _valid
            version,
        )

    def _raw_fields(self) -> dict[str, object]:
        """This command's fields under their wire names, unconverted (for validation)."""
        return {
            "code": self.code,
            "opaque": self.opaque,
            "flag": self.flag,
            "language": self.language,
            "version": self.version,
            "remark": self.remark,
            "extFields": self.ext_fields,
            "body": self.body,
        }


_NO_FIELDS: Final[dict[str, ExtValue]] = {}
_LANGUAGES: Final = dict(LanguageCode._value2member_map_)
_EXT_VALUE_TYPE_SET: Final = frozenset(_EXT_VALUE_TYPES)
_STR_ONLY: Final = frozenset({str})
_LANGUAGE_TYPES: Final = frozenset({int, LanguageCode})


def _valid(
    code: object,
    opaque: object,
    flag: object,
    language: object,
    version: object,
    remark: object,
    ext: object,
    body: object,
) -> bool:
    """Fast check of what :func:`_check_wire` checks (the hot path of every frame)."""
    if not (
        type(code) is int
        and type(opaque) is int
        and type(flag) is int
        and type(version) is int
        and type(language) in _LANGUAGE_TYPES
    ):
        return False  # maybe an IntEnum (allowed) or a bool (not): the full check decides
    if not (
        INT32_MIN <= code <= INT32_MAX
        and INT32_MIN <= opaque <= INT32_MAX
        and INT32_MIN <= flag <= INT32_MAX
        and INT32_MIN <= version <= INT32_MAX
        and isinstance(language, int)  # checked above; narrows for the range
        and INT32_MIN <= language <= INT32_MAX
    ):
        return False
    return (
        type(remark) is str
        and type(body) is bytes
        and type(ext) is dict
        and set(map(type, ext)) <= _STR_ONLY
        and set(map(type, ext.values())) <= _EXT_VALUE_TYPE_SET
    )


def _check_wire(fields: Mapping[str, object], error: type[ProtocolError]) -> None:
    """Raise ``error`` unless every field has the type and range the protocol allows."""
    for key in ("code", "opaque", "flag", "language", "version"):
        value = fields[key]
        if not isinstance(value, int) or isinstance(value, bool):
            raise error(f"field {key!r} must be an int, got {type(value).__name__}")
        if not INT32_MIN <= value <= INT32_MAX:
            raise error(f"field {key!r} = {value} does not fit in a signed 32-bit int")
    remark = fields["remark"]
    if not isinstance(remark, str):
        raise error(f"field 'remark' must be a str, got {type(remark).__name__}")
    body = fields["body"]
    if not isinstance(body, bytes):
        raise error(f"field 'body' must be bytes, got {type(body).__name__}")
    ext = fields["extFields"]
    if not isinstance(ext, dict):
        raise error(f"field 'extFields' must be a map, got {type(ext).__name__}")
    for name, value in ext.items():
        if not isinstance(name, str):
            raise error(f"extFields key {name!r} must be a str, got {type(name).__name__}")
        if not isinstance(value, _EXT_VALUE_TYPES):
            raise error(
                f"extFields[{name!r}] must be str/int/float/bool/bytes/None, "
                f"got {type(value).__name__}"
            )
