"""Tests for producer queue selection and latency fault tolerance (client/queue_selector.py)."""

from __future__ import annotations

from collections import Counter

from client import MessageQueue, MQFaultStrategy, RoundRobinSelector, select_by_key
from client.queue_selector import (
    LATENCY_MAX,
    NOT_AVAILABLE_DURATION,
    LatencyFaultTolerance,
    compute_not_available_duration,
    publish_queues,
)
from common.hashing import java_string_hash
from common.route import BrokerData, PermName, QueueData, TopicRouteData

A = [MessageQueue("T", "broker-a", i) for i in range(4)]
B = [MessageQueue("T", "broker-b", i) for i in range(4)]
QUEUES = A + B


def test_publish_queues_sorted_writable_with_master() -> None:
    route = TopicRouteData(
        queue_datas=[
            QueueData("broker-b", 4, 2, PermName.PERM_READ | PermName.PERM_WRITE),
            QueueData("broker-a", 4, 3, 6),
            QueueData("broker-c", 4, 4, PermName.PERM_READ),  # not writable
            QueueData("broker-d", 4, 4, 6),  # slave only
        ],
        broker_datas=[
            BrokerData("c", "broker-a", {0: "a:1"}),
            BrokerData("c", "broker-b", {0: "b:1", 1: "b:2"}),
            BrokerData("c", "broker-c", {0: "c:1"}),
            BrokerData("c", "broker-d", {1: "d:2"}),
        ],
    )
    assert publish_queues("T", route) == [
        MessageQueue("T", "broker-a", 0),
        MessageQueue("T", "broker-a", 1),
        MessageQueue("T", "broker-a", 2),
        MessageQueue("T", "broker-b", 0),
        MessageQueue("T", "broker-b", 1),
    ]


def test_round_robin_cycles_all_queues() -> None:
    sel = RoundRobinSelector(start=-1)
    picked = [sel.select_one(QUEUES) for _ in range(16)]
    assert picked == QUEUES + QUEUES
    assert Counter(RoundRobinSelector().select_one(QUEUES) for _ in range(8)) != {}


def test_counter_wraps_non_negative() -> None:
    sel = RoundRobinSelector(start=2**31 - 2)
    assert [sel.next_index() for _ in range(3)] == [2**31 - 1, 0, 1]


def test_avoids_last_broker() -> None:
    sel = RoundRobinSelector(start=0)
    for _ in range(20):
        assert sel.select_one(QUEUES, last_broker_name="broker-a").broker_name == "broker-b"


def test_last_broker_only_broker_falls_back() -> None:
    sel = RoundRobinSelector(start=0)
    assert sel.select_one(A, last_broker_name="broker-a") in A


def test_same_key_same_queue() -> None:
    q = select_by_key(QUEUES, "order-42")
    assert all(select_by_key(QUEUES, "order-42") == q for _ in range(10))
    assert q == QUEUES[abs(java_string_hash("order-42")) % len(QUEUES)]
    assert len({select_by_key(QUEUES, f"k{i}") for i in range(200)}) == len(QUEUES)


def test_key_with_negative_hash() -> None:
    key = "polygenelubricants"  # Java hashCode == Integer.MIN_VALUE
    assert java_string_hash(key) == -(2**31)
    assert select_by_key(QUEUES[:3], key) == QUEUES[(2**31) % 3]


def test_compute_not_available_duration_tables() -> None:
    assert LATENCY_MAX == (50, 100, 550, 1800, 3000, 5000, 15000)
    assert NOT_AVAILABLE_DURATION == (0, 0, 2000, 5000, 6000, 10000, 30000)
    assert compute_not_available_duration(10) == 0
    assert compute_not_available_duration(100) == 0
    assert compute_not_available_duration(550) == 2000
    assert compute_not_available_duration(1799) == 2000
    assert compute_not_available_duration(3000) == 6000
    assert compute_not_available_duration(10000) == 10000
    assert compute_not_available_duration(99999) == 30000


def test_latency_fault_tolerance_like_rocketmq_test() -> None:
    lft = LatencyFaultTolerance()
    lft.update_fault_item("b", 3000, 3000, now_ms=1000)
    assert not lft.is_available("b", 1000)
    assert not lft.is_available("b", 3999)
    assert lft.is_available("b", 4000)
    assert lft.is_available("unknown", 0)
    lft.update_fault_item("b", 50, 50, now_ms=5000)
    assert not lft.is_available("b", 5010)
    assert lft.is_available("b", 5050)
    lft.update_fault_item("b", 3000, 3000, now_ms=6000)
    lft.remove("b")
    assert lft.is_available("b", 6000)
    lft.update_fault_item("c", 10, 0, now_ms=0, reachable=False)
    assert not lft.is_reachable("c")
    assert lft.is_reachable("b")


