"""``mqadmin`` message commands: queryMsgById, queryMsgByUniqueKey, queryMsgByKey,
queryMsgByOffset, printMsg, printMsgByQueue, sendMessage, consumeMessage."""

from __future__ import annotations

from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import click

from client import api
from client.admin.admin_client import TOOLS_CONSUMER, AdminClient, MessageQuery
from client.admin.base import (
    JsonArrayWriter,
    admin_command,
    charset_option,
    emit_json,
    fail,
    fmt_time_ms,
    lines,
    message_json,
    parse_timestamp,
    print_message,
    progress,
    run,
    table,
    warn,
)
from client.admin.cmd_consumer import consume_directly, direct_result_json, print_direct_result
from client.errors import MQClientError
from client.message import Message, MessageQueue, ReceivedMessage
from client.producer import Producer
from remoting.codes import RequestCode, ResponseCode
from remoting.consumer_bodies import ConsumeMessageDirectlyResult

PULL_BATCH = 32
PRINT_PAGE = 1000
"""printMsg prints its table in pages of this many rows, each as soon as it is read."""
TOOLS_PRODUCER = "TOOLS_PRODUCER"


def _show(msgs: list[ReceivedMessage], as_json: bool, charset: str = "utf-8") -> None:
    if as_json:
        emit_json([message_json(m, charset) for m in msgs])
        return
    for i, msg in enumerate(msgs):
        if i:
            lines("")
        print_message(msg, charset)


def _warn_failed(failed: dict[str, str]) -> None:
    """One line on stderr per broker that did not answer a query (stdout stays the result)."""
    ctx = click.get_current_context(silent=True)
    name = ctx.info_name if ctx is not None else "mqadmin"
    for broker, reason in failed.items():
        one_line = " ".join(reason.split())
        click.echo(f"mqadmin {name}: warning: broker {broker} did not answer: {one_line}", err=True)


def _unanswered(failed: dict[str, str]) -> str:
    """`` (broker-b did not answer: ...)`` for the brokers in ``failed``, or ""."""
    if not failed:
        return ""
    return " (" + "; ".join(f"{b} did not answer: {r}" for b, r in failed.items()) + ")"


@admin_command("queryMsgById")
@click.option(
    "-i",
    "--msgId",
    "msg_ids",
    required=True,
    help="Offset message id or UNIQ_KEY; several separated by commas.",
)
@click.option("-t", "--topic", help="Topic (needed to look a UNIQ_KEY up).")
@click.option("-g", "--consumerGroup", "group", help="With -d: consume directly in this group.")
@click.option("-d", "--clientId", "client_id", help="With -g: the member that consumes directly.")
@charset_option
def query_msg_by_id(
    namesrv: str | None,
    as_json: bool,
    msg_ids: str,
    topic: str | None,
    group: str | None,
    client_id: str | None,
    charset: str,
) -> None:
    """Query Message by Id (offsetMsgId, or the UNIQ_KEY with -t); -i id1,id2 looks each up.

    With -t, a broker of the topic that does not answer is named on stderr; the command fails
    only when none answers (or nothing is found), and when any id is not found. With -g and
    -d, member -d of group -g runs its handler on each message once (nothing is committed or
    sent back) and the outcome is printed instead of the message.
    """
    if (group is None) != (client_id is None):
        raise click.UsageError("-g and -d go together (consume directly)")
    # as RocketMQ's QueryMsgByIdSubCommand: split at commas, each id trimmed, empty ones skipped
    ids = [i.strip() for i in msg_ids.split(",") if i.strip()]
    if not ids:
        raise click.BadParameter("no message id given", param_hint="-i")

    async def one(admin: AdminClient, msg_id: str) -> MessageQuery:
        failed: dict[str, str] = {}
        if topic:
            query = await admin.query_message(topic, msg_id, unique=True)
            if query.messages:
                return query
            failed = query.failed
        try:
            return MessageQuery([await admin.view_message(msg_id)], failed)
        except ValueError:
            reason = (
                f"no message with this UNIQ_KEY in topic {topic}"
                f"{_unanswered(failed)}, and not an offset message id"
                if topic
                else "not an offset message id; give -t to look a UNIQ_KEY up"
            )
            raise MQClientError(ResponseCode.SYSTEM_ERROR, f"{msg_id}: {reason}") from None

    async def body(admin: AdminClient) -> MessageQuery:
        messages: list[ReceivedMessage] = []
        failed: dict[str, str] = {}
        for msg_id in ids:
            query = await one(admin, msg_id)
            messages.extend(query.messages)
            failed.update(query.failed)
        return MessageQuery(messages, failed)

    if group is not None and client_id is not None:
        _consume_directly(namesrv, as_json, body, group, client_id)
        return
    result = run(namesrv, body)
    _warn_failed(result.failed)
    _show(result.messages, as_json, charset)


