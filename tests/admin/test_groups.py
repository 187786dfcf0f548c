"""mqadmin group commands against two in-process brokers with live consumers and producers."""

from __future__ import annotations

from pathlib import Path

from client.admin.admin_client import AdminClient
from client.admin.cmd_group import allocation
from client.aio import ConsumeFrom, Message, Producer, PullConsumer, PushConsumer
from client.consume_service import ConsumeResult
from client.message import MessageQueue, ReceivedMessage
from remoting.admin_bodies import Connection, ConsumerConnection, QueueConsumeStats
from tests.admin.harness import as_json, collecting_consumer, fails, headers_in, ok
from tests.broker.inprocess import wait_until
from tests.client.inproc_cluster import TOPIC, cluster

FAST_RETRY = {"messageDelayLevel": " ".join(["50ms"] * 18)}


async def send(namesrv: str, n: int, prefix: str = "m") -> None:
    async with Producer("pg", namesrv) as producer:
        for i in range(n):
            await producer.send(Message(TOPIC, f"{prefix}{i}".encode(), tags="T"))


async def test_progress_and_connections_of_a_live_group(tmp_path: Path) -> None:
    async with cluster(tmp_path) as c:
        n = ("-n", c.namesrv)
        got: list[bytes] = []

        def handle(msgs: list[ReceivedMessage]) -> ConsumeResult:
            got.extend(m.body for m in msgs)
            return ConsumeResult.SUCCESS

        consumer = PushConsumer(
            "cg", c.namesrv, consume_from=ConsumeFrom.FIRST_OFFSET, persist_interval=0.05
        )
        consumer.subscribe(TOPIC, "T", handle)
        async with consumer, Producer("pg", c.namesrv) as producer:
            for i in range(20):
                await producer.send(Message(TOPIC, f"m{i}".encode(), tags="T"))
            await wait_until(lambda: len(got) == 20, "every message consumed")

            async def settled() -> bool:
                stats = await as_json("consumerProgress", *n, "-g", "cg", "-t", TOPIC)
                return stats["diffTotal"] == 0 and len(stats["queues"]) == 8

            await wait_until(settled, "offsets committed")
            text = await ok("consumerProgress", *n, "-g", "cg")
            assert "#Client IP" not in text  # only with -s true, as RocketMQ's
            text = await ok("consumerProgress", *n, "-g", "cg", "-s", "true")
            assert headers_in(
                text,
                "#Topic",
                "#Broker Name",
                "#QID",
                "#Broker Offset",
                "#Consumer Offset",
                "#Client IP",
                "#Diff",
                "#LastTime",
            )
            assert "Diff Total: 0" in text
            assert "Consume TPS:" in text
            stats = await as_json("consumerProgress", *n, "-g", "cg", "-t", TOPIC)
            assert sum(q["brokerOffset"] for q in stats["queues"]) == 20
            assert stats["consumeTps"] > 0  # 20 messages pulled within the last minute
            assert {q["clientId"] for q in stats["queues"]} == {consumer.instance.client_id}

            summary = await as_json("consumerProgress", *n)
            row = next(g for g in summary if g["group"] == "cg")
            assert row["consumeTps"] > 0
            assert (row["count"], row["consumeType"], row["messageModel"]) == (
                1,
                "PUSH",
                "CLUSTERING",
            )
            # a number, as consumerConnection's "version"
            cc = await as_json("consumerConnection", *n, "-g", "cg")
            assert (row["online"], row["version"]) == (True, cc["connectionSet"][0]["version"])
            assert isinstance(row["version"], int)
            text = await ok("consumerProgress", *n)
            assert headers_in(
                text, "#Group", "#Count", "#Version", "#Type", "#Model", "#TPS", "#Diff Total"
            )

            text = await ok("consumerConnection", *n, "-g", "cg")
            assert headers_in(
                text,
                "#ClientId",
                "#ClientAddr",
                "#Language",
                "#Version",
                "#Topic",
                "#SubExpression",
            )
            assert "ConsumeType: CONSUME_PASSIVELY" in text
            cc = await as_json("consumerConnection", *n, "-g", "cg")
            assert [x["clientId"] for x in cc["connectionSet"]] == [consumer.instance.client_id]
            assert cc["connectionSet"][0]["language"] == "PYTHON"
            assert cc["subscriptionTable"][TOPIC] == "T"
            assert cc["messageModel"] == "CLUSTERING"

            text = await ok("producerConnection", *n, "-g", "pg", "-t", TOPIC)
            assert headers_in(text, "#ClientId", "#ClientAddr", "#Language", "#Version")
            pc = await as_json("producerConnection", *n, "-g", "pg", "-t", TOPIC)
            assert [x["clientId"] for x in pc["connectionSet"]] == [producer.instance.client_id]

            await ok("cloneGroupOffset", *n, "-s", "cg", "-d", "cg2", "-t", TOPIC)
            err = await fails("cloneGroupOffset", *n, "-s", "nosuchgroup", "-d", "cg3", "-t", TOPIC)
            assert "source group nosuchgroup has no offsets" in err
            cloned = await as_json("consumerProgress", *n, "-g", "cg2", "-t", TOPIC)
            assert [q["consumerOffset"] for q in cloned["queues"]] == [
                q["consumerOffset"] for q in stats["queues"]
            ]

        summary = await as_json("consumerProgress", *n)
        row = next(g for g in summary if g["group"] == "cg")
        assert (row["count"], row["online"], row["version"]) == (0, False, None)
        [line] = [li for li in (await ok("consumerProgress", *n)).splitlines() if "cg " in li]
        assert line.split()[:3] == ["cg", "0", "OFFLINE"]
        err = await fails("consumerConnection", *n, "-g", "cg")
        assert "not online" in err
        err = await fails("producerConnection", *n, "-g", "nobody", "-t", TOPIC)
        assert "not exist" in err
        err = await fails("consumerProgress", *n, "-g", "never-seen")
        assert "never-seen" in err
        # an empty group is a mistake, not "every group"
        for empty in ("", " "):
            err = await fails("consumerProgress", *n, "-g", empty)
            assert "Invalid value for '-g' / '--groupName': must not be empty" in err


