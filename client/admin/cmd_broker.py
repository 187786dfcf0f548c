"""``mqadmin`` cluster and broker commands: clusterList, brokerStatus, getBrokerConfig,
updateBrokerConfig."""

from __future__ import annotations

import time
from typing import Any

import click

from client.admin.admin_client import AdminClient
from client.admin.base import (
    EachBroker,
    admin_command,
    emit_json,
    fail,
    fail_if_any_failed,
    lines,
    on_each_broker,
    run,
    show_configs,
    table,
    try_each_broker,
)
from client.errors import MQClientError
from common.route import MASTER_ID

CLUSTER_HEADERS = (
    "#Cluster Name",
    "#Broker Name",
    "#BID",
    "#Addr",
    "#Version",
    "#InTPS(LOAD)",
    "#OutTPS(LOAD)",
    "#Hour",
    "#SPACE",
    "#ACTIVATED",
)


def _hours_since(earliest_ms: str) -> str:
    try:
        ms = int(earliest_ms)
    except ValueError:
        return "N/A"
    if ms <= 0:
        return "0.00"
    return f"{(time.time() * 1000 - ms) / 3_600_000:.2f}"


@admin_command("clusterList")
@click.option("-c", "--clusterName", "cluster", help="Only this cluster.")
def cluster_list(namesrv: str | None, as_json: bool, cluster: str | None) -> None:
    """List cluster infos: every broker with its version, TPS and disk use (a broker that does
    not answer is listed as unreachable; ``--json`` gives its ``error``)."""

    async def body(admin: AdminClient) -> list[dict[str, Any]]:
        info = await admin.cluster_info()
        rows = []
        for cname, names in sorted(info.cluster_addr_table.items()):
            if cluster is not None and cname != cluster:
                continue
            for bname in sorted(names):
                data = info.broker_addr_table.get(bname)
                if data is None:
                    continue
                for bid, addr in sorted(data.broker_addrs.items()):
                    row: dict[str, Any] = {
                        "clusterName": cname,
                        "brokerName": bname,
                        "brokerId": bid,
                        "addr": addr,
                        "runtime": {},
                    }
                    try:  # one broker that does not answer does not hide the others
                        row["runtime"] = await admin.runtime_info(addr)
                    except MQClientError as exc:
                        row["error"] = str(exc)
                    rows.append(row)
        return rows

    rows = run(namesrv, body)
    if as_json:
        emit_json(rows)
        return
    table(CLUSTER_HEADERS, (_cluster_row(r) for r in rows))


def _cluster_row(r: dict[str, Any]) -> tuple[Any, ...]:
    """One ``clusterList`` row; a broker that did not answer shows ``-`` for every figure it
    would have given (nothing is known, not an idle, empty, healthy broker)."""
    where = (r["clusterName"], r["brokerName"], r["brokerId"], r["addr"])
    if "error" in r:
        return (*where, "(unreachable)", "-", "-", "-", "-", "-")
    runtime = r["runtime"]
    return (
        *where,
        runtime.get("brokerVersionDesc", ""),
        _tps(runtime.get("putTps", "")),
        _tps(runtime.get("getTransferedTps", "")),
        _hours_since(runtime.get("earliestMessageTimeStamp", "0")),
        f"{float(runtime.get('commitLogDiskRatio', '0')):.4f}",
        "true" if r["brokerId"] == MASTER_ID else "false",
    )


def _tps(figure: str) -> str:
    """``#InTPS`` / ``#OutTPS``: the 10 s rate of a ``"10s 60s 600s"`` figure, as RocketMQ's
    ``clusterList`` shows it (``12.50(0.0w)``); 0 when the broker gave none."""
    try:
        rate = float(figure.split()[0])
    except (IndexError, ValueError):
        rate = 0.0
    return f"{rate:.2f}({rate / 10_000:.1f}w)"


