"""Tests for broker/config.py: defaults, precedence, key mapping and store settings."""

from __future__ import annotations

import ipaddress
from pathlib import Path

import pytest

from broker.config import STORE_KEYS, BrokerConfig
from common.properties import parse_properties
from store.config import FlushDiskType, StoreConfig


def test_defaults_match_rocketmq() -> None:
    config = BrokerConfig()
    assert config.broker_cluster_name == "DefaultCluster"
    assert config.broker_name == "broker-a"
    assert config.broker_id == 0
    assert config.listen_port == 10911
    assert config.namesrv_addr is None
    assert config.namesrv_addrs == []
    assert config.broker_permission == 6
    assert config.auto_create_topic_enable is True
    assert config.default_topic_queue_nums == 8
    assert config.auto_create_subscription_group is True
    assert config.flush_consumer_offset_interval_ms == 5000
    assert config.register_name_server_period_ms == 30_000
    assert config.channel_expired_timeout_ms == 120_000
    assert config.long_polling_enable is True
    assert config.metrics_port is None
    assert ipaddress.ip_address(config.broker_ip1).version == 4
    assert config.store_config().store_host == (config.broker_ip1, 10911)


def _write(tmp_path: Path, text: str, name: str = "broker.conf") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def test_namesrv_precedence(tmp_path: Path) -> None:
    """NAMESRV_ADDR is only the default (RocketMQ's BrokerConfig): -c, -n and --key win."""
    conf = _write(tmp_path, "namesrvAddr=file:1\nbrokerName=broker-b\n")
    bare = _write(tmp_path, "brokerName=broker-b\n", name="bare.conf")
    env = {"NAMESRV_ADDR": "env:2"}
    assert BrokerConfig.load(conf, None, {}, {}).namesrv_addr == "file:1"
    assert BrokerConfig.load(conf, None, env, {}).namesrv_addr == "file:1"
    assert BrokerConfig.load(bare, None, env, {}).namesrv_addr == "env:2"
    assert BrokerConfig.load(None, None, env, {}).namesrv_addr == "env:2"
    assert BrokerConfig.load(conf, "arg:3", env, {}).namesrv_addr == "arg:3"
    assert BrokerConfig.load(bare, "arg:3", env, {}).namesrv_addr == "arg:3"
    over = BrokerConfig.load(conf, "arg:3", env, {"namesrvAddr": "over:4"})
    assert over.namesrv_addr == "over:4"
    assert over.broker_name == "broker-b"
    assert BrokerConfig.load(bare, None, env, {"namesrvAddr": "over:4"}).namesrv_addr == "over:4"
    assert BrokerConfig.load(None, None, {"NAMESRV_ADDR": ""}, {}).namesrv_addr is None
    assert BrokerConfig.load(conf, "", env, {}).namesrv_addr is None  # -n "" clears it
    assert BrokerConfig.load(bare, "", env, {}).namesrv_addr is None


def test_bad_namesrv_addr_env_is_named_only_when_used(tmp_path: Path) -> None:
    env = {"NAMESRV_ADDR": "foo"}
    with pytest.raises(ValueError, match=r"^NAMESRV_ADDR: expected host:port, got 'foo'$"):
        BrokerConfig.load(None, None, env, {})
    conf = _write(tmp_path, "namesrvAddr=10.0.0.1:9876\n")
    assert BrokerConfig.load(conf, None, env, {}).namesrv_addr == "10.0.0.1:9876"


