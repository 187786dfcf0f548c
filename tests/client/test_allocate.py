"""Queue allocation strategies: RocketMQ's own test cases, the derived vectors of facts §6,
the seed's worked example and property tests (every queue owned exactly once, consistent-hash
stability)."""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Sequence

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import client
import client.aio
from client.allocate import (
    AllocateMachineRoomNearby,
    AllocateMessageQueueAveragely,
    AllocateMessageQueueAveragelyByCircle,
    AllocateMessageQueueByConfig,
    AllocateMessageQueueByMachineRoom,
    AllocateMessageQueueConsistentHash,
    AllocateMessageQueueStrategy,
    broker_room,
    md5_hash,
)
from client.message import MessageQueue

GROUP = "Test-C-G"


def queues(n: int, topic: str = "topic", broker: str = "brokerName") -> list[MessageQueue]:
    """``n`` queues of one broker, ids 0..n-1 (already sorted)."""
    return [MessageQueue(topic, broker, i) for i in range(n)]


def cids(n: int, prefix: str = "CID_PREFIX") -> list[str]:
    """``n`` consumer ids; sorted as long as ``n <= 10``."""
    return [f"{prefix}{i}" for i in range(n)]


def allocation(
    strategy: AllocateMessageQueueStrategy,
    mq_all: Sequence[MessageQueue],
    cid_all: Sequence[str],
) -> list[list[MessageQueue]]:
    """Every member's result, in ``cid_all`` order."""
    return [strategy.allocate(GROUP, cid, mq_all, cid_all) for cid in cid_all]


def ids(allocated: list[list[MessageQueue]]) -> list[list[int]]:
    return [[mq.queue_id for mq in part] for part in allocated]


def owners(
    strategy: AllocateMessageQueueStrategy,
    mq_all: Sequence[MessageQueue],
    cid_all: Sequence[str],
) -> dict[MessageQueue, str]:
    """Queue -> owner, asserting that no queue has two owners."""
    result: dict[MessageQueue, str] = {}
    for cid, part in zip(cid_all, allocation(strategy, mq_all, cid_all), strict=True):
        for mq in part:
            assert mq not in result, f"{mq} owned by {result[mq]} and {cid}"
            result[mq] = cid
    return result


CHECKED = [
    AllocateMessageQueueAveragely(),
    AllocateMessageQueueAveragelyByCircle(),
    AllocateMessageQueueByMachineRoom({"room1"}),
    AllocateMessageQueueConsistentHash(),
    AllocateMessageQueueConsistentHash(3),
]


class RoomByDash:
    """The repo test's resolver: the room is the text before the first ``-``."""

    def broker_deploy_in(self, mq: MessageQueue) -> str | None:
        return mq.broker_name.split("-")[0]

    def consumer_deploy_in(self, cid: str) -> str | None:
        return cid.split("-")[0]


CHECKED.append(AllocateMachineRoomNearby(AllocateMessageQueueAveragely(), RoomByDash()))


# ---------------------------------------------------------------- common argument checks


@pytest.mark.parametrize("strategy", CHECKED, ids=lambda s: s.name)
def test_common_checks(strategy: AllocateMessageQueueStrategy) -> None:
    mq_all, cid_all = queues(4, broker="room1@b-x"), ["room1-c0", "room1-c1"]
    with pytest.raises(ValueError, match=r"^currentCID is empty$"):
        strategy.allocate(GROUP, "", mq_all, cid_all)
    with pytest.raises(ValueError, match=r"^mqAll is null or mqAll empty$"):
        strategy.allocate(GROUP, "room1-c0", [], cid_all)
    with pytest.raises(ValueError, match=r"^cidAll is null or cidAll empty$"):
        strategy.allocate(GROUP, "room1-c0", mq_all, [])


