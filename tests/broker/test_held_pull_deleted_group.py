"""A pull held (long polling) for a group that ``mqadmin deleteSubGroup -r true`` deletes
meanwhile is answered as RocketMQ's ``executeRequestWhenWakeup`` answers it: the whole request
runs again without its commit (``brokerAllowSuspend`` false), so the group's committed offsets
stay deleted, and its config comes back only when ``autoCreateSubscriptionGroup`` is on (as a
new pull of the same consumer would bring it back); with it off the pull is refused and the
group stays deleted."""

from __future__ import annotations

from pathlib import Path

import pytest
import trio

from broker.controller import BrokerController
from broker.processors.group_admin import encode_subscription_group
from broker.subscription_group import SubscriptionGroupConfig
from remoting.client import RemotingClient
from remoting.codes import RequestCode, ResponseCode
from remoting.command import RemotingCommand
from tests.broker.inprocess import LIMIT, req, running_broker, wait_until
from tests.broker.pulls import send

GROUP, TOPIC = "held_group", "HeldTopic"


def group_exists(broker: BrokerController) -> bool:
    assert broker.groups is not None
    return GROUP in broker.groups.to_wire()["subscriptionGroupTable"]


def committed_offsets(broker: BrokerController) -> dict[str, object]:
    assert broker.offsets is not None
    table: dict[str, object] = broker.offsets.to_wire()["offsetTable"]
    return table


async def set_up(client: RemotingClient, addr: str) -> None:
    """TOPIC with one message, GROUP created."""
    create = req(RequestCode.UPDATE_AND_CREATE_TOPIC, topic=TOPIC, readQueueNums="1",
                 writeQueueNums="1", perm="6")  # fmt: skip
    assert (await client.invoke(addr, create)).code == ResponseCode.SUCCESS
    body = encode_subscription_group(SubscriptionGroupConfig(GROUP))
    group = req(RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, body)
    assert (await client.invoke(addr, group)).code == ResponseCode.SUCCESS
    await send(client, addr, TOPIC, b"first")


@pytest.mark.parametrize(("auto_create", "answer"), [
    ("false", ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST),
    ("true", ResponseCode.SUCCESS),
])  # fmt: skip
async def test_a_held_pull_does_not_bring_back_a_deleted_groups_offsets(
    tmp_path: Path, auto_create: str, answer: int
) -> None:
    overrides = {"autoCreateSubscriptionGroup": auto_create}
    with trio.fail_after(LIMIT):
        async with (
            running_broker(tmp_path, overrides=overrides) as (broker, addr),
            RemotingClient(default_timeout_s=LIMIT) as client,
        ):
            await set_up(client, addr)
            pull = req(
                RequestCode.PULL_MESSAGE,
                consumerGroup=GROUP,
                topic=TOPIC,
                queueId="0",
                queueOffset="1",
                maxMsgNums="1",
                sysFlag="3",
                commitOffset="1",
                suspendTimeoutMillis="20000",
            )  # fmt: skip  (commit + suspend)
            answered: list[RemotingCommand] = []
            async with trio.open_nursery() as nursery:
                nursery.start_soon(_pull, client, addr, pull, answered)
                await wait_until(lambda: broker.holds.parked_count() == 1, "the pull held")
                assert committed_offsets(broker) != {}  # its commit counted, once
                delete = req(RequestCode.DELETE_SUBSCRIPTIONGROUP, groupName=GROUP,
                             cleanOffset="true")  # fmt: skip
                assert (await client.invoke(addr, delete)).code == ResponseCode.SUCCESS
                await send(client, addr, TOPIC, b"wakes the pull")
            assert answered[0].code == answer
            assert committed_offsets(broker) == {}
            assert group_exists(broker) is (auto_create == "true")


async def _pull(
    client: RemotingClient, addr: str, pull: RemotingCommand, answered: list[RemotingCommand]
) -> None:
    answered.append(await client.invoke(addr, pull))