def _consume_directly(
    namesrv: str | None,
    as_json: bool,
    find: Callable[[AdminClient], Awaitable[MessageQuery]],
    group: str,
    client_id: str,
) -> None:
    """queryMsgById / queryMsgByUniqueKey -g -d: each message ``find`` gives is consumed
    directly by member ``client_id`` of ``group``."""

    async def body(admin: AdminClient) -> tuple[MessageQuery, list[ConsumeMessageDirectlyResult]]:
        query = await find(admin)
        return query, [await consume_directly(admin, m, group, client_id) for m in query.messages]

    query, results = run(namesrv, body)
    _warn_failed(query.failed)
    if as_json:
        emit_json(
            [direct_result_json(m.msg_id, r) for m, r in zip(query.messages, results, strict=True)]
        )
        return
    for result in results:
        print_direct_result(result)


UNIQ_KEY_QUERY_MAX = 32
"""The most messages ``queryMsgByUniqueKey`` asks each broker for (RocketMQ's)."""


@admin_command("queryMsgByUniqueKey")
@click.option("-i", "--msgId", "msg_id", required=True, help="Message id (UNIQ_KEY).")
@click.option("-t", "--topic", required=True, help="The topic of the message.")
@click.option(
    "-a",
    "--showAll",
    "show_all",
    is_flag=True,
    help=f"Print every message with this id (at most {UNIQ_KEY_QUERY_MAX} per broker), "
    "not only the first stored.",
)
@click.option("-g", "--consumerGroup", "group", help="With -d: consume directly in this group.")
@click.option("-d", "--clientId", "client_id", help="With -g: the member that consumes directly.")
@charset_option
def query_msg_by_unique_key(
    namesrv: str | None,
    as_json: bool,
    msg_id: str,
    topic: str,
    show_all: bool,
    group: str | None,
    client_id: str | None,
    charset: str,
) -> None:
    """Query Message by Unique key: the first stored message whose UNIQ_KEY is -i (every one
    with -a, a resent message say), oldest first.

    A broker of the topic that does not answer is named on stderr; the command fails when
    none answers or no message has the id. With -g and -d, member -d of group -g runs its
    handler on that message (each one with -a) once, as queryMsgById -g -d does, and the
    outcome is printed instead of the message.
    """
    if (group is None) != (client_id is None):
        raise click.UsageError("-g and -d go together (consume directly)")

    def not_found(failed: dict[str, str]) -> str:
        return f"{msg_id}: no message with this UNIQ_KEY in topic {topic}{_unanswered(failed)}"

    async def body(admin: AdminClient) -> MessageQuery:
        query = await admin.query_message(topic, msg_id, max_num=UNIQ_KEY_QUERY_MAX, unique=True)
        msgs = sorted(query.messages, key=lambda m: m.store_timestamp)
        return MessageQuery(msgs if show_all else msgs[:1], query.failed)

    async def found(admin: AdminClient) -> MessageQuery:
        query = await body(admin)
        if not query.messages:
            raise MQClientError(ResponseCode.QUERY_NOT_FOUND, not_found(query.failed))
        return query

    if group is not None and client_id is not None:
        _consume_directly(namesrv, as_json, found, group, client_id)
        return
    result = run(namesrv, body)
    _warn_failed(result.failed)
    if not result.messages:
        fail(not_found(result.failed))
    _show(result.messages, as_json, charset)


