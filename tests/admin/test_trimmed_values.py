"""mqadmin trims its option values as RocketMQ's (``getOptionValue('x').trim()``)."""

from __future__ import annotations

from pathlib import Path

import click

from client.admin.base import TrimmedText, java_trim
from client.admin.cli import main
from tests.admin.harness import as_json, mqadmin, ok
from tests.client.inproc_cluster import cluster


async def test_spaces_around_values_are_trimmed_as_rocketmq(tmp_path: Path) -> None:
    async with cluster(tmp_path, brokers=("broker-a",)) as c:
        addr = c.brokers["broker-a"]
        n = ("-n", f" {c.namesrv} ")
        text = await ok("updateTopic", *n, "-c", " DefaultCluster ", "-t", " Trimmed\t")
        assert "TopicConfig [topicName=Trimmed," in text
        route = await as_json("topicRoute", *n, "-t", " Trimmed ")
        assert [q["brokerName"] for q in route["queueDatas"]] == ["broker-a"]

        sent = await as_json(
            "sendMessage", *n, "-t", " Trimmed ", "-p", "  hi  ", "-c", " TagA ", "-k", " k1 "
        )
        [msg] = await as_json("queryMsgById", *n, "-i", f" {sent['offsetMsgId']} ")
        assert (msg["topic"], msg["body"], msg["tags"], msg["keys"]) == (
            "Trimmed",
            "hi",
            "TagA",
            ["k1"],
        )

        key_value = ("-k", " defaultTopicQueueNums ", "-v", " 3 ")
        text = await ok("updateBrokerConfig", *n, "-b", f" {addr} ", *key_value)
        assert f"update broker config success, {addr}" in text
        assert c.controllers["broker-a"].topics is not None
        assert c.controllers["broker-a"].topics.default_queue_nums == 3

        text = await ok("updateSubGroup", *n, "-b", f" {addr}", "-g", " G1 ")
        assert "SubscriptionGroupConfig [groupName=G1," in text
        result = await mqadmin("topicList", env={"NAMESRV_ADDR": f" {c.namesrv} "})
        assert result.exit_code == 0, result.output
        assert "Trimmed" in result.stdout.split()


def test_every_text_option_of_every_command_is_trimmed() -> None:
    for name, command in main.commands.items():
        for param in command.params:
            if isinstance(param.type, click.types.StringParamType):
                assert isinstance(param.type, TrimmedText), (name, param.name)


def test_java_trim_removes_control_characters_and_keeps_other_spaces() -> None:
    assert java_trim("\x00\x1f Orders \r\n") == "Orders"
    assert java_trim("\u00a0Orders\u3000") == "\u00a0Orders\u3000"  # Java's trim keeps these
