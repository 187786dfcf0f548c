"""mqadmin cluster, broker and topic commands against two in-process brokers."""

from __future__ import annotations

import socket
from pathlib import Path

import trio

from client.aio import ConsumeFrom, Message, Producer, PullConsumer, PushConsumer
from client.consume_service import ConsumeResult
from client.message import ReceivedMessage
from tests.admin.harness import as_json, fails, headers_in, mqadmin, ok
from tests.broker.inprocess import running_broker, running_namesrv, wait_until
from tests.client.inproc_cluster import TOPIC, cluster


async def test_cluster_list_and_broker_status(tmp_path: Path) -> None:
    async with cluster(tmp_path) as c:
        n = ("-n", c.namesrv)
        text = await ok("clusterList", *n)
        assert headers_in(text, "#Cluster Name", "#Broker Name", "#BID", "#Addr", "#Version")
        assert "broker-a" in text
        assert "broker-b" in text
        assert c.brokers["broker-a"] in text
        rows = await as_json("clusterList", *n)
        assert {(r["brokerName"], r["addr"]) for r in rows} == set(c.brokers.items())
        assert all(r["clusterName"] == "DefaultCluster" for r in rows)
        async with Producer("pg", c.namesrv) as producer:
            for i in range(8):
                await producer.send(Message(TOPIC, b"%d" % i))
        in_tps = [
            float(line.split()[5].split("(")[0])
            for line in (await ok("clusterList", *n)).splitlines()
            if "broker-" in line
        ]
        assert len(in_tps) == 2
        assert sum(in_tps) > 0  # messages stored a second over the last 10 s

        addr = c.brokers["broker-a"]
        text = await ok("brokerStatus", *n, "-b", addr)
        assert "brokerVersionDesc" in text
        assert "commitLogMaxOffset" in text
        status = await as_json("brokerStatus", *n, "-c", "DefaultCluster")
        assert set(status) == set(c.brokers.values())
        assert status[addr]["brokerVersionDesc"].startswith("minimq")


async def test_broker_config_get_and_update(tmp_path: Path) -> None:
    root = tmp_path / "back\\slash"  # the broker escapes it, mqadmin reads it back
    async with cluster(root) as c:
        n = ("-n", c.namesrv)
        addr = c.brokers["broker-b"]
        text = await ok("getBrokerConfig", *n, "-b", addr)
        assert f"============{addr}============" in text
        assert "brokerName" in text
        config = await as_json("getBrokerConfig", *n, "-b", addr)
        assert config[addr]["brokerName"] == "broker-b"
        assert config[addr]["storePathRootDir"] == str(root / "broker-b" / "store")
        assert config[addr]["defaultTopicQueueNums"] == "8"

        text = await ok(
            "updateBrokerConfig",
            *n,
            "-c",
            "DefaultCluster",
            "-k",
            "defaultTopicQueueNums",
            "-v",
            "3",
        )
        assert f"update broker config success, {addr}" in text
        config = await as_json("getBrokerConfig", *n, "-c", "DefaultCluster")
        assert {cfg["defaultTopicQueueNums"] for cfg in config.values()} == {"3"}
        assert c.controllers["broker-a"].topics is not None
        assert c.controllers["broker-a"].topics.default_queue_nums == 3
        # auto-created topics now get 3 queues
        async with Producer("pg", c.namesrv) as producer:
            await producer.send(Message("AutoCreated", b"x"))
        route = await as_json("topicRoute", *n, "-t", "AutoCreated")
        assert {q["writeQueueNums"] for q in route["queueDatas"]} == {3}

        err = await fails("updateBrokerConfig", *n, "-b", addr, "-k", "listenPort", "-v", "1")
        assert "cannot be changed at runtime" in err
        err = await fails(
            "updateBrokerConfig", *n, "-b", addr, "-k", "defaultTopicQueueNums", "-v", "-2"
        )
        assert "defaultTopicQueueNums" in err
        # values a route cannot carry, or a period the name servers would expire the broker in
        for key, value in (
            ("defaultTopicQueueNums", "100000"),
            ("registerNameServerPeriod", "3600000"),
        ):
            err = await fails("updateBrokerConfig", *n, "-b", addr, "-k", key, "-v", value)
            assert key in err
        err = await fails("getBrokerConfig", *n)
        assert "-b brokerAddr or -c clusterName" in err


