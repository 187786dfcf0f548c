"""``mqadmin`` transaction commands: queryHalfMessages (minimq's own; RocketMQ has none).

``queryHalfMessages -g <producerGroup>`` asks every master broker (or ``-b`` one, or ``-c`` a
cluster's) with GET_PENDING_HALF_MESSAGES (:mod:`remoting.transaction_bodies`) and lists the
undecided half messages of the group: the real topic and queue, the transaction id (UNIQ_KEY),
how many times the broker already asked the group, and when the message was born.
"""

from __future__ import annotations

from typing import Any

import click

from client.admin.admin_client import AdminClient
from client.admin.base import (
    EachBroker,
    admin_command,
    emit_json,
    fail_if_any_failed,
    fmt_time,
    not_empty,
    table,
    try_each_broker,
)
from client.admin.base import run as run_admin
from remoting.codes import RequestCode
from remoting.transaction_bodies import decode_half_messages


@admin_command("queryHalfMessages")
@click.option(
    "-g", "--producerGroup", "group", required=True, callback=not_empty, help="Producer group name."
)
@click.option("-b", "--brokerAddr", "broker", help="Only this broker.")
@click.option("-c", "--clusterName", "cluster", help="Only the brokers of this cluster.")
def query_half_messages(
    namesrv: str | None, as_json: bool, group: str, broker: str | None, cluster: str | None
) -> None:
    """List the pending (undecided) half messages of a producer group.

    A broker that does not answer does not hide the others: their half messages are printed,
    then the failed broker is named on stderr (status 1).
    """

    async def body(admin: AdminClient) -> EachBroker[list[dict[str, Any]]]:
        targets = await admin.masters(cluster=cluster, broker_addr=broker)
        names = {addr: name for name, addr in targets}

        async def halves(addr: str) -> list[dict[str, Any]]:
            resp = await admin.call(
                addr, RequestCode.GET_PENDING_HALF_MESSAGES, {"producerGroup": group}
            )
            return [
                {"brokerName": names[addr], "brokerAddr": addr, **half.to_wire()}
                for half in decode_half_messages(resp.body)
            ]

        return await try_each_broker(targets, halves)

    result = run_admin(namesrv, body)
    rows = [row for _, rows_of_broker in result.done for row in rows_of_broker]
    if as_json:
        emit_json({"producerGroup": group, "halfMessages": rows})
    else:
        _print_halves(group, rows)
    fail_if_any_failed(result)


def _print_halves(group: str, rows: list[dict[str, Any]]) -> None:
    """The ``queryHalfMessages`` table."""
    table(
        (
            "#Broker Name",
            "#Topic",
            "#QID",
            "#Transaction Id",
            "#Check Times",
            "#Born Time",
            "#Half Offset",
        ),
        (
            (
                r["brokerName"],
                r["topic"],
                r["queueId"],
                r["msgId"],
                r["checkTimes"],
                fmt_time(r["bornTimestamp"]),
                r["tranStateTableOffset"],
            )
            for r in rows
        ),
        title=f"{len(rows)} pending half message(s) of {group}",
    )