@admin_command("queryMsgByKey")
@click.option("-t", "--topic", required=True, help="Topic name.")
@click.option("-k", "--msgKey", "key", required=True, help="Message key.")
@click.option("-b", "--beginTimestamp", "begin", default="0", help="Stored at or after.")
@click.option("-e", "--endTimestamp", "end", default=None, help="Stored at or before.")
@click.option(
    "-m", "--maxNum", "max_num", type=click.IntRange(min=1), default=64, show_default=True
)
def query_msg_by_key(
    namesrv: str | None,
    as_json: bool,
    topic: str,
    key: str,
    begin: str,
    end: str | None,
    max_num: int,
) -> None:
    """Query Message by Key.

    A broker of the topic that does not answer is named on stderr, and the others' messages
    are printed; the command fails only when no broker answers.
    """
    lo = parse_timestamp(begin, "-b")
    hi = parse_timestamp(end, "-e") if end else 2**62

    async def body(admin: AdminClient) -> MessageQuery:
        return await admin.query_message(topic, key, max_num=max_num, begin=lo, end=hi)

    result = run(namesrv, body)
    _warn_failed(result.failed)
    msgs = result.messages
    if as_json:
        emit_json([message_json(m) for m in msgs])
        return
    table(
        ("#Message ID", "#QID", "#Offset"),
        ((m.msg_id, m.queue.queue_id, m.queue_offset) for m in msgs),
    )


@admin_command("queryMsgByOffset")
@click.option("-t", "--topic", required=True, help="Topic name.")
@click.option("-b", "--brokerName", "broker", required=True, help="Broker name.")
@click.option("-i", "--queueId", "queue_id", type=int, required=True, help="Queue id.")
@click.option("-o", "--offset", type=int, required=True, help="Queue offset.")
def query_msg_by_offset(
    namesrv: str | None, as_json: bool, topic: str, broker: str, queue_id: int, offset: int
) -> None:
    """Query Message by offset."""

    async def body(admin: AdminClient) -> ReceivedMessage:
        await admin.topic_route(topic)
        result = await admin.pull(MessageQueue(topic, broker, queue_id), offset, 1)
        for msg in result.messages:
            if msg.queue_offset == offset:
                return msg
        raise MQClientError(
            ResponseCode.QUERY_NOT_FOUND,
            f"no message at offset {offset} of {topic}/{broker}/{queue_id} "
            f"({result.status.name}, queue holds [{result.min_offset}, {result.max_offset}))",
        )

    _show([run(namesrv, body)], as_json)


async def _queue_range(
    admin: AdminClient, mq: MessageQueue, begin: int | None, end: int | None
) -> tuple[int, int]:
    lo = await admin.offset(RequestCode.GET_MIN_OFFSET, mq)
    hi = await admin.offset(RequestCode.GET_MAX_OFFSET, mq)
    if begin is not None:
        lo = max(lo, await admin.offset(RequestCode.SEARCH_OFFSET_BY_TIMESTAMP, mq, begin))
    if end is not None:
        hi = min(hi, await admin.offset(RequestCode.SEARCH_OFFSET_BY_TIMESTAMP, mq, end + 1))
    return lo, hi


async def iter_range(
    admin: AdminClient,
    ranges: list[tuple[MessageQueue, int, int]],
    *,
    group: str = TOOLS_CONSUMER,
    expression: str = "*",
    limit: int | None = None,
) -> AsyncIterator[list[ReceivedMessage]]:
    """Pull each ``(queue, from, to)`` range in turn and yield each pull's messages as they
    arrive (at most ``limit`` in all), with a progress bar on stderr."""
    seen = 0
    total = sum(hi - lo for _, lo, hi in ranges)
    if limit is not None:
        total = min(total, limit)
    with progress("reading messages") as bar:
        task = bar.add_task("reading messages", total=total)
        for mq, lo, hi in ranges:
            offset = lo
            while offset < hi and (limit is None or seen < limit):
                result = await admin.pull(
                    mq, offset, PULL_BATCH, group=group, expression=expression
                )
                batch = [m for m in result.messages if offset <= m.queue_offset < hi]
                if limit is not None:
                    batch = batch[: limit - seen]
                if batch:
                    seen += len(batch)
                    yield batch
                if result.next_begin_offset <= offset:
                    break  # nothing more in this queue
                bar.advance(task, min(result.next_begin_offset, hi) - offset)
                offset = result.next_begin_offset


