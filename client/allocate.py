"""Queue allocation strategies: which queues of a topic one member of a consumer group takes.

These are RocketMQ's six ``AllocateMessageQueueStrategy`` implementations, with the same names
(``name`` is Java's ``getName()``) and the same results, so a mixed group of RocketMQ and minimq
consumers would agree on who owns which queue:

=======================================  =========================  ============================
class                                    ``name``                   idea
=======================================  =========================  ============================
:class:`AllocateMessageQueueAveragely`   ``AVG``                    contiguous blocks (default)
:class:`AllocateMessageQueueAveragelyByCircle`  ``AVG_BY_CIRCLE``   round robin
:class:`AllocateMessageQueueByConfig`    ``CONFIG``                 a fixed list
:class:`AllocateMessageQueueByMachineRoom`  ``MACHINE_ROOM``        queues of chosen IDCs only
:class:`AllocateMachineRoomNearby`       ``MACHINE_ROOM_NEARBY-…``  same room first, then orphans
:class:`AllocateMessageQueueConsistentHash`  ``CONSISTENT_HASH``    MD5 ring with virtual nodes
=======================================  =========================  ============================

Every strategy is called as ``allocate(consumer_group, current_cid, mq_all, cid_all)`` and returns
a new list. **The inputs must already be sorted** (``mq_all`` by topic, broker name, queue id —
:class:`~client.message.MessageQueue`'s own order — and ``cid_all`` as strings): the rebalance
caller sorts them, exactly as RocketMQ's ``RebalanceImpl`` does, so that every member of the group
computes over identical lists. The strategies never sort, copy-on-read only, and never mutate their
arguments. They are pure: no I/O, no trio.

Any object with a ``name`` and a matching ``allocate`` method satisfies
:class:`AllocateMessageQueueStrategy` and can be passed to a consumer.
"""

from __future__ import annotations

import bisect
import hashlib
import logging
from collections.abc import Callable, Iterable, Sequence
from typing import Protocol

from client.message import MessageQueue

__all__ = [
    "AllocateMachineRoomNearby",
    "AllocateMessageQueueAveragely",
    "AllocateMessageQueueAveragelyByCircle",
    "AllocateMessageQueueByConfig",
    "AllocateMessageQueueByMachineRoom",
    "AllocateMessageQueueConsistentHash",
    "AllocateMessageQueueStrategy",
    "MachineRoomResolver",
    "md5_hash",
]

log = logging.getLogger(__name__)


class AllocateMessageQueueStrategy(Protocol):
    """What a consumer needs from an allocation strategy (RocketMQ's interface of that name)."""

    @property
    def name(self) -> str:
        """The strategy's name, as RocketMQ's ``getName()``."""
        ...

    def allocate(
        self,
        consumer_group: str,
        current_cid: str,
        mq_all: Sequence[MessageQueue],
        cid_all: Sequence[str],
    ) -> list[MessageQueue]:
        """The queues ``current_cid`` owns among ``mq_all`` shared by ``cid_all`` (both sorted)."""
        ...


class MachineRoomResolver(Protocol):
    """Tells which machine room (IDC) a queue's broker and a consumer are deployed in."""

    def broker_deploy_in(self, mq: MessageQueue) -> str | None:
        """The room of ``mq``'s broker; None or "" is an error for the allocation."""
        ...

    def consumer_deploy_in(self, cid: str) -> str | None:
        """The room of consumer ``cid``; None or "" is an error for the allocation."""
        ...


def check(
    consumer_group: str,
    current_cid: str,
    mq_all: Sequence[MessageQueue],
    cid_all: Sequence[str],
) -> bool:
    """RocketMQ's ``AbstractAllocateMessageQueueStrategy.check``.

    Raises :class:`ValueError` (Java's ``IllegalArgumentException``, same messages) for an empty
    current id, queue list or consumer list; returns False (and logs) when ``current_cid`` is not
    a member of ``cid_all``, in which case the strategy allocates nothing.
    """
    if not current_cid:
        raise ValueError("currentCID is empty")
    if not mq_all:
        raise ValueError("mqAll is null or mqAll empty")
    if not cid_all:
        raise ValueError("cidAll is null or cidAll empty")
    if current_cid not in cid_all:
        log.info(
            "[BUG] ConsumerGroup: %s The consumerId: %s not in cidAll: %s",
            consumer_group,
            current_cid,
            list(cid_all),
        )
        return False
    return True


