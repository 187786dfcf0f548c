"""Driver side of the Spark source: ask the brokers about queues and offsets.

Coroutines run against a :class:`~client.instance.ClientInstance` (through
:meth:`client.blocking.SharedInstance.call`): the topics' readable queues with their min and
max offsets, offsets by store timestamp, and consumer-group progress commits.

Each queue is asked on its own: a failing queue never cancels the others, and failures come
back as data (:class:`Probe`, :func:`commit_group`) or as one :class:`OffsetsUnavailableError`
naming the brokers, never as a bare trio ``ExceptionGroup``.
"""

from __future__ import annotations

import contextlib
import logging
from collections import Counter
from collections.abc import Awaitable, Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field

import trio

from client import api
from client.errors import CLIENT_ERROR, MQClientError
from client.instance import ClientInstance
from client.message import MessageQueue
from client.spark.offsets import QueueKey
from client.spark.options import SecurityOptions, acl_hint
from remoting.codes import RequestCode, ResponseCode

log = logging.getLogger(__name__)

Bounds = dict[QueueKey, tuple[int, int]]
Failures = dict[QueueKey, MQClientError]


class OffsetsUnavailableError(MQClientError):
    """Brokers did not answer offset requests; the message names each broker and why."""

    def __init__(self, what: str, failures: Mapping[QueueKey, MQClientError]) -> None:
        super().__init__(CLIENT_ERROR, f"{what}: {describe(failures)}")
        self.brokers = sorted({broker for _, broker, _ in failures})
        self.codes = frozenset(exc.code for exc in failures.values())
        """The error codes of the failed queues."""


class AclRefusedError(MQClientError):
    """A broker refused the query's requests for lack of permission (``NO_PERMISSION``: ACL
    on and no account, a wrong secret, or an account without the permission); the message
    says which options to give or which account to check."""


def refused_for_permission(exc: MQClientError) -> bool:
    """True when ``exc`` (or one of the queue failures it gathers) is ``NO_PERMISSION``."""
    codes = getattr(exc, "codes", frozenset({exc.code}))
    return ResponseCode.NO_PERMISSION in codes


@contextlib.contextmanager
def acl_refusals_explained(security: SecurityOptions) -> Iterator[None]:
    """Turn an MQClientError that is a refusal for lack of permission into
    :class:`AclRefusedError`, with what to do (:func:`client.spark.options.acl_hint`)."""
    try:
        yield
    except MQClientError as exc:
        if not refused_for_permission(exc) or isinstance(exc, AclRefusedError):
            raise
        raise AclRefusedError(ResponseCode.NO_PERMISSION, f"{exc}{acl_hint(security)}") from exc


@dataclass
class Probe:
    """What :func:`probe_bounds` learned: ``{queue: (min, max)}`` of the queues that answered,
    and the error of each queue that did not."""

    bounds: Bounds = field(default_factory=dict)
    failures: Failures = field(default_factory=dict)


def describe(failures: Mapping[QueueKey, MQClientError]) -> str:
    """``broker broker-b (queues T/0, T/1): <its first error>; ...``: one entry per broker."""
    by_broker: dict[str, list[QueueKey]] = {}
    for key in sorted(failures):
        by_broker.setdefault(key[1], []).append(key)
    parts = []
    for broker, keys in by_broker.items():
        queues = ", ".join(f"{t}/{q}" for t, _, q in keys)
        parts.append(f"broker {broker} (queues {queues}): {_reason(failures[keys[0]])}")
    return "; ".join(parts)


def _reason(exc: MQClientError) -> str:
    return exc.reason if exc.code == CLIENT_ERROR else str(exc)


def _mq(key: QueueKey) -> MessageQueue:
    return MessageQueue(*key)


class KeptRoutes:
    """The topics whose routes a :class:`ClientInstance` keeps while the Spark source reads
    them (one per instance, in its ``published_topics`` hooks; loop thread only).

    The instance's route loop forgets, every ``pollNameServerInterval`` (30 s), the routes of
    topics none of its producers or consumers use, which the source's offset requests and
    pulls are not: without this, a query would need the name servers again 30 s after its
    last trigger or pull, and the fallback to the held routes during a name-server outage
    would find none. Kept topics have their routes refreshed by that loop instead, and keep
    their old route when the name servers do not answer, as a consumer's do."""

    def __init__(self) -> None:
        self.users: Counter[str] = Counter()
        """Topics kept by a driver-side reader until it stops (counted per reader)."""
        self.for_life: set[str] = set()
        """Topics an executor's pulls read: kept as long as the worker's instance lives."""

    def __call__(self) -> Iterable[str]:
        """The kept topics (the instance's ``topics_in_use`` asks)."""
        return self.for_life.union(self.users)


def kept_routes(instance: ClientInstance) -> KeptRoutes:
    """``instance``'s :class:`KeptRoutes`, registered with it on first use (loop thread)."""
    for hook in instance.published_topics:
        if isinstance(hook, KeptRoutes):
            return hook
    hook = KeptRoutes()
    instance.published_topics.append(hook)
    return hook


async def keep_routes(instance: ClientInstance, topics: Sequence[str]) -> None:
    """Keep the routes of ``topics`` in ``instance`` until :func:`release_routes`."""
    kept_routes(instance).users.update(topics)