async def test_update_and_delete_sub_group(tmp_path: Path) -> None:
    async with cluster(tmp_path) as c:
        n = ("-n", c.namesrv)
        text = await ok(
            "updateSubGroup", *n, "-c", "DefaultCluster", "-g", "g1", "-r", "3", "-d", "false"
        )
        assert text.count("create subscription group to") == 2
        # what the brokers keep, a new group's other settings included, in RocketMQ's form
        assert text.count("SubscriptionGroupConfig [groupName=g1, ") == 2
        assert "retryMaxTimes=3" in text
        assert "consumeBroadcastEnable=false" in text
        assert "retryQueueNums=1" in text  # a default, not given
        done = await as_json(
            "updateSubGroup", *n, "-b", c.brokers["broker-a"], "-g", "g1", "-s", "false"
        )
        assert done[0]["config"]["retryMaxTimes"] == 3  # kept
        assert done[0]["config"]["consumeEnable"] is False
        groups = c.controllers["broker-a"].groups
        assert groups is not None
        config = groups.find("g1")
        assert config is not None
        assert (config.retry_max_times, config.consume_broadcast_enable, config.consume_enable) == (
            3,
            False,
            False,
        )
        text = await ok("deleteSubGroup", *n, "-c", "DefaultCluster", "-g", "g1")
        assert "delete subscription group [g1]" in text
        assert "g1" not in groups.groups()
        await fails("updateSubGroup", *n, "-g", "g1")


