"""Client message types: what a producer sends, what it gets back, what a consumer receives.

Names follow RocketMQ's ``Message``, ``MessageQueue``, ``SendStatus``, ``SendResult`` and
``MessageExt``. Tags, keys and the delay level live in the properties under RocketMQ's keys
(``TAGS``, ``KEYS`` joined by spaces, ``DELAY``), so they reach the commitlog unchanged.
"""

from __future__ import annotations

import enum
import functools
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from client.compression import decompress_if_needed
from common.message import MessageConst, MessageSysFlag
from common.message_id import create_offset_msg_id, offset_msg_id_of_packed
from common.record import (
    MessageRecord,
    RawRecordFields,
    decode_properties,
    unpack_host,
)


def _split_keys(raw: str | None) -> list[str]:
    if not raw:
        return []
    return [k for k in raw.split(MessageConst.KEY_SEPARATOR) if k]


class _PropertyView:
    """Read access to the well-known properties of a message's ``properties`` map."""

    __slots__ = ()
    properties: dict[str, str]

    @property
    def tags(self) -> str | None:
        """The TAGS property, or None."""
        return self.properties.get(MessageConst.TAGS)

    @property
    def keys(self) -> list[str]:
        """The KEYS property split on spaces."""
        return _split_keys(self.properties.get(MessageConst.KEYS))

    @property
    def uniq_key(self) -> str | None:
        """The client-side unique id (set by the producer before sending), or None."""
        return self.properties.get(MessageConst.UNIQ_KEY)


class Message(_PropertyView):
    """A message to send (RocketMQ's ``Message``); ``properties`` holds tags, keys and delay."""

    __slots__ = ("body", "flag", "properties", "topic", "transaction_id")

    def __init__(
        self,
        topic: str,
        body: bytes,
        tags: str | None = None,
        keys: str | list[str] | None = None,
        properties: dict[str, str] | None = None,
        flag: int = 0,
        delay_level: int = 0,
    ) -> None:
        self.topic = topic
        self.body = body
        self.flag = flag
        self.transaction_id: str | None = None
        self.properties: dict[str, str] = dict(properties) if properties else {}
        if tags is not None:
            self.properties[MessageConst.TAGS] = tags
        if keys is not None:
            joined = keys if isinstance(keys, str) else MessageConst.KEY_SEPARATOR.join(keys)
            if joined:
                self.properties[MessageConst.KEYS] = joined
        if delay_level > 0:
            self.properties[MessageConst.DELAY] = str(delay_level)

    @property
    def delay_level(self) -> int:
        """The DELAY property as an int (0 when absent or not a number)."""
        try:
            return int(self.properties.get(MessageConst.DELAY, "0"))
        except ValueError:
            return 0

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Message):
            return NotImplemented
        return (self.topic, self.body, self.flag, self.properties, self.transaction_id) == (
            other.topic,
            other.body,
            other.flag,
            other.properties,
            other.transaction_id,
        )

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return (
            f"Message(topic={self.topic!r}, flag={self.flag}, properties={self.properties!r}, "
            f"body=<{len(self.body)} bytes>)"
        )


@dataclass(frozen=True, slots=True, order=True)
class MessageQueue:
    """One queue of a topic on one broker; sorts by (topic, broker_name, queue_id) as Java does.

    The hash is computed once: queues key the consumers' tables, looked up per message.
    """

    topic: str
    broker_name: str
    queue_id: int
    _hash: int = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_hash", hash((self.topic, self.broker_name, self.queue_id)))

    def __hash__(self) -> int:
        return self._hash

    def __reduce__(self) -> tuple[type[MessageQueue], tuple[str, str, int]]:
        # str hashes differ between processes: a pickled queue recomputes its hash on arrival
        return (MessageQueue, (self.topic, self.broker_name, self.queue_id))

    def __str__(self) -> str:
        return (
            f"MessageQueue [topic={self.topic}, brokerName={self.broker_name}, "
            f"queueId={self.queue_id}]"
        )


class SendStatus(enum.Enum):
    """Outcome of a successful send request (RocketMQ's ``SendStatus``)."""

    SEND_OK = "SEND_OK"
    FLUSH_DISK_TIMEOUT = "FLUSH_DISK_TIMEOUT"
    FLUSH_SLAVE_TIMEOUT = "FLUSH_SLAVE_TIMEOUT"
    SLAVE_NOT_AVAILABLE = "SLAVE_NOT_AVAILABLE"


@dataclass(frozen=True, slots=True)
class SendResult:
    """What a send returns: ``msg_id`` is the UNIQ_KEY, ``offset_msg_id`` the broker's id."""

    status: SendStatus
    msg_id: str
    offset_msg_id: str
    queue: MessageQueue
    queue_offset: int
    transaction_id: str | None = None