async def release_routes(instance: ClientInstance, topics: Sequence[str]) -> None:
    """Undo one :func:`keep_routes` of ``topics``."""
    users = kept_routes(instance).users
    users.subtract(topics)
    for topic in topics:
        if users[topic] <= 0:
            del users[topic]


async def queues(
    instance: ClientInstance, topics: Sequence[str], *, cached_ok: bool = False
) -> list[QueueKey]:
    """Every readable queue of ``topics`` (fresh routes from the name servers), sorted.

    With ``cached_ok``, a topic whose route cannot be refreshed but that this instance already
    holds a route for uses that route, with a warning, as RocketMQ's client keeps its route:
    when no name server answered, and when they say the topic does not exist (a name server
    that restarted knows a topic only once its brokers register again, within 30 s; a topic
    really deleted is then seen by its brokers' offsets, which went back to 0). A topic
    without a cached route still raises."""
    out: list[QueueKey] = []
    for topic in topics:
        try:
            mqs = await instance.subscribe_queues(topic)
        except MQClientError as exc:
            if not cached_ok:
                raise
            mqs = await _cached_queues(instance, topic, exc)
        for mq in mqs:
            out.append((mq.topic, mq.broker_name, mq.queue_id))
    return sorted(out)


async def _cached_queues(
    instance: ClientInstance, topic: str, error: MQClientError
) -> list[MessageQueue]:
    """The readable queues of the route cached for ``topic``; ``error`` (the failed refresh)
    when there is none."""
    try:
        route = await instance.topic_route(topic)  # the cached one; asks again if none is
    except MQClientError:
        raise error from None
    log.warning(
        "minimq source: could not refresh the route of topic %s (%s); using the route from before",
        topic,
        _reason(error),
    )
    return api.subscribe_queues(topic, route)


async def _gather(
    keys: Sequence[QueueKey], fn: Callable[[QueueKey], Awaitable[int]]
) -> tuple[dict[QueueKey, int], Failures]:
    """``fn`` of every key concurrently: the results, and the MQClientError of each failure."""
    out: dict[QueueKey, int] = {}
    failed: Failures = {}

    async def one(key: QueueKey) -> None:
        try:
            out[key] = await fn(key)
        except MQClientError as exc:
            failed[key] = exc

    async with trio.open_nursery() as nursery:
        for key in keys:
            nursery.start_soon(one, key)
    return out, failed


async def _offsets(
    instance: ClientInstance, keys: Sequence[QueueKey], code: RequestCode, ts: int = 0
) -> tuple[dict[QueueKey, int], Failures]:
    async def one(key: QueueKey) -> int:
        return await instance.broker_offset(code, _mq(key), ts)

    return await _gather(keys, one)


async def probe_bounds(
    instance: ClientInstance, topics: Sequence[str], cached_ok: bool = False
) -> Probe:
    """The min and max offsets of every readable queue of ``topics`` whose broker answers;
    the queues that failed are in :attr:`Probe.failures` (route errors propagate; with
    ``cached_ok`` a route that cannot be refreshed is taken from the cache, see
    :func:`queues`)."""
    keys = await queues(instance, topics, cached_ok=cached_ok)
    lo, failed = await _offsets(instance, keys, RequestCode.GET_MIN_OFFSET)
    hi, failed_hi = await _offsets(instance, sorted(lo), RequestCode.GET_MAX_OFFSET)
    failed.update(failed_hi)
    return Probe({k: (lo[k], hi[k]) for k in keys if k in hi}, failed)


async def queue_bounds(instance: ClientInstance, topics: Sequence[str]) -> Bounds:
    """``{queue: (min offset, max offset)}`` of every readable queue of ``topics``;
    OffsetsUnavailableError naming the brokers if any queue did not answer."""
    probe = await probe_bounds(instance, topics)
    if probe.failures:
        raise OffsetsUnavailableError("could not get the queues' offsets", probe.failures)
    return probe.bounds


async def offsets_for_time(
    instance: ClientInstance, keys: Sequence[QueueKey], timestamp_ms: int
) -> dict[QueueKey, int]:
    """The first offset stored at or after ``timestamp_ms`` in each queue
    (OffsetsUnavailableError naming the brokers if any queue did not answer)."""
    code = RequestCode.SEARCH_OFFSET_BY_TIMESTAMP
    out, failed = await _offsets(instance, keys, code, timestamp_ms)
    if failed:
        raise OffsetsUnavailableError("could not search offsets by timestamp", failed)
    return out


async def commit_group(
    instance: ClientInstance, group: str, offsets: Mapping[QueueKey, int]
) -> Failures:
    """Store ``offsets`` as ``group``'s consumer offsets on the brokers, each queue on its own;
    returns the queues whose commit failed (never raises MQClientError)."""

    async def one(key: QueueKey) -> int:
        mq = _mq(key)
        addr = await instance.find_broker_addr(mq)
        resp = await instance.invoke(addr, api.update_offset_request(group, mq, offsets[key]))
        api.check_success(resp, addr)
        return offsets[key]

    _, failed = await _gather(sorted(offsets), one)
    return failed
