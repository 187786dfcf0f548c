"""``plain_acl.yml``: the accounts file (RocketMQ's ``PlainPermissionManager``).

The shape is RocketMQ's ``distribution/conf/plain_acl.yml``::

    globalWhiteRemoteAddresses: [10.10.103.*]      # optional
    accounts:
      - accessKey: RocketMQ
        secretKey: "12345678"
        whiteRemoteAddress: 192.168.0.*             # optional
        admin: false
        defaultTopicPerm: DENY
        defaultGroupPerm: SUB
        topicPerms: [topicA=DENY, topicB=PUB|SUB]
        groupPerms: [groupA=DENY, groupB=SUB]       # checked as %RETRY%groupA, ...

Rules:

- :func:`parse_acl_config` reads the YAML text; :func:`load_acl_config` a file. Anything
  RocketMQ refuses is refused here, with :class:`AclConfigError` naming the account (never its
  secret): a missing or too short ``accessKey`` / ``secretKey`` (RocketMQ wants more than 6
  characters), a duplicate ``accessKey``, a permission other than ``PUB``, ``SUB``,
  ``PUB|SUB``, ``SUB|PUB``, ``DENY``, a resource entry not ``name=PERM``, an address pattern
  of no known form. Unknown keys are refused too (a misspelt ``topicPerm`` would silently
  grant the defaults).
- ``defaultTopicPerm`` / ``defaultGroupPerm`` default to ``DENY``, as RocketMQ's
  ``parsePermFromString(null)``; ``admin`` to false.
- Group permissions are stored under the group's retry topic ``%RETRY%<group>``, as RocketMQ
  does, so one table answers for topics and groups.
- An empty file, or one without ``accounts``, is a valid file with no account: every signed
  request is then refused.
"""

from __future__ import annotations

import stat
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import yaml

from common.topic import RETRY_GROUP_TOPIC_PREFIX
from remoting.acl.address import AddressPattern, AddressPatternError, parse_address_pattern
from remoting.acl.permission import DENY, PermissionSyntaxError, parse_perm

PLAIN_ACL_FILE: Final = "plain_acl.yml"
"""The accounts file's name (RocketMQ's ``conf/plain_acl.yml``)."""
KEY_MIN_LENGTH: Final = 6
"""``accessKey`` and ``secretKey`` must be longer than this (RocketMQ's ``ACCESS_KEY_MIN_LENGTH``
/ ``SECRET_KEY_MIN_LENGTH``)."""

ACCOUNT_KEY_ORDER: Final = (
    "accessKey",
    "secretKey",
    "whiteRemoteAddress",
    "admin",
    "defaultTopicPerm",
    "defaultGroupPerm",
    "topicPerms",
    "groupPerms",
)
"""An account's keys, in the order of RocketMQ's ``plain_acl.yml`` (and of a file the broker
writes)."""
_ACCOUNT_KEYS: Final = frozenset(ACCOUNT_KEY_ORDER)
_TOP_KEYS: Final = frozenset({"globalWhiteRemoteAddresses", "accounts", "dataVersion"})


class AclConfigError(ValueError):
    """The accounts file cannot be used; the message says where and why (no secret in it)."""


@dataclass(frozen=True, slots=True)
class Account:
    """One account (RocketMQ's ``PlainAccessResource`` as built from the file)."""

    access_key: str
    secret_key: str = field(repr=False)
    white_remote_address: AddressPattern | None = None
    admin: bool = False
    default_topic_perm: int = DENY
    default_group_perm: int = DENY
    resource_perms: Mapping[str, int] = field(default_factory=dict)
    """Topic or ``%RETRY%group`` -> its explicit permission bits."""


@dataclass(frozen=True, slots=True)
class AclConfig:
    """The whole file: the global address list and the accounts by access key."""

    global_white_remote_addresses: tuple[AddressPattern, ...] = ()
    accounts: Mapping[str, Account] = field(default_factory=dict)


