"""Tests for namesrv/route_info.py with explicit ``now_ms`` values: no clocks, no sleeps."""

from __future__ import annotations

from common.route import BrokerData, DataVersion, QueueData, TopicConfig
from namesrv.route_info import BrokerLiveInfo, RegisterResult, RouteInfoManager

CLUSTER = "DefaultCluster"
A_MASTER, A_SLAVE, B_MASTER = "10.0.0.1:10911", "10.0.0.2:10911", "10.0.0.3:10911"


def topics(*configs: TopicConfig) -> dict[str, TopicConfig]:
    return {c.topic_name: c for c in configs}


def register(
    rim: RouteInfoManager,
    addr: str,
    name: str,
    broker_id: int = 0,
    configs: dict[str, TopicConfig] | None = None,
    now_ms: int = 0,
    cluster: str = CLUSTER,
) -> RegisterResult:
    return rim.register_broker(
        cluster, addr, name, broker_id, addr.replace("10911", "10912"), configs or {}, now_ms
    )


def test_two_masters_same_topic() -> None:
    rim = RouteInfoManager()
    register(rim, A_MASTER, "broker-a", configs=topics(TopicConfig("T", 8, 8)))
    register(rim, B_MASTER, "broker-b", configs=topics(TopicConfig("T", 4, 4, perm=4)))
    route = rim.pick_topic_route("T")
    assert route is not None
    assert route.queue_datas == [QueueData("broker-a", 8, 8, 6), QueueData("broker-b", 4, 4, 4)]
    assert route.broker_datas == [
        BrokerData(CLUSTER, "broker-a", {0: A_MASTER}),
        BrokerData(CLUSTER, "broker-b", {0: B_MASTER}),
    ]
    assert route.filter_server_table == {}


def test_unknown_topic_has_no_route() -> None:
    assert RouteInfoManager().pick_topic_route("nope") is None


def test_slave_adds_address_not_queue_data() -> None:
    rim = RouteInfoManager()
    register(rim, A_MASTER, "broker-a", configs=topics(TopicConfig("T", 8, 8)))
    result = register(rim, A_SLAVE, "broker-a", 1, topics(TopicConfig("T", 2, 2), TopicConfig("S")))
    assert result == RegisterResult(A_MASTER, "10.0.0.1:10912")
    route = rim.pick_topic_route("T")
    assert route is not None
    assert route.queue_datas == [QueueData("broker-a", 8, 8, 6)]
    assert route.broker_datas == [BrokerData(CLUSTER, "broker-a", {0: A_MASTER, 1: A_SLAVE})]
    assert rim.pick_topic_route("S") is None
    assert set(rim.broker_live_table) == {A_MASTER, A_SLAVE}


def test_master_and_first_slave_results() -> None:
    rim = RouteInfoManager()
    assert register(rim, A_SLAVE, "broker-a", 1) == RegisterResult()
    assert register(rim, A_MASTER, "broker-a", 0) == RegisterResult()


def test_reregistration_updates_queue_counts_and_liveness() -> None:
    rim = RouteInfoManager()
    register(rim, A_MASTER, "broker-a", configs=topics(TopicConfig("T", 8, 8)), now_ms=0)
    register(rim, A_MASTER, "broker-a", configs=topics(TopicConfig("T", 16, 12)), now_ms=30_000)
    route = rim.pick_topic_route("T")
    assert route is not None
    assert route.queue_datas == [QueueData("broker-a", 16, 12, 6)]
    assert rim.broker_live_table[A_MASTER].last_update_ms == 30_000


def test_promoted_slave_keeps_one_id_per_address() -> None:
    rim = RouteInfoManager()
    register(rim, A_SLAVE, "broker-a", 1)
    register(rim, A_SLAVE, "broker-a", 0)
    assert rim.broker_addr_table["broker-a"].broker_addrs == {0: A_SLAVE}


def test_unregister_master_and_slave_removes_broker_and_topic() -> None:
    rim = RouteInfoManager()
    register(rim, A_MASTER, "broker-a", configs=topics(TopicConfig("T")))
    register(rim, A_SLAVE, "broker-a", 1)
    rim.unregister_broker(CLUSTER, A_MASTER, "broker-a", 0)
    assert rim.broker_addr_table["broker-a"].broker_addrs == {1: A_SLAVE}
    assert rim.get_all_topic_list() == ["T"]
    rim.unregister_broker(CLUSTER, A_SLAVE, "broker-a", 1)
    assert rim.broker_addr_table == {}
    assert rim.cluster_addr_table == {}
    assert rim.topic_queue_table == {}
    assert rim.broker_live_table == {}
    assert rim.pick_topic_route("T") is None


