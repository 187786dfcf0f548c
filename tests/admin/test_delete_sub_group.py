"""``mqadmin deleteSubGroup`` against two in-process brokers, as RocketMQ's: ``-r true`` also
removes the group's committed offsets; ``-c`` also deletes its ``%RETRY%`` and ``%DLQ%``
topics from the cluster's brokers and the name servers; ``-b`` deletes only the config there.
A member still online brings its group's config and retry topic back."""

from __future__ import annotations

from pathlib import Path

from client.aio import ClientInstance, ConsumeFrom, Message, Producer, PushConsumer
from client.config import ClientConfig
from client.consume_service import ConsumeResult
from client.message import ReceivedMessage
from remoting.client import RemotingClient
from tests.admin.harness import as_json, fails, ok
from tests.broker.inprocess import wait_until
from tests.broker.pulls import send, send_back
from tests.client.inproc_cluster import TOPIC, Cluster, cluster

GROUP = "cg"
RETRY = "%RETRY%cg"
DLQ = "%DLQ%cg"


async def consume_all_then_go_offline(c: Cluster, n: int = 10) -> None:
    """Group ``cg`` consumes ``n`` new messages of TOPIC, commits its offsets and shuts down."""
    got: list[ReceivedMessage] = []

    def handle(msgs: list[ReceivedMessage]) -> ConsumeResult:
        got.extend(msgs)
        return ConsumeResult.SUCCESS

    consumer = PushConsumer(
        GROUP, c.namesrv, consume_from=ConsumeFrom.FIRST_OFFSET, persist_interval=0.05
    )
    consumer.subscribe(TOPIC, "*", handle)
    async with consumer, Producer("pg", c.namesrv) as producer:
        for i in range(n):
            await producer.send(Message(TOPIC, f"m{i}".encode()))
        await wait_until(lambda: len(got) == n, "every message consumed")

        async def committed() -> bool:
            stats = await as_json("consumerProgress", "-n", c.namesrv, "-g", GROUP, "-t", TOPIC)
            return bool(stats["diffTotal"] == 0)

        await wait_until(committed, "offsets committed")


async def make_dlq_on(c: Cluster, broker: str) -> None:
    """A dead letter of group ``cg`` on ``broker``: its ``%DLQ%cg`` topic exists there and in
    the route."""
    addr = c.brokers[broker]
    async with RemotingClient() as client:
        offset = await send(client, addr, TOPIC, b"dead")
        assert (await send_back(client, addr, offset, GROUP, delay_level=-1))[0] == 0

    async def routed() -> bool:
        return DLQ in await as_json("topicList", "-n", c.namesrv)

    await wait_until(routed, "the DLQ topic in the route")


def group_topics_on_brokers(c: Cluster) -> set[tuple[str, str]]:
    """``(broker name, topic)`` of each ``%RETRY%cg`` / ``%DLQ%cg`` topic config."""
    out = set()
    for name, controller in c.controllers.items():
        assert controller.topics is not None
        out |= {(name, t) for t in (RETRY, DLQ) if t in controller.topics}
    return out


async def test_cluster_delete_takes_the_retry_and_dlq_topics_and_keeps_offsets(
    tmp_path: Path,
) -> None:
    async with cluster(tmp_path) as c:
        n = ("-n", c.namesrv)
        await consume_all_then_go_offline(c)
        await make_dlq_on(c, "broker-a")
        assert {(b, RETRY) for b in c.brokers} | {("broker-a", DLQ)} <= group_topics_on_brokers(c)

        # -b: only that broker's config, as RocketMQ's (no topic is deleted)
        text = await ok("deleteSubGroup", *n, "-b", c.brokers["broker-a"], "-g", GROUP)
        assert (
            text
            == f"delete subscription group [cg] from broker [{c.brokers['broker-a']}] success.\n"
        )
        assert len(group_topics_on_brokers(c)) == 3

        text = await ok("deleteSubGroup", *n, "-c", "DefaultCluster", "-g", GROUP)
        assert group_topics_on_brokers(c) == set()
        for addr in c.brokers.values():
            assert f"from broker [{addr}] in cluster [DefaultCluster] success." in text
        assert "delete topic [%RETRY%cg] from cluster [DefaultCluster] and NameServer" in text
        assert "delete topic [%DLQ%cg] from cluster [DefaultCluster] and NameServer" in text
        for controller in c.controllers.values():
            assert controller.groups is not None
            assert GROUP not in controller.groups
        topics = await as_json("topicList", *n)
        assert RETRY not in topics
        assert DLQ not in topics
        # consumerProgress lists the groups of the %RETRY% topics: cg is no longer one
        assert all(g["group"] != GROUP for g in await as_json("consumerProgress", *n))
        # without -r its committed offsets stay: its progress and the consumers of the topic
        stats = await as_json("consumerProgress", *n, "-g", GROUP)
        assert {q["topic"] for q in stats["queues"]} == {TOPIC}
        assert sum(q["consumerOffset"] for q in stats["queues"]) == 10
        by_topic = {r["topic"]: r for r in await as_json("topicList", *n, "-c")}
        assert GROUP in by_topic[TOPIC]["consumerGroups"]


async def test_remove_offset_takes_the_groups_offsets(tmp_path: Path) -> None:
    async with cluster(tmp_path) as c:
        n = ("-n", c.namesrv)
        await consume_all_then_go_offline(c)
        done = await as_json(
            "deleteSubGroup", *n, "-c", "DefaultCluster", "-g", GROUP, "-r", "true"
        )
        assert done == {
            "groupName": GROUP,
            "clusterName": "DefaultCluster",
            "removeOffset": True,
            "brokers": [c.brokers["broker-a"], c.brokers["broker-b"]],
            "topicsDeleted": [RETRY, DLQ],
        }
        for controller in c.controllers.values():
            assert controller.offsets is not None
            assert controller.offsets.which_topics_by_group(GROUP) == set()
        err = await fails("consumerProgress", *n, "-g", GROUP)
        assert "Not found the consumer group consume stats" in err
        by_topic = {r["topic"]: r for r in await as_json("topicList", *n, "-c")}
        assert GROUP not in by_topic[TOPIC]["consumerGroups"]
        err = await fails("deleteSubGroup", *n, "-c", "DefaultCluster", "-g", GROUP, "-r", "maybe")
        assert "maybe" in err


async def test_an_online_group_comes_back_after_its_deletion(tmp_path: Path) -> None:
    """As RocketMQ's broker with autoCreateSubscriptionGroup: the member's next pull or
    heartbeat re-creates the group's config, and a heartbeat its retry topic (whether the name
    servers have it again depends on the race between that heartbeat and the command's
    DELETE_TOPIC_IN_NAMESRV, as in RocketMQ: not checked)."""
    async with cluster(tmp_path) as c:
        n = ("-n", c.namesrv)
        config = ClientConfig.create(c.namesrv, heartbeat_broker_interval_s=0.2)
        async with ClientInstance(config) as instance:
            consumer = PushConsumer(GROUP, instance=instance)
            consumer.subscribe(TOPIC, "*", lambda msgs: ConsumeResult.SUCCESS)
            async with consumer:
                await wait_until(lambda: len(group_topics_on_brokers(c)) == 2, "retry topics")
                await ok("deleteSubGroup", *n, "-c", "DefaultCluster", "-g", GROUP, "-r", "true")

                def back() -> bool:
                    groups = [ctl.groups for ctl in c.controllers.values()]
                    has_config = all(g is not None and GROUP in g for g in groups)
                    return has_config and len(group_topics_on_brokers(c)) == 2

                await wait_until(back, "the group's config and retry topics re-created")