@pytest.mark.parametrize("strategy", CHECKED, ids=lambda s: s.name)
def test_consumer_not_in_list_gets_nothing_and_is_logged(
    strategy: AllocateMessageQueueStrategy, caplog: pytest.LogCaptureFixture
) -> None:
    mq_all, cid_all = queues(4, broker="room1@b-x"), ["room1-c0", "room1-c1"]
    with caplog.at_level(logging.INFO, logger="client.allocate"):
        assert strategy.allocate(GROUP, "2147483647", mq_all, cid_all) == []
    assert "[BUG] ConsumerGroup: Test-C-G The consumerId: 2147483647 not in cidAll" in caplog.text


@pytest.mark.parametrize("strategy", CHECKED, ids=lambda s: s.name)
def test_inputs_are_not_mutated(strategy: AllocateMessageQueueStrategy) -> None:
    mq_all = queues(7, broker="room1@b-x")
    cid_all = ["room1-c0", "room1-c1", "room1-c2"]
    before = (list(mq_all), list(cid_all))
    for cid in cid_all:
        result = strategy.allocate(GROUP, cid, mq_all, cid_all)
        result.clear()  # a caller may modify what it gets back
    assert (mq_all, cid_all) == before
    # tuples work as well as lists
    assert allocation(strategy, tuple(mq_all), tuple(cid_all)) == allocation(
        strategy, mq_all, cid_all
    )


def test_names() -> None:
    assert AllocateMessageQueueAveragely().name == "AVG"
    assert AllocateMessageQueueAveragelyByCircle().name == "AVG_BY_CIRCLE"
    assert AllocateMessageQueueByConfig([]).name == "CONFIG"
    assert AllocateMessageQueueByMachineRoom(()).name == "MACHINE_ROOM"
    assert AllocateMessageQueueConsistentHash().name == "CONSISTENT_HASH"
    nearby = AllocateMachineRoomNearby(AllocateMessageQueueAveragelyByCircle(), RoomByDash())
    assert nearby.name == "MACHINE_ROOM_NEARBY-AVG_BY_CIRCLE"


def test_public_names_are_exported() -> None:
    for module in (client, client.aio):
        for name in (
            "AllocateMessageQueueStrategy",
            "AllocateMessageQueueAveragely",
            "AllocateMessageQueueAveragelyByCircle",
            "AllocateMessageQueueByConfig",
            "AllocateMessageQueueByMachineRoom",
            "AllocateMachineRoomNearby",
            "AllocateMessageQueueConsistentHash",
            "MachineRoomResolver",
        ):
            assert name in module.__all__
            assert getattr(module, name) is getattr(client.allocate, name)


# ---------------------------------------------------------------- AVG


def test_averagely_repo_case() -> None:
    """AllocateMessageQueueAveragelyTest: 4 consumers, 10 queues -> sizes 3,3,2,2."""
    result = ids(allocation(AllocateMessageQueueAveragely(), queues(10), cids(4)))
    assert [len(part) for part in result] == [3, 3, 2, 2]
    assert result == [[0, 1, 2], [3, 4, 5], [6, 7], [8, 9]]


AVG_VECTORS = [
    (5, 1, [[0, 1, 2, 3, 4]]),
    (5, 2, [[0, 1, 2], [3, 4]]),
    (5, 3, [[0, 1], [2, 3], [4]]),
    (5, 4, [[0, 1], [2], [3], [4]]),
    (5, 5, [[0], [1], [2], [3], [4]]),
    (6, 2, [[0, 1, 2], [3, 4, 5]]),
    (3, 5, [[0], [1], [2], [], []]),
    (8, 3, [[0, 1, 2], [3, 4, 5], [6, 7]]),
    (13, 3, [[0, 1, 2, 3, 4], [5, 6, 7, 8], [9, 10, 11, 12]]),
    (16, 6, [[0, 1, 2], [3, 4, 5], [6, 7, 8], [9, 10, 11], [12, 13], [14, 15]]),
    (19, 10, [[2 * i, 2 * i + 1] for i in range(9)] + [[18]]),
]


