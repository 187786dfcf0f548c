"""mqadmin wipeWritePerm, addWritePerm and updateTopicPerm against in-process name servers and
brokers (real sockets on 127.0.0.1)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

import trio

from client.aio import Message, Producer
from client.config import ClientConfig
from client.instance import ClientInstance
from namesrv.config import NamesrvConfig
from namesrv.server import NameServer
from tests.admin.harness import as_json, collecting_consumer, fails, mqadmin, ok
from tests.broker.inprocess import wait_until
from tests.client.inproc_cluster import TOPIC, Cluster

LIMIT = 60.0
FAST_REGISTRATION = {"registerNameServerPeriod": "100"}
"""Brokers re-register every 100 ms, so a test sees periodic registrations soon."""


@dataclass
class PermCluster:
    """Name servers (kept, to read their tables) and the brokers of :class:`Cluster`."""

    namesrvs: list[NameServer]
    brokers: Cluster

    @property
    def n(self) -> tuple[str, str]:
        """The ``-n`` option naming every name server."""
        return ("-n", self.brokers.namesrv)

    def registrations_of(self, broker_addr: str) -> list[int]:
        """The last registration time of ``broker_addr`` on each name server."""
        return [ns.route_info.broker_live_table[broker_addr].last_update_ms for ns in self.namesrvs]

    def topics_of(self, broker_name: str) -> int:
        """How many topics the first name server routes to ``broker_name``."""
        tables = self.namesrvs[0].route_info.topic_queue_table.values()
        return sum(1 for queue_map in tables if broker_name in queue_map)


@asynccontextmanager
async def perm_cluster(tmp_path: Path, namesrv_count: int = 1) -> AsyncIterator[PermCluster]:
    """``namesrv_count`` name servers and brokers broker-a and broker-b registering with each
    every 100 ms, with TOPIC (4 queues) on both."""
    with trio.fail_after(LIMIT):
        async with trio.open_nursery() as namesrv_nursery:
            namesrvs = []
            for _ in range(namesrv_count):
                server = NameServer(NamesrvConfig(listen_port=0, bind_address="127.0.0.1"))
                await namesrv_nursery.start(server.run)
                namesrvs.append(server)
            brokers = Cluster(";".join(f"127.0.0.1:{ns.port}" for ns in namesrvs))
            async with trio.open_nursery() as broker_nursery:  # stopped before the name servers
                for name in ("broker-a", "broker-b"):
                    await broker_nursery.start(
                        brokers.run_broker, tmp_path, name, FAST_REGISTRATION
                    )
                await brokers.create_topic(TOPIC, 4)
                yield PermCluster(namesrvs, brokers)
                broker_nursery.cancel_scope.cancel()
            namesrv_nursery.cancel_scope.cancel()


async def route_perms(c: PermCluster, topic: str = TOPIC) -> dict[str, int]:
    """Broker name -> the topic's perm in its route, as ``topicRoute --json`` shows it."""
    route = await as_json("topicRoute", *c.n, "-t", topic)
    return {q["brokerName"]: q["perm"] for q in route["queueDatas"]}


async def brokers_written(producer: Producer, count: int) -> set[str]:
    """The broker names ``count`` sends of ``producer`` went to."""
    names = set()
    for i in range(count):
        result = await producer.send(Message(TOPIC, b"m%d" % i))
        names.add(result.queue.broker_name)
    return names