async def test_reset_offset_by_time_on_a_live_push_group(tmp_path: Path) -> None:
    async with cluster(tmp_path) as c:
        n = ("-n", c.namesrv)
        consumer, got = collecting_consumer(c.namesrv)
        async with consumer:
            await send(c.namesrv, 30)
            await wait_until(lambda: len(got) == 30, "first pass")
            by_time = sorted(got, key=lambda m: m.store_timestamp)
            point = by_time[10].store_timestamp
            expected = sorted(m.body for m in got if m.store_timestamp >= point)
            before = len(got)
            text = await ok("resetOffsetByTime", *n, "-g", "cg", "-t", TOPIC, "-s", str(point))
            assert headers_in(text, "#brokerName", "#queueId", "#offset")
            assert f"timestamp(long)[{point}]" in text
            await wait_until(lambda: len(got) - before == len(expected), "re-consumed")
            assert sorted(m.body for m in got[before:]) == expected

            # -1 skips everything, "now" too; the json answer has one row per queue
            rows = await as_json("resetOffsetByTime", *n, "-g", "cg", "-t", TOPIC, "-s", "now")
            assert len(rows["offsetTable"]) == 8
            by_q = {(r["brokerName"], r["queueId"]): r["offset"] for r in rows["offsetTable"]}
            stats = await as_json("topicStatus", *n, "-t", TOPIC)
            assert by_q == {(r["brokerName"], r["queueId"]): r["maxOffset"] for r in stats}
            await send(c.namesrv, 5, "late")
            # every late message arrives; one sent while a queue is being reset may arrive twice
            # (the reset re-reads from the offset it set: at-least-once), so count distinct ones
            await wait_until(
                lambda: len({m.body for m in got if m.body.startswith(b"late")}) == 5, "late"
            )
        err = await fails("resetOffsetByTime", *n, "-g", "cg", "-t", TOPIC, "-s", "yesterday")
        assert "yyyy-MM-dd#HH:mm:ss:SSS" in err


async def test_reset_offset_seeks_a_pull_consumer(tmp_path: Path) -> None:
    async with cluster(tmp_path) as c:
        await send(c.namesrv, 16)
        async with PullConsumer("pc", c.namesrv, consume_from=ConsumeFrom.FIRST_OFFSET) as pc:
            queues = await pc.fetch_queues(TOPIC)
            pc.assign(queues)
            got: list[ReceivedMessage] = []

            async def drained() -> bool:
                got.extend(await pc.poll_for(0.05))
                return len(got) >= 16

            await wait_until(drained, "first pass")
            await pc.commit()
            await ok("resetOffsetByTime", "-n", c.namesrv, "-g", "pc", "-t", TOPIC, "-s", "0")
            again: list[ReceivedMessage] = []

            async def again_all() -> bool:
                again.extend(await pc.poll_for(0.05))
                return len(again) >= 16

            await wait_until(again_all, "re-read after the reset")
            assert sorted(m.body for m in again) == sorted(m.body for m in got)
            assert all(
                pc.position(MessageQueue(TOPIC, q.broker_name, q.queue_id)) is not None
                for q in queues
            )
            # back where it was before the reset: the commit still reaches the brokers
            await pc.commit()
            stats = await as_json("consumerProgress", "-n", c.namesrv, "-g", "pc", "-t", TOPIC)
            assert stats["diffTotal"] == 0


async def test_retry_max_times_sends_to_dlq_after_one_retry(tmp_path: Path) -> None:
    async with cluster(tmp_path, overrides=FAST_RETRY) as c:
        n = ("-n", c.namesrv)
        await ok("updateSubGroup", *n, "-c", "DefaultCluster", "-g", "rg", "-r", "1")
        calls: list[int] = []

        def fail_always(msgs: list[ReceivedMessage]) -> ConsumeResult:
            calls.extend(m.reconsume_times for m in msgs)
            return ConsumeResult.RECONSUME_LATER

        consumer = PushConsumer("rg", c.namesrv, consume_from=ConsumeFrom.FIRST_OFFSET)
        consumer.subscribe(TOPIC, "*", fail_always)
        async with consumer:
            await send(c.namesrv, 1)

            async def in_dlq() -> bool:
                try:
                    rows = await as_json("printMsg", *n, "-t", "%DLQ%rg")
                except AssertionError:
                    return False  # no DLQ topic yet
                return len(rows) == 1

            await wait_until(in_dlq, "the message in the DLQ")
            assert calls == [0, 1]