@pytest.mark.parametrize(("n_queues", "n_cids", "expected"), AVG_VECTORS)
def test_averagely_vectors(n_queues: int, n_cids: int, expected: list[list[int]]) -> None:
    assert ids(allocation(AllocateMessageQueueAveragely(), queues(n_queues), cids(n_cids))) == (
        expected
    )


# ---------------------------------------------------------------- AVG_BY_CIRCLE


def test_by_circle_repo_case() -> None:
    strategy = AllocateMessageQueueAveragelyByCircle()
    assert strategy.allocate(GROUP, "CID_PREFIX", queues(10), cids(4)) == []
    result = ids(allocation(strategy, queues(10), cids(4)))
    assert result == [[0, 4, 8], [1, 5, 9], [2, 6], [3, 7]]


CIRCLE_VECTORS = [
    (5, 2, [[0, 2, 4], [1, 3]]),
    (5, 3, [[0, 3], [1, 4], [2]]),
    (8, 3, [[0, 3, 6], [1, 4, 7], [2, 5]]),
    (13, 3, [[0, 3, 6, 9, 12], [1, 4, 7, 10], [2, 5, 8, 11]]),
    (3, 5, [[0], [1], [2], [], []]),
]


@pytest.mark.parametrize(("n_queues", "n_cids", "expected"), CIRCLE_VECTORS)
def test_by_circle_vectors(n_queues: int, n_cids: int, expected: list[list[int]]) -> None:
    strategy = AllocateMessageQueueAveragelyByCircle()
    assert ids(allocation(strategy, queues(n_queues), cids(n_cids))) == expected


# ---------------------------------------------------------------- seed 000's worked example


def nine_queues_on_three_brokers() -> list[MessageQueue]:
    return sorted(MessageQueue("TopicTest", f"broker-{b}", i) for b in "cab" for i in range(3))


def labels(allocated: list[list[MessageQueue]]) -> list[list[str]]:
    return [[f"{mq.broker_name[-1]}{mq.queue_id}" for mq in part] for part in allocated]


def test_seed_example_averagely() -> None:
    """9 queues on 3 brokers, 4 consumers: the first consumer takes the extra queue."""
    result = allocation(AllocateMessageQueueAveragely(), nine_queues_on_three_brokers(), cids(4))
    assert labels(result) == [["a0", "a1", "a2"], ["b0", "b1"], ["b2", "c0"], ["c1", "c2"]]


def test_seed_example_by_circle() -> None:
    strategy = AllocateMessageQueueAveragelyByCircle()
    result = allocation(strategy, nine_queues_on_three_brokers(), cids(4))
    assert labels(result) == [["a0", "b1", "c2"], ["a1", "b2"], ["a2", "c0"], ["b0", "c1"]]


def test_seed_example_every_queue_owned_once() -> None:
    mq_all = nine_queues_on_three_brokers()
    for strategy in (
        AllocateMessageQueueAveragely(),
        AllocateMessageQueueAveragelyByCircle(),
        AllocateMessageQueueConsistentHash(),
    ):
        assert set(owners(strategy, mq_all, cids(4))) == set(mq_all)


# ---------------------------------------------------------------- CONSISTENT_HASH


def test_md5_hash_vectors() -> None:
    assert md5_hash("CID-0-0") == 1900518137
    key = str(MessageQueue("topic_test", "brokerName", 0))
    assert key == "MessageQueue [topic=topic_test, brokerName=brokerName, queueId=0]"
    assert md5_hash(key) == 2171879703  # > 2**31: unsigned, not Java int


def ch_owner_ids(
    strategy: AllocateMessageQueueConsistentHash, n: int, cid_all: list[str]
) -> list[int]:
    """Owner of each queue as the number after ``CID-`` (``CID-NEW`` is -1)."""
    table = owners(strategy, queues(n, "topic_test"), cid_all)
    names = [table[mq].removeprefix("CID-") for mq in queues(n, "topic_test")]
    return [-1 if name == "NEW" else int(name) for name in names]