async def read_range(
    admin: AdminClient,
    ranges: list[tuple[MessageQueue, int, int]],
    *,
    group: str = TOOLS_CONSUMER,
    expression: str = "*",
    limit: int | None = None,
) -> list[ReceivedMessage]:
    """Every message of each ``(queue, from, to)`` range (at most ``limit``), in one list."""
    out: list[ReceivedMessage] = []
    async for batch in iter_range(admin, ranges, group=group, expression=expression, limit=limit):
        out.extend(batch)
    return out


def _rows(msgs: list[ReceivedMessage], print_body: bool, charset: str) -> None:
    table(
        ("#Broker Name", "#QID", "#Offset", "#MsgId", "#Tags", "#Keys", "#StoreTime", "#Body"),
        (
            (
                m.queue.broker_name,
                m.queue.queue_id,
                m.queue_offset,
                m.msg_id,
                m.tags or "",
                " ".join(m.keys),
                fmt_time_ms(m.store_timestamp),
                m.body.decode(charset, "replace") if print_body else "NOT PRINT BODY",
            )
            for m in msgs
        ),
    )


class _PagedRows:
    """Prints messages as tables of up to :data:`PRINT_PAGE` rows, each as soon as it fills,
    so printing a large topic holds one page in memory and shows output as it reads."""

    def __init__(self, print_body: bool, charset: str) -> None:
        self._page: list[ReceivedMessage] = []
        self._print_body = print_body
        self._charset = charset
        self._pages = 0

    def add(self, batch: list[ReceivedMessage]) -> None:
        self._page.extend(batch)
        while len(self._page) >= PRINT_PAGE:
            self._emit(self._page[:PRINT_PAGE])
            del self._page[:PRINT_PAGE]

    def close(self) -> None:
        if self._page or not self._pages:  # an empty topic still prints its header
            self._emit(self._page)
        self._page = []

    def _emit(self, rows: list[ReceivedMessage]) -> None:
        if self._pages:
            lines("")
        _rows(rows, self._print_body, self._charset)
        self._pages += 1


@admin_command("printMsg")
@click.option("-t", "--topic", required=True, help="Topic name.")
@charset_option
@click.option("-s", "--subExpression", "expression", default="*", show_default=True)
@click.option("-b", "--beginTimestamp", "begin", default=None, help="Stored at or after.")
@click.option("-e", "--endTimestamp", "end", default=None, help="Stored at or before.")
@click.option("-d", "--printBody", "print_body", type=click.BOOL, default=True, show_default=True)
def print_msg(
    namesrv: str | None,
    as_json: bool,
    topic: str,
    charset: str,
    expression: str,
    begin: str | None,
    end: str | None,
    print_body: bool,
) -> None:
    """Print every message of a topic (optionally in a store-time range), as it is read: tables
    of up to 1,000 rows, or with --json one JSON array written item by item."""
    lo = parse_timestamp(begin, "-b") if begin else None
    hi = parse_timestamp(end, "-e") if end else None

    async def body(admin: AdminClient) -> None:
        route = await admin.topic_route(topic)
        ranges = []
        for mq in api.subscribe_queues(topic, route):
            a, b = await _queue_range(admin, mq, lo, hi)
            ranges.append((mq, a, b))
        if as_json:
            with JsonArrayWriter() as out:
                async for batch in iter_range(admin, ranges, expression=expression):
                    out.extend(message_json(m, charset) for m in batch)
            return
        pages = _PagedRows(print_body, charset)
        async for batch in iter_range(admin, ranges, expression=expression):
            pages.add(batch)
        pages.close()

    run(namesrv, body)


