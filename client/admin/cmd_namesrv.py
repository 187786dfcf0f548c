"""``mqadmin`` name-server commands: wipeWritePerm, addWritePerm (RocketMQ's
``WipeWritePermSubCommand`` / ``AddWritePermSubCommand``).

Each asks every name server of ``-n`` / ``NAMESRV_ADDR`` in turn and prints one line per name
server that answered, with the number of topics it changed, as RocketMQ's::

    wipe write perm of broker[broker-a] in name server[127.0.0.1:9876] OK, 12

A name server that fails does not stop the others; then one line on stderr names it and the
command exits 1. ``-b`` is a broker name (``clusterList``'s ``#Broker Name``); a name no name
server routes a topic of is answered 0 by each, as in RocketMQ, and a warning on stderr says
so (the command still succeeds).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import click

from client.admin.admin_client import AdminClient
from client.admin.base import (
    EachBroker,
    admin_command,
    emit_json,
    fail_if_any_failed,
    lines,
    run,
    try_each_broker,
    warn,
)

PermCall = Callable[[AdminClient, str, str], Awaitable[int]]
"""``(admin, name server address, broker name) -> topic count``."""


@dataclass(frozen=True)
class WritePermOperation:
    """One of the two commands: its verb in RocketMQ's lines, the request behind it and the
    count's name in ``--json`` (RocketMQ's response header field)."""

    verb: str
    call: PermCall
    count_field: str


WIPE = WritePermOperation("wipe", AdminClient.wipe_write_perm_of_broker, "wipeTopicCount")
ADD = WritePermOperation("add", AdminClient.add_write_perm_of_broker, "addTopicCount")


def run_write_perm(
    operation: WritePermOperation, namesrv: str | None, as_json: bool, broker_name: str
) -> None:
    """Run ``operation`` for ``broker_name`` on every name server and print the outcome."""

    async def body(admin: AdminClient) -> EachBroker[int]:
        targets = [(addr, addr) for addr in admin.namesrv_addrs]
        return await try_each_broker(targets, lambda addr: operation.call(admin, addr, broker_name))

    result = run(namesrv, body)
    if as_json:
        emit_json([_json_row(operation, broker_name, addr, n) for addr, n in result.done])
    else:
        lines(
            *(
                f"{operation.verb} write perm of broker[{broker_name}] in name server[{addr}] "
                f"OK, {count}"
                for addr, count in result.done
            )
        )
    if result.done and not any(count for _, count in result.done):
        warn(
            f"no name server routes a topic of broker {broker_name}: -b takes a broker name "
            "(clusterList's #Broker Name), not an address"
        )
    fail_if_any_failed(result)


def _json_row(
    operation: WritePermOperation, broker_name: str, namesrv_addr: str, count: int
) -> dict[str, Any]:
    """One name server's answer in ``--json``."""
    return {"brokerName": broker_name, "namesrvAddr": namesrv_addr, operation.count_field: count}


@admin_command("wipeWritePerm")
@click.option("-b", "--brokerName", "broker_name", required=True, help="Broker name.")
def wipe_write_perm(namesrv: str | None, as_json: bool, broker_name: str) -> None:
    """Wipe write perm of broker in all name server you defined in the -n param.

    Producers stop choosing the broker's queues at their next route refresh; consumers still
    read them. It lasts until the broker's topic table changes or it registers afresh
    (restart, lost connection); addWritePerm gives it back.
    """
    run_write_perm(WIPE, namesrv, as_json, broker_name)


@admin_command("addWritePerm")
@click.option("-b", "--brokerName", "broker_name", required=True, help="Broker name.")
def add_write_perm(namesrv: str | None, as_json: bool, broker_name: str) -> None:
    """Add write perm of broker in all name server you defined in the -n param.

    Every topic of the broker gets perm 6 (read and write) in the routes, as RocketMQ's,
    whatever its perm was.
    """
    run_write_perm(ADD, namesrv, as_json, broker_name)
