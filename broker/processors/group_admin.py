"""Subscription group administration (the group part of RocketMQ's ``AdminBrokerProcessor``).

::

    UPDATE_AND_CREATE_SUBSCRIPTIONGROUP  200  body = msgpack map of a SubscriptionGroupConfig
                                              (camelCase keys; absent keys take the defaults)
                                              -> SUCCESS
    GET_ALL_SUBSCRIPTIONGROUP_CONFIG     201  -> body msgpack of
                                              SubscriptionGroupManager.to_wire()
    DELETE_SUBSCRIPTIONGROUP             207  groupName [cleanOffset] -> SUCCESS (also when
                                              absent)

A bad body (not msgpack, not a map, a wrong value type, an invalid group name) answers
SYSTEM_ERROR naming the problem. Changes are persisted at once by the manager. Deleting a
group also drops its metric series (``on_group_deleted``, RocketMQ's
``BrokerStatsManager.onGroupDeleted``). Its committed offsets stay unless the header
``cleanOffset`` is true (``mqadmin deleteSubGroup -r true``): then every offset of the group
goes, its ``%RETRY%`` topic's included, with the pull offsets kept in memory for
``consumerProgress``'s ``#Inflight`` (RocketMQ's ``ConsumerOffsetManager#removeOffset``). A
member still online commits its offsets again, and its next pull or heartbeat re-creates the
group's config while ``autoCreateSubscriptionGroup`` is on, as in RocketMQ.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import msgpack

from broker.consumer_offset import ConsumerOffsetManager
from broker.subscription_group import SubscriptionGroupConfig, SubscriptionGroupManager
from remoting.channel import Channel, Handler
from remoting.codes import RequestCode, ResponseCode
from remoting.command import RemotingCommand
from remoting.headers import error, guarded, header_str, opt_bool

log = logging.getLogger(__name__)


def encode_subscription_group(config: SubscriptionGroupConfig) -> bytes:
    """The UPDATE_AND_CREATE_SUBSCRIPTIONGROUP request body."""
    data: bytes = msgpack.packb(config.to_wire(), use_bin_type=True)
    return data


class GroupAdminProcessor:
    """Create, list and delete subscription group configs."""

    def __init__(
        self,
        groups: SubscriptionGroupManager,
        on_group_deleted: Callable[[str], None] | None = None,
        offsets: ConsumerOffsetManager | None = None,
    ) -> None:
        self.groups = groups
        self.offsets = offsets
        """The committed offsets that DELETE_SUBSCRIPTIONGROUP with ``cleanOffset`` removes."""
        self.on_group_deleted = on_group_deleted
        """Called with the group's name after DELETE_SUBSCRIPTIONGROUP (its statistics go)."""

    async def update_and_create(
        self, request: RemotingCommand, channel: Channel
    ) -> RemotingCommand:
        """UPDATE_AND_CREATE_SUBSCRIPTIONGROUP."""
        try:
            wire = msgpack.unpackb(request.body, raw=False)
            if not isinstance(wire, dict):
                raise ValueError("the body must be a map")
            config = SubscriptionGroupConfig.from_wire(wire)
        except (ValueError, TypeError, msgpack.UnpackException) as exc:
            return error(request, ResponseCode.SYSTEM_ERROR, f"bad subscription group: {exc}")
        self.groups.create_or_update(config)
        log.info("subscription group %s updated: %s", config.group_name, config)
        return RemotingCommand.response_to(request, ResponseCode.SUCCESS)

    async def get_all(self, request: RemotingCommand, channel: Channel) -> RemotingCommand:
        """GET_ALL_SUBSCRIPTIONGROUP_CONFIG."""
        body: bytes = msgpack.packb(self.groups.to_wire(), use_bin_type=True)
        return RemotingCommand.response_to(request, ResponseCode.SUCCESS, body=body)

    async def delete(self, request: RemotingCommand, channel: Channel) -> RemotingCommand:
        """DELETE_SUBSCRIPTIONGROUP (see the module rules)."""
        group = header_str(request, "groupName")
        clean_offset = opt_bool(request, "cleanOffset")
        if self.groups.delete(group) is None:
            log.warning("delete subscription group %s: not found", group)
        if clean_offset and self.offsets is not None:
            removed = self.offsets.remove_group(group)
            log.info("deleted subscription group %s: its offsets on %d topic(s) go", group, removed)
        if self.on_group_deleted is not None:
            self.on_group_deleted(group)
        return RemotingCommand.response_to(request, ResponseCode.SUCCESS)

    def handlers(self) -> dict[int, Handler]:
        """The ``{request code: handler}`` table."""
        return {
            int(RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP): guarded(self.update_and_create),
            int(RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG): guarded(self.get_all),
            int(RequestCode.DELETE_SUBSCRIPTIONGROUP): guarded(self.delete),
        }
