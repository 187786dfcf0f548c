"""Admin requests (the topic / config / runtime part of RocketMQ's ``AdminBrokerProcessor``).

::

    UPDATE_AND_CREATE_TOPIC   17  topic readQueueNums writeQueueNums perm [topicFilterType]
                                  [topicSysFlag] [order] [attributes "+k=v,-k"]
                                  -> SUCCESS, then re-registration
    DELETE_TOPIC_IN_BROKER   215  topic -> SUCCESS, then re-registration
    GET_ALL_TOPIC_CONFIG      21  -> body msgpack of TopicConfigManager.to_wire()
    GET_BROKER_RUNTIME_INFO   28  -> body msgpack {"table": {str: str}}
    GET_BROKER_CONFIG         26  -> body = the effective config as ``key=value`` lines

Rules:

- A topic name must pass :func:`common.topic.topic_problem` and must not be a system topic
  (RocketMQ answers both SYSTEM_ERROR); a bad header value is SYSTEM_ERROR too.
- ``attributes`` is RocketMQ 5's modification string, applied to the topic's current attributes
  by :func:`common.topic_attributes.alter_current_attributes` (none given: they stay as they
  are). An unknown key, a bad value, a malformed string or a change of ``queue.type`` on an
  existing topic is answered SYSTEM_ERROR with the reason (as RocketMQ's), nothing changed.
- After a topic change the handler awaits ``reregister()`` (one REGISTER_BROKER round to every
  name server, awaited until one of them has it) before answering, so the route is current
  once the caller has the response.
- Deleting a topic removes its config, its consume queues (``MessageStore.delete_topic``: its
  records stay in the commitlog until retention, but never reach a queue again) and every
  group's committed offsets on it, as RocketMQ's ``deleteTopic`` does, and what the broker
  keeps per topic in memory (``on_topic_deleted``: its metric series and the send path's
  round-robin position, as RocketMQ's ``onTopicDeleted``); sends to the topic afterwards
  start again at queue offset 0. A topic with no config and nothing in the store (never
  created, or deleted already) is answered SUCCESS with no deletion recorded (RocketMQ's
  ``deleteTopics`` skips a topic without consume queues).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import msgpack

from broker.config import BrokerConfig
from broker.consumer_offset import ConsumerOffsetManager
from broker.topic_config import TopicConfigManager
from common.clock import wall_clock_ms
from common.compiled import build_description
from common.route import PermName, TopicConfig
from common.topic import is_system_topic, topic_problem
from common.topic_attributes import TopicAttributeError, alter_current_attributes, parse_to_map
from common.version import minimq_version
from remoting.channel import Channel, Handler
from remoting.codes import RequestCode, ResponseCode
from remoting.command import RemotingCommand
from remoting.headers import (
    BadRequestError,
    error,
    guarded,
    header_int,
    header_str,
    opt_bool,
    opt_int,
    opt_str,
)
from store import MessageStore

VERSION_DESC = f"minimq-{minimq_version()}"
"""What ``brokerVersionDesc`` reports."""


class AdminProcessor:
    """Topic administration and broker introspection."""

    def __init__(
        self,
        store: MessageStore,
        topics: TopicConfigManager,
        config: BrokerConfig,
        reregister: Callable[[], Awaitable[None]],
        *,
        rates: Callable[[], dict[str, str]] | None = None,
        flow: Callable[[], dict[str, str]] | None = None,
        clock_ms: Callable[[], int] = wall_clock_ms,
        offsets: ConsumerOffsetManager | None = None,
        on_topic_deleted: Callable[[str], None] | None = None,
    ) -> None:
        self.store = store
        self.offsets = offsets
        self.on_topic_deleted = on_topic_deleted
        self.topics = topics
        self.config = config
        self.reregister = reregister
        self.rates = rates
        self.flow = flow
        """minimq's flow-control figures for the runtime table (see the controller)."""
        self.clock_ms = clock_ms
        self.boot_ms = clock_ms()

    async def update_and_create_topic(
        self, request: RemotingCommand, channel: Channel
    ) -> RemotingCommand:
        """UPDATE_AND_CREATE_TOPIC."""
        topic = header_str(request, "topic", allow_empty=True)
        problem = topic_problem(topic)
        if problem is not None:
            return error(request, ResponseCode.SYSTEM_ERROR, problem)
        if is_system_topic(topic):
            return error(
                request,
                ResponseCode.SYSTEM_ERROR,
                f"The topic[{topic}] is conflict with system topic.",
            )
        read_queues = header_int(request, "readQueueNums")
        write_queues = header_int(request, "writeQueueNums")
        perm = header_int(request, "perm")
        if not 0 <= perm < PermName.PERM_PRIORITY:  # RocketMQ's Validators.checkTopicConfig
            return error(
                request, ResponseCode.SYSTEM_ERROR, f"topicPermission value: {perm} is invalid."
            )
        try:
            attributes = self._altered_attributes(topic, opt_str(request, "attributes", ""))
        except TopicAttributeError as exc:
            return error(request, ResponseCode.SYSTEM_ERROR, str(exc))
        wire = {
            "attributes": attributes,
            "topicName": topic,
            "readQueueNums": read_queues,
            "writeQueueNums": write_queues,
            "perm": perm,
            "topicFilterType": opt_str(request, "topicFilterType", "SINGLE_TAG"),
            "topicSysFlag": opt_int(request, "topicSysFlag", 0),
            "order": opt_bool(request, "order", False),
        }
        try:
            config = TopicConfig.from_wire(wire)
        except ValueError as exc:
            raise BadRequestError(str(exc)) from None
        self.topics.create_or_update(config)
        await self.reregister()
        return RemotingCommand.response_to(request, ResponseCode.SUCCESS)

    def _altered_attributes(self, topic: str, modification: str) -> dict[str, str]:
        """The attributes ``topic`` has once ``modification`` is applied (module rules)."""
        existing = self.topics.select(topic)
        current = {} if existing is None else existing.attributes
        return alter_current_attributes(existing is None, current, parse_to_map(modification))

    async def delete_topic(self, request: RemotingCommand, channel: Channel) -> RemotingCommand:
        """DELETE_TOPIC_IN_BROKER: forget the topic's config (see the module rules)."""
        topic = header_str(request, "topic")
        if is_system_topic(topic):
            return error(
                request,
                ResponseCode.SYSTEM_ERROR,
                f"The topic[{topic}] is conflict with system topic.",
            )
        existed = self.topics.delete(topic) is not None
        if existed or self.store.has_topic(topic):  # else, as RocketMQ: nothing to record
            self.store.delete_topic(topic)
        if self.offsets is not None:
            self.offsets.remove_topic(topic)
        if self.on_topic_deleted is not None:
            self.on_topic_deleted(topic)
        if existed:
            await self.reregister()
        return RemotingCommand.response_to(request, ResponseCode.SUCCESS)

    async def get_all_topic_config(
        self, request: RemotingCommand, channel: Channel
    ) -> RemotingCommand:
        """GET_ALL_TOPIC_CONFIG."""
        body: bytes = msgpack.packb(self.topics.to_wire(), use_bin_type=True)
        return RemotingCommand.response_to(request, ResponseCode.SUCCESS, body=body)

    def get_runtime_info(self, request: RemotingCommand, channel: Channel) -> RemotingCommand:
        """GET_BROKER_RUNTIME_INFO (answered inline: it waits for nothing)."""
        body: bytes = msgpack.packb({"table": self.runtime_table()}, use_bin_type=True)
        return RemotingCommand.response_to(request, ResponseCode.SUCCESS, body=body)

    def runtime_table(self) -> dict[str, str]:
        """What this broker knows about itself right now, as RocketMQ's key names."""
        commitlog = self.store.commitlog
        lo, hi = commitlog.min_offset, commitlog.max_offset
        table = {
            "brokerVersionDesc": VERSION_DESC,
            "minimqBuild": build_description(),  # pure Python, or how many modules run compiled
            "bootTimestamp": str(self.boot_ms),
            "runtime": _uptime(self.clock_ms() - self.boot_ms),
            "commitLogMinOffset": str(lo),
            "commitLogMaxOffset": str(hi),
            "dispatchBehindBytes": str(max(0, hi - self.store.reput_offset)),
            "earliestMessageTimeStamp": str(commitlog.store_timestamp_at(lo) if hi > lo else 0),
            "commitLogDiskRatio": str(self.store.disk_usage(self.store.config.store_path_root_dir)),
            "remainHowManyDataToFlush": str(max(0, hi - self.store.flushed_offset)),
            "topicCount": str(len(self.topics)),
        }
        refusal = self.store.write_refusal
        if refusal is not None:  # minimq's: why sends are answered SERVICE_NOT_AVAILABLE
            table["storeWriteRefusal"] = refusal
        if self.rates is not None:
            table.update(self.rates())
        if self.flow is not None:
            table.update(self.flow())
        return table

    async def get_broker_config(
        self, request: RemotingCommand, channel: Channel
    ) -> RemotingCommand:
        """GET_BROKER_CONFIG: the effective configuration as properties text."""
        body = self.config.to_properties(hide_secrets=True).encode()
        return RemotingCommand.response_to(request, ResponseCode.SUCCESS, body=body)

    def handlers(self) -> dict[int, Handler]:
        """The ``{request code: handler}`` table."""
        return {
            int(RequestCode.UPDATE_AND_CREATE_TOPIC): guarded(self.update_and_create_topic),
            int(RequestCode.DELETE_TOPIC_IN_BROKER): guarded(self.delete_topic),
            int(RequestCode.GET_ALL_TOPIC_CONFIG): guarded(self.get_all_topic_config),
            int(RequestCode.GET_BROKER_RUNTIME_INFO): guarded(self.get_runtime_info),
            int(RequestCode.GET_BROKER_CONFIG): guarded(self.get_broker_config),
        }


def _uptime(ms: int) -> str:
    """RocketMQ's ``runtime`` format: ``[ d days, h hours, m minutes, s seconds ]``."""
    seconds = max(0, ms) // 1000
    days, rest = divmod(seconds, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    return f"[ {days} days, {hours} hours, {minutes} minutes, {secs} seconds ]"
