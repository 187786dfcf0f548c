"""``mqadmin`` statistics commands: statsAll and brokerConsumeStats (RocketMQ's
``StatsAllSubCommand`` and ``BrokerConsumeStatsSubCommad``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import click

from client.admin.admin_client import AdminClient
from client.admin.base import admin_command, emit_json, fmt_time, lines, run, table, warn
from client.admin.cmd_topic import topic_groups
from client.errors import MQBrokerError, MQClientError
from common.topic import DLQ_GROUP_TOPIC_PREFIX, RETRY_GROUP_TOPIC_PREFIX
from remoting.admin_bodies import BrokerStatsData, ConsumeStatsList, QueueConsumeStats
from remoting.codes import ResponseCode

TOPIC_PUT_NUMS = "TOPIC_PUT_NUMS"
GROUP_GET_NUMS = "GROUP_GET_NUMS"
"""The stats names statsAll asks for (those of :mod:`broker.broker_stats`)."""
STATS_ALL_HEADERS = (
    "#Topic",
    "#Consumer Group",
    "#Accumulation",
    "#InTPS",
    "#OutTPS",
    "#InMsg24Hour",
    "#OutMsg24Hour",
)
BROKER_CONSUME_STATS_HEADERS = (
    "#Topic",
    "#Group",
    "#Broker Name",
    "#QID",
    "#Broker Offset",
    "#Consumer Offset",
    "#Diff",
    "#LastTime",
)
NO_CONSUMER = "NO_CONSUMER"


def sum_24_hours(data: BrokerStatsData) -> int:
    """Messages of the last day: the day's sum, else the hour's, else the minute's
    (RocketMQ's ``compute24HourSum``)."""
    for item in (data.stats_day, data.stats_hour, data.stats_minute):
        if item.sum:
            return item.sum
    return 0


@dataclass
class Flow:
    """A stats item added up over the brokers: its minute rate and its 24-hour sum."""

    tps: float = 0.0
    day_sum: int = 0


async def _flow(admin: AdminClient, brokers: list[tuple[str, str]], name: str, key: str) -> Flow:
    """``name`` / ``key`` summed over ``brokers``; a broker that has counted nothing under it
    (SYSTEM_ERROR "not exist") adds nothing."""
    flow = Flow()
    for _, addr in brokers:
        try:
            data = await admin.broker_stats_data(addr, name, key)
        except MQBrokerError as exc:
            if exc.code != ResponseCode.SYSTEM_ERROR:
                raise
            continue
        flow.tps += data.stats_minute.tps
        flow.day_sum += sum_24_hours(data)
    return flow


async def _accumulation(
    admin: AdminClient, brokers: list[tuple[str, str]], group: str, topic: str
) -> int:
    """Messages of ``topic`` the group has not consumed yet, over ``brokers`` (0 at least)."""
    diff = 0
    for _, addr in brokers:
        diff += sum(r.diff for r in (await admin.consume_stats(addr, group, topic)).rows)
    return max(diff, 0)


async def _topic_rows(
    admin: AdminClient, topic: str, groups: set[str], active_only: bool
) -> list[dict[str, Any]]:
    """statsAll's rows of one topic: one per consumer group, or one NO_CONSUMER row."""
    brokers = await admin.topic_masters(topic)
    put = await _flow(admin, brokers, TOPIC_PUT_NUMS, topic)
    if not groups:
        if active_only and put.day_sum == 0:
            return []
        return [_row(topic, None, 0, put, None)]
    rows = []
    for group in sorted(groups):
        got = await _flow(admin, brokers, GROUP_GET_NUMS, f"{topic}@{group}")
        if active_only and put.day_sum == 0 and got.day_sum == 0:
            continue
        rows.append(_row(topic, group, await _accumulation(admin, brokers, group, topic), put, got))
    return rows


def _row(topic: str, group: str | None, accumulation: int, put: Flow, got: Flow | None) -> Any:
    return {
        "topic": topic,
        "consumerGroup": group,
        "accumulation": accumulation,
        "inTps": put.tps,
        "outTps": None if got is None else got.tps,
        "inMsg24Hour": put.day_sum,
        "outMsg24Hour": None if got is None else got.day_sum,
    }


async def stats_all(admin: AdminClient, topic: str, active_only: bool) -> list[dict[str, Any]]:
    """statsAll's rows of every topic (not %RETRY%/%DLQ%), or of ``topic`` only. A topic
    whose brokers cannot be asked is named on stderr and left out (RocketMQ skips it
    silently)."""
    topics = sorted(await admin.topic_list())
    chosen = [
        t
        for t in topics
        if not t.startswith((RETRY_GROUP_TOPIC_PREFIX, DLQ_GROUP_TOPIC_PREFIX))
        and (not topic or t == topic)
    ]
    by_topic = await topic_groups(admin) if chosen else {}
    rows: list[dict[str, Any]] = []
    for t in chosen:
        try:
            rows.extend(await _topic_rows(admin, t, by_topic.get(t, set()), active_only))
        except MQClientError as exc:
            warn(f"topic {t} left out: {exc}")
    return rows


def _stats_all_cells(row: dict[str, Any]) -> tuple[Any, ...]:
    no_consumer = row["consumerGroup"] is None
    return (
        row["topic"],
        "" if no_consumer else row["consumerGroup"],
        row["accumulation"],
        f"{row['inTps']:.2f}",
        "" if no_consumer else f"{row['outTps']:.2f}",
        row["inMsg24Hour"],
        NO_CONSUMER if no_consumer else row["outMsg24Hour"],
    )


@admin_command("statsAll")
@click.option("-a", "--activeTopic", "active_only", is_flag=True, help="Print active topic only.")
@click.option("-t", "--topic", "topic", default="", help="Print select topic only.")
def stats_all_command(namesrv: str | None, as_json: bool, active_only: bool, topic: str) -> None:
    """Topic and Consumer tps stats: per topic and consumer group, the messages not consumed
    yet, the rates in and out over the last minute and the messages in and out over the last
    day (a topic nobody consumes: NO_CONSUMER)."""
    rows = run(namesrv, lambda admin: stats_all(admin, topic, active_only))
    if as_json:
        emit_json(rows)
        return
    table(STATS_ALL_HEADERS, (_stats_all_cells(r) for r in rows))


# ---------------------------------------------------------------------- brokerConsumeStats


def consume_rows(stats: ConsumeStatsList, diff_level: int) -> list[tuple[str, QueueConsumeStats]]:
    """``(group, row)`` of every queue whose diff is at least ``diff_level``, group by group
    in the broker's order, each group's queues by topic, broker and queue id."""
    out: list[tuple[str, QueueConsumeStats]] = []
    for group, per_topic in stats.groups:
        rows = sorted(
            (row for s in per_topic for row in s.rows),
            key=lambda r: (r.topic, r.broker_name, r.queue_id),
        )
        out.extend((group, row) for row in rows if row.diff >= diff_level)
    return out


def _consume_row_json(group: str, row: QueueConsumeStats) -> dict[str, Any]:
    return {
        "topic": row.topic,
        "group": group,
        "brokerName": row.broker_name,
        "queueId": row.queue_id,
        "brokerOffset": row.broker_offset,
        "consumerOffset": row.consumer_offset,
        "diff": row.diff,
        "lastTimestamp": row.last_timestamp,
    }


@admin_command("brokerConsumeStats")
@click.option("-b", "--brokerAddr", "broker", required=True, help="Broker address (host:port).")
@click.option(
    "-t",
    "--timeoutMillis",
    "timeout_ms",
    type=click.IntRange(min=1),
    default=50_000,
    show_default=True,
    help="Request timeout in milliseconds.",
)
@click.option(
    "-l",
    "--level",
    "diff_level",
    type=int,
    default=0,
    show_default=True,
    help="Threshold of print diff: only queues at least this far behind.",
)
@click.option(
    "-o",
    "--order",
    "is_order",
    type=click.BOOL,
    default=False,
    show_default=True,
    help="Only order topics.",
)
def broker_consume_stats(
    namesrv: str | None,
    as_json: bool,
    broker: str,
    timeout_ms: int,
    diff_level: int,
    is_order: bool,
) -> None:
    """Fetch broker consume stats data: every subscription group's queues on one broker.

    As RocketMQ's, the table shows only queues the group has consumed from (a last time);
    --json gives every queue that passes -l. Diff Total counts every queue.
    """

    async def body(admin: AdminClient) -> ConsumeStatsList:
        return await admin.broker_consume_stats(broker, is_order=is_order, timeout_ms=timeout_ms)

    stats = run(namesrv, body)
    rows = consume_rows(stats, diff_level)
    if as_json:
        emit_json(
            {
                "brokerAddr": stats.broker_addr,
                "totalDiff": stats.total_diff,
                "totalInflightDiff": stats.total_inflight_diff,
                "queues": [_consume_row_json(group, row) for group, row in rows],
            }
        )
        return
    cells = (
        (
            r.topic,
            group,
            r.broker_name,
            r.queue_id,
            r.broker_offset,
            r.consumer_offset,
            r.diff,
            fmt_time(r.last_timestamp),
        )
        for group, r in rows
        if r.last_timestamp > 0
    )
    table(BROKER_CONSUME_STATS_HEADERS, cells)
    lines("", f"Diff Total: {stats.total_diff}")
