"""Options of the ``minimq`` Spark data source: parsing and validation, pure (no Spark).

Spark passes options as a case-insensitive map of strings; every check here raises
:class:`OptionError` naming the option, so a bad query fails when it starts.

Readers and writers take the same security options (:class:`SecurityOptions`): an ACL account
(``accessKey`` / ``secretKey``, RocketMQ's names, as in ``tools.yml`` and ``broker.conf``) and
TLS with the client keys of RocketMQ's ``tls.properties`` (``tls.enable``, ``tls.client.*``).
TLS keys that are not given keep the process's defaults from the environment
(``MINIMQ_TLS_CONFIG_FILE`` / ``MINIMQ_TLS_ENABLE``, see :mod:`client.config`). No message
here ever shows an option's value for the secret.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Final

from client.config import ClientConfig
from client.spark.offsets import OffsetError, OffsetMap, parse_spec
from common.subscription import parse_tags
from common.topic import group_problem
from remoting.tls_config import (
    TLS_CLIENT_AUTHSERVER,
    TLS_CLIENT_CERTPATH,
    TLS_CLIENT_KEYPATH,
    TLS_CLIENT_TRUSTCERTPATH,
    TLS_ENABLE,
    parse_bool,
)

ACCESS_KEY: Final = "accessKey"
SECRET_KEY: Final = "secretKey"
TLS_OPTIONS: Final = {
    TLS_ENABLE: "use_tls",
    TLS_CLIENT_AUTHSERVER: "tls_auth_server",
    TLS_CLIENT_TRUSTCERTPATH: "tls_trust_cert_path",
    TLS_CLIENT_CERTPATH: "tls_cert_path",
    TLS_CLIENT_KEYPATH: "tls_key_path",
}
"""TLS option -> the :class:`~client.config.ClientConfig` field it sets."""
_TLS_BOOLS: Final = frozenset({TLS_ENABLE, TLS_CLIENT_AUTHSERVER})
SECURITY_NAMES: Final = (ACCESS_KEY, SECRET_KEY, *TLS_OPTIONS)

_NAMES = (
    "namesrv",
    "topic",
    "startingOffsets",
    "endingOffsets",
    "startingTimestamp",
    "maxOffsetsPerTrigger",
    "tags",
    "failOnDataLoss",
    "pullBatchSize",
    "group",
    "batchSize",
    *SECURITY_NAMES,
)
CANONICAL = {n.lower(): n for n in _NAMES}
"""Spark lower-cases option names; messages use the documented spelling."""
_SECURITY = frozenset(n.lower() for n in SECURITY_NAMES)
READ_OPTIONS = frozenset(n.lower() for n in _NAMES if n != "batchSize")
WRITE_OPTIONS = frozenset({"namesrv", "topic", "group", "batchsize"}) | _SECURITY
SPARK_OPTIONS = frozenset({"checkpointlocation", "queryname"})
"""Options Spark itself passes on to a data source (ignored): a streaming sink gets the
checkpoint location and the query's name (``writeStream.queryName(...)``)."""

DEFAULT_PULL_BATCH = 32
DEFAULT_SINK_GROUP = "minimq-spark-sink"
DEFAULT_SINK_BATCH = 32
MAX_SINK_BATCH = 1024


class OptionError(ValueError):
    """An unknown, missing or malformed option (the message names it)."""


TlsSetting = tuple[str, str | bool]
"""A :class:`~client.config.ClientConfig` TLS field and its value."""


@dataclass(frozen=True, slots=True)
class SecurityOptions:
    """The ACL account and TLS settings of a query's clients; picklable and hashable (part of
    the key of a worker's shared client instance: two accounts never share one). The secret
    is compared but stays out of ``repr``."""

    access_key: str = ""
    secret_key: str = field(default="", repr=False)
    tls: tuple[TlsSetting, ...] = ()
    """The TLS fields given as options, sorted (the others come from the environment)."""

    @property
    def is_default(self) -> bool:
        """No account and no TLS option: clients are built exactly as without these options."""
        return not self.access_key and not self.tls

    def config_kwargs(self) -> dict[str, object]:
        """Keyword arguments of :meth:`ClientConfig.create` for these settings."""
        kwargs: dict[str, object] = dict(self.tls)
        if self.access_key:
            kwargs.update(access_key=self.access_key, secret_key=self.secret_key)
        return kwargs

    def client_config(self, namesrv: str) -> ClientConfig:
        """The client config for ``namesrv`` with these settings, built in the calling process
        (its IP, and the environment's TLS defaults for the TLS fields not given)."""
        return ClientConfig.create(namesrv, **self.config_kwargs())