def test_busy_poll_env_is_only_the_default(tmp_path: Path) -> None:
    """MINIMQ_BUSY_POLL_US is the default: busyPollMicros in -c or --busyPollMicros wins."""
    conf = _write(tmp_path, "busyPollMicros=50\n")
    assert BrokerConfig.load(conf, None, {}, {}).busy_poll_us == 50
    env = {"MINIMQ_BUSY_POLL_US": "0"}
    assert BrokerConfig.load(conf, None, env, {}).busy_poll_us == 50
    assert BrokerConfig.load(None, None, env, {}).busy_poll_us == 0
    assert BrokerConfig.load(None, None, {"MINIMQ_BUSY_POLL_US": "750"}, {}).busy_poll_us == 750
    assert BrokerConfig.load(conf, None, env, {"busyPollMicros": "75"}).busy_poll_us == 75
    assert BrokerConfig.load(None, None, env, {"busyPollMicros": "75"}).busy_poll_us == 75
    assert "busyPollMicros=50\n" in BrokerConfig.load(conf, None, env, {}).to_properties()
    bad = {"MINIMQ_BUSY_POLL_US": "fast"}
    with pytest.raises(ValueError, match=r"^MINIMQ_BUSY_POLL_US must be .*, got 'fast'$"):
        BrokerConfig.load(None, None, bad, {})
    assert BrokerConfig.load(conf, None, bad, {}).busy_poll_us == 50  # not used: not read


def test_overrides_beat_file_for_any_key(tmp_path: Path) -> None:
    conf = _write(tmp_path, "listenPort=20911\nflushDiskType=SYNC_FLUSH\n")
    config = BrokerConfig.load(conf, None, {}, {"listenPort": "30911"})
    assert config.listen_port == 30911
    assert config.store_config().flush_disk_type is FlushDiskType.SYNC_FLUSH


def test_namesrv_addrs_split() -> None:
    config = BrokerConfig.load(None, "10.0.0.1:9876; 10.0.0.2:9876;", {}, {})
    assert config.namesrv_addrs == ["10.0.0.1:9876", "10.0.0.2:9876"]


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("listenPort", "abc"),
        ("listenPort", "70000"),
        ("autoCreateTopicEnable", "yes"),
        ("brokerPermission", "9"),
        ("defaultTopicQueueNums", "0"),
        ("defaultTopicQueueNums", "1025"),  # past what a route may carry
        ("registerNameServerPeriod", "60001"),  # name servers drop a broker after 120 s
        ("registerNameServerPeriod", "99"),  # would re-register without pause
        ("registerNameServerPeriod", "0"),
        ("registerNameServerPeriod", "-5"),
        ("listenPort", "1_000"),  # Java's parseInt refuses it
        ("brokerRole", "SLAVE"),
        ("brokerRole", "SYNC_MASTER"),
        ("brokerRole", "async_master"),
        ("bindAddress", ""),
        ("namesrvAddr", "127.0.0.1:\u00b2"),
        ("flushDiskType", "SOMETIMES"),
        ("mappedFileSizeCommitLog", "12"),
        ("mappedFileSizeConsumeQueue", "-20"),
        ("namesrvAddr", "no-port"),
        ("metricsPort", "x"),
        ("advertisedPort", "65536"),
        ("advertisedPort", "-1"),
        ("busyPollMicros", "-1"),
        ("busyPollMicros", "soon"),
        # values that would crash the first put, answer every send with an error or spin a
        # loop at runtime are refused at startup
        ("mappedFileSizeConsumeQueue", "0"),
        ("syncFlushTimeout", "-1"),
        ("flushIntervalCommitLog", "0"),
        ("flushIntervalConsumeQueue", "-5"),
        ("cleanResourceInterval", "0"),
        ("fileReservedTime", "-1"),
        ("diskMaxUsedSpaceRatio", "500"),
        ("deleteWhen", "xx"),
        ("deleteWhen", "24"),
        ("deleteFileBatchMax", "0"),
        ("maxMessageSize", "0"),
        ("maxTopicLength", "0"),
        ("brokerIP1", "notanip"),
    ],
)
def test_bad_value_names_the_key(key: str, value: str) -> None:
    with pytest.raises(ValueError, match=key):
        BrokerConfig.load(None, None, {}, {key: value})


def test_advertised_port_is_what_clients_and_message_ids_get() -> None:
    plain = BrokerConfig.load(None, None, {}, {"brokerIP1": "10.0.0.5", "listenPort": "10911"})
    assert plain.advertised_port == 0
    assert plain.broker_addr == "10.0.0.5:10911"
    assert plain.advertised(bound_port=40000) == 40000  # listenPort 0: the port bound
    behind_nat = BrokerConfig.load(
        None,
        None,
        {},
        {"brokerIP1": "203.0.113.7", "listenPort": "10911", "advertisedPort": "31911"},
    )
    assert behind_nat.listen_port == 10911  # still where it listens
    assert behind_nat.broker_addr == "203.0.113.7:31911"
    assert behind_nat.advertised(bound_port=10911) == 31911
    assert behind_nat.store_config().store_host == ("203.0.113.7", 31911)