def test_consistent_hash_vectors_20_queues_10_consumers() -> None:
    strategy = AllocateMessageQueueConsistentHash(3)
    cid_all = [f"CID-{i}" for i in range(10)]
    assert ch_owner_ids(strategy, 20, cid_all) == [
        7,
        8,
        7,
        0,
        2,
        0,
        3,
        3,
        0,
        3,
        5,
        5,
        7,
        8,
        8,
        5,
        9,
        5,
        0,
        0,
    ]

    without_0 = cid_all[1:]
    assert ch_owner_ids(strategy, 20, without_0) == (
        [7, 8, 7, 3, 2, 3, 3, 3, 3, 3, 5, 5, 7, 8, 8, 5, 9, 5, 3, 3]
    )

    with_new = sorted([*without_0, "CID-NEW"])
    after = ch_owner_ids(strategy, 20, with_new)
    before = ch_owner_ids(strategy, 20, without_0)
    moved = [i for i in range(20) if after[i] != before[i]]
    assert moved == [3, 5, 8, 18, 19]
    assert all(after[i] == -1 for i in moved)


def test_consistent_hash_vector_10_queues_20_consumers() -> None:
    strategy = AllocateMessageQueueConsistentHash(3)
    created = [f"CID-{i}" for i in range(20)]  # creation order, as the repo test
    expected = [7, 10, 12, 15, 2, 15, 3, 3, 15, 3]
    assert ch_owner_ids(strategy, 10, created) == expected
    assert ch_owner_ids(strategy, 10, sorted(created)) == expected


def test_consistent_hash_default_virtual_nodes() -> None:
    strategy = AllocateMessageQueueConsistentHash()
    assert strategy.virtual_node_cnt == 10
    assert ch_owner_ids(strategy, 8, ["CID-0", "CID-1", "CID-2"]) == [2, 0, 1, 2, 2, 2, 0, 0]


def assert_repo_consistent_hash_properties(n_queues: int, n_cids: int) -> None:
    """AllocateMessageQueueConsitentHashTest.testAllocate(queueSize, consumerSize)."""
    strategy = AllocateMessageQueueConsistentHash(3)
    mq_all = queues(n_queues, "topic_test")
    cid_all = [f"CID-{i}" for i in range(n_cids)]
    first = owners(strategy, mq_all, cid_all)
    assert set(first) == set(mq_all)

    removed = cid_all[0]
    after_remove = owners(strategy, mq_all, cid_all[1:])
    if cid_all[1:]:
        assert set(after_remove) == set(mq_all)
    for mq, owner in first.items():
        if owner != removed:
            assert after_remove[mq] == owner

    with_new = [*cid_all, "CID-NEW"]
    after_add = owners(strategy, mq_all, with_new)
    for mq, owner in after_add.items():
        if owner != "CID-NEW":
            assert first[mq] == owner


@pytest.mark.parametrize(("n_queues", "n_cids"), [(20, 10), (10, 20), (1, 1), (7, 3)])
def test_consistent_hash_repo_cases(n_queues: int, n_cids: int) -> None:
    assert_repo_consistent_hash_properties(n_queues, n_cids)


@settings(deadline=None)  # CPU-bound; the machine may be busy
@given(st.integers(1, 20), st.integers(1, 20))
def test_consistent_hash_repo_random_cases(n_queues: int, n_cids: int) -> None:
    assert_repo_consistent_hash_properties(n_queues, n_cids)