def test_pick_one_at_least_prefers_available_then_low_latency() -> None:
    lft = LatencyFaultTolerance()
    assert lft.pick_one_at_least(0) is None
    lft.update_fault_item("slow", 900, 0, now_ms=0)
    lft.update_fault_item("fast", 10, 0, now_ms=0)
    lft.update_fault_item("down", 1, 60_000, now_ms=0)
    assert lft.pick_one_at_least(1) == "fast"


def test_fault_strategy_disabled_is_plain_round_robin() -> None:
    fs = MQFaultStrategy()
    fs.update_fault_item("broker-a", 5000, isolation=True, now_ms=0)
    assert fs.tolerance.item("broker-a") is None
    sel = RoundRobinSelector(start=-1)
    assert [fs.select_one(sel, QUEUES, None, 0) for _ in range(8)] == QUEUES


def test_fault_strategy_skips_isolated_broker_until_expiry() -> None:
    fs = MQFaultStrategy(enabled=True)
    fs.update_fault_item("broker-a", 100, isolation=True, now_ms=0)  # 10000 ms out
    item = fs.tolerance.item("broker-a")
    assert item is not None
    assert item.start_timestamp == 10_000
    sel = RoundRobinSelector(start=0)
    assert {fs.select_one(sel, QUEUES, None, 5_000).broker_name for _ in range(10)} == {"broker-b"}
    assert {fs.select_one(sel, QUEUES, None, 10_000).broker_name for _ in range(10)} == {
        "broker-a",
        "broker-b",
    }


def test_fault_strategy_all_unavailable_falls_back() -> None:
    fs = MQFaultStrategy(enabled=True)
    fs.update_fault_item("broker-a", 20_000, isolation=False, now_ms=0)
    fs.update_fault_item("broker-b", 20_000, isolation=False, now_ms=0, reachable=False)
    sel = RoundRobinSelector(start=0)
    # nothing available: a reachable broker (a) is preferred over the unreachable one
    assert {fs.select_one(sel, QUEUES, "broker-b", 1).broker_name for _ in range(5)} == {"broker-a"}
    fs.tolerance.update_fault_item("broker-a", 1, 60_000, now_ms=0, reachable=False)
    assert fs.select_one(sel, QUEUES, None, 1) in QUEUES


def test_fault_strategy_low_latency_keeps_broker() -> None:
    fs = MQFaultStrategy(enabled=True)
    fs.update_fault_item("broker-a", 80, isolation=False, now_ms=0)
    sel = RoundRobinSelector(start=-1)
    assert fs.select_one(sel, QUEUES, None, 0) == A[0]


def test_the_reachable_fallback_still_avoids_the_last_broker() -> None:
    """RocketMQ 5: ``selectOneMessageQueue(reachableFilter, brokerFilter)``: with every broker
    isolated, a retry goes to another reachable broker, not back to the one that failed."""
    fs = MQFaultStrategy(enabled=True)
    fs.update_fault_item("broker-a", 100, isolation=True, now_ms=0)
    fs.update_fault_item("broker-b", 100, isolation=True, now_ms=0)
    two = [A[0], B[0]]
    sel = RoundRobinSelector(start=1)  # the next plain pick is A[0]
    assert fs.select_one(sel, two, "broker-a", 1) == B[0]


def test_a_fast_send_does_not_end_an_isolation_early() -> None:
    """RocketMQ 5's ``FaultItem.updateNotAvailableDuration`` only lengthens an isolation: a
    fast success (one that was in flight when another send failed) leaves it as it was."""
    fs = MQFaultStrategy(enabled=True)
    fs.update_fault_item("broker-a", 100, isolation=True, now_ms=0)  # out until 10 000
    fs.update_fault_item("broker-a", 5, isolation=False, now_ms=100)  # a fast success
    assert not fs.tolerance.is_available("broker-a", 9_999)
    assert fs.tolerance.is_available("broker-a", 10_000)
    fs.update_fault_item("broker-a", 600, isolation=False, now_ms=500)  # 2000 ms: ends earlier
    assert not fs.tolerance.is_available("broker-a", 9_999)
    fs.update_fault_item("broker-a", 100, isolation=True, now_ms=5_000)  # ends later: lengthened
    assert not fs.tolerance.is_available("broker-a", 14_999)
    assert fs.tolerance.is_available("broker-a", 15_000)


def test_a_success_marks_an_isolated_broker_reachable_and_keeps_its_latency() -> None:
    """A success after a refusal makes the broker reachable again and records its latency,
    while its isolation runs on (RocketMQ 5 sets both fields on every update)."""
    lft = LatencyFaultTolerance()
    lft.update_fault_item("b", 10_000, 10_000, now_ms=0, reachable=False)
    lft.update_fault_item("b", 3, 0, now_ms=10)
    item = lft.item("b")
    assert item is not None
    assert (item.current_latency, item.start_timestamp, item.reachable) == (3, 10_000, True)