def test_unregister_keeps_topic_served_by_other_broker() -> None:
    rim = RouteInfoManager()
    register(rim, A_MASTER, "broker-a", configs=topics(TopicConfig("T"), TopicConfig("OnlyA")))
    register(rim, B_MASTER, "broker-b", configs=topics(TopicConfig("T")))
    rim.unregister_broker(CLUSTER, A_MASTER, "broker-a", 0)
    assert rim.get_all_topic_list() == ["T"]
    route = rim.pick_topic_route("T")
    assert route is not None
    assert [qd.broker_name for qd in route.queue_datas] == ["broker-b"]
    assert rim.cluster_addr_table == {CLUSTER: {"broker-b"}}


def test_unregister_unknown_is_harmless() -> None:
    rim = RouteInfoManager()
    rim.unregister_broker(CLUSTER, A_MASTER, "broker-a", 0)
    assert rim.broker_addr_table == {}


def test_expiry_boundary() -> None:
    rim = RouteInfoManager()
    register(rim, A_MASTER, "broker-a", configs=topics(TopicConfig("T")), now_ms=1_000)
    assert rim.expire_brokers(1_000 + 120_000) == []
    assert rim.pick_topic_route("T") is not None
    assert rim.expire_brokers(1_000 + 120_001) == [A_MASTER]
    assert rim.pick_topic_route("T") is None
    assert rim.broker_addr_table == {}
    assert rim.cluster_addr_table == {}
    assert rim.broker_live_table == {}


def test_expiry_drops_only_stale_addresses() -> None:
    rim = RouteInfoManager(broker_channel_expired_time_ms=10_000)
    register(rim, A_MASTER, "broker-a", configs=topics(TopicConfig("T")), now_ms=0)
    register(rim, A_SLAVE, "broker-a", 1, now_ms=0)
    register(rim, B_MASTER, "broker-b", configs=topics(TopicConfig("T")), now_ms=0)
    register(rim, A_SLAVE, "broker-a", 1, now_ms=5_000)
    register(rim, B_MASTER, "broker-b", configs=topics(TopicConfig("T")), now_ms=5_000)
    assert rim.expire_brokers(10_001) == [A_MASTER]
    route = rim.pick_topic_route("T")
    assert route is not None
    # broker-a keeps its slave (and so its queue data, as RocketMQ does).
    assert [qd.broker_name for qd in route.queue_datas] == ["broker-a", "broker-b"]
    assert rim.broker_addr_table["broker-a"].broker_addrs == {1: A_SLAVE}
    assert rim.expire_brokers(15_001) == [A_SLAVE, B_MASTER]
    assert rim.topic_queue_table == {}


def test_delete_topic() -> None:
    rim = RouteInfoManager()
    register(rim, A_MASTER, "broker-a", configs=topics(TopicConfig("T"), TopicConfig("U")))
    assert rim.delete_topic("T") is True
    assert rim.delete_topic("T") is False
    assert rim.get_all_topic_list() == ["U"]
    assert rim.pick_topic_route("T") is None


def test_cluster_info_and_topics_by_cluster() -> None:
    rim = RouteInfoManager()
    register(rim, A_MASTER, "broker-a", configs=topics(TopicConfig("T"), TopicConfig("X")))
    register(rim, A_SLAVE, "broker-a", 1)
    register(
        rim, B_MASTER, "broker-b", configs=topics(TopicConfig("T"), TopicConfig("Y")), cluster="C2"
    )
    info = rim.get_all_cluster_info()
    assert info.cluster_addr_table == {CLUSTER: {"broker-a"}, "C2": {"broker-b"}}
    assert info.broker_addr_table == {
        "broker-a": BrokerData(CLUSTER, "broker-a", {0: A_MASTER, 1: A_SLAVE}),
        "broker-b": BrokerData("C2", "broker-b", {0: B_MASTER}),
    }
    info.cluster_addr_table[CLUSTER].add("mutated")
    assert rim.cluster_addr_table[CLUSTER] == {"broker-a"}
    assert rim.get_all_topic_list() == ["T", "X", "Y"]
    assert rim.get_topics_by_cluster(CLUSTER) == ["T", "X"]
    assert rim.get_topics_by_cluster("C2") == ["T", "Y"]
    assert rim.get_topics_by_cluster("none") == []


def test_filter_servers_in_route() -> None:
    rim = RouteInfoManager()
    rim.register_broker(
        CLUSTER, A_MASTER, "broker-a", 0, "", topics(TopicConfig("T")), 0, ["f:1", "f:2"]
    )
    route = rim.pick_topic_route("T")
    assert route is not None
    assert route.filter_server_table == {A_MASTER: ["f:1", "f:2"]}
    rim.register_broker(CLUSTER, A_MASTER, "broker-a", 0, "", {}, 1, [])
    route = rim.pick_topic_route("T")
    assert route is not None
    assert route.filter_server_table == {}