def test_consistent_hash_custom_hash_function() -> None:
    ring = {"a-0": 10, "a-1": 30, "bb-0": 20, "bb-1": 40}

    def custom(key: str) -> int:
        if key in ring:
            return ring[key]
        return 10 * int(key.removesuffix("]").rsplit("=", 1)[1])  # queue id * 10

    strategy = AllocateMessageQueueConsistentHash(2, custom)
    table = owners(strategy, queues(6), ["a", "bb"])
    # 0 -> a(10); 10 -> a (a key equal to a node's); 20 -> bb; 30 -> a; 40 -> bb; 50 wraps to a
    assert [table[mq] for mq in queues(6)] == ["a", "a", "bb", "a", "bb", "a"]


def test_consistent_hash_collisions_overwrite_like_a_tree_map() -> None:
    """Later puts win on a hash collision, as ``TreeMap.put`` in RocketMQ's router."""

    def constant(key: str) -> int:
        return 42

    strategy = AllocateMessageQueueConsistentHash(1, constant)
    assert owners(strategy, queues(3), ["x", "y"]) == dict.fromkeys(queues(3), "y")


def test_consistent_hash_repeated_consumer_numbers_replicas_like_java() -> None:
    """A repeated id continues its replica numbers after the ones still on the ring.

    RocketMQ's ``addNode`` counts the node's virtual nodes already in the ring; callers never pass
    duplicates, but the ring is built the same way.
    """
    ring = {"a-0": 10, "b-0": 10, "a-1": 30}

    def custom(key: str) -> int:
        return ring.get(key, 5)  # every queue hashes to 5 -> first node at or after 5

    strategy = AllocateMessageQueueConsistentHash(1, custom)
    # a-0 (10), then b-0 overwrites 10, then "a" again has no replica left: a-0 takes 10 back
    assert strategy.allocate(GROUP, "a", queues(2), ["a", "b", "a"]) == queues(2)


def test_consistent_hash_virtual_node_count() -> None:
    with pytest.raises(ValueError, match="illegal virtualNodeCnt :-1"):
        AllocateMessageQueueConsistentHash(-1)
    zero = AllocateMessageQueueConsistentHash(0)  # an empty ring: nobody gets anything
    assert allocation(zero, queues(4), cids(2)) == [[], []]


# ---------------------------------------------------------------- CONFIG


def test_by_config_repo_case() -> None:
    configured = queues(4)
    strategy = AllocateMessageQueueByConfig(configured)
    assert ids(allocation(strategy, queues(10), cids(2))) == [[0, 1, 2, 3], [0, 1, 2, 3]]
    assert strategy.message_queue_list == configured


def test_by_config_makes_no_checks_and_returns_copies() -> None:
    configured = queues(2)
    strategy = AllocateMessageQueueByConfig(configured)
    assert strategy.allocate(GROUP, "", [], []) == configured
    strategy.allocate(GROUP, "c", [], []).clear()
    configured.clear()
    assert strategy.allocate(GROUP, "c", [], []) == queues(2)


# ---------------------------------------------------------------- MACHINE_ROOM


def room_queues() -> list[MessageQueue]:
    return [
        MessageQueue("topic", "room1@broker-a" if i < 5 else "room2@broker-b", i) for i in range(10)
    ]


def test_by_machine_room_repo_case() -> None:
    strategy = AllocateMessageQueueByMachineRoom({"room1"})
    assert strategy.consumer_idcs == frozenset({"room1"})
    assert ids(allocation(strategy, room_queues(), cids(2))) == [[0, 1, 4], [2, 3]]
    with pytest.raises(ValueError, match="mqAll is null or mqAll empty"):
        strategy.allocate(GROUP, "CID_PREFIX0", [], cids(2))


def test_by_machine_room_more_consumers_than_queues() -> None:
    strategy = AllocateMessageQueueByMachineRoom({"room2"})
    assert ids(allocation(strategy, room_queues(), cids(7))) == [[5], [6], [7], [8], [9], [], []]
    both = AllocateMessageQueueByMachineRoom(["room1", "room2"])
    assert ids(allocation(both, room_queues(), cids(3))) == [[0, 1, 2, 9], [3, 4, 5], [6, 7, 8]]


