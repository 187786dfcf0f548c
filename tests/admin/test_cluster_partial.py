"""Commands that change several brokers (``-c`` a cluster, or every broker of a topic) while one
of them does not answer: the others are still changed, and the one-line failure names the
failed broker and the brokers that were changed, so the operator knows what happened."""

from __future__ import annotations

import json
from pathlib import Path

from client.aio import Message, Producer, PullConsumer
from tests.admin.harness import fails, mqadmin
from tests.admin.test_query_failed_broker import still_listed
from tests.client.inproc_cluster import TOPIC, cluster


async def test_update_broker_config_goes_on_past_a_dead_broker(tmp_path: Path) -> None:
    async with cluster(tmp_path) as c:
        dead, alive = c.brokers["broker-a"], c.brokers["broker-b"]
        await c.stop_broker("broker-a")  # the first broker of the cluster, by name
        async with still_listed(c.namesrv, {"broker-a": dead}):
            update = ("-c", "DefaultCluster", "-k", "autoCreateTopicEnable", "-v", "false")
            err = await fails("updateBrokerConfig", "-n", c.namesrv, *update)
        assert f"failed on {dead}" in err, err
        assert f"done on {alive}" in err, err
        assert c.controllers["broker-b"].config.auto_create_topic_enable is False


async def test_reset_offset_names_the_brokers_it_reset(tmp_path: Path) -> None:
    async with cluster(tmp_path) as c:
        async with Producer("pg", c.namesrv) as producer:
            for i in range(8):
                await producer.send(Message(TOPIC, b"m%d" % i))
        async with PullConsumer("off", c.namesrv) as pc:  # an offline group with offsets
            await pc.commit({q: 0 for q in await pc.fetch_queues(TOPIC)})
        alive, dead = c.brokers["broker-a"], c.brokers["broker-b"]
        await c.stop_broker("broker-b")
        async with still_listed(c.namesrv, {"broker-b": dead}):
            reset = ("-g", "off", "-t", TOPIC, "-s", "-1")
            err = await fails("resetOffsetByTime", "-n", c.namesrv, *reset)
        assert f"failed on {dead}" in err, err
        assert f"done on {alive}" in err, err
        broker_a = c.controllers["broker-a"]
        assert broker_a.offsets is not None
        ends = {qid: broker_a.store.get_max_offset_in_queue(TOPIC, qid) for qid in range(4)}
        assert sum(ends.values()) > 0
        assert broker_a.offsets.query_offsets("off", TOPIC) == ends  # skipped to the end


async def partly(*args: str) -> tuple[str, str]:
    """``mqadmin <args>`` must print what the brokers that answered gave and fail (status 1)
    with one line on stderr; its stdout and that line."""
    result = await mqadmin(*args)
    assert result.exit_code == 1, (args, result.output)
    assert result.stderr.count("\n") == 1, result.stderr
    return result.stdout, result.stderr.strip()


READS = (
    ("brokerStatus", "-c", "DefaultCluster"),
    ("getBrokerConfig", "-c", "DefaultCluster"),
    ("queryHalfMessages", "-c", "DefaultCluster", "-g", "pg"),
    ("topicStatus", "-t", TOPIC),
    ("topicStatus", "-t", TOPIC, "-c", "DefaultCluster"),
)


async def test_reads_of_several_brokers_go_on_past_a_dead_broker(tmp_path: Path) -> None:
    """brokerStatus -c, getBrokerConfig -c, queryHalfMessages and topicStatus: the live
    broker's answer is printed (tables and --json), the dead one is named on stderr."""
    async with cluster(tmp_path) as c:
        dead, alive = c.brokers["broker-a"], c.brokers["broker-b"]
        await c.stop_broker("broker-a")
        async with still_listed(c.namesrv, {"broker-a": dead}):
            for command in READS:
                args = (command[0], "-n", c.namesrv, *command[1:])
                text, err = await partly(*args)
                assert f"failed on {dead}" in err, err
                assert f"done on {alive}" in err, err
                assert text.strip(), (command, text)
                data, _ = await partly(*args, "--json")
                assert json.loads(data), (command, data)
            status, _ = await partly("brokerStatus", "-n", c.namesrv, "-c", "DefaultCluster")
            assert status.startswith(alive), status
            config_of = ("getBrokerConfig", "-n", c.namesrv, "-c", "DefaultCluster", "--json")
            config = json.loads((await partly(*config_of))[0])
            assert list(config) == [alive]
            assert config[alive]["brokerName"] == "broker-b"