def need_target(broker: str | None, cluster: str | None) -> None:
    """Fail unless ``-b`` or ``-c`` was given."""
    if broker is None and cluster is None:
        fail("give -b brokerAddr or -c clusterName")


async def _targets(
    admin: AdminClient, broker: str | None, cluster: str | None
) -> list[tuple[str, str]]:
    return await admin.masters(cluster=cluster, broker_addr=broker)


@admin_command("brokerStatus")
@click.option("-b", "--brokerAddr", "broker", help="Broker address (host:port).")
@click.option("-c", "--clusterName", "cluster", help="Every broker of this cluster.")
def broker_status(
    namesrv: str | None, as_json: bool, broker: str | None, cluster: str | None
) -> None:
    """Fetch broker runtime status data.

    With -c, a broker that does not answer does not hide the others: their data is printed,
    then the failed broker is named on stderr (status 1).
    """
    need_target(broker, cluster)

    async def body(admin: AdminClient) -> EachBroker[dict[str, str]]:
        return await try_each_broker(await _targets(admin, broker, cluster), admin.runtime_info)

    result = run(namesrv, body)
    if as_json:
        emit_json(dict(result.done))
    else:
        for addr, stats in result.done:
            prefix = f"{addr:<24}" if broker is None else ""  # -c, as RocketMQ's
            lines(*(f"{prefix}{k:<32}: {v}" for k, v in sorted(stats.items())))
    fail_if_any_failed(result)


@admin_command("getBrokerConfig")
@click.option("-b", "--brokerAddr", "broker", help="Broker address (host:port).")
@click.option("-c", "--clusterName", "cluster", help="Every broker of this cluster.")
def get_broker_config(
    namesrv: str | None, as_json: bool, broker: str | None, cluster: str | None
) -> None:
    """Show the effective broker configuration.

    With -c, a broker that does not answer does not hide the others: their configuration is
    printed, then the failed broker is named on stderr (status 1).
    """
    need_target(broker, cluster)

    async def body(admin: AdminClient) -> EachBroker[dict[str, str]]:
        return await try_each_broker(await _targets(admin, broker, cluster), admin.broker_config)

    show_configs(run(namesrv, body), as_json)


RUNTIME_BROKER_KEYS = (
    "autoCreateTopicEnable",
    "defaultTopicQueueNums",
    "autoCreateSubscriptionGroup",
    "flushConsumerOffsetInterval",
    "registerNameServerPeriod",
    "channelExpiredTimeout",
    "brokerPermission",
)
"""The keys the broker changes at runtime (its ``LIVE_KEYS``), for ``updateBrokerConfig -h``."""


@admin_command("updateBrokerConfig")
@click.option("-b", "--brokerAddr", "broker", help="Broker address (host:port).")
@click.option("-c", "--clusterName", "cluster", help="Every broker of this cluster.")
@click.option(
    "-k",
    "--key",
    required=True,
    help="Config key, one of the runtime keys: " + ", ".join(RUNTIME_BROKER_KEYS) + ".",
)
@click.option("-v", "--value", required=True, help="New value.")
def update_broker_config(
    namesrv: str | None,
    as_json: bool,
    broker: str | None,
    cluster: str | None,
    key: str,
    value: str,
) -> None:
    """Update a broker config key at runtime (brokerPermission, autoCreateTopicEnable,
    defaultTopicQueueNums, autoCreateSubscriptionGroup, flushConsumerOffsetInterval,
    registerNameServerPeriod, channelExpiredTimeout); not written to broker.conf."""
    need_target(broker, cluster)

    async def body(admin: AdminClient) -> list[str]:
        targets = await _targets(admin, broker, cluster)
        done = await on_each_broker(
            targets, lambda addr: admin.update_broker_config(addr, {key: value})
        )
        return [addr for addr, _ in done]

    done = run(namesrv, body)
    if as_json:
        emit_json({"key": key, "value": value, "brokers": done})
        return
    lines(*(f"update broker config success, {addr}" for addr in done))
