"""Queries by key and by UNIQ_KEY when a broker of the topic does not answer: the others'
messages are shown, the silent broker is named on stderr, and only a query no broker answers
fails; ``queryMsgByKey -m`` must be at least 1."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from functools import partial
from pathlib import Path

import pytest
import trio

from client.admin.admin_client import AdminClient
from client.aio import Message, Producer
from client.errors import MQClientError
from client.message import MessageQueue
from common.route import TopicConfig
from remoting.client import RemotingClient
from remoting.codes import RequestCode, ResponseCode
from remoting.route_bodies import encode_register_body
from tests.admin.harness import as_json, fails, mqadmin
from tests.broker.inprocess import req, wait_until
from tests.client.inproc_cluster import LIMIT, TOPIC, Cluster, cluster

ONLY_ON_B = "OnlyOnB"


async def send_keyed(c: Cluster) -> dict[str, list[str]]:
    """Two messages with key ``same`` to each broker; broker name -> their UNIQ_KEYs."""
    sent: dict[str, list[str]] = {"broker-a": [], "broker-b": []}
    async with Producer("pg", c.namesrv) as producer:
        for broker, ids in sent.items():
            for queue_id in (0, 1):
                msg = Message(TOPIC, f"{broker}-{queue_id}".encode(), keys="same")
                result = await producer.send(msg, queue=MessageQueue(TOPIC, broker, queue_id))
                ids.append(result.msg_id)

    async def indexed() -> bool:
        return len(await as_json("queryMsgByKey", "-n", c.namesrv, "-t", TOPIC, "-k", "same")) == 4

    await wait_until(indexed, "the four messages indexed")
    return sent


@asynccontextmanager
async def still_listed(
    namesrv: str, brokers: dict[str, str], topics: tuple[str, ...] = (TOPIC, ONLY_ON_B)
) -> AsyncIterator[None]:
    """Register ``brokers`` (name -> address) with ``topics``, over a connection kept open:
    as a frozen or partitioned broker stays in the name server's routes (up to 120 s, or
    while its connection stays open)."""
    body = encode_register_body({t: TopicConfig(t, 4, 4) for t in topics})
    async with RemotingClient() as client:
        for name, addr in brokers.items():
            register = req(
                RequestCode.REGISTER_BROKER,
                body,
                brokerName=name,
                brokerAddr=addr,
                clusterName="DefaultCluster",
                haServerAddr=addr,
                brokerId="0",
            )
            resp = await client.invoke(namesrv, register)
            assert resp.code == ResponseCode.SUCCESS, resp.remark
        yield


def warnings_in(stderr: str, dead: str) -> list[str]:
    """The stderr lines, each checked to be a warning naming broker-b and its address."""
    lines = stderr.splitlines()
    for line in lines:
        assert "warning: broker broker-b did not answer" in line, line
        assert dead in line, line
    return lines


async def test_queries_keep_the_answers_of_the_brokers_that_answer(tmp_path: Path) -> None:
    async with cluster(tmp_path) as c:
        sent = await send_keyed(c)
        dead = c.brokers["broker-b"]
        await c.stop_broker("broker-b")
        async with still_listed(c.namesrv, {"broker-b": dead}):
            await check_queries(c.namesrv, sent, dead)


async def check_queries(namesrv: str, sent: dict[str, list[str]], dead: str) -> None:
    """Queries by key and UNIQ_KEY while broker-b, listed at ``dead``, does not answer."""
    n = ("-n", namesrv)
    result = await mqadmin("queryMsgByKey", *n, "-t", TOPIC, "-k", "same", "--json")
    assert result.exit_code == 0, result.output
    found = json.loads(result.stdout)  # stdout is the JSON alone
    assert sorted(m["msgId"] for m in found) == sorted(sent["broker-a"])
    assert len(warnings_in(result.stderr, dead)) == 1

    result = await mqadmin("queryMsgByKey", *n, "-t", TOPIC, "-k", "same")
    assert result.exit_code == 0, result.output
    assert all(msg_id in result.stdout for msg_id in sent["broker-a"])
    assert len(warnings_in(result.stderr, dead)) == 1

    wanted = sent["broker-a"][1]
    result = await mqadmin("queryMsgById", *n, "-i", wanted, "-t", TOPIC, "--json")
    assert result.exit_code == 0, result.output
    assert [m["msgId"] for m in json.loads(result.stdout)] == [wanted]
    assert len(warnings_in(result.stderr, dead)) == 1

    # a UNIQ_KEY the answering broker does not have: the failure names the silent one
    err = await fails("queryMsgById", *n, "-i", sent["broker-b"][0], "-t", TOPIC)
    assert "no message with this UNIQ_KEY" in err
    assert "broker-b did not answer" in err
    assert dead in err

    async with AdminClient(namesrv) as admin:
        query = await admin.query_message(TOPIC, "same")
    assert sorted(m.msg_id for m in query.messages) == sorted(sent["broker-a"])
    assert list(query.failed) == ["broker-b"]
    assert dead in query.failed["broker-b"]


async def test_a_query_no_broker_answers_fails(tmp_path: Path) -> None:
    async with cluster(tmp_path) as c:
        dead = c.brokers["broker-b"]
        await c.stop_broker("broker-b")
        async with still_listed(c.namesrv, {"broker-b": dead}):
            for command in (("queryMsgByKey", "-k", "k"), ("queryMsgById", "-i", "k")):
                err = await fails(*command, "-n", c.namesrv, "-t", ONLY_ON_B)
                assert "no broker answered the query: broker-b" in err
                assert dead in err


async def test_max_num_must_be_at_least_one(tmp_path: Path) -> None:
    async with cluster(tmp_path, brokers=("broker-a",)) as c:
        for max_num in ("0", "-5"):
            err = await fails(
                "queryMsgByKey", "-n", c.namesrv, "-t", TOPIC, "-k", "k", "-m", max_num
            )
            assert "-m" in err
            assert "x>=1" in err


async def test_the_brokers_are_asked_at_once(tmp_path: Path) -> None:
    """Two brokers that hold a query until both have one: only asked at once do they answer
    (by closing the connection) before the client's timeout."""
    received = 0
    both = trio.Event()

    async def hold_until_both(stream: trio.SocketStream) -> None:
        nonlocal received
        async with stream:
            await stream.receive_some()
            received += 1
            if received == 2:
                both.set()
            await both.wait()

    async with cluster(tmp_path, brokers=("broker-a",)) as c, trio.open_nursery() as nursery:
        fakes = {}
        for name in ("slow-1", "slow-2"):
            serve = partial(trio.serve_tcp, hold_until_both, 0, host="127.0.0.1")
            listeners = await nursery.start(serve)
            fakes[name] = f"127.0.0.1:{listeners[0].socket.getsockname()[1]}"
        async with (
            still_listed(c.namesrv, fakes, ("Slow",)),
            AdminClient(c.namesrv, timeout_s=LIMIT / 3) as admin,
        ):
            with pytest.raises(MQClientError, match="no broker answered the query") as failure:
                await admin.query_message("Slow", "k")
        assert received == 2
        assert "slow-1" in failure.value.reason
        assert "slow-2" in failure.value.reason
        nursery.cancel_scope.cancel()