def test_unknown_key_rejected(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="brokerNme"):
        BrokerConfig.load(None, None, {}, {"brokerNme": "x"})
    conf = _write(tmp_path, "store_host=1.2.3.4\n")
    with pytest.raises(ValueError, match="store_host"):
        BrokerConfig.load(conf, None, {}, {})


def test_store_config_mapping(tmp_path: Path) -> None:
    root = tmp_path / "data"
    conf = _write(
        tmp_path,
        f"storePathRootDir={root}\n"
        "flushDiskType=SYNC_FLUSH\n"
        "mappedFileSizeCommitLog=65536\n"
        "mappedFileSizeConsumeQueue=1000\n"
        "deleteWhen=03;04\n"
        "fileReservedTime=48\n"
        "diskMaxUsedSpaceRatio=80\n"
        "maxMessageSize=1024\n"
        "syncFlushTimeout=100\n"
        "flushIntervalCommitLog=50\n"
        "checkCRCOnRecover=false\n",
    )
    store = BrokerConfig.load(conf, None, {}, {"brokerIP1": "10.1.2.3"}).store_config()
    assert isinstance(store, StoreConfig)
    assert store.store_path_root_dir == root
    assert store.flush_disk_type is FlushDiskType.SYNC_FLUSH
    assert store.mapped_file_size_commit_log == 65536
    assert store.mapped_file_size_consume_queue == 1000
    assert store.delete_when == "03;04"
    assert store.file_reserved_time == 48
    assert store.disk_max_used_space_ratio == 80
    assert store.max_message_size == 1024
    assert store.sync_flush_timeout == 100
    assert store.flush_interval_commit_log == 50
    assert store.check_crc_on_recover is False
    assert store.store_host == ("10.1.2.3", 10911)


def test_store_keys_cover_store_config() -> None:
    assert set(STORE_KEYS.values()) == {
        "store_path_root_dir",
        "mapped_file_size_commit_log",
        "mapped_file_size_consume_queue",
        "mapper_file_size_batch_consume_queue",
        "max_hash_slot_num",
        "max_index_num",
        "max_msgs_num_batch",
        "default_query_max_num",
        "message_index_enable",
        "flush_disk_type",
        "flush_interval_commit_log",
        "flush_interval_consume_queue",
        "warm_ahead_size_commit_log",
        "sync_flush_timeout",
        "file_reserved_time",
        "delete_when",
        "disk_max_used_space_ratio",
        "disk_space_warning_level_ratio",
        "disk_space_clean_forcibly_ratio",
        "clean_file_forcibly_enable",
        "clean_resource_interval",
        "delete_commit_log_files_interval",
        "destroy_maped_file_interval_forcibly",
        "redelete_hanged_file_interval",
        "delete_file_batch_max",
        "max_message_size",
        "max_topic_length",
        "check_crc_on_recover",
        "enabled_append_prop_crc",
        "max_transfer_count_on_message_in_memory",
        "max_transfer_bytes_on_message_in_memory",
    }
    assert "checkCRCOnRecover" in STORE_KEYS
    assert STORE_KEYS["enabledAppendPropCRC"] == "enabled_append_prop_crc"


def test_to_properties_round_trip(tmp_path: Path) -> None:
    config = BrokerConfig.load(
        None,
        "127.0.0.1:9876",
        {},
        {"flushDiskType": "SYNC_FLUSH", "brokerIP1": "10.0.0.9", "metricsPort": "5557"},
    )
    text = config.to_properties()
    props = parse_properties(text)
    assert props["flushDiskType"] == "SYNC_FLUSH"
    assert props["namesrvAddr"] == "127.0.0.1:9876"
    assert props["autoCreateTopicEnable"] == "true"
    again = BrokerConfig.from_properties(props)
    assert again.store_config() == config.store_config()
    assert again.to_properties() == text
    assert again.metrics_port == 5557
