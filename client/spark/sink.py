"""The sink: ``df.write.format("minimq")`` and ``df.writeStream.format("minimq")``.

Columns: ``body`` (binary or string, required), and optionally ``topic`` (the row's topic
when there is no ``topic`` option: the option, when given, overrides the column as in Spark's
Kafka sink), ``tags``, ``keys`` (string; several keys space-separated) and ``properties``
(map<string,string>). Each task sends its rows in batches per topic with one blocking
producer: at most ``batchSize`` messages and :data:`MAX_BATCH_BYTES` encoded bytes a batch; a
message too big to share a batch is sent alone. A failed send fails the task.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from pyspark.sql.datasource import DataSourceStreamWriter, DataSourceWriter, WriterCommitMessage
from pyspark.sql.types import BinaryType, MapType, StringType, StructType

from client.blocking import Producer
from client.errors import MQClientError
from client.message import Message
from client.spark.options import OptionError, WriteOptions, acl_hint
from client.validation import MAX_MESSAGE_SIZE
from remoting.codes import ResponseCode

SINK_COLUMNS = ("body", "topic", "tags", "keys", "properties")
MAX_BATCH_BYTES = MAX_MESSAGE_SIZE - 64 * 1024
"""Encoded bytes of one batch send at most: the producer refuses a batch over
``MAX_MESSAGE_SIZE`` (4 MiB); the headroom covers the estimate's slack."""
MESSAGE_OVERHEAD = 256
"""Bytes a message adds to a batch besides its body and properties: msgpack framing, the
flag, and the UNIQ_KEY property the producer stamps (generous: an upper bound)."""
PROPERTY_OVERHEAD = 10
"""msgpack framing of one property's name and value, at most."""


class SinkError(RuntimeError):
    """Rows could not be sent (the task fails with this)."""


@dataclass
class SentMessage(WriterCommitMessage):
    """What one task sent."""

    count: int


def check_schema(schema: StructType, opts: WriteOptions) -> None:
    """OptionError unless the DataFrame's columns fit the sink."""
    fields = {f.name: f.dataType for f in schema.fields}
    extra = sorted(set(fields) - set(SINK_COLUMNS))
    if extra:
        raise OptionError(
            f"the minimq sink takes columns {', '.join(SINK_COLUMNS)}; unexpected: "
            f"{', '.join(extra)}"
        )
    body = fields.get("body")
    if not isinstance(body, (BinaryType, StringType)):
        raise OptionError("the minimq sink needs a 'body' column of type binary or string")
    for name in ("topic", "tags", "keys"):
        if name in fields and not isinstance(fields[name], StringType):
            raise OptionError(f"column '{name}' of the minimq sink must be a string")
    props = fields.get("properties")
    if props is not None and not (
        isinstance(props, MapType)
        and isinstance(props.keyType, StringType)
        and isinstance(props.valueType, StringType)
    ):
        raise OptionError("column 'properties' of the minimq sink must be map<string,string>")
    if opts.topic is None and "topic" not in fields:
        raise OptionError("the minimq sink needs the 'topic' option or a 'topic' column")


def to_message(row: Any, default_topic: str | None) -> Message:
    """A row as a :class:`Message` (SinkError for a row without body or topic, or with a body
    over the 4 MiB message limit). The ``topic`` option, when given, overrides the row's.
    Null ``tags``/``keys`` and null-valued ``properties`` entries are left out."""
    d: Mapping[str, Any] = row.asDict() if hasattr(row, "asDict") else row
    topic = default_topic or d.get("topic")
    if not topic:
        raise SinkError(f"a row has no topic and the sink has no 'topic' option: {d!r}")
    body = d.get("body")
    if body is None:
        raise SinkError(f"a row for topic {topic} has a null body")
    if isinstance(body, str):
        body = body.encode()
    if len(body) > MAX_MESSAGE_SIZE:
        raise SinkError(
            f"a row for topic {topic} has a body of {len(body)} bytes, over the message size "
            f"limit of {MAX_MESSAGE_SIZE} bytes"
        )
    keys = d.get("keys")
    # a map<string,string> value may be null: such a property is absent, as null tags/keys are
    props = {k: v for k, v in (d.get("properties") or {}).items() if v is not None}
    return Message(
        topic,
        bytes(body),
        tags=d.get("tags") or None,
        keys=keys or None,
        properties=props,
    )