def _tag_counts(counts: Counter[str]) -> list[tuple[str, int]]:
    """``(tag, count)`` by count, most first (then by tag)."""
    return sorted(counts.items(), key=lambda item: (-item[1], item[0]))


async def _queue_of_route(
    admin: AdminClient, topic: str, broker: str, queue_id: int
) -> MessageQueue:
    """The readable queue ``queue_id`` of ``broker`` in ``topic``'s route; MQClientError naming
    the broker's readable queues when the route has no such queue."""
    mq = MessageQueue(topic, broker, queue_id)
    queues = api.subscribe_queues(topic, await admin.topic_route(topic))
    if mq in queues:
        return mq
    held = [q.queue_id for q in queues if q.broker_name == broker]
    where = (
        f"broker {broker} has readable queues 0 to {max(held)}"
        if held
        else f"no broker named {broker} has readable queues of it "
        f"(brokers: {', '.join(sorted({q.broker_name for q in queues})) or 'none'})"
    )
    raise MQClientError(
        ResponseCode.SYSTEM_ERROR, f"queue {queue_id} of {broker} is not in topic {topic}: {where}"
    )


@admin_command("printMsgByQueue")
@click.option("-t", "--topic", required=True, help="Topic name.")
@click.option("-a", "--brokerName", "broker", required=True, help="Broker name.")
@click.option("-i", "--queueId", "queue_id", type=int, required=True, help="Queue id.")
@charset_option
@click.option("-s", "--subExpression", "expression", default="*", show_default=True)
@click.option("-b", "--beginTimestamp", "begin", default=None, help="Stored at or after.")
@click.option("-e", "--endTimestamp", "end", default=None, help="Stored at or before.")
@click.option("-p", "--printMsg", "print_msg", type=click.BOOL, default=False, show_default=True)
@click.option("-d", "--printBody", "print_body", type=click.BOOL, default=False, show_default=True)
@click.option(
    "-f",
    "--calculate",
    "by_tag",
    type=click.BOOL,
    default=False,
    show_default=True,
    help="Count the messages by tag.",
)
def print_msg_by_queue(
    namesrv: str | None,
    as_json: bool,
    topic: str,
    broker: str,
    queue_id: int,
    charset: str,
    expression: str,
    begin: str | None,
    end: str | None,
    print_msg: bool,
    print_body: bool,
    by_tag: bool,
) -> None:
    """Print Message Detail by queueId: with -p true the messages of one queue (printMsg's
    table; bodies with -d true), with -f true how many carry each tag (most first). As
    RocketMQ's, neither is on by default."""
    lo = parse_timestamp(begin, "-b") if begin else None
    hi = parse_timestamp(end, "-e") if end else None
    counts: Counter[str] = Counter()
    found: list[dict[str, Any]] = []
    pages = _PagedRows(print_body, charset)

    async def body(admin: AdminClient) -> None:
        mq = await _queue_of_route(admin, topic, broker, queue_id)
        a, b = await _queue_range(admin, mq, lo, hi)
        async for batch in iter_range(admin, [(mq, a, b)], expression=expression):
            counts.update(m.tags for m in batch if m.tags and m.tags.strip())
            if print_msg and as_json:
                found.extend(_message_json(m, charset, print_body) for m in batch)
            elif print_msg:
                pages.add(batch)

    run(namesrv, body)
    if not (print_msg or by_tag or as_json):
        warn("nothing to print: give -p true to print the messages, -f true to count the tags")
    tags = _tag_counts(counts) if by_tag else []
    if as_json:
        out: dict[str, Any] = {"topic": topic, "brokerName": broker, "queueId": queue_id}
        if print_msg:
            out["messages"] = found
        if by_tag:
            out["tagCounts"] = [{"tag": t, "count": n} for t, n in tags]
        emit_json(out)
        return
    if print_msg:
        pages.close()
    lines(*(f"Tag: {t:<30} Count: {n}" for t, n in tags))


def _message_json(msg: ReceivedMessage, charset: str, with_body: bool) -> dict[str, Any]:
    """:func:`message_json`, without ``body`` unless ``with_body``."""
    out = message_json(msg, charset)
    if not with_body:
        del out["body"]
    return out


