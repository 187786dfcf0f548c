"""``mqadmin`` consume queue commands: queryCq."""

from __future__ import annotations

import json
from typing import Any

import click

from client.admin.admin_client import AdminClient
from client.admin.base import admin_command, emit_json, lines, run, table

RULE = "=" * 38
"""The separator line RocketMQ's ``queryCq`` prints between its parts."""


@admin_command("queryCq")
@click.option("-t", "--topic", required=True, help="Topic name.")
@click.option("-q", "--queue", "queue_id", type=int, required=True, help="Queue id, e.g. 1.")
@click.option("-i", "--index", type=int, required=True, help="Start queue index (offset).")
@click.option(
    "-c",
    "--count",
    type=click.IntRange(min=0),
    default=10,
    show_default=True,
    help="How many units (the broker lists at most 1000).",
)
@click.option(
    "-b", "--broker", "broker", help="Broker address (default: the topic's first master)."
)
@click.option(
    "-g", "--consumer", "group", help="Consumer group: its subscription, and what it takes."
)
def query_cq(
    namesrv: str | None,
    as_json: bool,
    topic: str,
    queue_id: int,
    index: int,
    count: int,
    broker: str | None,
    group: str | None,
) -> None:
    """Query cq command: the raw units of a consume queue from -i on (commitlog offset, size,
    tag hash code)."""

    async def body(admin: AdminClient) -> dict[str, Any]:
        addr = broker or (await admin.topic_masters(topic))[0][1]
        answer = await admin.query_consume_queue(addr, topic, queue_id, index, count, group)
        return {"brokerAddr": addr, **answer.to_wire()}

    result = run(namesrv, body)
    if as_json:
        emit_json(result)
        return
    _print_cq(result, index)


def _print_cq(result: dict[str, Any], index: int) -> None:
    """RocketMQ's ``queryCq`` text: the group's subscription and filter data when asked for,
    the queue's index range, then one row per unit."""
    if result["subscriptionData"] is not None:
        lines("Subscription data:", json.dumps(result["subscriptionData"], indent=2), RULE)
    if result["filterData"] is not None:
        lines("Filter data:", result["filterData"], RULE)
    lines(
        "Queue data:",
        f"max: {result['maxQueueIndex']}, min: {result['minQueueIndex']}",
        RULE,
    )
    table(
        ("#Idx", "#PhysicOffset", "#PhysicSize", "#TagsCode", "#Eval"),
        (
            (
                index + i,
                unit["physicOffset"],
                unit["physicSize"],
                unit["tagsCode"],
                str(unit["eval"]).lower(),
            )
            for i, unit in enumerate(result["queueData"])
        ),
    )