async def test_topic_lifecycle(tmp_path: Path) -> None:
    async with cluster(tmp_path) as c:
        n = ("-n", c.namesrv)
        text = await ok(
            "updateTopic", *n, "-c", "DefaultCluster", "-t", "T1", "-r", "2", "-w", "2", "-p", "6"
        )
        assert text.count("create topic to") == 2
        assert "TopicConfig [topicName=T1, readQueueNums=2, writeQueueNums=2, perm=6" in text
        err = await fails("updateTopic", *n, "-c", "DefaultCluster", "-t", "T9", "-p", "9")
        assert "0<=x<=7" in err  # RocketMQ's perms are 0..7 (9 is neither readable nor writable)
        assert "T1" in (await ok("topicList", *n)).split()
        assert "T1" in await as_json("topicList", *n)

        text = await ok("topicRoute", *n, "-t", "T1")
        assert headers_in(text, "#ClusterName", "#BrokerName", "#BrokerAddrs", "#ReadQueue")
        route = await as_json("topicRoute", *n, "-t", "T1")
        assert sorted((q["brokerName"], q["readQueueNums"]) for q in route["queueDatas"]) == [
            ("broker-a", 2),
            ("broker-b", 2),
        ]

        async with Producer("pg", c.namesrv) as producer:
            for i in range(10):
                await producer.send(Message("T1", f"m{i}".encode()))
        text = await ok("topicStatus", *n, "-t", "T1")
        assert headers_in(
            text, "#Broker Name", "#QID", "#Min Offset", "#Max Offset", "#Last Updated"
        )
        rows = await as_json("topicStatus", *n, "-t", "T1")
        assert len(rows) == 4
        assert sum(r["maxOffset"] for r in rows) == 10
        assert all(r["lastUpdateTimestamp"] > 0 for r in rows if r["maxOffset"] > 0)

        text = await ok(
            "updateTopic", *n, "-b", c.brokers["broker-a"], "-t", "T1", "-w", "4", "-r", "4"
        )
        route = await as_json("topicRoute", *n, "-t", "T1")
        assert sorted((q["brokerName"], q["writeQueueNums"]) for q in route["queueDatas"]) == [
            ("broker-a", 4),
            ("broker-b", 2),
        ]

        table = await ok("topicList", *n, "-c")
        assert headers_in(table, "#Cluster Name", "#Topic", "#Consumer Group")
        listed = await as_json("topicList", *n, "-c")
        assert {"clusterName": "DefaultCluster", "topic": TOPIC, "consumerGroups": []} in listed

        text = await ok("deleteTopic", *n, "-t", "T1")
        assert "delete topic [T1] from NameServer success." in text
        assert "T1" not in await as_json("topicList", *n)
        err = await fails("topicRoute", *n, "-t", "T1")
        assert "T1" in err
        err = await fails("topicStatus", *n, "-t", "NoSuchTopic")
        assert "NoSuchTopic" in err


async def test_unreachable_name_server_and_missing_address(tmp_path: Path) -> None:
    err = await fails("clusterList", "-n", "127.0.0.1:1")
    assert "no name server answered" in err
    # no address at all: the CLI's own words (-n), not the library's keyword argument
    for args in ((), ("-n", ""), ("-n", ";"), ("-n", " ; ")):
        result = await mqadmin("clusterList", *args, env={"NAMESRV_ADDR": None})
        assert result.exit_code == 1, result.output
        assert result.stderr == (
            "mqadmin clusterList: no name server address: give -n host:port[;host:port] "
            "or set NAMESRV_ADDR\n"
        )
    err = await fails("topicList", "-n", "not-an-address")
    assert "illegal name server address" in err
    err = await fails("topicRoute", "-t")  # an option without its value names the command
    assert err.startswith("mqadmin topicRoute: Option '-t' requires an argument")


async def test_cluster_list_shows_a_broker_that_does_not_answer(tmp_path: Path) -> None:
    # broker-b advertises a port nothing listens on: registered, but unreachable
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        dead = sock.getsockname()[1]
    async with (
        running_namesrv() as namesrv,
        running_broker(tmp_path / "a", namesrv, overrides={"brokerName": "broker-a"}),
        running_broker(
            tmp_path / "b",
            namesrv,
            overrides={"brokerName": "broker-b", "advertisedPort": str(dead)},
        ),
    ):
        text = await ok("clusterList", "-n", namesrv)
        assert "minimq" in text  # broker-a's version
        assert f"127.0.0.1:{dead}" in text
        assert "(unreachable)" in text
        # no made-up figures (0 TPS, an empty disk, activated) for a broker that did not answer
        [row] = [line.split() for line in text.splitlines() if f"127.0.0.1:{dead}" in line]
        assert row[4:] == ["(unreachable)", "-", "-", "-", "-", "-"]
        [row] = [line.split() for line in text.splitlines() if "broker-a" in line]
        assert "-" not in row
        rows = {r["brokerName"]: r for r in await as_json("clusterList", "-n", namesrv)}
        assert "error" not in rows["broker-a"]
        assert rows["broker-b"]["runtime"] == {}
        assert str(dead) in rows["broker-b"]["error"]


async def test_delete_topic_tells_every_name_server_it_can_reach(tmp_path: Path) -> None:
    """One name server down: the others still drop the route (or they would serve it for as
    long as they run), and the command fails naming the one it could not reach."""
    async with cluster(tmp_path) as c:
        both = ("-n", f"127.0.0.1:1;{c.namesrv}")
        await ok("updateTopic", "-n", c.namesrv, "-c", "DefaultCluster", "-t", "Gone", "-r", "2")
        err = await fails("deleteTopic", *both, "-t", "Gone")
        assert "127.0.0.1:1" in err
        await fails("topicRoute", "-n", c.namesrv, "-t", "Gone")