def test_unregister_forgets_the_address_it_names_not_a_replacement() -> None:
    """The old process of a broker moved to a new address unregisters after the new one
    registered under the same id: the live address stays (RocketMQ 5 matches addresses)."""
    rim = RouteInfoManager()
    register(rim, A_MASTER, "broker-a", configs=topics(TopicConfig("T", 8, 8)))
    register(rim, A_SLAVE, "broker-a", configs=topics(TopicConfig("T", 8, 8)))  # moved, id 0
    rim.unregister_broker(CLUSTER, A_MASTER, "broker-a", 0)
    route = rim.pick_topic_route("T")
    assert route is not None
    assert route.broker_datas == [BrokerData(CLUSTER, "broker-a", {0: A_SLAVE})]
    assert rim.cluster_addr_table == {CLUSTER: {"broker-a"}}


def test_an_address_registered_under_another_name_leaves_the_old_name() -> None:
    """Killed (no unregister) and started again on the same address as another broker name,
    or in another cluster: the old name's routes and cluster entry go at once."""
    rim = RouteInfoManager()
    register(rim, A_MASTER, "broker-old", configs=topics(TopicConfig("OldT", 4, 4)))
    register(rim, A_MASTER, "broker-new", configs=topics(TopicConfig("NewT", 4, 4)))
    assert rim.pick_topic_route("OldT") is None
    assert set(rim.broker_addr_table) == {"broker-new"}
    assert rim.cluster_addr_table == {CLUSTER: {"broker-new"}}
    register(rim, A_MASTER, "broker-new", configs=topics(TopicConfig("NewT", 4, 4)), cluster="C2")
    assert rim.cluster_addr_table == {"C2": {"broker-new"}}
    assert rim.get_topics_by_cluster(CLUSTER) == []


def test_deleting_a_topic_in_one_cluster_keeps_the_other_clusters_part() -> None:
    rim = RouteInfoManager()
    register(rim, A_MASTER, "broker-a", configs=topics(TopicConfig("T", 4, 4)), cluster="C1")
    register(rim, B_MASTER, "broker-b", configs=topics(TopicConfig("T", 4, 4)), cluster="C2")
    assert rim.delete_topic("T", "C1")
    route = rim.pick_topic_route("T")
    assert route is not None
    assert [q.broker_name for q in route.queue_datas] == ["broker-b"]
    assert not rim.delete_topic("T", "C1")  # nothing of C1 left
    assert rim.delete_topic("T", "C2")
    assert rim.pick_topic_route("T") is None


# --------------------------------------------------------------------------- data versions


def register_versioned(
    rim: RouteInfoManager, write_queues: int, version: DataVersion | None, now_ms: int = 0
) -> RegisterResult:
    configs = topics(TopicConfig("T", write_queues, write_queues))
    return rim.register_broker(
        CLUSTER, A_MASTER, "broker-a", 0, "", configs, now_ms, data_version=version
    )


def write_queues_of_t(rim: RouteInfoManager) -> int:
    route = rim.pick_topic_route("T")
    assert route is not None
    return route.queue_datas[0].write_queue_nums


def test_an_older_registration_delivered_late_keeps_the_newer_topics() -> None:
    rim = RouteInfoManager()
    register_versioned(rim, 8, DataVersion(2000, 2))
    late = register_versioned(rim, 4, DataVersion(1000, 1), now_ms=5)
    assert late.stale
    assert write_queues_of_t(rim) == 8
    assert rim.broker_live_table[A_MASTER] == BrokerLiveInfo(5, "", DataVersion(2000, 2))


def test_newer_or_unversioned_registrations_apply() -> None:
    rim = RouteInfoManager()
    register_versioned(rim, 8, DataVersion(2000, 2))
    assert not register_versioned(rim, 6, DataVersion(2000, 2)).stale  # the same version
    assert write_queues_of_t(rim) == 8  # nothing changed: not applied again, as RocketMQ's
    assert not register_versioned(rim, 5, DataVersion(1500, 3)).stale  # clock stepped back
    assert write_queues_of_t(rim) == 5
    assert not register_versioned(rim, 4, None).stale  # a broker that sends no version
    assert write_queues_of_t(rim) == 4
    assert not register_versioned(rim, 3, DataVersion(900, 1)).stale
    assert write_queues_of_t(rim) == 3


def test_a_restarted_broker_with_a_new_counter_base_is_accepted() -> None:
    rim = RouteInfoManager()
    register_versioned(rim, 8, DataVersion(2000, 40))
    assert not register_versioned(rim, 4, DataVersion(3000, 0)).stale  # its topics file lost
    assert write_queues_of_t(rim) == 4


