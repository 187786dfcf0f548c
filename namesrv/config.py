"""NamesrvConfig: the name server's knobs, with RocketMQ's property names and defaults.

Rules:

- Fields are snake_case; each carries its RocketMQ camelCase key in ``metadata["key"]``
  (``listenPort``, ``scanNotActiveBrokerInterval``, ...), used by :meth:`from_properties` and
  :meth:`to_properties`.
- Intervals are in milliseconds and named ``*_ms``.
- :func:`load_properties` reads a Java ``.properties`` file; :meth:`NamesrvConfig.from_properties`
  converts values by the field's type and raises :class:`ValueError` naming the key on an
  unknown key or a bad value.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

_ESCAPES = {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}


def _key(name: str) -> dict[str, str]:
    return {"key": name}


@dataclass(frozen=True, slots=True)
class NamesrvConfig:
    """Name server settings (RocketMQ's ``NamesrvConfig`` plus the ``NettyServerConfig`` port)."""

    listen_port: int = field(default=9876, metadata=_key("listenPort"))
    bind_address: str = field(default="0.0.0.0", metadata=_key("bindAddress"))
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
    product_env_name: str = field(default="center", metadata=_key("productEnvName"))
    cluster_test: bool = field(default=False, metadata=_key("clusterTest"))
    order_message_enable: bool = field(default=False, metadata=_key("orderMessageEnable"))

    def __post_init__(self) -> None:
        if not 0 <= self.listen_port <= 65535:
            raise ValueError(f"listenPort must be in [0, 65535], got {self.listen_port}")
        if self.scan_not_active_broker_interval_ms <= 0:
            raise ValueError("scanNotActiveBrokerInterval must be > 0 ms")
        if self.broker_channel_expired_time_ms <= 0:
            raise ValueError("brokerChannelExpiredTime must be > 0 ms")

    @classmethod
    def property_keys(cls) -> dict[str, str]:
        """RocketMQ key -> field name, in declaration order."""
        return {f.metadata["key"]: f.name for f in dataclasses.fields(cls)}

    @classmethod
    def from_properties(cls, props: dict[str, str]) -> NamesrvConfig:
        """Build a config from RocketMQ-named string properties; absent keys keep defaults."""
        keys = cls.property_keys()
        types = {f.name: type(getattr(_DEFAULTS, f.name)) for f in dataclasses.fields(cls)}
        kwargs: dict[str, Any] = {}
        for key, raw in props.items():
            if key not in keys:
                known = ", ".join(sorted(keys))
                raise ValueError(f"unknown namesrv property {key!r} (known: {known})")
            name = keys[key]
            kwargs[name] = _convert(key, raw, types[name])
        try:
            return cls(**kwargs)
        except ValueError as exc:
            raise ValueError(f"bad namesrv properties: {exc}") from None

    def to_properties(self) -> str:
        """``key=value`` lines (as ``mqnamesrv -p`` prints), one per field, booleans lowercase."""
        lines = []
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            text = str(value).lower() if isinstance(value, bool) else str(value)
            lines.append(f"{f.metadata['key']}={text}")
        return "\n".join(lines) + "\n"


def _convert(key: str, raw: str, kind: type) -> Any:
    """``raw`` as ``kind`` (int, bool or str); ValueError names ``key`` on failure."""
    if kind is bool:
        lowered = raw.strip().lower()
        if lowered not in ("true", "false"):
            raise ValueError(f"property {key!r}: expected true or false, got {raw!r}")
        return lowered == "true"
    if kind is int:
        try:
            return int(raw.strip())
        except ValueError:
            raise ValueError(f"property {key!r}: expected an integer, got {raw!r}") from None
    return raw


_DEFAULTS = NamesrvConfig()


# --------------------------------------------------------------------------- .properties files


def parse_properties(text: str) -> dict[str, str]:
    """Parse Java ``.properties`` text (``java.util.Properties#load`` rules, simplified).

    Handles ``key=value``, ``key: value`` and ``key value``; ``#`` and ``!`` comment lines;
    blank lines; trimming; a trailing odd backslash continuing the line; ``\\t \\n \\r \\f
    \\uXXXX`` escapes and escaped separators in keys. Later duplicates win.
    """
    props: dict[str, str] = {}
    for line in _logical_lines(text):
        key, value = _split_entry(line)
        props[key] = value
    return props


def load_properties(path: str | Path) -> dict[str, str]:
    """Read and parse a ``.properties`` file (UTF-8)."""
    return parse_properties(Path(path).read_text(encoding="utf-8"))


def _ends_with_continuation(line: str) -> bool:
    trailing = len(line) - len(line.rstrip("\\"))
    return trailing % 2 == 1


def _logical_lines(text: str) -> list[str]:
    """Join continued lines; drop blank and comment lines; strip leading whitespace."""
    out: list[str] = []
    pending: str | None = None
    for physical in text.splitlines():
        stripped = physical.lstrip(" \t\f")
        if pending is None:
            if not stripped or stripped[0] in "#!":
                continue
            current = stripped
        else:
            current = pending + stripped
        if _ends_with_continuation(current):
            pending = current[:-1]
            continue
        pending = None
        out.append(current)
    if pending is not None:
        out.append(pending)
    return out


def _split_entry(line: str) -> tuple[str, str]:
    """Split one logical line at the first unescaped ``=``, ``:`` or whitespace."""
    i = 0
    n = len(line)
    while i < n:
        ch = line[i]
        if ch == "\\":
            i += 2
            continue
        if ch in "=: \t\f":
            break
        i += 1
    key = line[:i]
    rest = line[i:].lstrip(" \t\f")
    if rest[:1] in ("=", ":"):
        rest = rest[1:].lstrip(" \t\f")
    return _unescape(key), _unescape(rest).rstrip()


def _unescape(text: str) -> str:
    out: list[str] = []
    i = 0
    while i < len(text):
        ch = text[i]
        if ch != "\\" or i + 1 == len(text):
            out.append(ch)
            i += 1
            continue
        nxt = text[i + 1]
        if nxt == "u":
            digits = text[i + 2 : i + 6]
            try:
                out.append(chr(int(digits, 16)))
            except ValueError:
                raise ValueError(f"malformed \\uXXXX escape: {text[i : i + 6]!r}") from None
            i += 6
            continue
        out.append(_ESCAPES.get(nxt, nxt))
        i += 2
    return "".join(out)