async def test_wipe_write_perm_drains_producers_until_add_write_perm(tmp_path: Path) -> None:
    """wipeWritePerm: producers leave broker-a at their next route refresh while consumers
    still read it, and it lasts through the broker's periodic registrations (its topic table
    unchanged, as RocketMQ's name server); addWritePerm gives the queues back."""
    async with perm_cluster(tmp_path) as c:
        config = ClientConfig.create(c.brokers.namesrv, poll_name_server_interval_s=3600)
        async with ClientInstance(config) as instance, Producer("pg", instance=instance) as p:
            assert await brokers_written(p, 8) == {"broker-a", "broker-b"}
            expected = c.topics_of("broker-a")
            out = await ok("wipeWritePerm", *c.n, "-b", "broker-a")
            assert out == (
                f"wipe write perm of broker[broker-a] in name server[{c.brokers.namesrv}] OK, "
                f"{expected}\n"
            )
            assert await route_perms(c) == {"broker-a": 4, "broker-b": 6}

            before = c.registrations_of(c.brokers.brokers["broker-a"])
            await wait_until(
                lambda: c.registrations_of(c.brokers.brokers["broker-a"]) > before,
                "a periodic registration of broker-a",
            )
            assert await route_perms(c) == {"broker-a": 4, "broker-b": 6}  # still wiped

            await instance.refresh_routes()
            assert await brokers_written(p, 8) == {"broker-b"}
            await consume_all(c.brokers.namesrv, 16, {"broker-a", "broker-b"})

            out = await ok("addWritePerm", *c.n, "-b", "broker-a")
            assert out == (
                f"add write perm of broker[broker-a] in name server[{c.brokers.namesrv}] OK, "
                f"{c.topics_of('broker-a')}\n"  # the consumer's %RETRY% topic too
            )
            assert await route_perms(c) == {"broker-a": 6, "broker-b": 6}
            await instance.refresh_routes()
            assert await brokers_written(p, 8) == {"broker-a", "broker-b"}


async def consume_all(namesrv: str, count: int, from_brokers: set[str]) -> None:
    """A new push consumer reads ``count`` messages of TOPIC, from each of ``from_brokers``."""
    consumer, got = collecting_consumer(namesrv)
    async with consumer:
        await wait_until(lambda: len(got) >= count, f"{count} messages consumed")
    assert {m.queue.broker_name for m in got} == from_brokers


async def test_a_topic_change_on_the_broker_gives_back_a_wiped_write_perm(
    tmp_path: Path,
) -> None:
    """A registration with a new topic table re-applies all of it, as RocketMQ's."""
    async with perm_cluster(tmp_path) as c:
        await ok("wipeWritePerm", *c.n, "-b", "broker-a")
        assert await route_perms(c) == {"broker-a": 4, "broker-b": 6}
        await ok("updateTopic", *c.n, "-b", c.brokers.brokers["broker-a"], "-t", "Other")
        assert await route_perms(c) == {"broker-a": 6, "broker-b": 6}


async def test_write_perm_commands_ask_every_name_server(tmp_path: Path) -> None:
    """One line (or JSON entry) per name server; an unknown broker name counts 0, with a
    warning; a name server that does not answer is named on stderr (status 1), after the
    others were done."""
    async with perm_cluster(tmp_path, namesrv_count=2) as c:
        first, second = (f"127.0.0.1:{ns.port}" for ns in c.namesrvs)
        expected = c.topics_of("broker-a")
        rows = await as_json("wipeWritePerm", *c.n, "-b", "broker-a")
        assert rows == [
            {"brokerName": "broker-a", "namesrvAddr": first, "wipeTopicCount": expected},
            {"brokerName": "broker-a", "namesrvAddr": second, "wipeTopicCount": expected},
        ]
        for ns in c.namesrvs:
            route = ns.route_info.pick_topic_route(TOPIC)
            assert route is not None
            assert {q.broker_name: q.perm for q in route.queue_datas} == {
                "broker-a": 4,
                "broker-b": 6,
            }

        unknown = await mqadmin("addWritePerm", *c.n, "-b", c.brokers.brokers["broker-a"])
        assert unknown.exit_code == 0
        assert unknown.stdout.count(" OK, 0\n") == 2
        assert "warning" in unknown.stderr
        assert "-b takes a broker name" in unknown.stderr

        dead = await dead_address()
        partly = await mqadmin("addWritePerm", "-n", f"{first};{dead}", "-b", "broker-a")
        assert partly.exit_code == 1
        assert partly.stdout == (
            f"add write perm of broker[broker-a] in name server[{first}] OK, {expected}\n"
        )
        assert partly.stderr.count("\n") == 1
        assert f"failed on {dead}" in partly.stderr
        assert f"done on {first}" in partly.stderr