async def test_progress_counts_the_queues_consumers_read_while_a_topic_shrinks(
    tmp_path: Path,
) -> None:
    """Shrinking a topic lowers its write queues first; the others still hold a backlog, and
    consumerProgress must keep showing it (RocketMQ counts read queues there)."""
    async with cluster(tmp_path) as c:
        n = ("-n", c.namesrv)
        broker = ("-b", c.brokers["broker-a"])
        await ok("updateTopic", *n, *broker, "-t", "Shrink", "-r", "8", "-w", "8")
        async with Producer("pg", c.namesrv) as producer:
            for i in range(16):
                await producer.send(Message("Shrink", b"m%d" % i))
        # the group commits offset 0 on every queue (a reset needs a group with offsets)
        async with PullConsumer("gs", c.namesrv) as pc:
            queues = await pc.fetch_queues("Shrink")
            await pc.commit({q: 0 for q in queues if q.broker_name == "broker-a"})
        before = await as_json("consumerProgress", *n, "-g", "gs", "-t", "Shrink")
        assert (before["diffTotal"], len(before["queues"])) == (16, 8)
        await ok("updateTopic", *n, *broker, "-t", "Shrink", "-r", "8", "-w", "4")
        after = await as_json("consumerProgress", *n, "-g", "gs", "-t", "Shrink")
        assert (after["diffTotal"], len(after["queues"])) == (16, 8)


async def test_progress_of_an_online_group_leaves_out_topics_it_does_not_subscribe_to(
    tmp_path: Path,
) -> None:
    """As RocketMQ's getConsumeStats: while the group is online, a topic none of its members
    subscribes to is no backlog of it (offsets left from an earlier subscription, or ``-t``
    another topic); offline, every topic it has offsets on counts again."""
    async with cluster(tmp_path) as c:
        n = ("-n", c.namesrv)
        await c.create_topic("Old")
        got: list[bytes] = []

        def handle(msgs: list[ReceivedMessage]) -> ConsumeResult:
            got.extend(m.body for m in msgs)
            return ConsumeResult.SUCCESS

        async with Producer("pg", c.namesrv) as producer:
            for i in range(4):
                await producer.send(Message("Old", b"old%d" % i))
        old = PushConsumer(
            "mg", c.namesrv, consume_from=ConsumeFrom.FIRST_OFFSET, persist_interval=0.05
        )
        old.subscribe("Old", "*", handle)
        async with old:
            await wait_until(lambda: len(got) == 4, "Old consumed")

            async def old_committed() -> bool:
                stats = await as_json("consumerProgress", *n, "-g", "mg", "-t", "Old")
                return stats["diffTotal"] == 0 and len(stats["queues"]) == 8

            await wait_until(old_committed, "Old's offsets committed")
        async with Producer("pg", c.namesrv) as producer:
            for i in range(2):
                await producer.send(Message("Old", b"unread%d" % i))  # nobody in mg reads Old now

        new = PushConsumer(
            "mg", c.namesrv, consume_from=ConsumeFrom.FIRST_OFFSET, persist_interval=0.05
        )
        new.subscribe(TOPIC, "*", handle)
        async with new:
            await send(c.namesrv, 4)
            await wait_until(lambda: len(got) == 8, "Orders consumed")

            async def orders_committed() -> bool:
                stats = await as_json("consumerProgress", *n, "-g", "mg", "-t", TOPIC)
                return stats["diffTotal"] == 0 and len(stats["queues"]) == 8

            await wait_until(orders_committed, "Orders' offsets committed")
            cc = await as_json("consumerConnection", *n, "-g", "mg")
            assert set(cc["subscriptionTable"]) == {TOPIC, "%RETRY%mg"}

            stats = await as_json("consumerProgress", *n, "-g", "mg")
            assert {q["topic"] for q in stats["queues"]} <= {TOPIC, "%RETRY%mg"}
            assert stats["diffTotal"] == 0
            assert {q["clientId"] for q in stats["queues"] if q["topic"] == TOPIC} == {
                new.instance.client_id
            }
            err = await fails("consumerProgress", *n, "-g", "mg", "-t", "Old")
            assert "Not found the consumer group consume stats" in err
            summary = await as_json("consumerProgress", *n)
            assert next(g for g in summary if g["group"] == "mg")["diffTotal"] == 0

        # offline: the offsets it still has on Old are its backlog again
        offline = await as_json("consumerProgress", *n, "-g", "mg", "-t", "Old")
        assert offline["diffTotal"] == 2
        assert {q["clientId"] for q in offline["queues"]} == {""}


