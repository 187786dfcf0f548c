"""Options of the ``minimq`` Spark data source: parsing and validation, pure (no Spark).

Spark passes options as a case-insensitive map of strings; every check here raises
:class:`OptionError` naming the option, so a bad query fails when it starts.

Readers and writers take the same security options (:class:`SecurityOptions`): an ACL account
(``accessKey`` / ``secretKey``, RocketMQ's names, as in ``tools.yml`` and ``broker.conf``) and
TLS with the client keys of RocketMQ's ``tls.properties`` (``tls.enable``, ``tls.client.*``),
or that file itself (``tls.config.file``: read where each client is built, on the driver and on
every executor; the ``tls.*`` options given override its keys). TLS keys given by neither keep
the process's defaults from the environment (``MINIMQ_TLS_CONFIG_FILE`` / ``MINIMQ_TLS_ENABLE``,
see :mod:`client.config`). No message here ever shows an option's value for the secret.

Readers filter by ``tags`` (a TAG expression) or by ``sql`` (an SQL92 selector over message
properties, RocketMQ's ``MessageSelector.bySql``; brokers need ``enablePropertyFilter=true``),
not both; the selector is parsed here with the brokers' own grammar.
"""

from __future__ import annotations

import socket
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Final

from client.config import ClientConfig
from client.spark.offsets import OffsetError, OffsetMap, parse_spec
from common.properties import load_properties
from common.sql_filter import EXPRESSION_SQL92, compile_sql_cached
from common.subscription import MessageSelector, SubscriptionExpression, parse_tags
from common.topic import group_problem
from remoting.tls_config import (
    TLS_CLIENT_AUTHSERVER,
    TLS_CLIENT_CERTPATH,
    TLS_CLIENT_KEYPASSWORD,
    TLS_CLIENT_KEYPATH,
    TLS_CLIENT_TRUSTCERTPATH,
    TLS_CONFIG_FILE,
    TLS_ENABLE,
    TLS_TEST_MODE_ENABLE,
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
    TLS_CLIENT_KEYPASSWORD: "tls_key_password",
}
"""TLS option -> the :class:`~client.config.ClientConfig` field it sets."""
_TLS_BOOLS: Final = frozenset({TLS_ENABLE, TLS_CLIENT_AUTHSERVER})
SECURITY_NAMES: Final = (ACCESS_KEY, SECRET_KEY, *TLS_OPTIONS, TLS_CONFIG_FILE)
TAGS: Final = "tags"
SQL: Final = "sql"