async def dead_address() -> str:
    """A 127.0.0.1 address nothing listens on (a port bound, then closed)."""
    sock = trio.socket.socket()
    await sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()
    return f"127.0.0.1:{port}"


async def test_update_topic_perm_changes_only_the_named_broker(tmp_path: Path) -> None:
    async with perm_cluster(tmp_path) as c:
        a_addr = c.brokers.brokers["broker-a"]
        out = await ok("updateTopicPerm", *c.n, "-t", TOPIC, "-b", a_addr, "-p", "4")
        assert out.splitlines() == [
            f"update topic perm from 6 to 4 in {a_addr} success.",
            f"TopicConfig [topicName={TOPIC}, readQueueNums=4, writeQueueNums=4, perm=4, "
            "topicFilterType=SINGLE_TAG, topicSysFlag=0, order=false].",
        ]
        assert await route_perms(c) == {"broker-a": 4, "broker-b": 6}
        a_topics = c.brokers.controllers["broker-a"].topics
        assert a_topics is not None
        held = a_topics.select(TOPIC)
        assert held is not None
        assert held.perm == 4

        same = await ok("updateTopicPerm", *c.n, "-t", TOPIC, "-b", a_addr, "-p", "4")
        assert same == "new perm equals to the old one!\n"

        result = await as_json(
            "updateTopicPerm", *c.n, "-t", TOPIC, "-c", "DefaultCluster", "-p", "2"
        )
        assert result["topic"] == TOPIC
        assert [
            (b["brokerName"], b["oldPerm"], b["perm"], b["updated"]) for b in result["brokers"]
        ] == [
            ("broker-a", 4, 2, True),
            ("broker-b", 6, 2, True),
        ]
        assert result["brokers"][0]["topicConfig"]["writeQueueNums"] == 4
        assert await route_perms(c) == {"broker-a": 2, "broker-b": 2}


async def test_update_topic_perm_refuses_bad_input_saying_why(tmp_path: Path) -> None:
    async with perm_cluster(tmp_path) as c:
        a_addr = c.brokers.brokers["broker-a"]
        for perm in ("5", "0", "7", "x"):
            err = await fails("updateTopicPerm", *c.n, "-t", TOPIC, "-b", a_addr, "-p", perm)
            assert "'-p'" in err, err
        err = await fails("updateTopicPerm", *c.n, "-t", TOPIC, "-b", a_addr, "-p", "5")
        assert "give 2 (W), 4 (R) or 6 (RW)" in err

        err = await fails("updateTopicPerm", *c.n, "-t", "NoSuchTopic", "-b", a_addr, "-p", "4")
        assert "No topic route info" in err
        assert "NoSuchTopic" in err
        err = await fails("updateTopicPerm", *c.n, "-t", TOPIC, "-b", "broker-a", "-p", "4")
        assert "not the master of a broker hosting topic" in err
        assert a_addr in err  # the masters it could have named
        err = await fails("updateTopicPerm", *c.n, "-t", TOPIC, "-c", "NoCluster", "-p", "4")
        assert "NoCluster" in err
        err = await fails("updateTopicPerm", *c.n, "-t", TOPIC, "-p", "4")
        assert "give -b brokerAddr or -c clusterName" in err
        assert await route_perms(c) == {"broker-a": 6, "broker-b": 6}  # nothing changed


async def test_update_topic_perm_does_not_claim_to_undo_a_wiped_write_perm(
    tmp_path: Path,
) -> None:
    """After wipeWritePerm the route shows 4 while the broker holds 6: sending 6 would change
    nothing on the broker, so nothing in the routes; the command says so and what to run."""
    async with perm_cluster(tmp_path) as c:
        a_addr = c.brokers.brokers["broker-a"]
        await ok("wipeWritePerm", *c.n, "-b", "broker-a")
        err = await fails("updateTopicPerm", *c.n, "-t", TOPIC, "-b", a_addr, "-p", "6")
        assert "broker-a holds perm 6, routed 4" in err
        assert "addWritePerm" in err
        assert await route_perms(c) == {"broker-a": 4, "broker-b": 6}
