"""Tests for common/route.py: permission bits, broker address choice, wire round trips."""

from __future__ import annotations

from typing import Any

import msgpack
import pytest
from hypothesis import given
from hypothesis import strategies as st

from common.route import (
    MAX_QUEUE_NUMS,
    BrokerData,
    ClusterInfo,
    PermName,
    QueueData,
    TopicConfig,
    TopicRouteData,
)

names = st.text(min_size=1, max_size=12)
small = st.integers(min_value=0, max_value=1024)
perms = st.integers(min_value=0, max_value=15)

queue_datas = st.builds(
    QueueData,
    broker_name=names,
    read_queue_nums=small,
    write_queue_nums=small,
    perm=perms,
    topic_sys_flag=small,
)
broker_datas = st.builds(
    BrokerData,
    cluster=names,
    broker_name=names,
    broker_addrs=st.dictionaries(st.integers(min_value=0, max_value=8), names, max_size=3),
)
route_datas = st.builds(
    TopicRouteData,
    queue_datas=st.lists(queue_datas, max_size=4),
    broker_datas=st.lists(broker_datas, max_size=4),
    filter_server_table=st.dictionaries(names, st.lists(names, max_size=2), max_size=2),
)
topic_configs = st.builds(
    TopicConfig,
    topic_name=names,
    read_queue_nums=small,
    write_queue_nums=small,
    perm=perms,
    topic_filter_type=st.sampled_from(["SINGLE_TAG", "MULTI_TAG"]),
    topic_sys_flag=small,
    order=st.booleans(),
)


def through_msgpack(wire: dict[str, Any]) -> Any:
    return msgpack.unpackb(msgpack.packb(wire), strict_map_key=False)


@pytest.mark.parametrize(
    ("perm", "text"),
    [
        (0, "---"),
        (4, "R--"),
        (2, "-W-"),
        (6, "RW-"),
        (7, "RWX"),
        (1, "--X"),
        (8, "---"),
        (14, "RW-"),
    ],
)
def test_perm_to_string(perm: int, text: str) -> None:
    assert PermName.perm_to_string(perm) == text


def test_perm_bits() -> None:
    assert PermName.is_readable(6)
    assert PermName.is_writeable(6)
    assert not PermName.is_writeable(PermName.PERM_READ)
    assert not PermName.is_readable(PermName.PERM_WRITE | PermName.PERM_INHERIT)
    assert PermName.is_inherited(7)
    assert PermName.is_valid(0)
    assert PermName.is_valid(15)
    assert not PermName.is_valid(-1)
    assert not PermName.is_valid(16)


def test_topic_config_defaults_match_rocketmq() -> None:
    config = TopicConfig("T")
    assert (config.read_queue_nums, config.write_queue_nums, config.perm) == (16, 16, 6)
    assert config.topic_filter_type == "SINGLE_TAG"
    assert config.topic_sys_flag == 0
    assert config.order is False


def test_select_broker_addr_prefers_master() -> None:
    assert BrokerData("c", "b", {1: "s1", 0: "m"}).select_broker_addr() == "m"
    assert BrokerData("c", "b", {2: "s2", 1: "s1"}).select_broker_addr() == "s1"
    assert BrokerData("c", "b", {}).select_broker_addr() is None


def test_wire_uses_rocketmq_names() -> None:
    route = TopicRouteData(
        [QueueData("broker-a", 8, 8, 6)], [BrokerData("DefaultCluster", "broker-a", {0: "h:1"})]
    )
    assert route.to_wire() == {
        "queueDatas": [
            {
                "brokerName": "broker-a",
                "readQueueNums": 8,
                "writeQueueNums": 8,
                "perm": 6,
                "topicSysFlag": 0,
            }
        ],
        "brokerDatas": [
            {"cluster": "DefaultCluster", "brokerName": "broker-a", "brokerAddrs": {0: "h:1"}}
        ],
        "filterServerTable": {},
    }
    assert set(TopicConfig("T").to_wire()) == {
        "topicName",
        "readQueueNums",
        "writeQueueNums",
        "perm",
        "topicFilterType",
        "topicSysFlag",
        "order",
    }


def test_queue_data_accepts_rocketmq4_spelling() -> None:
    wire = {
        "brokerName": "a",
        "readQueueNums": 8,
        "writeQueueNums": 8,
        "perm": 7,
        "topicSynFlag": 3,
    }
    assert QueueData.from_wire(wire).topic_sys_flag == 3