def test_a_broker_registered_again_after_unregister_or_expiry_starts_afresh() -> None:
    rim = RouteInfoManager(broker_channel_expired_time_ms=10)
    register_versioned(rim, 8, DataVersion(2000, 2))
    rim.unregister_broker(CLUSTER, A_MASTER, "broker-a", 0)
    register_versioned(rim, 4, DataVersion(1000, 1))
    assert write_queues_of_t(rim) == 4
    rim.expire_brokers(now_ms=100)
    register_versioned(rim, 2, DataVersion(500, 0), now_ms=100)
    assert write_queues_of_t(rim) == 2


# --------------------------------------------------------------------------- write permission


def perms(rim: RouteInfoManager, topic: str) -> dict[str, int]:
    route = rim.pick_topic_route(topic)
    assert route is not None
    return {qd.broker_name: qd.perm for qd in route.queue_datas}


def two_brokers_with_versions(rim: RouteInfoManager, version: DataVersion) -> None:
    """broker-a with T (RW) and R (read-only), broker-b with T; both with ``version``."""
    a_topics = topics(TopicConfig("T", 4, 4), TopicConfig("R", 4, 4, perm=4))
    rim.register_broker(CLUSTER, A_MASTER, "broker-a", 0, "", a_topics, 0, data_version=version)
    b_topics = topics(TopicConfig("T", 4, 4))
    rim.register_broker(CLUSTER, B_MASTER, "broker-b", 0, "", b_topics, 0, data_version=version)


def test_wipe_and_add_write_perm_change_only_that_brokers_queue_data() -> None:
    rim = RouteInfoManager()
    two_brokers_with_versions(rim, DataVersion(1000, 1))
    assert rim.wipe_write_perm_of_broker("broker-a") == 2  # T and R: every topic it holds
    assert perms(rim, "T") == {"broker-a": 4, "broker-b": 6}
    assert perms(rim, "R") == {"broker-a": 4}
    assert rim.add_write_perm_of_broker("broker-a") == 2
    assert perms(rim, "T") == {"broker-a": 6, "broker-b": 6}
    assert perms(rim, "R") == {"broker-a": 6}  # RocketMQ's: read and write, whatever it was


def test_write_perm_of_an_unknown_broker_name_counts_zero() -> None:
    rim = RouteInfoManager()
    two_brokers_with_versions(rim, DataVersion(1000, 1))
    assert rim.wipe_write_perm_of_broker("broker-x") == 0
    assert rim.wipe_write_perm_of_broker(A_MASTER) == 0  # an address is not a broker name
    assert rim.add_write_perm_of_broker("broker-x") == 0
    assert perms(rim, "T") == {"broker-a": 6, "broker-b": 6}


def test_a_wiped_perm_survives_a_registration_with_the_same_version() -> None:
    rim = RouteInfoManager()
    version = DataVersion(1000, 1)
    two_brokers_with_versions(rim, version)
    rim.wipe_write_perm_of_broker("broker-a")
    two_brokers_with_versions(rim, version)  # the periodic registration, nothing changed
    assert perms(rim, "T") == {"broker-a": 4, "broker-b": 6}
    assert rim.broker_live_table[A_MASTER].data_version == version


def test_a_registration_with_the_same_version_adds_a_topic_the_tables_lack() -> None:
    rim = RouteInfoManager()
    version = DataVersion(1000, 1)
    two_brokers_with_versions(rim, version)
    rim.wipe_write_perm_of_broker("broker-a")
    rim.delete_topic("R")
    two_brokers_with_versions(rim, version)
    assert perms(rim, "R") == {"broker-a": 4}  # back, from the broker's table
    assert perms(rim, "T") == {"broker-a": 4, "broker-b": 6}  # still wiped


def test_a_wiped_perm_goes_when_the_brokers_topics_change_or_it_registers_afresh() -> None:
    rim = RouteInfoManager()
    two_brokers_with_versions(rim, DataVersion(1000, 1))
    rim.wipe_write_perm_of_broker("broker-a")
    two_brokers_with_versions(rim, DataVersion(2000, 2))  # a topic change on the broker
    assert perms(rim, "T") == {"broker-a": 6, "broker-b": 6}

    rim.wipe_write_perm_of_broker("broker-a")
    rim.on_channel_destroy(A_MASTER)  # its connection closed: gone from the routes
    two_brokers_with_versions(rim, DataVersion(2000, 2))  # registered afresh, same version
    assert perms(rim, "T") == {"broker-a": 6, "broker-b": 6}


def test_an_unversioned_registration_always_applies() -> None:
    rim = RouteInfoManager()
    register(rim, A_MASTER, "broker-a", configs=topics(TopicConfig("T", 4, 4)))
    rim.wipe_write_perm_of_broker("broker-a")
    register(rim, A_MASTER, "broker-a", configs=topics(TopicConfig("T", 4, 4)))
    assert perms(rim, "T") == {"broker-a": 6}