class AllocateMessageQueueAveragely:
    """Contiguous blocks; the first ``len(mq_all) % len(cid_all)`` consumers get one more.

    The default strategy. 10 queues over 4 consumers: ``[0,1,2] [3,4,5] [6,7] [8,9]``; with more
    consumers than queues the last consumers get nothing.
    """

    name = "AVG"

    def allocate(
        self,
        consumer_group: str,
        current_cid: str,
        mq_all: Sequence[MessageQueue],
        cid_all: Sequence[str],
    ) -> list[MessageQueue]:
        """The block of ``mq_all`` that belongs to ``current_cid`` (inputs sorted)."""
        if not check(consumer_group, current_cid, mq_all, cid_all):
            return []
        index = cid_all.index(current_cid)
        n, c = len(mq_all), len(cid_all)
        mod = n % c
        extra = mod > 0 and index < mod
        if n <= c:
            average = 1
        else:
            average = n // c + 1 if extra else n // c
        start = index * average if extra else index * average + mod
        count = min(average, n - start)
        return [mq_all[(start + i) % n] for i in range(count)]


class AllocateMessageQueueAveragelyByCircle:
    """Round robin: consumer ``k`` gets the queues whose index is ``k`` modulo the group size."""

    name = "AVG_BY_CIRCLE"

    def allocate(
        self,
        consumer_group: str,
        current_cid: str,
        mq_all: Sequence[MessageQueue],
        cid_all: Sequence[str],
    ) -> list[MessageQueue]:
        """Every ``len(cid_all)``-th queue of ``mq_all`` starting at ``current_cid``'s index."""
        if not check(consumer_group, current_cid, mq_all, cid_all):
            return []
        index = cid_all.index(current_cid)
        return list(mq_all[index :: len(cid_all)])


class AllocateMessageQueueByConfig:
    """Always the configured queues, whoever asks; no argument checks (as RocketMQ)."""

    name = "CONFIG"

    def __init__(self, message_queue_list: Iterable[MessageQueue]) -> None:
        self._queues = tuple(message_queue_list)

    @property
    def message_queue_list(self) -> list[MessageQueue]:
        """A copy of the configured queues."""
        return list(self._queues)

    def allocate(
        self,
        consumer_group: str,
        current_cid: str,
        mq_all: Sequence[MessageQueue],
        cid_all: Sequence[str],
    ) -> list[MessageQueue]:
        """A new list of the configured queues; the arguments are ignored."""
        return list(self._queues)


def _java_split(text: str, sep: str) -> list[str]:
    """``String.split`` as Java does it for a literal one-character separator.

    Java drops trailing empty strings (``"a@b@".split("@")`` has 2 parts) but keeps the single
    empty string of an empty input.
    """
    if not text:
        return [text]
    parts = text.split(sep)
    while parts and not parts[-1]:
        parts.pop()
    return parts


def broker_room(broker_name: str) -> str | None:
    """The IDC of a ``room@broker`` broker name, or None when the name is not of that form."""
    parts = _java_split(broker_name, "@")
    return parts[0] if len(parts) == 2 else None


class AllocateMessageQueueByMachineRoom:
    """Only the queues of brokers named ``room@broker`` whose room is one of ``consumer_idcs``.

    Those queues are dealt out in blocks of ``len(pre) // len(cid_all)``, and the remainder
    one each to the first consumers (RocketMQ's exact arithmetic).
    """

    name = "MACHINE_ROOM"

    def __init__(self, consumer_idcs: Iterable[str]) -> None:
        self._idcs = frozenset(consumer_idcs)

    @property
    def consumer_idcs(self) -> frozenset[str]:
        """The machine rooms whose queues this group consumes."""
        return self._idcs

    def allocate(
        self,
        consumer_group: str,
        current_cid: str,
        mq_all: Sequence[MessageQueue],
        cid_all: Sequence[str],
    ) -> list[MessageQueue]:
        """``current_cid``'s share of the queues in the configured rooms (inputs sorted)."""
        if not check(consumer_group, current_cid, mq_all, cid_all):
            return []
        index = cid_all.index(current_cid)
        pre = [mq for mq in mq_all if broker_room(mq.broker_name) in self._idcs]
        c = len(cid_all)
        mod, rem = divmod(len(pre), c)
        result = pre[mod * index : mod * index + mod]
        if rem > index:
            result.append(pre[index + mod * c])
        return result


def _java_string_key(text: str) -> bytes:
    """Sort key giving Java's ``String.compareTo`` order (UTF-16 code units)."""
    return text.encode("utf-16-be", "surrogatepass")