@admin_command("sendMessage")
@click.option("-t", "--topic", required=True, help="Topic name.")
@click.option("-p", "--body", "text", required=True, help="Message body (UTF-8).")
@click.option("-k", "--key", default=None, help="Message keys.")
@click.option("-c", "--tags", default=None, help="Message tag.")
@click.option("-b", "--broker", default=None, help="Send to this broker (with -i).")
@click.option(
    "-i", "--qid", "queue_id", type=int, default=None, help="Send to this queue (with -b)."
)
def send_message(
    namesrv: str | None,
    as_json: bool,
    topic: str,
    text: str,
    key: str | None,
    tags: str | None,
    broker: str | None,
    queue_id: int | None,
) -> None:
    """Send a message."""
    if (broker is None) != (queue_id is None):
        fail("give both -b broker and -i queueId, or neither")

    async def body(admin: AdminClient) -> dict[str, Any]:
        msg = Message(topic, text.encode(), tags=tags, keys=key)
        queue = MessageQueue(topic, broker, queue_id) if broker and queue_id is not None else None
        async with Producer(TOOLS_PRODUCER, instance=admin.instance) as producer:
            result = await producer.send(msg, queue=queue)
        return {
            "brokerName": result.queue.broker_name,
            "queueId": result.queue.queue_id,
            "sendStatus": result.status.name,
            "msgId": result.msg_id,
            "offsetMsgId": result.offset_msg_id,
            "queueOffset": result.queue_offset,
        }

    r = run(namesrv, body)
    if as_json:
        emit_json(r)
        return
    table(
        ("#Broker Name", "#QID", "#Send Result", "#MsgId"),
        [(r["brokerName"], r["queueId"], r["sendStatus"], r["msgId"])],
    )


@admin_command("consumeMessage")
@click.option("-t", "--topic", required=True, help="Topic name.")
@click.option("-b", "--brokerName", "broker", default=None, help="Only this broker (with -i).")
@click.option("-i", "--queueId", "queue_id", type=int, default=None, help="Only this queue.")
@click.option("-o", "--offset", type=int, default=None, help="Start offset (with -b -i).")
@click.option("-g", "--consumerGroup", "group", default=TOOLS_CONSUMER, show_default=True)
@click.option("-s", "--beginTimestamp", "begin", default=None, help="Stored at or after.")
@click.option("-e", "--endTimestamp", "end", default=None, help="Stored at or before.")
@click.option(
    "-c", "--MessageNumber", "count", type=click.IntRange(min=1), default=128, show_default=True
)
def consume_message(
    namesrv: str | None,
    as_json: bool,
    topic: str,
    broker: str | None,
    queue_id: int | None,
    offset: int | None,
    group: str,
    begin: str | None,
    end: str | None,
    count: int,
) -> None:
    """Consume up to -c messages (pulls; no offset is committed)."""
    if (broker is None) != (queue_id is None):
        fail("give both -b brokerName and -i queueId, or neither")
    if offset is not None and broker is None:  # as RocketMQ's consumeMessage
        fail("-o offset needs -b brokerName and -i queueId (one queue)")
    lo = parse_timestamp(begin, "-s") if begin else None
    hi = parse_timestamp(end, "-e") if end else None

    async def body(admin: AdminClient) -> list[ReceivedMessage]:
        route = await admin.topic_route(topic)
        if broker is not None and queue_id is not None:
            queues = [MessageQueue(topic, broker, queue_id)]
        else:
            queues = api.subscribe_queues(topic, route)
        ranges = []
        for mq in queues:
            a, b = await _queue_range(admin, mq, lo, hi)
            if offset is not None:
                a = offset
            ranges.append((mq, a, b))
        return await read_range(admin, ranges, group=group, limit=count)

    msgs = run(namesrv, body)
    if as_json:
        emit_json([message_json(m) for m in msgs])
    else:
        _rows(msgs, True, "utf-8")
        lines("", f"Consumed {len(msgs)} message(s).")