def test_by_machine_room_no_matching_room() -> None:
    strategy = AllocateMessageQueueByMachineRoom({"room9"})
    assert allocation(strategy, room_queues(), cids(2)) == [[], []]


@pytest.mark.parametrize(
    ("broker_name", "room"),
    [
        ("room1@broker-a", "room1"),
        ("room1@broker-a@", "room1"),  # Java's split drops trailing empty strings
        ("@broker-a", ""),
        ("broker-a", None),
        ("room1@", None),
        ("a@b@c", None),
        ("", None),
    ],
)
def test_broker_room_splits_like_java(broker_name: str, room: str | None) -> None:
    assert broker_room(broker_name) == room


# ---------------------------------------------------------------- MACHINE_ROOM_NEARBY


def nearby() -> AllocateMachineRoomNearby:
    return AllocateMachineRoomNearby(AllocateMessageQueueAveragely(), RoomByDash())


def idc_queues(rooms: Sequence[int], per_room: int) -> list[MessageQueue]:
    return [
        MessageQueue("topic_test", f"IDC{room}-brokerName", i)
        for room in rooms
        for i in range(per_room)
    ]


def idc_cids(rooms: Sequence[int], per_room: int) -> list[str]:
    return [f"IDC{room}-CID-{i}" for room in rooms for i in range(per_room)]


def short(allocated: list[list[MessageQueue]]) -> list[list[str]]:
    return [[f"{mq.broker_name.split('-')[0]}:{mq.queue_id}" for mq in part] for part in allocated]


def test_nearby_derived_vectors() -> None:
    mq_all = idc_queues([1, 2], 4)
    assert short(allocation(nearby(), mq_all, ["IDC1-CID-0", "IDC1-CID-1"])) == [
        ["IDC1:0", "IDC1:1", "IDC2:0", "IDC2:1"],
        ["IDC1:2", "IDC1:3", "IDC2:2", "IDC2:3"],
    ]
    assert short(allocation(nearby(), mq_all, ["IDC1-CID-0", "IDC2-CID-0", "IDC2-CID-1"])) == [
        ["IDC1:0", "IDC1:1", "IDC1:2", "IDC1:3"],
        ["IDC2:0", "IDC2:1"],
        ["IDC2:2", "IDC2:3"],
    ]
    three_rooms = idc_queues([1, 2, 3], 3)
    cid_all = ["IDC1-CID-0", "IDC1-CID-1", "IDC4-CID-0"]
    assert short(allocation(nearby(), three_rooms, cid_all)) == [
        ["IDC1:0", "IDC1:1", "IDC2:0", "IDC3:0"],
        ["IDC1:2", "IDC2:1", "IDC3:1"],
        ["IDC2:2", "IDC3:2"],
    ]


def test_nearby_orphan_rooms_in_sorted_order() -> None:
    """Consumer-less rooms are visited in room order, whatever the queue order."""
    mq_all = [MessageQueue("t", "Z-b", 0), MessageQueue("t", "A-b", 0), MessageQueue("t", "M-b", 0)]
    assert short(allocation(nearby(), mq_all, ["M-c"])) == [["M:0", "A:0", "Z:0"]]


def test_nearby_empty_room_is_an_error() -> None:
    class Blank:
        def broker_deploy_in(self, mq: MessageQueue) -> str | None:
            return "" if mq.queue_id == 1 else "r"

        def consumer_deploy_in(self, cid: str) -> str | None:
            return None if cid == "bad" else "r"

    strategy = AllocateMachineRoomNearby(AllocateMessageQueueAveragely(), Blank())
    with pytest.raises(ValueError, match=r"^Machine room is null for mq MessageQueue \[topic="):
        strategy.allocate(GROUP, "c", queues(2), ["c"])
    with pytest.raises(ValueError, match=r"^Machine room is null for consumer id bad$"):
        strategy.allocate(GROUP, "c", queues(1), ["bad", "c"])