async def test_topic_list_with_groups_as_rocketmq(tmp_path: Path) -> None:
    """topicList -c, as RocketMQ's: no %RETRY%/%DLQ% topics; each topic's groups are those with
    offsets on it (a cloned group, a pull consumer's commits: no retry topic) and the online
    groups that subscribe to it."""
    async with cluster(tmp_path) as c:
        n = ("-n", c.namesrv)
        got: list[ReceivedMessage] = []
        consumer = PushConsumer(
            "cg", c.namesrv, consume_from=ConsumeFrom.FIRST_OFFSET, persist_interval=0.05
        )

        def handle(msgs: list[ReceivedMessage]) -> ConsumeResult:
            got.extend(msgs)
            return ConsumeResult.SUCCESS

        consumer.subscribe(TOPIC, "*", handle)
        async with consumer, Producer("pg", c.namesrv) as producer:
            for i in range(8):
                await producer.send(Message(TOPIC, b"%d" % i))
            await wait_until(lambda: len(got) == 8, "consumed")

            async def committed() -> bool:
                stats = await as_json("consumerProgress", *n, "-g", "cg", "-t", TOPIC)
                return stats["diffTotal"] == 0 and len(stats["queues"]) == 8

            await wait_until(committed, "offsets committed")
            await ok("cloneGroupOffset", *n, "-s", "cg", "-d", "cg4", "-t", TOPIC)
            async with PullConsumer("pullg", c.namesrv) as pc:
                queues = await pc.fetch_queues(TOPIC)
                await pc.commit({q: 0 for q in queues})
            await ok(
                "updateTopic", *n, "-c", "DefaultCluster", "-t", "%DLQ%cg", "-r", "1", "-w", "1"
            )
            await ok("updateTopic", *n, "-c", "DefaultCluster", "-t", "Idle")
            topics = await as_json("topicList", *n)
            assert {"%RETRY%cg", "%DLQ%cg"} <= set(topics)  # listed without -c

            listed = await as_json("topicList", *n, "-c")
            by_topic = {r["topic"]: r["consumerGroups"] for r in listed}
            assert not [t for t in by_topic if t.startswith(("%RETRY%", "%DLQ%"))]
            assert by_topic[TOPIC] == ["cg", "cg4", "pullg"]
            assert by_topic["Idle"] == []
            text = await ok("topicList", *n, "-c")
            assert "%RETRY%" not in text
            assert "%DLQ%" not in text
            assert {tuple(line.split()) for line in text.splitlines() if TOPIC in line} == {
                ("DefaultCluster", TOPIC, group) for group in ("cg", "cg4", "pullg")
            }


async def test_a_broker_name_given_to_b_is_named_as_one(tmp_path: Path) -> None:
    """``-b`` takes a broker address: a broker's name (or a value without a port) is refused
    with a reason, and the name's address is shown, instead of a failed connection to it."""
    async with cluster(tmp_path, brokers=("broker-a",)) as c:
        n = ("-n", c.namesrv)
        for command in (("brokerStatus",), ("updateTopic", "-t", "NewTopic")):
            err = await fails(*command, *n, "-b", "broker-a")
            assert "'broker-a' is a broker name, not a broker address (host:port)" in err, err
            assert c.brokers["broker-a"] in err, err
        err = await fails("getBrokerConfig", *n, "-b", "127.0.0.1")
        assert "illegal broker address '127.0.0.1': expected host:port" in err, err
        assert "NewTopic" not in await as_json("topicList", *n)


async def test_topic_status_of_one_cluster(tmp_path: Path) -> None:
    """topicStatus -c: only the queues of the cluster's brokers (RocketMQ's -c cluster)."""
    async with cluster(tmp_path) as c, trio.open_nursery() as nursery:
        other = {"brokerClusterName": "OtherCluster"}
        await nursery.start(c.run_broker, tmp_path, "broker-c", other)
        await c.create_topic(TOPIC)
        n = ("-n", c.namesrv, "-t", TOPIC)

        async def brokers_of(*cluster_option: str) -> set[str]:
            return {r["brokerName"] for r in await as_json("topicStatus", *n, *cluster_option)}

        async def all_three() -> bool:
            return len(await brokers_of()) == 3

        await wait_until(all_three, "broker-c registered with the topic")
        assert await brokers_of("-c", "OtherCluster") == {"broker-c"}
        assert await brokers_of("-c", "DefaultCluster") == {"broker-a", "broker-b"}
        text = await ok("topicStatus", *n, "-c", "OtherCluster")
        assert "broker-c" in text
        assert "broker-a" not in text
        err = await fails("topicStatus", *n, "-c", "NoSuchCluster")
        assert "no broker found in cluster NoSuchCluster" in err
        nursery.cancel_scope.cancel()
