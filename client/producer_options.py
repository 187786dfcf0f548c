"""The keyword options of the producers, and their checks.

``Producer(group, namesrv, **options)`` takes :class:`ProducerOptions` (a ``TypedDict``, so a
type checker knows every name and type) and :func:`producer_settings` checks them when the
producer is made, not at its first send: an unknown name or a wrong type is a TypeError
naming the option, a value out of range a ValueError. The options arrive as one mapping of
untyped values, which is also what lets the compiled build (whose functions check their
declared parameter types on entry, with errors that name no parameter) check them as the pure
build does.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final, TypedDict

from client.compression import COMPRESS_MSG_BODY_OVER_HOWMUCH
from client.validation import MAX_MESSAGE_SIZE


class ProducerOptions(TypedDict, total=False):
    """A producer's options, all optional (the defaults are :class:`ProducerSettings`')."""

    send_timeout: float
    """Seconds a send may take, retries included (3.0)."""
    retry_times: int
    """Attempts after the first on another broker (2)."""
    compress_over: int
    """Bodies of at least this many bytes are zlib-compressed (4096)."""
    max_message_size: int
    """The largest body accepted (4 MiB)."""
    default_topic_queue_nums: int
    """Queues per broker of a topic created by its first message (8)."""
    latency_fault_tolerance: bool
    """Avoid brokers that were slow or failed, as RocketMQ's ``sendLatencyFaultEnable``."""


class TransactionProducerOptions(ProducerOptions, total=False):
    """A transactional producer's options: a producer's and those of its checks."""

    check_threads: int
    """Broker checks run at once (1)."""
    check_request_hold_max: int
    """Checks waiting or running at most; more are dropped (2000)."""


@dataclass(frozen=True, slots=True)
class ProducerSettings:
    """Checked producer options, defaults filled in."""

    send_timeout: float = 3.0
    retry_times: int = 2
    compress_over: int = COMPRESS_MSG_BODY_OVER_HOWMUCH
    max_message_size: int = MAX_MESSAGE_SIZE
    default_topic_queue_nums: int = 8
    latency_fault_tolerance: bool = False
    check_threads: int = 1
    check_request_hold_max: int = 2000


_PRODUCER_NAMES: Final = frozenset(ProducerOptions.__annotations__)
_TRANSACTION_NAMES: Final = frozenset(TransactionProducerOptions.__annotations__)
_MINIMUMS: Final = {
    "retry_times": 0,
    "compress_over": 0,
    "max_message_size": 1,
    "default_topic_queue_nums": 1,
    "check_threads": 1,
    "check_request_hold_max": 1,
}


def producer_settings(
    options: Mapping[str, object], *, who: str = "Producer", transactional: bool = False
) -> ProducerSettings:
    """``options`` checked (TypeError / ValueError naming the option) with the defaults filled
    in; ``transactional`` also allows :class:`TransactionProducerOptions`' own."""
    allowed = _TRANSACTION_NAMES if transactional else _PRODUCER_NAMES
    for name in options:
        if name not in allowed:
            raise TypeError(f"{who}() got an unexpected keyword argument {name!r}")
    for name, minimum in _MINIMUMS.items():
        if name in options:
            check_count(options[name], name, minimum)
    if "send_timeout" in options:
        check_budget(options["send_timeout"], "send_timeout")
    if "latency_fault_tolerance" in options:
        _check_flag(options["latency_fault_tolerance"], "latency_fault_tolerance")
    checked: dict[str, Any] = dict(options)
    return ProducerSettings(**checked)


def check_count(value: object, name: str, minimum: int) -> None:
    """An option counting retries, queues, threads or bytes must be an int >= ``minimum``."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int, got {value!r}")
    if value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value}")


def check_budget(seconds: object, name: str) -> None:
    """A send's time budget must be a finite number of seconds > 0 (ValueError /
    TypeError)."""
    if isinstance(seconds, bool) or not isinstance(seconds, int | float):
        raise TypeError(f"{name} must be a number of seconds, got {seconds!r}")
    if not seconds > 0:  # also NaN
        raise ValueError(f"{name} must be > 0 seconds, got {seconds!r}")
    if math.isinf(seconds):
        raise ValueError(f"{name} must be a finite number of seconds, got {seconds!r}")


def _check_flag(value: object, name: str) -> None:
    if not isinstance(value, bool):
        raise TypeError(f"{name} must be a bool, got {value!r}")