NO_SECURITY: Final = SecurityOptions()


def acl_hint(security: SecurityOptions) -> str:
    """What to add to a refusal for lack of permission (``NO_PERMISSION``): the options to
    give, or the account to check (named by its access key, never the secret)."""
    if not security.access_key:
        return (
            f" (the brokers have ACL on: give the options '{ACCESS_KEY}' and '{SECRET_KEY}' "
            "of an account allowed to use the topic and group)"
        )
    return (
        f" (check the ACL account '{security.access_key}' of option '{ACCESS_KEY}': its "
        "secret, and its permissions on the topic and group)"
    )


@dataclass(frozen=True, slots=True)
class ReadOptions:
    """What a reader needs; picklable."""

    namesrv: str
    topics: tuple[str, ...]
    starting: str | OffsetMap | None = None
    ending: str | OffsetMap | None = None
    starting_timestamp: int | None = None
    max_offsets_per_trigger: int | None = None
    tags: str = "*"
    fail_on_data_loss: bool = True
    pull_batch_size: int = DEFAULT_PULL_BATCH
    group: str | None = None
    security: SecurityOptions = NO_SECURITY


@dataclass(frozen=True, slots=True)
class WriteOptions:
    """What a writer needs; picklable."""

    namesrv: str
    topic: str | None = None
    group: str = DEFAULT_SINK_GROUP
    batch_size: int = DEFAULT_SINK_BATCH
    security: SecurityOptions = NO_SECURITY


def _lower(options: Mapping[str, str]) -> dict[str, str]:
    return {str(k).lower(): str(v) for k, v in options.items()}


def _check_known(opts: Mapping[str, str], known: frozenset[str], what: str) -> None:
    unknown = sorted(set(opts) - known - SPARK_OPTIONS)
    if unknown:
        names = ", ".join(CANONICAL.get(u, u) for u in unknown)
        raise OptionError(
            f"unknown option(s) for the minimq {what}: {names} "
            f"(known: {', '.join(CANONICAL[k] for k in sorted(known))})"
        )


def _required(opts: Mapping[str, str], name: str) -> str:
    value = opts.get(name.lower(), "").strip()
    if not value:
        raise OptionError(f"option '{name}' is required")
    return value


def _int(opts: Mapping[str, str], name: str, lo: int, hi: int | None = None) -> int | None:
    raw = opts.get(name.lower())
    if raw is None:
        return None
    try:
        value = int(raw.strip())
    except ValueError:
        raise OptionError(f"option '{name}' must be an integer, got {raw!r}") from None
    if value < lo or (hi is not None and value > hi):
        bound = f">= {lo}" if hi is None else f"in [{lo}, {hi}]"
        raise OptionError(f"option '{name}' must be {bound}, got {value}")
    return value


def _bool(opts: Mapping[str, str], name: str, default: bool) -> bool:
    raw = opts.get(name.lower())
    if raw is None:
        return default
    value = raw.strip().lower()
    if value not in ("true", "false"):
        raise OptionError(f"option '{name}' must be true or false, got {raw!r}")
    return value == "true"


def _spec(opts: Mapping[str, str], name: str) -> str | OffsetMap | None:
    raw = opts.get(name.lower())
    if raw is None:
        return None
    try:
        return parse_spec(raw, f"option '{name}'")
    except OffsetError as exc:
        raise OptionError(str(exc)) from None


def _group(opts: Mapping[str, str]) -> str | None:
    """The ``group`` option (None when absent or blank), checked by the broker's naming rule."""
    group = opts.get("group", "").strip() or None
    if group is not None:
        problem = group_problem(group)
        if problem is not None:
            raise OptionError(f"option 'group': {problem}")
    return group


