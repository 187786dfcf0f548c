"""Changes to ``plain_acl.yml`` made over the wire (RocketMQ 4.x's ``PlainPermissionManager``
``updateAccessConfig`` / ``deleteAccessConfig`` / ``updateGlobalWhiteAddrsConfig``), pure: a
document in, a new document out, no I/O.

Rules:

- An :class:`AclDocument` is the file as YAML data (``globalWhiteRemoteAddresses``,
  ``accounts``, ``dataVersion``), the :class:`~remoting.acl.config.AclConfig` it loads as, and
  its data version. :func:`parse_document` reads one; every change returns a new one and
  leaves its input as it was.
- A new document is checked by rendering it (:func:`render`) and loading that text with the
  accounts file's own loader (:func:`~remoting.acl.config.parse_acl_config`): a change is
  refused (:class:`AclEditError`, the loader's reason, never a secret) when the file it would
  write could not be loaded, so what is written always loads as what is in force.
- :func:`upsert_account` adds an account, or changes the one with that ``accessKey``, as
  RocketMQ's ``createAclAccessConfigMap``: each field given replaces the account's, a field
  not given keeps it; an empty ``whiteRemoteAddress`` / ``topicPerms`` / ``groupPerms``
  clears it. ``secretKey`` is required, as RocketMQ's ``checkPlainAccessConfig``.
- :func:`delete_account` refuses an unknown ``accessKey`` and the account the request is
  signed with; :func:`replace_global_white_addrs` replaces the list (empty: no list) and
  refuses one that leaves out the address the request comes from.
- No change may leave the file without an ``admin: true`` account (:func:`checked`), or no
  one could administer the broker over the wire again.
- Each change moves the data version on (RocketMQ's ``updateAclConfigFileVersion``): counter
  + 1, timestamp = now, never earlier than the previous one. It is kept in the file as
  RocketMQ's ``dataVersion: [{counter, timestamp}]``, so it survives a restart; a file
  without one (written by hand) is at counter 0, dated by its modification time.
- :func:`masked_view` is what GET_BROKER_CLUSTER_ACL_CONFIG answers: every ``secretKey`` is
  :data:`SECRET_MASK`.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

import yaml

from common.route import DataVersion
from remoting.acl.address import AddressPatternError, parse_address_pattern
from remoting.acl.config import ACCOUNT_KEY_ORDER, AclConfig, AclConfigError, parse_acl_config

SECRET_MASK: Final = "******"
"""What a secret is shown as (as GET_BROKER_CONFIG shows the broker's own ``secretKey``)."""
GLOBAL_WHITE_ADDRS: Final = "globalWhiteRemoteAddresses"
ACCOUNTS: Final = "accounts"
DATA_VERSION: Final = "dataVersion"
FILE_HEADER: Final = (
    "# plain_acl.yml, written by minimq for an ACL admin request (mqadmin updateAclConfig,\n"
    "# deleteAclConfig, updateGlobalWhiteAddr). Edit by hand or over the wire: the broker\n"
    "# reloads it either way. Comments are not kept when the broker writes it.\n"
)
"""The comment the broker puts at the top of the file it writes."""


class AclEditError(ValueError):
    """A change refused; the message says why (it never holds a secret)."""


@dataclass(frozen=True, slots=True)
class AccountChange:
    """One UPDATE_AND_CREATE_ACL_CONFIG (RocketMQ's ``PlainAccessConfig``): None is "not
    given" (the account keeps what it has); an empty text or tuple clears the field."""

    access_key: str
    secret_key: str = field(repr=False)
    white_remote_address: str | None = None
    admin: bool | None = None
    default_topic_perm: str | None = None
    default_group_perm: str | None = None
    topic_perms: tuple[str, ...] | None = None
    group_perms: tuple[str, ...] | None = None

    def fields(self) -> dict[str, Any]:
        """The account's file keys for what was given (``topicPerms`` as a list)."""
        given: dict[str, Any] = {"accessKey": self.access_key, "secretKey": self.secret_key}
        for key, value in (
            ("whiteRemoteAddress", self.white_remote_address),
            ("admin", self.admin),
            ("defaultTopicPerm", self.default_topic_perm),
            ("defaultGroupPerm", self.default_group_perm),
            ("topicPerms", self.topic_perms),
            ("groupPerms", self.group_perms),
        ):
            if value is not None:
                given[key] = list(value) if isinstance(value, tuple) else value
        return given


@dataclass(frozen=True, slots=True)
class AclDocument:
    """The accounts file as data, what it loads as, and its data version."""

    data: Mapping[str, Any]
    """The YAML map without ``dataVersion`` (see :attr:`version`)."""
    config: AclConfig
    version: DataVersion

    def accounts(self) -> list[dict[str, Any]]:
        """A copy of the account maps, in file order."""
        return copy.deepcopy(list(self.data.get(ACCOUNTS) or []))

    def global_white_addrs(self) -> list[str]:
        """The ``globalWhiteRemoteAddresses`` entries (empty: none)."""
        return list(self.data.get(GLOBAL_WHITE_ADDRS) or [])


def parse_document(text: str, mtime_ms: int) -> AclDocument:
    """The document of the file ``text`` (modified at ``mtime_ms``); AclConfigError (the
    loader's) when it does not load."""
    config = parse_acl_config(text)
    raw = yaml.safe_load(text) or {}
    version = _file_version(raw.get(DATA_VERSION), mtime_ms)
    data = {k: v for k, v in raw.items() if k != DATA_VERSION}
    data[ACCOUNTS] = [_normalised(a) for a in data.get(ACCOUNTS) or []]
    return AclDocument(data, config, version)


def _normalised(account: Mapping[str, Any]) -> dict[str, Any]:
    """``account`` with its keys as text (YAML reads ``12345678`` as a number), as loaded."""
    out = dict(account)
    for key in ("accessKey", "secretKey"):
        out[key] = str(out[key]).strip()
    return out


def _file_version(value: object, mtime_ms: int) -> DataVersion:
    """RocketMQ's ``dataVersion: [{counter, timestamp}]`` (the first entry); counter 0 at the
    file's modification time when there is none or it is not of that shape."""
    if isinstance(value, list) and value:
        try:
            return DataVersion.from_wire(value[0])
        except ValueError:
            pass
    return DataVersion(timestamp=mtime_ms, counter=0)


def next_version(version: DataVersion, now_ms: int) -> DataVersion:
    """The version after ``version`` (RocketMQ's ``DataVersion.nextVersion``), never dated
    before it."""
    return DataVersion(timestamp=max(now_ms, version.timestamp), counter=version.counter + 1)


def render(data: Mapping[str, Any], version: DataVersion) -> str:
    """The file text of ``data`` at ``version``: :data:`FILE_HEADER`, then
    ``globalWhiteRemoteAddresses``, ``dataVersion``, any other key, and ``accounts`` last
    (keys in :data:`ACCOUNT_KEY_ORDER`; an account appended at the end of the file by hand
    lands in the list), in YAML's block style."""
    ordered: dict[str, Any] = {}
    if GLOBAL_WHITE_ADDRS in data:
        ordered[GLOBAL_WHITE_ADDRS] = list(data[GLOBAL_WHITE_ADDRS] or [])
    ordered[DATA_VERSION] = [version.to_wire()]
    for key, value in data.items():
        if key != ACCOUNTS:
            ordered.setdefault(key, value)
    ordered[ACCOUNTS] = [_ordered_account(a) for a in data.get(ACCOUNTS) or []]
    body: str = yaml.safe_dump(
        ordered, sort_keys=False, default_flow_style=False, allow_unicode=True
    )
    return FILE_HEADER + body


def _ordered_account(account: Mapping[str, Any]) -> dict[str, Any]:
    known = {k: account[k] for k in ACCOUNT_KEY_ORDER if k in account}
    return known | {k: v for k, v in account.items() if k not in known}


def checked(data: Mapping[str, Any], version: DataVersion) -> tuple[str, AclDocument]:
    """The file text of ``data`` at ``version`` and its document, once it loads with the
    accounts file's loader and keeps an admin account; AclEditError otherwise."""
    text = render(data, version)
    try:
        config = parse_acl_config(text)
    except AclConfigError as exc:
        raise AclEditError(str(exc)) from None
    if not any(account.admin for account in config.accounts.values()):
        raise AclEditError("the change would leave no admin account (admin: true)")
    return text, AclDocument(data, config, version)


def upsert_account(doc: AclDocument, change: AccountChange) -> dict[str, Any]:
    """``doc``'s data with ``change`` applied (module rules): the account replaced in place,
    or added at the end."""
    accounts = doc.accounts()
    for index, account in enumerate(accounts):
        if account.get("accessKey") == change.access_key:
            accounts[index] = {**account, **change.fields()}
            break
    else:
        accounts.append(change.fields())
    return {**doc.data, ACCOUNTS: [_without_blanks(a) for a in accounts]}


def _without_blanks(account: dict[str, Any]) -> dict[str, Any]:
    """``account`` without a cleared (empty) ``whiteRemoteAddress``, ``topicPerms`` or
    ``groupPerms``."""
    blank = ("whiteRemoteAddress", "topicPerms", "groupPerms")
    return {k: v for k, v in account.items() if not (k in blank and not v)}


def delete_account(doc: AclDocument, access_key: str, requester: str) -> dict[str, Any]:
    """``doc``'s data without the account ``access_key``; AclEditError when there is none or
    it is ``requester``'s own (the account the request is signed with)."""
    if access_key == requester:
        raise AclEditError(
            f"accessKey {access_key!r} signed this request: an account cannot delete itself"
        )
    accounts = doc.accounts()
    kept = [a for a in accounts if a.get("accessKey") != access_key]
    if len(kept) == len(accounts):
        raise AclEditError(f"no account with accessKey {access_key!r}")
    return {**doc.data, ACCOUNTS: kept}


def replace_global_white_addrs(
    doc: AclDocument, addrs: Sequence[str], requester_ip: str
) -> dict[str, Any]:
    """``doc``'s data with ``globalWhiteRemoteAddresses`` = ``addrs`` (empty: no list);
    AclEditError when an entry is no address pattern or the list leaves out
    ``requester_ip``, the address the request came from (no one could change it back from
    there)."""
    try:
        patterns = [parse_address_pattern(a) for a in addrs]
    except AddressPatternError as exc:
        raise AclEditError(f"globalWhiteRemoteAddresses: {exc}") from None
    if patterns and not any(p.matches(requester_ip) for p in patterns):
        raise AclEditError(
            f"globalWhiteRemoteAddresses would leave out {requester_ip}, the address this "
            "request comes from"
        )
    data = {k: v for k, v in doc.data.items() if k != GLOBAL_WHITE_ADDRS}
    if addrs:
        data = {GLOBAL_WHITE_ADDRS: list(addrs), **data}
    return data


def split_addrs(text: str) -> list[str]:
    """A comma-separated address list (RocketMQ's ``globalWhiteAddrs`` header) as entries,
    blanks dropped; a comma inside ``{...}`` (``192.168.1.{1,2}``) does not split."""
    out: list[str] = []
    depth = 0
    start = 0
    for i, ch in enumerate(text):
        depth += (ch == "{") - (ch == "}")
        if ch == "," and depth == 0:
            out.append(text[start:i])
            start = i + 1
    out.append(text[start:])
    return [entry.strip() for entry in out if entry.strip()]


def masked_view(doc: AclDocument) -> dict[str, Any]:
    """GET_BROKER_CLUSTER_ACL_CONFIG's answer (RocketMQ's ``AclConfig``): ``globalWhiteAddrs``
    and ``plainAccessConfigs`` (every account's file keys, ``admin`` and the default
    permissions filled in), each ``secretKey`` :data:`SECRET_MASK`."""
    configs = []
    for account in doc.accounts():
        view: dict[str, Any] = {
            "accessKey": account["accessKey"],
            "secretKey": SECRET_MASK,
            "whiteRemoteAddress": account.get("whiteRemoteAddress") or "",
            "admin": bool(account.get("admin", False)),
            "defaultTopicPerm": account.get("defaultTopicPerm") or "DENY",
            "defaultGroupPerm": account.get("defaultGroupPerm") or "DENY",
            "topicPerms": list(account.get("topicPerms") or []),
            "groupPerms": list(account.get("groupPerms") or []),
        }
        configs.append(view)
    return {"globalWhiteAddrs": doc.global_white_addrs(), "plainAccessConfigs": configs}