def test_topic_config_from_sparse_wire_takes_defaults() -> None:
    assert TopicConfig.from_wire({"topicName": "T"}) == TopicConfig("T")


@given(route_datas)
def test_route_round_trip(route: TopicRouteData) -> None:
    assert TopicRouteData.from_wire(route.to_wire()) == route
    assert TopicRouteData.from_wire(through_msgpack(route.to_wire())) == route


@given(topic_configs)
def test_topic_config_round_trip(config: TopicConfig) -> None:
    assert TopicConfig.from_wire(through_msgpack(config.to_wire())) == config


@given(st.dictionaries(names, broker_datas, max_size=3), st.dictionaries(names, st.sets(names)))
def test_cluster_info_round_trip(
    brokers: dict[str, BrokerData], clusters: dict[str, set[str]]
) -> None:
    info = ClusterInfo(brokers, clusters)
    assert ClusterInfo.from_wire(through_msgpack(info.to_wire())) == info


GOOD_QD = {"brokerName": "a", "readQueueNums": 8, "writeQueueNums": 8, "perm": 6}


@pytest.mark.parametrize(
    ("wire", "message"),
    [
        ([], "QueueData: expected a map"),
        ({**GOOD_QD, "brokerName": 1}, "'brokerName' must be str"),
        ({k: v for k, v in GOOD_QD.items() if k != "perm"}, "missing key 'perm'"),
        ({**GOOD_QD, "perm": 16}, "'perm' must be in [0, 16)"),
        ({**GOOD_QD, "readQueueNums": True}, "'readQueueNums' must be an int, got bool"),
        ({**GOOD_QD, "writeQueueNums": -1}, "'writeQueueNums' must be >= 0"),
    ],
)
def test_queue_data_rejects(wire: Any, message: str) -> None:
    with pytest.raises(ValueError, match="QueueData") as info:
        QueueData.from_wire(wire)
    assert message in str(info.value)


@pytest.mark.parametrize(
    ("wire", "message"),
    [
        ({"cluster": "c", "brokerName": "b"}, "missing key 'brokerAddrs'"),
        ({"cluster": "c", "brokerName": "b", "brokerAddrs": {"0": "h"}}, "int broker ids"),
        (
            {"cluster": "c", "brokerName": "b", "brokerAddrs": {0: 5}},
            "'brokerAddrs'[0] must be str",
        ),
        ({"cluster": "c", "brokerName": "b", "brokerAddrs": []}, "'brokerAddrs' must be Mapping"),
    ],
)
def test_broker_data_rejects(wire: Any, message: str) -> None:
    with pytest.raises(ValueError, match="BrokerData") as info:
        BrokerData.from_wire(wire)
    assert message in str(info.value)


def test_route_rejects_bad_lists() -> None:
    with pytest.raises(ValueError, match="'queueDatas' must be list"):
        TopicRouteData.from_wire({"queueDatas": {}, "brokerDatas": []})
    with pytest.raises(ValueError, match="QueueData: expected a map"):
        TopicRouteData.from_wire({"queueDatas": [1], "brokerDatas": []})
    with pytest.raises(ValueError, match="filterServerTable"):
        TopicRouteData.from_wire(
            {"queueDatas": [], "brokerDatas": [], "filterServerTable": {"h": [1]}}
        )


def test_topic_config_rejects() -> None:
    with pytest.raises(ValueError, match="'order' must be bool"):
        TopicConfig.from_wire({"topicName": "T", "order": 1})
    with pytest.raises(ValueError, match="topicFilterType"):
        TopicConfig.from_wire({"topicName": "T", "topicFilterType": "SQL"})
    with pytest.raises(ValueError, match="missing key 'topicName'"):
        TopicConfig.from_wire({})


@pytest.mark.parametrize("key", ["readQueueNums", "writeQueueNums"])
def test_topic_queue_numbers_are_bounded(key: str) -> None:
    """RocketMQ sets no bound; one request for 2**40 queues would make every per-queue loop
    (stats, routes, rebalance) run for ever."""
    assert TopicConfig.from_wire({"topicName": "T", key: MAX_QUEUE_NUMS}).to_wire()[key] == 1024
    for bad in (MAX_QUEUE_NUMS + 1, 2**40, -1):
        with pytest.raises(ValueError, match=key):
            TopicConfig.from_wire({"topicName": "T", key: bad})