def test_progress_owners_only_for_subscribed_topics() -> None:
    """The #Client IP column: only queues of a topic the group subscribes to have an owner."""
    rows = [
        QueueConsumeStats(topic, "broker-a", qid, 1, 0, 0) for topic in ("A", "B") for qid in (0, 1)
    ]
    members = (Connection("10.0.0.1@1", "10.0.0.1:1", "PYTHON", 1),)
    cc = ConsumerConnection(members, {"A": "*"}, "CONSUME_PASSIVELY", "CLUSTERING", "FIRST")
    queues = {
        topic: [MessageQueue(r.topic, r.broker_name, r.queue_id) for r in rows if r.topic == topic]
        for topic in ("A", "B")
    }
    owners = allocation(queues, cc)
    assert set(owners) == {MessageQueue("A", "broker-a", 0), MessageQueue("A", "broker-a", 1)}
    assert set(owners.values()) == {"10.0.0.1@1"}


async def test_reset_offset_of_a_group_without_offsets_is_refused(tmp_path: Path) -> None:
    """As RocketMQ's Broker2Client.resetOffset: a group with no committed offset on the topic
    (a typo, say) and no member online is refused, and nothing is created for it; a group that
    has offsets, online or not, is reset."""
    async with cluster(tmp_path) as c:
        n = ("-n", c.namesrv)
        await send(c.namesrv, 8)
        for when in ("0", "-1", "now"):
            err = await fails("resetOffsetByTime", *n, "-g", "typo-group", "-t", TOPIC, "-s", when)
            assert "The consumer group <typo-group> not exist" in err
        for controller in c.controllers.values():
            assert controller.offsets is not None
            assert controller.offsets.which_topics_by_group("typo-group") == set()
        err = await fails("consumerProgress", *n, "-g", "typo-group")
        assert "Not found the consumer group consume stats" in err

        # an offline group with offsets is reset (to the end here)
        async with PullConsumer("off", c.namesrv) as pc:
            queues = await pc.fetch_queues(TOPIC)
            await pc.commit({q: 0 for q in queues})
        done = await as_json("resetOffsetByTime", *n, "-g", "off", "-t", TOPIC, "-s", "-1")
        assert len(done["offsetTable"]) == 8
        stats = await as_json("consumerProgress", *n, "-g", "off", "-t", TOPIC)
        assert (stats["diffTotal"], len(stats["queues"])) == (0, 8)


async def test_progress_owners_are_what_the_members_rebalance_gives(tmp_path: Path) -> None:
    """#Client IP / clientId: the members divide the readable queues of the topic's route (as
    their rebalance does), so a broker where the topic is write-only has no owner and the
    readable queues have the owners the members really have."""
    async with cluster(tmp_path) as c:
        n = ("-n", c.namesrv)
        write_only = ("-t", TOPIC, "-r", "4", "-w", "4", "-p", "2")
        await ok("updateTopic", *n, "-b", c.brokers["broker-b"], *write_only)
        members = [
            PushConsumer("cg", c.namesrv, consume_from=ConsumeFrom.FIRST_OFFSET) for _ in range(2)
        ]
        for member in members:
            member.subscribe(TOPIC, "*", lambda msgs: ConsumeResult.SUCCESS)
        async with members[0], members[1]:
            readable = {MessageQueue(TOPIC, "broker-a", qid) for qid in range(4)}

            def held() -> dict[MessageQueue, str]:
                return {
                    mq: m.instance.client_id
                    for m in members
                    for mq in m.assignment()
                    if mq.topic == TOPIC
                }

            def divided() -> bool:
                shares = [{mq for mq in m.assignment() if mq.topic == TOPIC} for m in members]
                return all(shares) and sum(map(len, shares)) == 4 and set(held()) == readable

            await wait_until(divided, "broker-a's queues divided between the two members")
            stats = await as_json("consumerProgress", *n, "-g", "cg", "-t", TOPIC)
            owners = {
                MessageQueue(TOPIC, q["brokerName"], q["queueId"]): q["clientId"]
                for q in stats["queues"]
            }
            assert {mq: cid for mq, cid in owners.items() if mq in readable} == held()
            assert {cid for mq, cid in owners.items() if mq not in readable} == {""}


