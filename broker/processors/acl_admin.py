"""The plain-ACL admin requests (the ACL part of RocketMQ 4.x's ``AdminBrokerProcessor``).

::

    UPDATE_AND_CREATE_ACL_CONFIG      50  accessKey secretKey [whiteRemoteAddress admin
                                          defaultTopicPerm defaultGroupPerm topicPerms
                                          groupPerms] -> SUCCESS
    DELETE_ACL_CONFIG                 51  accessKey -> SUCCESS
    GET_BROKER_CLUSTER_ACL_INFO       52  -> version allAclFileVersion brokerName brokerAddr
                                          clusterName
    UPDATE_GLOBAL_WHITE_ADDRS_CONFIG  53  globalWhiteAddrs [aclFileFullPath] -> SUCCESS
    GET_BROKER_CLUSTER_ACL_CONFIG     54  -> body: accounts and global addresses, secrets
                                          masked

(fields and bodies: :mod:`remoting.acl.wire`; what a change does: :mod:`remoting.acl.edit`
and :class:`remoting.acl.service.AclService`).

Rules:

- With ACL on, the guard in front of every handler lets only a signed request of an
  ``admin: true`` account through (the five codes are in
  :data:`~remoting.acl.resource.ADMIN_CODES`).
- With ACL off there is no account to manage: each code is answered with its RocketMQ
  failure code (UPDATE_AND_CREATE_ACL_CONFIG_FAILED 209, DELETE_ACL_CONFIG_FAILED 210,
  UPDATE_GLOBAL_WHITE_ADDRS_CONFIG_FAILED 211; SYSTEM_ERROR for the two reads) and
  :data:`ACL_OFF` as remark. RocketMQ answers the same codes with no remark (its validator
  is missing).
- A refused change is answered with its code and the reason (never a secret) and changes
  nothing; it is logged as a warning, a change as info, each with the access key that
  signed the request and the peer.
- The handlers are plain functions: a change runs from reading the file to putting the new
  one in force with no await, so concurrent changes never lose one another.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path

from remoting.acl.edit import AclEditError
from remoting.acl.service import AclService
from remoting.acl.signing import ACCESS_KEY
from remoting.acl.validator import peer_ip
from remoting.acl.wire import (
    AclVersionInfo,
    decode_change,
    decode_delete,
    decode_white_addrs,
    encode_acl_config,
)
from remoting.channel import Channel, Handler
from remoting.codes import (
    DELETE_ACL_CONFIG_FAILED,
    UPDATE_AND_CREATE_ACL_CONFIG_FAILED,
    UPDATE_GLOBAL_WHITE_ADDRS_CONFIG_FAILED,
    RequestCode,
    ResponseCode,
)
from remoting.command import RemotingCommand
from remoting.headers import BadRequestError, guarded

log = logging.getLogger(__name__)

ACL_OFF = "ACL is not enabled on this broker (aclEnable=false): there are no accounts to manage"
"""The remark of every ACL admin request to a broker without ``aclEnable``."""

BrokerIdentity = Callable[[], tuple[str, str, str]]
"""``(broker name, broker address, cluster name)`` now (the address is known once bound)."""


class AclAdminProcessor:
    """The ACL admin handlers of one broker (module rules); ``acl`` None: ACL is off."""

    def __init__(self, acl: AclService | None, identity: BrokerIdentity) -> None:
        self.acl = acl
        self.identity = identity

    def update_and_create(self, request: RemotingCommand, channel: Channel) -> RemotingCommand:
        """UPDATE_AND_CREATE_ACL_CONFIG."""
        failed = UPDATE_AND_CREATE_ACL_CONFIG_FAILED
        if self.acl is None:
            return _refused(request, failed, ACL_OFF)
        try:
            change = decode_change(request.ext_fields)
            version = self.acl.update_account(change)
        except (BadRequestError, AclEditError) as exc:
            return self._refuse(request, channel, failed, "update account", exc)
        self._log_change(request, channel, f"account {change.access_key!r} set", version.counter)
        return RemotingCommand.response_to(request, ResponseCode.SUCCESS)

    def delete(self, request: RemotingCommand, channel: Channel) -> RemotingCommand:
        """DELETE_ACL_CONFIG."""
        failed = DELETE_ACL_CONFIG_FAILED
        if self.acl is None:
            return _refused(request, failed, ACL_OFF)
        try:
            access_key = decode_delete(request.ext_fields)
            version = self.acl.delete_account(access_key, _signer(request))
        except (BadRequestError, AclEditError) as exc:
            return self._refuse(request, channel, failed, "delete account", exc)
        self._log_change(request, channel, f"account {access_key!r} deleted", version.counter)
        return RemotingCommand.response_to(request, ResponseCode.SUCCESS)

    def update_global_white_addrs(
        self, request: RemotingCommand, channel: Channel
    ) -> RemotingCommand:
        """UPDATE_GLOBAL_WHITE_ADDRS_CONFIG; an ``aclFileFullPath`` must name this broker's
        file (it has one)."""
        failed = UPDATE_GLOBAL_WHITE_ADDRS_CONFIG_FAILED
        if self.acl is None:
            return _refused(request, failed, ACL_OFF)
        try:
            addrs, path = decode_white_addrs(request.ext_fields)
            if path is not None and Path(path).resolve() != self.acl.path.resolve():
                raise AclEditError(f"aclFileFullPath {path} is not this broker's ACL file")
            version = self.acl.update_global_white_addrs(addrs, peer_ip(channel.remote_addr))
        except (BadRequestError, AclEditError) as exc:
            return self._refuse(request, channel, failed, "update global white addresses", exc)
        what = f"globalWhiteRemoteAddresses set to {addrs}"
        self._log_change(request, channel, what, version.counter)
        return RemotingCommand.response_to(request, ResponseCode.SUCCESS)

    def acl_info(self, request: RemotingCommand, channel: Channel) -> RemotingCommand:
        """GET_BROKER_CLUSTER_ACL_INFO."""
        if self.acl is None:
            return _refused(request, ResponseCode.SYSTEM_ERROR, ACL_OFF)
        name, addr, cluster = self.identity()
        version = self.acl.data_version
        info = AclVersionInfo(name, addr, cluster, version, {str(self.acl.path): version})
        return RemotingCommand.response_to(request, ResponseCode.SUCCESS, ext_fields=info.fields())

    def acl_config(self, request: RemotingCommand, channel: Channel) -> RemotingCommand:
        """GET_BROKER_CLUSTER_ACL_CONFIG (secrets masked)."""
        if self.acl is None:
            return _refused(request, ResponseCode.SYSTEM_ERROR, ACL_OFF)
        body = encode_acl_config(self.acl.masked_config())
        return RemotingCommand.response_to(request, ResponseCode.SUCCESS, body=body)

    def _refuse(
        self, request: RemotingCommand, channel: Channel, code: int, what: str, exc: ValueError
    ) -> RemotingCommand:
        log.warning(
            "ACL admin: %s refused (accessKey %r from %s): %s",
            what,
            _signer(request),
            channel.remote_addr,
            exc,
        )
        return _refused(request, code, str(exc))

    def _log_change(self, request: RemotingCommand, channel: Channel, what: str, n: int) -> None:
        log.info(
            "ACL admin: %s by accessKey %r from %s (data version %d)",
            what,
            _signer(request),
            channel.remote_addr,
            n,
        )

    def handlers(self) -> dict[int, Handler]:
        """The ``{request code: handler}`` table."""
        return {
            int(RequestCode.UPDATE_AND_CREATE_ACL_CONFIG): guarded(self.update_and_create),
            int(RequestCode.DELETE_ACL_CONFIG): guarded(self.delete),
            int(RequestCode.GET_BROKER_CLUSTER_ACL_INFO): guarded(self.acl_info),
            int(RequestCode.UPDATE_GLOBAL_WHITE_ADDRS_CONFIG): guarded(
                self.update_global_white_addrs
            ),
            int(RequestCode.GET_BROKER_CLUSTER_ACL_CONFIG): guarded(self.acl_config),
        }


def _signer(request: RemotingCommand) -> str:
    """The access key the request is signed with (the guard checked it)."""
    value = request.ext_fields.get(ACCESS_KEY)
    return value if isinstance(value, str) else ""


def _refused(request: RemotingCommand, code: int, reason: str) -> RemotingCommand:
    return RemotingCommand.response_to(request, code, remark=reason)
