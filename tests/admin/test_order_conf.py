"""mqadmin updateOrderConf (the name servers' ORDER_TOPIC_CONFIG KV namespace) and the route's
orderTopicConf, against an in-process name server (its KV file under tmp_path) and broker."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import trio

from client.admin.admin_client import AdminClient
from client.errors import MQClientError
from namesrv.config import NamesrvConfig
from namesrv.server import NameServer
from remoting.client import RemotingClient
from remoting.codes import RequestCode, ResponseCode
from tests.admin.harness import as_json, fails, mqadmin, ok
from tests.broker.inprocess import req, running_broker, wait_until

LIMIT = 30.0
TOPIC = "Ordered"


@asynccontextmanager
async def namesrv_and_broker(tmp_path: Path) -> AsyncIterator[str]:
    """A name server keeping its KV and config files under ``tmp_path`` and a broker
    ``broker-a`` with TOPIC (4 queues) in its routes; yields the name server's address."""
    config = NamesrvConfig(
        listen_port=0,
        bind_address="127.0.0.1",
        kv_config_path=str(tmp_path / "kvConfig.json"),
        config_store_path=str(tmp_path / "namesrv.properties"),
    )
    server = NameServer(config)
    with trio.fail_after(LIMIT):
        async with trio.open_nursery() as nursery:
            await nursery.start(server.run)
            namesrv = f"127.0.0.1:{server.port}"
            overrides = {"brokerName": "broker-a"}
            async with running_broker(tmp_path / "broker", namesrv, overrides=overrides) as (
                _,
                addr,
            ):
                async with RemotingClient() as client:
                    create = req(
                        RequestCode.UPDATE_AND_CREATE_TOPIC,
                        topic=TOPIC,
                        readQueueNums=4,
                        writeQueueNums=4,
                        perm=6,
                    )
                    assert (await client.invoke(addr, create)).code == ResponseCode.SUCCESS
                await wait_until(lambda: routed(namesrv), "the topic routed")
                yield namesrv
            nursery.cancel_scope.cancel()


async def routed(namesrv: str) -> bool:
    """True once the name server has a route for TOPIC."""
    try:
        async with AdminClient(namesrv) as admin:
            await admin.topic_route(TOPIC)
    except MQClientError:
        return False
    return True


async def test_put_get_delete_and_the_route_carries_it_with_order_message_enable(
    tmp_path: Path,
) -> None:
    async with namesrv_and_broker(tmp_path) as namesrv:
        n = ("-n", namesrv)
        cmd = ("updateOrderConf", *n, "-t", TOPIC)
        put = await mqadmin(*cmd, "-m", "put", "-v", " broker-a:4; broker-b:2 ")
        assert put.exit_code == 0, put.output
        assert put.stdout == (
            f"update orderConf success. topic=[{TOPIC}], orderConf=[broker-a:4;broker-b:2]\n"
        )
        assert "orderMessageEnable is false on " in put.stderr  # the default: not in routes
        assert await ok(*cmd, "-m", "get") == (
            f"get orderConf success. topic=[{TOPIC}], orderConf=[broker-a:4;broker-b:2]\n"
        )
        assert await as_json(*cmd, "-m", "get") == {
            "topic": TOPIC,
            "orderConf": "broker-a:4;broker-b:2",
        }
        # it is RocketMQ's KV entry: the generic KV command sees it too
        kv = await mqadmin("updateKvConfig", *n, "-s", "ORDER_TOPIC_CONFIG", "-k", "X", "-v", "b:1")
        assert kv.exit_code == 0
        assert "orderTopicConf" not in await as_json("topicRoute", *n, "-t", TOPIC)

        await ok("updateNamesrvConfig", *n, "-k", "orderMessageEnable", "-v", "true")
        route = await as_json("topicRoute", *n, "-t", TOPIC)
        assert route["orderTopicConf"] == "broker-a:4;broker-b:2"
        async with AdminClient(namesrv) as admin:
            assert (await admin.topic_route(TOPIC)).order_topic_conf == "broker-a:4;broker-b:2"
        again = await mqadmin(*cmd, "-m", "put", "-v", "broker-a:2")
        assert again.exit_code == 0
        assert again.stderr == ""  # enabled now: no warning

        assert await ok(*cmd, "-m", "delete") == f"delete orderConf success. topic=[{TOPIC}]\n"
        assert "orderTopicConf" not in await as_json("topicRoute", *n, "-t", TOPIC)
        err = await fails(*cmd, "-m", "get")
        assert f"no order conf of topic {TOPIC}" in err


async def test_bad_input_is_a_usage_error(tmp_path: Path) -> None:
    async with namesrv_and_broker(tmp_path) as namesrv:
        cmd = ("updateOrderConf", "-n", namesrv, "-t", TOPIC)
        assert "please set orderConf with option -v" in await fails(*cmd, "-m", "put")
        err = await fails(*cmd, "-m", "put", "-v", "broker-a:4;broker-b")
        assert "'broker-b' is not brokerName:num (num > 0)" in err
        assert "'broker-a:0' is not" in await fails(*cmd, "-m", "put", "-v", "broker-a:0")
        assert "'post'" in await fails(*cmd, "-m", "post")
        assert not (tmp_path / "kvConfig.json").exists()  # nothing was stored
