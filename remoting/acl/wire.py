"""The ACL admin requests on the wire (RocketMQ 4.x's headers and bodies), pure codecs shared
by the broker and ``mqadmin``.

- UPDATE_AND_CREATE_ACL_CONFIG (50), ``CreateAccessConfigRequestHeader``: ``accessKey``,
  ``secretKey``, ``whiteRemoteAddress``, ``admin`` (``true``/``false``), ``defaultTopicPerm``,
  ``defaultGroupPerm``, ``topicPerms`` and ``groupPerms`` (comma-joined ``name=PERM``).
  minimq leaves a field out when it is not given (the account keeps it); RocketMQ's client
  always sends ``admin``.
- DELETE_ACL_CONFIG (51), ``DeleteAccessConfigRequestHeader``: ``accessKey``.
- UPDATE_GLOBAL_WHITE_ADDRS_CONFIG (53), ``UpdateGlobalWhiteAddrsConfigRequestHeader``:
  ``globalWhiteAddrs`` (comma-joined) and optional ``aclFileFullPath``.
- GET_BROKER_CLUSTER_ACL_INFO (52) answers ``GetBrokerAclConfigResponseHeader``: ``version``
  (the DataVersion as JSON), ``allAclFileVersion`` (JSON map file path -> DataVersion),
  ``brokerName``, ``brokerAddr``, ``clusterName``.
- GET_BROKER_CLUSTER_ACL_CONFIG (54) answers a msgpack body (as minimq's other admin
  bodies; RocketMQ's is JSON) ``{"globalWhiteAddrs": [...], "plainAccessConfigs": [...]}``
  with every ``secretKey`` masked (:func:`remoting.acl.edit.masked_view`).

Decoders raise :class:`~remoting.headers.BadRequestError` naming the field, never a value of
``secretKey``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import msgpack

from common.route import DataVersion
from remoting.acl.edit import AccountChange, split_addrs
from remoting.command import ExtValue
from remoting.headers import BadRequestError

_TEXT_FIELDS = (
    ("whiteRemoteAddress", "white_remote_address"),
    ("defaultTopicPerm", "default_topic_perm"),
    ("defaultGroupPerm", "default_group_perm"),
)


def change_fields(change: AccountChange) -> dict[str, ExtValue]:
    """The UPDATE_AND_CREATE_ACL_CONFIG header of ``change``."""
    fields: dict[str, ExtValue] = {"accessKey": change.access_key, "secretKey": change.secret_key}
    for name, attr in _TEXT_FIELDS:
        value = getattr(change, attr)
        if value is not None:
            fields[name] = value
    if change.admin is not None:
        fields["admin"] = "true" if change.admin else "false"
    for name, perms in (("topicPerms", change.topic_perms), ("groupPerms", change.group_perms)):
        if perms is not None:
            fields[name] = ",".join(perms)
    return fields


def decode_change(fields: Mapping[str, ExtValue]) -> AccountChange:
    """The account change of an UPDATE_AND_CREATE_ACL_CONFIG header; BadRequestError when
    ``accessKey`` or ``secretKey`` is missing or a field is not text."""
    texts = {name: _text(fields, name) for name in fields}
    access_key, secret_key = texts.get("accessKey"), texts.get("secretKey")
    if not access_key:
        raise BadRequestError("the header field accessKey is required")
    if not secret_key:
        raise BadRequestError("the header field secretKey is required")
    return AccountChange(
        access_key.strip(),
        secret_key.strip(),
        white_remote_address=_stripped(texts.get("whiteRemoteAddress")),
        admin=_admin(texts.get("admin")),
        default_topic_perm=_stripped(texts.get("defaultTopicPerm")),
        default_group_perm=_stripped(texts.get("defaultGroupPerm")),
        topic_perms=_perm_list(texts.get("topicPerms")),
        group_perms=_perm_list(texts.get("groupPerms")),
    )


def _text(fields: Mapping[str, ExtValue], name: str) -> str:
    value = fields[name]
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return value
    raise BadRequestError(f"the header field {name} must be text")


def _stripped(value: str | None) -> str | None:
    return None if value is None else value.strip()


def _admin(value: str | None) -> bool | None:
    if value is None:
        return None
    text = value.strip().lower()
    if text not in ("true", "false"):
        raise BadRequestError(f"the header field admin must be true or false, got {value!r}")
    return text == "true"


def _perm_list(value: str | None) -> tuple[str, ...] | None:
    """``a=PUB,b=SUB`` as entries (blank ones dropped); None when not given."""
    if value is None:
        return None
    return tuple(entry.strip() for entry in value.split(",") if entry.strip())


def delete_fields(access_key: str) -> dict[str, ExtValue]:
    """The DELETE_ACL_CONFIG header."""
    return {"accessKey": access_key}


def decode_delete(fields: Mapping[str, ExtValue]) -> str:
    """The ``accessKey`` of a DELETE_ACL_CONFIG header; BadRequestError when missing."""
    value = fields.get("accessKey")
    if not isinstance(value, str) or not value.strip():
        raise BadRequestError("the header field accessKey is required")
    return value.strip()


def white_addrs_fields(addrs: Sequence[str], acl_file: str | None = None) -> dict[str, ExtValue]:
    """The UPDATE_GLOBAL_WHITE_ADDRS_CONFIG header."""
    fields: dict[str, ExtValue] = {"globalWhiteAddrs": ",".join(addrs)}
    if acl_file:
        fields["aclFileFullPath"] = acl_file
    return fields


def decode_white_addrs(fields: Mapping[str, ExtValue]) -> tuple[list[str], str | None]:
    """The address entries and ``aclFileFullPath`` (None when not given) of an
    UPDATE_GLOBAL_WHITE_ADDRS_CONFIG header; BadRequestError when ``globalWhiteAddrs`` is
    missing (an empty one clears the list)."""
    value = fields.get("globalWhiteAddrs")
    if not isinstance(value, str):
        raise BadRequestError("the header field globalWhiteAddrs is required")
    path = fields.get("aclFileFullPath")
    return split_addrs(value), path.strip() if isinstance(path, str) and path.strip() else None


@dataclass(frozen=True, slots=True)
class AclVersionInfo:
    """GET_BROKER_CLUSTER_ACL_INFO's answer (RocketMQ's ``ClusterAclVersionInfo``)."""

    broker_name: str
    broker_addr: str
    cluster_name: str
    version: DataVersion
    """The ACL file's data version (RocketMQ's ``aclConfigDataVersion``)."""
    all_versions: Mapping[str, DataVersion]
    """File path -> its data version (RocketMQ's ``allAclConfigDataVersion``; one file here)."""

    def fields(self) -> dict[str, ExtValue]:
        """The response header."""
        return {
            "version": json.dumps(self.version.to_wire()),
            "allAclFileVersion": json.dumps({p: v.to_wire() for p, v in self.all_versions.items()}),
            "brokerName": self.broker_name,
            "brokerAddr": self.broker_addr,
            "clusterName": self.cluster_name,
        }

    @classmethod
    def from_fields(cls, fields: Mapping[str, ExtValue]) -> AclVersionInfo:
        """Parse a response header; BadRequestError naming a missing or bad field."""
        texts = {}
        for name in ("version", "allAclFileVersion", "brokerName", "brokerAddr", "clusterName"):
            value = fields.get(name)
            if not isinstance(value, str):
                raise BadRequestError(f"GET_BROKER_CLUSTER_ACL_INFO: missing field {name}")
            texts[name] = value
        try:
            version = DataVersion.from_wire(json.loads(texts["version"]))
            table = json.loads(texts["allAclFileVersion"])
            if not isinstance(table, dict):
                raise ValueError("allAclFileVersion must be a map")
            all_versions = {str(p): DataVersion.from_wire(v) for p, v in table.items()}
        except ValueError as exc:
            raise BadRequestError(f"GET_BROKER_CLUSTER_ACL_INFO: {exc}") from None
        return cls(
            texts["brokerName"], texts["brokerAddr"], texts["clusterName"], version, all_versions
        )


def encode_acl_config(view: Mapping[str, Any]) -> bytes:
    """The GET_BROKER_CLUSTER_ACL_CONFIG body of a :func:`~remoting.acl.edit.masked_view`."""
    data: bytes = msgpack.packb(dict(view), use_bin_type=True)
    return data


def decode_acl_config(body: bytes) -> dict[str, Any]:
    """A GET_BROKER_CLUSTER_ACL_CONFIG body: ``globalWhiteAddrs`` (list of text) and
    ``plainAccessConfigs`` (list of maps with an ``accessKey``); BadRequestError otherwise."""
    try:
        wire = msgpack.unpackb(body, raw=False)
    except (ValueError, TypeError, msgpack.UnpackException) as exc:
        raise BadRequestError(f"body of GET_BROKER_CLUSTER_ACL_CONFIG: {exc}") from None
    if not isinstance(wire, dict):
        raise BadRequestError("body of GET_BROKER_CLUSTER_ACL_CONFIG must be a map")
    addrs = wire.get("globalWhiteAddrs")
    configs = wire.get("plainAccessConfigs")
    if not isinstance(addrs, list) or not all(isinstance(a, str) for a in addrs):
        raise BadRequestError("GET_BROKER_CLUSTER_ACL_CONFIG: globalWhiteAddrs must be a list")
    if not isinstance(configs, list) or not all(
        isinstance(c, dict) and isinstance(c.get("accessKey"), str) for c in configs
    ):
        raise BadRequestError("GET_BROKER_CLUSTER_ACL_CONFIG: plainAccessConfigs must be maps")
    return {"globalWhiteAddrs": addrs, "plainAccessConfigs": configs}
