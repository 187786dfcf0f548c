"""ProcessQueue: commit offsets, flow-control figures and orderly take/commit/return."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from client.message import MessageQueue, ReceivedMessage
from client.process_queue import ProcessQueue
from tests.client.received import received_at

MQ = MessageQueue("T", "broker-a", 0)


def msg(offset: int, body: bytes = b"xx") -> ReceivedMessage:
    return received_at(MQ, offset, body)


def test_commit_offset_is_the_smallest_in_flight_then_max_plus_one() -> None:
    pq = ProcessQueue()
    assert pq.commit_offset() == -1
    ms = [msg(i) for i in range(10, 15)]
    assert pq.put(ms) == 5
    assert pq.put(ms[:2]) == 0  # already held
    assert (pq.count, pq.size_bytes, pq.span) == (5, 10, 4)
    assert pq.remove([ms[1], ms[3]]) == 10  # 10 still in flight holds the commit back
    assert pq.remove([ms[0]]) == 12
    assert pq.remove([ms[2], ms[4]]) == 15  # none left: one past the highest
    assert (pq.count, pq.size_bytes, pq.span) == (0, 0, 0)


def test_orderly_take_commit_and_return() -> None:
    pq = ProcessQueue()
    pq.put([msg(i) for i in (3, 1, 2)])
    first = pq.take(2)
    assert [m.queue_offset for m in first] == [1, 2]
    assert pq.count == 3  # taken messages still count for flow control
    pq.return_taken(first)
    assert [m.queue_offset for m in pq.take(1)] == [1]  # back at the front, in order
    assert pq.commit_taken() == 2
    assert [m.queue_offset for m in pq.take(5)] == [2, 3]
    assert pq.commit_taken() == 4


def test_pull_and_lock_expiry() -> None:
    pq = ProcessQueue(now_ms=1000)
    assert not pq.is_pull_expired(121_000)
    assert pq.is_pull_expired(121_001)
    pq.last_lock_ms = 5000
    assert not pq.is_lock_expired(35_000)
    assert pq.is_lock_expired(35_001)


@given(st.sets(st.integers(0, 200), min_size=1), st.data())
def test_commit_never_passes_a_message_in_flight(offsets: set[int], data: st.DataObject) -> None:
    pq = ProcessQueue()
    ms = {o: msg(o) for o in offsets}
    pq.put(ms.values())
    done = data.draw(st.sets(st.sampled_from(sorted(offsets))))
    commit = pq.remove([ms[o] for o in done])
    left = offsets - done
    assert commit == (min(left) if left else max(offsets) + 1)


def test_remove_out_of_order_and_duplicates_keep_the_offsets_sorted() -> None:
    pq = ProcessQueue()
    ms = [msg(i) for i in range(20)]
    pq.put(ms[10:])
    pq.put(ms[:10])  # an older pull arriving late: inserted, not appended
    assert pq.span == 19
    assert pq.remove([ms[5], ms[5], ms[0], ms[19]]) == 1  # not the front, in order
    assert pq.remove(ms[1:5]) == 6  # the front, in order: one cut
    assert pq.remove([ms[7], ms[6]]) == 8
    assert (pq.count, pq.size_bytes, pq.span) == (11, 22, 10)
    assert [m.queue_offset for m in pq.take(20)] == [8, *range(9, 19)]