def nearby_results(mq_all: list[MessageQueue], cid_all: list[str]) -> dict[str, list[MessageQueue]]:
    results = {cid: nearby().allocate(GROUP, cid, mq_all, cid_all) for cid in cid_all}
    if cid_all:
        everything = [mq for part in results.values() for mq in part]
        assert Counter(everything) == Counter(mq_all)  # hasAllocateAllQ: each exactly once
    return results


def assert_when_idc_size_equals(n_rooms: int, per_room: int, consumers: int) -> None:
    cid_all = idc_cids(range(1, n_rooms + 1), consumers)
    for cid, part in nearby_results(idc_queues(range(1, n_rooms + 1), per_room), cid_all).items():
        assert all(mq.broker_name.split("-")[0] == cid.split("-")[0] for mq in part)


def assert_when_consumer_idc_is_more(
    n_rooms: int, more: int, per_room: int, consumers: int
) -> None:
    cid_all = idc_cids(range(1, n_rooms + more + 1), consumers)
    for cid, part in nearby_results(idc_queues(range(1, n_rooms + 1), per_room), cid_all).items():
        # every broker room has consumers, so queues only go to same-room consumers
        assert all(mq.broker_name.split("-")[0] == cid.split("-")[0] for mq in part)


def assert_when_consumer_idc_is_less(
    n_rooms: int, less: int, per_room: int, consumers: int
) -> None:
    cid_all = idc_cids(range(1, n_rooms - less + 1), consumers)
    results = nearby_results(idc_queues(range(1, n_rooms + 1), per_room), cid_all)
    healthy = {cid.split("-")[0] for cid in cid_all}  # rooms that have consumers
    for room in healthy:
        in_room = [mq for cid, part in results.items() if cid.startswith(room + "-") for mq in part]
        assert set(idc_queues([int(room.removeprefix("IDC"))], per_room)) <= set(in_room)


@pytest.mark.parametrize("consumers", [10, 20, 30, 0])
def test_nearby_repo_case_idc_size_equals(consumers: int) -> None:
    assert_when_idc_size_equals(5, 20, consumers)


@pytest.mark.parametrize("consumers", [10, 5, 20, 0])
def test_nearby_repo_case_consumer_idc_is_more(consumers: int) -> None:
    assert_when_consumer_idc_is_more(5, 1, 10, consumers)


@pytest.mark.parametrize("consumers", [10, 5, 20, 0])
def test_nearby_repo_case_consumer_idc_is_less(consumers: int) -> None:
    assert_when_consumer_idc_is_less(5, 2, 10, consumers)


@settings(deadline=None)  # CPU-bound; the machine may be busy
@given(st.integers(1, 40), st.integers(1, 20), st.integers(1, 6), st.integers(1, 6))
def test_nearby_random_cases(
    consumers: int, per_room: int, broker_rooms: int, cid_rooms: int
) -> None:
    """testRun10RandomCase, with smaller ranges."""
    if broker_rooms == cid_rooms:
        assert_when_idc_size_equals(broker_rooms, per_room, consumers)
    elif broker_rooms > cid_rooms:
        assert_when_consumer_idc_is_less(
            broker_rooms, broker_rooms - cid_rooms, per_room, consumers
        )
    else:
        assert_when_consumer_idc_is_more(
            broker_rooms, cid_rooms - broker_rooms, per_room, consumers
        )


# ---------------------------------------------------------------- user strategies


class FirstConsumerTakesAll:
    """A user-written strategy: satisfies the protocol without inheriting anything."""

    name = "FIRST"

    def allocate(
        self,
        consumer_group: str,
        current_cid: str,
        mq_all: Sequence[MessageQueue],
        cid_all: Sequence[str],
    ) -> list[MessageQueue]:
        return list(mq_all) if cid_all and cid_all[0] == current_cid else []