_NAMES = (
    "namesrv",
    "topic",
    "startingOffsets",
    "endingOffsets",
    "startingTimestamp",
    "maxOffsetsPerTrigger",
    TAGS,
    SQL,
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
    tls: tuple[TlsSetting, ...] = field(default=(), repr=False)
    """The TLS fields given as options, sorted (the others come from :attr:`tls_config_file`,
    then from the environment); out of ``repr``, as it may hold the key's password."""
    tls_config_file: str = ""
    """The ``tls.config.file`` option: a ``tls.properties`` file, read in each process that
    builds a client (the driver and every executor), or ``""``."""

    @property
    def is_default(self) -> bool:
        """No account and no TLS option: clients are built exactly as without these options."""
        return not self.access_key and not self.tls and not self.tls_config_file

    def tls_settings(self) -> tuple[TlsSetting, ...]:
        """The TLS fields of the clients: :attr:`tls_config_file`'s (read now, in the calling
        process; OptionError naming the option when it cannot be used), overridden by the
        ``tls.*`` options."""
        if not self.tls_config_file:
            return self.tls
        return merge_tls(read_tls_config_file(self.tls_config_file), self.tls)

    def config_kwargs(self) -> dict[str, object]:
        """Keyword arguments of :meth:`ClientConfig.create` for these settings."""
        kwargs: dict[str, object] = dict(self.tls_settings())
        if self.access_key:
            kwargs.update(access_key=self.access_key, secret_key=self.secret_key)
        return kwargs

    def client_config(self, namesrv: str) -> ClientConfig:
        """The client config for ``namesrv`` with these settings, built in the calling process
        (its IP, its copy of the ``tls.config.file`` file, and the environment's TLS defaults
        for the TLS fields given by neither)."""
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
    sql: str | None = None
    """The ``sql`` option: an SQL92 selector (then ``tags`` is ``"*"``), or None."""

    @property
    def expression(self) -> SubscriptionExpression:
        """What the pulls subscribe with: the ``sql`` selector, else the ``tags`` expression."""
        if self.sql is not None:
            return MessageSelector(EXPRESSION_SQL92, self.sql)
        return self.tags


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


def _tls_value(name: str, raw: str) -> TlsSetting | None:
    """The ClientConfig field of TLS key ``name`` and its value (None when ``raw`` is blank);
    ValueError naming the key for a boolean that is not true or false."""
    value = raw.strip()
    if not value:
        return None
    if name not in _TLS_BOOLS:
        return TLS_OPTIONS[name], value
    return TLS_OPTIONS[name], parse_bool({name: value}, name, default=False)


def _tls(opts: Mapping[str, str]) -> tuple[TlsSetting, ...]:
    """The TLS options given (blank ones are not given), as ClientConfig fields, sorted."""
    given: list[TlsSetting] = []
    for name in TLS_OPTIONS:
        raw = opts.get(name.lower(), "")
        try:
            setting = _tls_value(name, raw)
        except ValueError:
            raise OptionError(f"option '{name}' must be true or false, got {raw!r}") from None
        if setting is not None:
            given.append(setting)
    return tuple(sorted(given))


def tls_file_settings(props: Mapping[str, str], path: str) -> tuple[TlsSetting, ...]:
    """The client TLS fields of ``props``, the keys of the ``tls.properties`` file ``path``
    (``tls.enable``, ``tls.client.*``; other keys, server ones included, are ignored), sorted.
    OptionError naming the option, the file and the key for a bad value, for
    ``tls.test.mode.enable=true`` (refused, as everywhere), or when the file sets none of the
    client keys (a wrong file would otherwise leave the query in plaintext unnoticed)."""
    where = f"option '{TLS_CONFIG_FILE}' ({path})"
    try:
        if parse_bool(props, TLS_TEST_MODE_ENABLE, default=False):
            raise ValueError(
                f"{TLS_TEST_MODE_ENABLE}=true is not supported (RocketMQ's test mode verifies "
                "nothing): set it to false or leave it out"
            )
        settings = [_tls_value(name, props.get(name, "")) for name in TLS_OPTIONS]
    except ValueError as exc:
        raise OptionError(f"{where}: {exc}") from None
    given = tuple(sorted(s for s in settings if s is not None))
    if not given:
        raise OptionError(
            f"{where}: the file sets none of the client TLS keys ({', '.join(TLS_OPTIONS)})"
        )
    return given


def read_tls_config_file(path: str) -> tuple[TlsSetting, ...]:
    """:func:`tls_file_settings` of the file ``path``, read now by the calling process (the
    driver when the query starts, each executor when it builds its client); OptionError
    naming the option, the path and the host when it cannot be read or parsed."""
    try:
        props = load_properties(path)
    except OSError as exc:
        raise OptionError(
            f"option '{TLS_CONFIG_FILE}': cannot read {path} on host {socket.gethostname()}: "
            f"{exc.strerror or exc} (the file must be readable at this path on the driver "
            "and on every executor)"
        ) from None
    except ValueError as exc:  # a malformed escape; the message names the file and line
        raise OptionError(f"option '{TLS_CONFIG_FILE}': {exc}") from None
    return tls_file_settings(props, path)


def merge_tls(
    base: tuple[TlsSetting, ...], overrides: tuple[TlsSetting, ...]
) -> tuple[TlsSetting, ...]:
    """``base`` with the fields of ``overrides`` replacing its own, sorted."""
    return tuple(sorted({**dict(base), **dict(overrides)}.items()))


def _check_client_certificate(settings: tuple[TlsSetting, ...], from_file: bool) -> None:
    """OptionError unless the client certificate and its key are given together (in the
    options, or between the options and the file)."""
    keys = {key for key, _ in settings}
    if ("tls_cert_path" in keys) != ("tls_key_path" in keys):
        where = f" (as options or in the file of '{TLS_CONFIG_FILE}')" if from_file else ""
        raise OptionError(
            f"options '{TLS_CLIENT_CERTPATH}' and '{TLS_CLIENT_KEYPATH}' go together: give "
            f"both{where}"
        )


def parse_security(options: Mapping[str, str]) -> SecurityOptions:
    """The ACL and TLS options among ``options`` (any case); the ``tls.config.file`` file is
    read and checked now, so a query whose file the driver cannot use fails at start."""
    opts = _lower(options)
    access_key, secret_key = _account(opts)
    path = opts.get(TLS_CONFIG_FILE, "").strip()
    security = SecurityOptions(access_key, secret_key, _tls(opts), path)
    _check_client_certificate(security.tls_settings(), bool(path))  # the file is read here too
    return security


def _topics(raw: str) -> tuple[str, ...]:
    topics = tuple(t.strip() for t in raw.split(","))
    if any(not t for t in topics):
        raise OptionError(f"option 'topic' has an empty name in {raw!r}")
    return tuple(dict.fromkeys(topics))


def _tags(opts: Mapping[str, str]) -> str:
    """The ``tags`` option (``"*"`` when absent or blank), checked."""
    tags = opts.get(TAGS, "*").strip() or "*"
    try:
        parse_tags(tags)
    except ValueError as exc:
        raise OptionError(f"option '{TAGS}': {exc}") from None
    return tags


def _sql(raw: str) -> str:
    """The ``sql`` option, parsed with the brokers' selector grammar (OptionError saying
    where it does not parse)."""
    sql = raw.strip()
    if not sql:
        raise OptionError(f"option '{SQL}' is empty: give an SQL92 selector, e.g. \"a > 5\"")
    try:
        compile_sql_cached(sql)
    except ValueError as exc:
        raise OptionError(f"option '{SQL}' is not a valid SQL92 selector: {exc}") from None
    return sql


def _filter(opts: Mapping[str, str]) -> tuple[str, str | None]:
    """``(tags, sql)``: the TAG expression and the SQL92 selector, which exclude each other."""
    if SQL not in opts:
        return _tags(opts), None
    if TAGS in opts:
        raise OptionError(
            f"options '{TAGS}' and '{SQL}' exclude each other: filter by tags or by an SQL92 "
            "selector (which can test the tag too: TAGS = 'A' or TAGS IN ('A', 'B'))"
        )
    return "*", _sql(opts[SQL])


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
    tags, sql = _filter(opts)
    group = _group(opts)
    return ReadOptions(
        namesrv=namesrv,
        topics=topics,
        starting=starting,
        ending=ending,
        starting_timestamp=timestamp,
        max_offsets_per_trigger=_int(opts, "maxOffsetsPerTrigger", 1),
        tags=tags,
        sql=sql,
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