def _account(opts: Mapping[str, str]) -> tuple[str, str]:
    """``(accessKey, secretKey)``, both or neither (the secret's value is never shown)."""
    access_key = opts.get(ACCESS_KEY.lower(), "").strip()
    secret_key = opts.get(SECRET_KEY.lower(), "").strip()
    if bool(access_key) != bool(secret_key):
        raise OptionError(f"options '{ACCESS_KEY}' and '{SECRET_KEY}' go together: give both")
    return access_key, secret_key


def _tls_setting(opts: Mapping[str, str], name: str) -> TlsSetting | None:
    raw = opts.get(name.lower(), "").strip()
    if not raw:
        return None
    if name not in _TLS_BOOLS:
        return TLS_OPTIONS[name], raw
    try:
        return TLS_OPTIONS[name], parse_bool({name: raw}, name, default=False)
    except ValueError:
        raise OptionError(f"option '{name}' must be true or false, got {raw!r}") from None


def _tls(opts: Mapping[str, str]) -> tuple[TlsSetting, ...]:
    """The TLS options given (blank ones are not given), as ClientConfig fields."""
    settings = (_tls_setting(opts, name) for name in TLS_OPTIONS)
    given = sorted(s for s in settings if s is not None)
    keys = {key for key, _ in given}
    if ("tls_cert_path" in keys) != ("tls_key_path" in keys):
        raise OptionError(
            f"options '{TLS_CLIENT_CERTPATH}' and '{TLS_CLIENT_KEYPATH}' go together: give both"
        )
    return tuple(given)


def parse_security(options: Mapping[str, str]) -> SecurityOptions:
    """The ACL and TLS options among ``options`` (any case)."""
    opts = _lower(options)
    access_key, secret_key = _account(opts)
    return SecurityOptions(access_key, secret_key, _tls(opts))


def _topics(raw: str) -> tuple[str, ...]:
    topics = tuple(t.strip() for t in raw.split(","))
    if any(not t for t in topics):
        raise OptionError(f"option 'topic' has an empty name in {raw!r}")
    return tuple(dict.fromkeys(topics))


def parse_read(options: Mapping[str, str], *, streaming: bool) -> ReadOptions:
    """Validate reader options (``streaming`` rejects ``endingOffsets``)."""
    opts = _lower(options)
    _check_known(opts, READ_OPTIONS, "source")
    namesrv = _required(opts, "namesrv")
    topics = _topics(_required(opts, "topic"))
    starting = _spec(opts, "startingOffsets")
    ending = _spec(opts, "endingOffsets")
    if streaming and ending is not None:
        raise OptionError("option 'endingOffsets' is for batch queries only")
    if ending == "earliest":
        raise OptionError("option 'endingOffsets' cannot be 'earliest'")
    timestamp = _int(opts, "startingTimestamp", 0)
    if timestamp is not None and starting is not None:
        raise OptionError("options 'startingTimestamp' and 'startingOffsets' exclude each other")
    tags = opts.get("tags", "*").strip() or "*"
    try:
        parse_tags(tags)
    except ValueError as exc:
        raise OptionError(f"option 'tags': {exc}") from None
    group = _group(opts)
    return ReadOptions(
        namesrv=namesrv,
        topics=topics,
        starting=starting,
        ending=ending,
        starting_timestamp=timestamp,
        max_offsets_per_trigger=_int(opts, "maxOffsetsPerTrigger", 1),
        tags=tags,
        fail_on_data_loss=_bool(opts, "failOnDataLoss", True),
        pull_batch_size=_int(opts, "pullBatchSize", 1, 1024) or DEFAULT_PULL_BATCH,
        group=group,
        security=parse_security(opts),
    )


def parse_write(options: Mapping[str, str]) -> WriteOptions:
    """Validate sink options."""
    opts = _lower(options)
    _check_known(opts, WRITE_OPTIONS, "sink")
    topic = opts.get("topic", "").strip() or None
    if topic is not None and "," in topic:
        raise OptionError(f"option 'topic' of the sink names one topic, got {topic!r}")
    return WriteOptions(
        namesrv=_required(opts, "namesrv"),
        topic=topic,
        group=_group(opts) or DEFAULT_SINK_GROUP,
        batch_size=_int(opts, "batchSize", 1, MAX_SINK_BATCH) or DEFAULT_SINK_BATCH,
        security=parse_security(opts),
    )