async def test_reset_one_queue_to_an_offset(tmp_path: Path) -> None:
    """resetOffsetByTime -b -q -o: only that queue moves, to that offset, and the live member
    re-reads it from there (RocketMQ's resetOffsetByQueueId); -b -q alone resets the queue by
    -s; -b, -q or -o without the others is refused."""
    async with cluster(tmp_path) as c:
        n = ("-n", c.namesrv, "-g", "cg", "-t", TOPIC)
        broker_a = c.brokers["broker-a"]
        consumer, got = collecting_consumer(c.namesrv)
        async with consumer, Producer("pg", c.namesrv) as producer:
            for i in range(6):
                for queue in (
                    MessageQueue(TOPIC, "broker-a", 0),
                    MessageQueue(TOPIC, "broker-b", 1),
                ):
                    await producer.send(
                        Message(TOPIC, f"{queue.broker_name}-{i}".encode()), queue=queue
                    )
            await wait_until(lambda: len(got) == 12, "first pass")

            async def committed() -> dict[tuple[str, int], int]:
                stats = await as_json("consumerProgress", *n)
                return {
                    (q["brokerName"], q["queueId"]): q["consumerOffset"] for q in stats["queues"]
                }

            async def settled() -> bool:
                offsets = await committed()
                return offsets[("broker-a", 0)] == 6 and offsets[("broker-b", 1)] == 6

            await wait_until(settled, "offsets committed")
            before = len(got)
            one = ("-b", broker_a, "-q", "0")
            text = await ok("resetOffsetByTime", *n, "-s", "now", *one, "-o", "2")
            assert "reset consumer offset to 2" in text
            await wait_until(lambda: len(got) - before == 4, "queue 0 of broker-a re-read from 2")
            assert sorted(m.body for m in got[before:]) == [b"broker-a-%d" % i for i in range(2, 6)]
            await wait_until(settled, "offsets committed again")

            done = await as_json("resetOffsetByTime", *n, "-s", "-1", *one)
            assert done["offsetTable"] == [{"brokerName": "broker-a", "queueId": 0, "offset": 6}]
            err = await fails("resetOffsetByTime", *n, "-s", "now", *one, "-o", "7")
            assert "Target offset 7 not in consume queue range [0-6]" in err
        for partial in (("-q", "0"), ("-b", broker_a), ("-o", "1")):
            err = await fails("resetOffsetByTime", *n, "-s", "now", *partial)
            assert "(see mqadmin resetOffsetByTime -h)" in err
        assert (await committed())[("broker-b", 1)] == 6  # the other queues did not move


async def test_clone_offline_copies_left_over_offsets_of_an_online_source(tmp_path: Path) -> None:
    """cloneGroupOffset -o: the source is online, subscribing to another topic only, so its
    offsets on TOPIC are left-overs: refused without -o (saying so), copied with -o true (the
    offline of RocketMQ's CLONE_GROUP_OFFSET)."""
    async with cluster(tmp_path) as c:
        await send(c.namesrv, 8)
        await c.create_topic("Other")
        async with PullConsumer("src", c.namesrv) as pc:
            await pc.commit({q: 1 for q in await pc.fetch_queues(TOPIC)})
        online = PushConsumer("src", c.namesrv)
        online.subscribe("Other", "*", lambda msgs: ConsumeResult.SUCCESS)
        clone = ("cloneGroupOffset", "-n", c.namesrv, "-s", "src", "-d", "dst", "-t", TOPIC)
        async with online:
            await wait_until(
                lambda: all(
                    ctl.clients.manager.consumer_data("src") is not None
                    for ctl in c.controllers.values()
                ),
                "the source online on both brokers",
            )
            err = await fails(*clone)
            assert "copied only with -o true" in err
            async with AdminClient(c.namesrv) as admin:  # the broker's own rule
                await admin.clone_group_offset(c.brokers["broker-a"], "src", "dst", TOPIC)
            assert c.controllers["broker-a"].offsets is not None
            assert c.controllers["broker-a"].offsets.query_offsets("dst", TOPIC) == {}
            done = await as_json(*clone, "-o", "true")
        assert sorted(done["brokers"]) == sorted(c.brokers.values())
        for ctl in c.controllers.values():
            assert ctl.offsets is not None
            assert ctl.offsets.query_offsets("dst", TOPIC) == {qid: 1 for qid in range(4)}