class AllocateMachineRoomNearby:
    """Queues go to consumers in the same machine room; rooms without consumers are shared.

    The current consumer gets ``inner.allocate`` over its own room's queues and consumers, plus,
    for every room (in sorted order) that has queues but no consumer, ``inner.allocate`` over that
    room's queues and the whole group.
    """

    def __init__(self, inner: AllocateMessageQueueStrategy, resolver: MachineRoomResolver) -> None:
        self._inner = inner
        self._resolver = resolver

    @property
    def name(self) -> str:
        """``MACHINE_ROOM_NEARBY-`` followed by the inner strategy's name."""
        return "MACHINE_ROOM_NEARBY-" + self._inner.name

    def _room_of_mq(self, mq: MessageQueue) -> str:
        room = self._resolver.broker_deploy_in(mq)
        if not room:
            raise ValueError(f"Machine room is null for mq {mq}")
        return room

    def _room_of_cid(self, cid: str) -> str:
        room = self._resolver.consumer_deploy_in(cid)
        if not room:
            raise ValueError(f"Machine room is null for consumer id {cid}")
        return room

    def allocate(
        self,
        consumer_group: str,
        current_cid: str,
        mq_all: Sequence[MessageQueue],
        cid_all: Sequence[str],
    ) -> list[MessageQueue]:
        """Same-room queues first, then ``current_cid``'s share of consumer-less rooms."""
        if not check(consumer_group, current_cid, mq_all, cid_all):
            return []
        room_mqs: dict[str, list[MessageQueue]] = {}
        for mq in mq_all:
            room_mqs.setdefault(self._room_of_mq(mq), []).append(mq)
        room_cids: dict[str, list[str]] = {}
        for cid in cid_all:
            room_cids.setdefault(self._room_of_cid(cid), []).append(cid)

        result: list[MessageQueue] = []
        current_room = self._room_of_cid(current_cid)
        same_room = room_mqs.pop(current_room, None)
        if same_room:
            result += self._inner.allocate(
                consumer_group, current_cid, same_room, room_cids.get(current_room, [])
            )
        for room in sorted(room_mqs, key=_java_string_key):
            if room not in room_cids:
                result += self._inner.allocate(consumer_group, current_cid, room_mqs[room], cid_all)
        return result


def md5_hash(key: str) -> int:
    """RocketMQ's ``MD5Hash``: MD5 of the UTF-8 key, digest bytes 0..3 big-endian, unsigned."""
    return int.from_bytes(hashlib.md5(key.encode("utf-8")).digest()[:4], "big")


class _HashRing:
    """RocketMQ's ``ConsistentHashRouter``: a sorted ring of virtual nodes ``<cid>-<i>``."""

    def __init__(self, cids: Iterable[str], vnodes: int, hash_fn: Callable[[str], int]) -> None:
        self._hash = hash_fn
        owners: dict[int, str] = {}
        replicas: dict[str, int] = {}
        for cid in cids:
            existing = replicas.get(cid, 0)  # Java numbers a re-added node's replicas onwards
            for i in range(vnodes):
                key = self._hash(f"{cid}-{i + existing}")
                previous = owners.get(key)
                if previous is not None:  # Java's TreeMap.put overwrites on collision
                    replicas[previous] -= 1
                owners[key] = cid
                replicas[cid] = replicas.get(cid, 0) + 1
        self._keys = sorted(owners)
        self._owners = [owners[k] for k in self._keys]

    def route(self, key: str) -> str | None:
        """Owner of the first virtual node at or after ``hash(key)``, wrapping; None if empty."""
        if not self._keys:
            return None
        pos = bisect.bisect_left(self._keys, self._hash(key))
        return self._owners[pos % len(self._keys)]


class AllocateMessageQueueConsistentHash:
    """Consistent hashing: each consumer has ``virtual_node_cnt`` points on an MD5 ring.

    A queue (keyed by ``str(mq)``, RocketMQ's ``MessageQueue [topic=…, brokerName=…, queueId=…]``)
    belongs to the consumer of the first point at or after its hash. A member joining or leaving
    moves only the queues it takes or gives up. ``hash_function`` replaces :func:`md5_hash`.
    """

    name = "CONSISTENT_HASH"

    def __init__(
        self, virtual_node_cnt: int = 10, hash_function: Callable[[str], int] | None = None
    ) -> None:
        if virtual_node_cnt < 0:
            raise ValueError(f"illegal virtualNodeCnt :{virtual_node_cnt}")
        self._vnodes = virtual_node_cnt
        self._hash = hash_function if hash_function is not None else md5_hash

    @property
    def virtual_node_cnt(self) -> int:
        """Virtual nodes per consumer on the ring."""
        return self._vnodes

    def allocate(
        self,
        consumer_group: str,
        current_cid: str,
        mq_all: Sequence[MessageQueue],
        cid_all: Sequence[str],
    ) -> list[MessageQueue]:
        """The queues of ``mq_all`` whose ring owner is ``current_cid``, in ``mq_all`` order."""
        if not check(consumer_group, current_cid, mq_all, cid_all):
            return []
        ring = _HashRing(cid_all, self._vnodes, self._hash)
        return [mq for mq in mq_all if ring.route(str(mq)) == current_cid]