def batch_size_of(msg: Message) -> int:
    """An upper bound of what ``msg`` adds to an encoded batch (body, properties, framing)."""
    props = sum(len(k.encode()) + len(v.encode()) for k, v in msg.properties.items())
    return len(msg.body) + props + PROPERTY_OVERHEAD * len(msg.properties) + MESSAGE_OVERHEAD


class _Batches:
    """Per-topic batches of one task, flushed by count (``batchSize``) and by bytes."""

    def __init__(self, opts: WriteOptions, producer: Producer) -> None:
        self.opts = opts
        self.producer = producer
        self.pending: dict[str, list[Message]] = {}
        self.pending_bytes: dict[str, int] = {}
        self.sent = 0

    def add(self, msg: Message) -> None:
        """Queue ``msg``; send its topic's batch first if ``msg`` would take it over the byte
        limit, and after if it reached ``batchSize``. A message that alone passes the byte
        limit is sent by itself."""
        size = batch_size_of(msg)
        topic = msg.topic
        if size > MAX_BATCH_BYTES:
            self.flush(topic)  # keep the topic's messages in row order
            self._send([msg], single=True)
            return
        if self.pending_bytes.get(topic, 0) + size > MAX_BATCH_BYTES:
            self.flush(topic)
        self.pending.setdefault(topic, []).append(msg)
        self.pending_bytes[topic] = self.pending_bytes.get(topic, 0) + size
        if len(self.pending[topic]) >= self.opts.batch_size:
            self.flush(topic)

    def flush(self, topic: str) -> None:
        """Send ``topic``'s pending batch, if any."""
        self.pending_bytes.pop(topic, None)
        batch = self.pending.pop(topic, [])
        if batch:
            self._send(batch)

    def flush_all(self) -> None:
        """Send every pending batch."""
        for topic in list(self.pending):
            self.flush(topic)

    def _send(self, batch: list[Message], *, single: bool = False) -> None:
        try:
            if single:
                self.producer.send(batch[0])
            else:
                self.producer.send_batch(batch)
        except MQClientError as exc:
            hint = acl_hint(self.opts.security) if exc.code == ResponseCode.NO_PERMISSION else ""
            raise SinkError(
                f"minimq sink: sending {len(batch)} message(s) to topic {batch[0].topic} "
                f"via {self.opts.namesrv} failed: {exc}{hint}"
            ) from exc
        self.sent += len(batch)


def open_producer(opts: WriteOptions) -> Producer:
    """The task's blocking producer: on the plain shared instance of ``namesrv``, or, with an
    account or TLS options, on one of its own configuration (the environment's TLS defaults
    are read in the executor)."""
    if opts.security.is_default:
        return Producer(group=opts.group, namesrv=opts.namesrv)
    return Producer(group=opts.group, client_config=opts.security.client_config(opts.namesrv))


def send_rows(opts: WriteOptions, rows: Iterator[Any]) -> int:
    """Send ``rows`` in batches per topic; the number sent."""
    with open_producer(opts) as producer:
        batches = _Batches(opts, producer)
        for row in rows:
            batches.add(to_message(row, opts.topic))
        batches.flush_all()
    return batches.sent


class BatchWriter(DataSourceWriter):
    """``df.write.format("minimq")``: each task sends its rows."""

    def __init__(self, opts: WriteOptions) -> None:
        self.opts = opts

    def write(self, iterator: Iterator[Any]) -> SentMessage:
        """Send the task's rows."""
        return SentMessage(send_rows(self.opts, iterator))


class StreamWriter(DataSourceStreamWriter):
    """``df.writeStream.format("minimq")``: each micro-batch's tasks send their rows
    (at-least-once: a retried batch is sent again)."""

    def __init__(self, opts: WriteOptions) -> None:
        self.opts = opts

    def write(self, iterator: Iterator[Any]) -> SentMessage:
        """Send the task's rows."""
        return SentMessage(send_rows(self.opts, iterator))

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """Nothing to do: the messages are stored when the tasks end."""

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """Nothing to undo: sent messages stay sent."""