@dataclass(slots=True)
class ReceivedMessage(_PropertyView):
    """A consumed message (RocketMQ's ``MessageExt``); build it with :func:`from_record`.

    ``msg_id`` is the UNIQ_KEY when the producer set one, else ``offset_msg_id``. Timestamps are
    ms since the epoch; hosts are ``"ip:port"``. Not frozen: building a frozen dataclass costs
    three times as much, and consumers build hundreds of thousands per second.

    Messages of a pull (:func:`received_from_raw_fields`) decode ``properties``, ``msg_id``,
    ``offset_msg_id``, ``born_host`` and ``store_host`` on first access (then they are plain
    attributes): decoding the properties alone cost a third of a pulled message, and many
    consumers never read them.
    """

    topic: str
    body: bytes
    properties: dict[str, str]
    queue: MessageQueue
    queue_offset: int
    msg_id: str
    offset_msg_id: str
    commitlog_offset: int
    born_timestamp: int
    store_timestamp: int
    born_host: str
    store_host: str
    reconsume_times: int = 0
    flag: int = 0
    sys_flag: int = 0
    _encoded: tuple[bytes, bytes, bytes] | None = field(
        default=None, init=False, repr=False, compare=False
    )
    """Pulled messages: (raw properties, packed born host, packed store host) for the lazily
    decoded attributes, which stay unset until first read."""

    if not TYPE_CHECKING:  # hidden from type checkers: every attribute is declared above

        def __getattr__(self, name: str) -> object:
            # only called when a slot is unset: a lazy attribute of a pulled message
            # the name first: unpickling asks for names before any slot is set
            encoded = self._encoded if name in _LAZY else None
            if encoded is None:
                raise AttributeError(
                    f"{type(self).__name__!r} object has no attribute {name!r}", name=name, obj=self
                )
            raw_props, born_host, store_host = encoded
            value: object
            if name == "properties":
                value = decode_properties(raw_props) if raw_props else {}
            elif name == "msg_id":
                value = self.properties.get(MessageConst.UNIQ_KEY) or self.offset_msg_id
            elif name == "offset_msg_id":
                value = offset_msg_id_of_packed(store_host, self.commitlog_offset)
            else:
                value = _host_str(born_host if name == "born_host" else store_host)
            setattr(self, name, value)
            return value


_LAZY = frozenset({"properties", "msg_id", "offset_msg_id", "born_host", "store_host"})


@functools.lru_cache(maxsize=4096)
def _host_str(packed: bytes) -> str:
    host, port = unpack_host(packed)
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def from_record(
    record: MessageRecord,
    broker_name: str,
    store_host_port: tuple[str, int] | None = None,
    *,
    decompress: bool = True,
) -> ReceivedMessage:
    """Turn a decoded commitlog record pulled from ``broker_name`` into a :class:`ReceivedMessage`.

    ``store_host_port`` overrides the record's store host when computing ``offset_msg_id`` (use
    the address the client reached the broker at if the broker stores a placeholder). A
    compressed body is decompressed unless ``decompress`` is false.
    """
    phys = record.physical_offset
    if store_host_port is None:
        offset_msg_id = offset_msg_id_of_packed(record.store_host, phys)
    else:
        offset_msg_id = create_offset_msg_id(*store_host_port, phys)
    sys_flag = record.sys_flag
    body = record.body
    if decompress and sys_flag & MessageSysFlag.COMPRESSED_FLAG:
        body = decompress_if_needed(body, sys_flag)
    props = record.properties  # a freshly decoded record's own map: no copy
    topic = record.topic
    # positional, in field order: this runs once per consumed message
    return ReceivedMessage(
        topic,
        body,
        props,
        _queue(topic, broker_name, record.queue_id),
        record.queue_offset,
        props.get(MessageConst.UNIQ_KEY) or offset_msg_id,
        offset_msg_id,
        phys,
        record.born_timestamp,
        record.store_timestamp,
        _host_str(record.born_host),
        _host_str(record.store_host),
        record.reconsume_times,
        record.flag,
        sys_flag,
    )


_new_message = ReceivedMessage.__new__


def received_from_raw_fields(
    fields: list[RawRecordFields], broker_name: str
) -> list[ReceivedMessage]:
    """The messages of a pull from ``broker_name`` (field tuples of
    :func:`common.record.decode_raw_fields`), their properties, ids and hosts decoded lazily
    (see :class:`ReceivedMessage`). A compressed body is decompressed."""
    out: list[ReceivedMessage] = []
    last_queue_id = -1
    mq: MessageQueue | None = None
    for (
        topic,
        body,
        queue_id,
        flag,
        raw_props,
        sys_flag,
        born_ts,
        born_host,
        store_ts,
        store_host,
        reconsume,
        _prepared,
        queue_offset,
        phys,
        _crc,
        _size,
    ) in fields:
        if sys_flag & MessageSysFlag.COMPRESSED_FLAG:
            body = decompress_if_needed(body, sys_flag)
        if queue_id != last_queue_id or mq is None or mq.topic != topic:
            mq = _queue(topic, broker_name, queue_id)  # a pull's records share their queue
            last_queue_id = queue_id
        # no __init__: it would set the lazy attributes; this runs once per consumed message
        m = _new_message(ReceivedMessage)
        m.topic = topic
        m.body = body
        m.queue = mq
        m.queue_offset = queue_offset
        m.commitlog_offset = phys
        m.born_timestamp = born_ts
        m.store_timestamp = store_ts
        m.reconsume_times = reconsume
        m.flag = flag
        m.sys_flag = sys_flag
        m._encoded = (raw_props, born_host, store_host)
        out.append(m)
    return out


@functools.lru_cache(maxsize=4096)
def _queue(topic: str, broker_name: str, queue_id: int) -> MessageQueue:
    """The (immutable, shared) MessageQueue: building a frozen dataclass per message is costly."""
    return MessageQueue(topic, broker_name, queue_id)
