"""The latency consumer's bookkeeping (``mqbench latency``): which received messages are the
run's own, and which of the producer's messages were lost or came twice."""

from __future__ import annotations

from client.bench.workers import STAMP, Arrivals
from client.message import MessageQueue, ReceivedMessage
from tests.client.received import received_at

SINCE_NS = 1_800_000_000_000_000_000
A0 = MessageQueue("T", "broker-a", 0)
B0 = MessageQueue("T", "broker-b", 0)


def stamped(queue: MessageQueue, offset: int, stamp: int) -> ReceivedMessage:
    return received_at(queue, offset, STAMP.pack(stamp) + bytes(8))


def test_lost_duplicated_and_foreign_messages_are_counted_apart() -> None:
    arrivals = Arrivals(SINCE_NS)
    now = SINCE_NS + 5_000
    arrivals.add(stamped(A0, 7, SINCE_NS + 1_000), now)  # the producer's
    arrivals.add(stamped(A0, 7, SINCE_NS + 1_000), now + 10)  # the same message again
    arrivals.add(stamped(B0, 7, SINCE_NS + 2_000), now)  # same queue id, other broker: not ours
    arrivals.add(stamped(A0, 6, 0), now)  # warm-up
    arrivals.add(stamped(A0, 5, -123), now)  # random first bytes of another benchmark's body
    arrivals.add(stamped(A0, 4, now + 1), now)  # no send time: from the future
    arrivals.expect([("broker-a", 0, 7), ("broker-a", 0, 8)])
    assert not arrivals.complete
    result = arrivals.result()
    assert (result["msgs"], result["expected"], result["lost"]) == (1, 2, 1)
    assert (result["duplicates"], result["foreign"]) == (1, 1)
    assert result["bytes"] == 16
    assert STAMP.unpack(result["latency"]) == (4_000,)  # the first arrival's latency


def test_complete_once_every_expected_message_arrived() -> None:
    arrivals = Arrivals(SINCE_NS)
    arrivals.add(stamped(A0, 1, SINCE_NS), SINCE_NS + 10)
    arrivals.expect([("broker-a", 0, 1), ("broker-b", 0, 1)])
    assert arrivals.received() == 1
    assert not arrivals.complete
    arrivals.add(stamped(B0, 1, SINCE_NS + 20), SINCE_NS + 30)
    assert arrivals.complete
    assert arrivals.received() == 2
    assert arrivals.result()["lost"] == 0
