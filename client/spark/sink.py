"""The sink: ``df.write.format("minimq")`` and ``df.writeStream.format("minimq")``.

Columns: ``body`` (binary or string, required), and optionally ``topic`` (overrides the
``topic`` option per row), ``tags``, ``keys`` (string; several keys space-separated) and
``properties`` (map<string,string>). Each task sends its rows in batches (``batchSize``) per
topic with one blocking producer; a failed send fails the task.
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
from client.spark.options import OptionError, WriteOptions

SINK_COLUMNS = ("body", "topic", "tags", "keys", "properties")


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
    """A row as a :class:`Message` (SinkError for a row without body or topic)."""
    d: Mapping[str, Any] = row.asDict() if hasattr(row, "asDict") else row
    topic = d.get("topic") or default_topic
    if not topic:
        raise SinkError(f"a row has no topic and the sink has no 'topic' option: {d!r}")
    body = d.get("body")
    if body is None:
        raise SinkError(f"a row for topic {topic} has a null body")
    if isinstance(body, str):
        body = body.encode()
    keys = d.get("keys")
    return Message(
        topic,
        bytes(body),
        tags=d.get("tags") or None,
        keys=keys or None,
        properties=dict(d.get("properties") or {}),
    )


def send_rows(opts: WriteOptions, rows: Iterator[Any]) -> int:
    """Send ``rows`` in batches per topic; the number sent."""
    pending: dict[str, list[Message]] = {}
    sent = 0
    with Producer(group=opts.group, namesrv=opts.namesrv) as producer:

        def flush(topic: str) -> None:
            nonlocal sent
            batch = pending.pop(topic, [])
            if not batch:
                return
            try:
                producer.send_batch(batch)
            except MQClientError as exc:
                raise SinkError(
                    f"minimq sink: sending {len(batch)} messages to topic {topic} "
                    f"via {opts.namesrv} failed: {exc}"
                ) from exc
            sent += len(batch)

        for row in rows:
            msg = to_message(row, opts.topic)
            batch = pending.setdefault(msg.topic, [])
            batch.append(msg)
            if len(batch) >= opts.batch_size:
                flush(msg.topic)
        for topic in list(pending):
            flush(topic)
    return sent


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