def load_acl_config(path: Path) -> AclConfig:
    """Read and parse ``path``; AclConfigError (naming the file) when it is missing, not
    readable or malformed."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise AclConfigError(f"cannot read ACL file {path}: {exc}") from None
    try:
        return parse_acl_config(text)
    except AclConfigError as exc:
        raise AclConfigError(f"bad ACL file {path}: {exc}") from None


def readable_by_others(path: Path) -> bool:
    """True when the group or others may read ``path`` (its secrets are the accounts')."""
    try:
        mode = path.stat().st_mode
    except OSError:
        return False
    return bool(mode & (stat.S_IRGRP | stat.S_IROTH))


def parse_acl_config(text: str) -> AclConfig:
    """Parse the YAML ``text`` of an accounts file (see the module rules)."""
    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise AclConfigError(f"not valid YAML: {_yaml_problem(exc)}") from None
    if doc is None:
        return AclConfig()
    if not isinstance(doc, dict):
        raise AclConfigError("the top level must be a map (globalWhiteRemoteAddresses, accounts)")
    unknown = sorted(str(k) for k in doc if k not in _TOP_KEYS)
    if unknown:
        raise AclConfigError(f"unknown key(s) {', '.join(unknown)}")
    patterns = tuple(
        _pattern(p, "globalWhiteRemoteAddresses")
        for p in _str_list(doc, "globalWhiteRemoteAddresses", "the file")
    )
    accounts: dict[str, Account] = {}
    raw_accounts = doc.get("accounts") or []
    if not isinstance(raw_accounts, list):
        raise AclConfigError("accounts must be a list of maps")
    for index, raw in enumerate(raw_accounts):
        account = _account(raw, index)
        if account.access_key in accounts:
            raise AclConfigError(f"accessKey {account.access_key!r} appears twice")
        accounts[account.access_key] = account
    return AclConfig(patterns, accounts)


def _account(raw: object, index: int) -> Account:
    where = f"account #{index + 1}"
    if not isinstance(raw, dict):
        raise AclConfigError(f"{where} must be a map")
    access_key = _key_text(raw, "accessKey", where)
    where = f"account {access_key!r}"
    secret_key = _key_text(raw, "secretKey", where)
    unknown = sorted(str(k) for k in raw if k not in _ACCOUNT_KEYS)
    if unknown:
        raise AclConfigError(f"{where}: unknown key(s) {', '.join(unknown)}")
    admin = raw.get("admin", False)
    if not isinstance(admin, bool):
        raise AclConfigError(f"{where}: admin must be true or false, got {admin!r}")
    white = raw.get("whiteRemoteAddress")
    if white is not None and not isinstance(white, str):
        raise AclConfigError(f"{where}: whiteRemoteAddress must be a string")
    perms = {
        **_resource_perms(raw, "topicPerms", where, group=False),
        **_resource_perms(raw, "groupPerms", where, group=True),
    }
    return Account(
        access_key,
        secret_key,
        _pattern(white, f"{where} whiteRemoteAddress") if white and white.strip() else None,
        admin,
        _perm(raw.get("defaultTopicPerm"), f"{where} defaultTopicPerm"),
        _perm(raw.get("defaultGroupPerm"), f"{where} defaultGroupPerm"),
        perms,
    )


def _key_text(raw: Mapping[str, Any], key: str, where: str) -> str:
    """``accessKey`` / ``secretKey`` as text of more than KEY_MIN_LENGTH characters (YAML reads
    ``12345678`` as a number: taken as its digits, as RocketMQ's loader does)."""
    value = raw.get(key)
    if isinstance(value, int) and not isinstance(value, bool):
        value = str(value)
    if not isinstance(value, str) or len(value.strip()) <= KEY_MIN_LENGTH:
        raise AclConfigError(f"{where}: {key} must be text longer than {KEY_MIN_LENGTH} characters")
    return value.strip()


def _perm(value: object, where: str) -> int:
    if value is None:
        return DENY
    if not isinstance(value, str):
        raise AclConfigError(f"{where}: expected PUB, SUB, PUB|SUB or DENY, got {value!r}")
    try:
        return parse_perm(value)
    except PermissionSyntaxError as exc:
        raise AclConfigError(f"{where}: {exc}") from None


def _resource_perms(raw: Mapping[str, Any], key: str, where: str, *, group: bool) -> dict[str, int]:
    """``name=PERM`` entries -> {resource: bits}; a group's resource is its retry topic."""
    out: dict[str, int] = {}
    for entry in _str_list(raw, key, where):
        name, sep, perm = entry.partition("=")
        if not sep or not name.strip() or "=" in perm:
            raise AclConfigError(f"{where} {key}: expected name=PERM, got {entry!r}")
        resource = name.strip()
        if group:
            resource = RETRY_GROUP_TOPIC_PREFIX + resource
        out[resource] = _perm(perm, f"{where} {key} {name.strip()}")
    return out


def _str_list(raw: Mapping[str, Any], key: str, where: str) -> list[str]:
    value = raw.get(key)
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise AclConfigError(f"{where}: {key} must be a list of strings")
    return value


def _pattern(text: str, where: str) -> AddressPattern:
    try:
        return parse_address_pattern(text)
    except AddressPatternError as exc:
        raise AclConfigError(f"{where}: {exc}") from None


def _yaml_problem(exc: yaml.YAMLError) -> str:
    """What is wrong and where, without the snippet of the line PyYAML adds (it could be a
    secret's line)."""
    if isinstance(exc, yaml.MarkedYAMLError):
        mark = exc.problem_mark
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        return f"{exc.problem or exc.context or 'syntax error'}{where}"
    return type(exc).__name__


TOOLS_FILE: Final = "tools.yml"
"""The admin tools' credentials file, ``$ROCKETMQ_HOME/conf/tools.yml`` (RocketMQ's
``MixAll.ACL_CONF_TOOLS_FILE``)."""


def load_tools_credentials(path: Path) -> tuple[str, str] | None:
    """``(accessKey, secretKey)`` of a ``tools.yml`` (RocketMQ's ``AclUtils#getAclRPCHook``):
    None when the file does not exist or either key is blank (requests are then not signed, as
    in RocketMQ); AclConfigError when it exists but cannot be read or parsed."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as exc:
        raise AclConfigError(f"cannot read {path}: {exc}") from None
    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise AclConfigError(f"bad {path}: not valid YAML: {_yaml_problem(exc)}") from None
    if doc is None:
        return None
    if not isinstance(doc, dict):
        raise AclConfigError(f"bad {path}: expected a map with accessKey and secretKey")
    keys = [doc.get("accessKey"), doc.get("secretKey")]
    texts = [str(k).strip() if isinstance(k, str | int) and k is not True else "" for k in keys]
    if not all(texts):
        return None
    return texts[0], texts[1]