def test_user_strategy_plugs_into_nearby() -> None:
    custom: AllocateMessageQueueStrategy = FirstConsumerTakesAll()
    strategy = AllocateMachineRoomNearby(custom, RoomByDash())
    assert strategy.name == "MACHINE_ROOM_NEARBY-FIRST"
    mq_all = idc_queues([1, 2], 2)
    assert short(allocation(strategy, mq_all, ["IDC1-CID-0", "IDC1-CID-1"])) == [
        ["IDC1:0", "IDC1:1", "IDC2:0", "IDC2:1"],
        [],
    ]


# ---------------------------------------------------------------- properties


topics = st.sampled_from(["T", "TopicTest", "%RETRY%g"])
broker_names = st.sets(st.from_regex(r"broker-[a-z]{1,3}", fullmatch=True), min_size=1, max_size=4)


@st.composite
def group_inputs(draw: st.DrawFn) -> tuple[list[MessageQueue], list[str]]:
    """Sorted queue and consumer lists, as the rebalance caller passes them."""
    topic = draw(topics)
    brokers = draw(broker_names)
    per_broker = draw(st.integers(1, 8))
    mq_all = sorted(MessageQueue(topic, b, i) for b in brokers for i in range(per_broker))
    cid_all = sorted(
        draw(
            st.sets(
                st.from_regex(r"10\.0\.0\.[0-9]{1,3}@[0-9]{1,5}", fullmatch=True),
                min_size=1,
                max_size=12,
            )
        )
    )
    return mq_all, cid_all


@settings(deadline=None)  # CPU-bound; the machine may be busy
@given(
    group_inputs(),
    st.sampled_from(
        [
            AllocateMessageQueueAveragely(),
            AllocateMessageQueueAveragelyByCircle(),
            AllocateMessageQueueConsistentHash(),
            AllocateMessageQueueConsistentHash(1),
        ]
    ),
)
def test_every_queue_owned_exactly_once(
    inputs: tuple[list[MessageQueue], list[str]], strategy: AllocateMessageQueueStrategy
) -> None:
    mq_all, cid_all = inputs
    assert set(owners(strategy, mq_all, cid_all)) == set(mq_all)


@settings(deadline=None)  # CPU-bound; the machine may be busy
@given(group_inputs())
def test_averagely_is_balanced(inputs: tuple[list[MessageQueue], list[str]]) -> None:
    mq_all, cid_all = inputs
    for strategy in (AllocateMessageQueueAveragely(), AllocateMessageQueueAveragelyByCircle()):
        sizes = [len(part) for part in allocation(strategy, mq_all, cid_all)]
        assert max(sizes) - min(sizes) <= 1
        assert sizes == sorted(sizes, reverse=True)  # the first consumers take the extras


@settings(deadline=None)  # CPU-bound; the machine may be busy
@given(group_inputs(), st.integers(1, 10), st.data())
def test_consistent_hash_stability(
    inputs: tuple[list[MessageQueue], list[str]], vnodes: int, data: st.DataObject
) -> None:
    """Removing a consumer moves only its queues; adding one moves queues only to it."""
    mq_all, cid_all = inputs
    strategy = AllocateMessageQueueConsistentHash(vnodes)
    before = owners(strategy, mq_all, cid_all)

    leaving = data.draw(st.sampled_from(cid_all))
    remaining = [cid for cid in cid_all if cid != leaving]
    if remaining:
        after = owners(strategy, mq_all, remaining)
        assert set(after) == set(mq_all)
        assert all(after[mq] == owner for mq, owner in before.items() if owner != leaving)

    joining = "10.9.9.9@999999"  # never generated by group_inputs
    after_join = owners(strategy, mq_all, sorted([*cid_all, joining]))
    assert set(after_join) == set(mq_all)
    assert all(before[mq] == owner for mq, owner in after_join.items() if owner != joining)
