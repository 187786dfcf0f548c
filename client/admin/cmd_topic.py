"""``mqadmin`` topic commands: topicList, updateTopic, deleteTopic, topicRoute, topicStatus."""

from __future__ import annotations

from typing import Any

import click

from client.admin.admin_client import AdminClient
from client.admin.base import (
    EachBroker,
    admin_command,
    emit_json,
    fail,
    fail_if_any_failed,
    fmt_time,
    java_object,
    lines,
    on_each_broker,
    run,
    table,
    try_each_broker,
)
from client.errors import MQBrokerError, MQClientError
from common.route import TopicConfig
from common.topic import DLQ_GROUP_TOPIC_PREFIX, RETRY_GROUP_TOPIC_PREFIX
from remoting.codes import ResponseCode


async def topic_groups(admin: AdminClient) -> dict[str, set[str]]:
    """Topic -> the consumer groups that consume it, as RocketMQ's ``queryTopicConsumeByWho``:
    the groups with committed offsets on it (every broker's offset table: cloned groups and
    Spark's commits too), and the groups of ``%RETRY%`` topics whose stats list it (online
    members subscribing to it)."""
    out: dict[str, set[str]] = {}
    brokers = await admin.masters()
    for _, addr in brokers:
        try:
            offsets = await admin.consumer_offsets(addr)
        except MQBrokerError as exc:
            if exc.code != ResponseCode.REQUEST_CODE_NOT_SUPPORTED:
                raise
            continue  # a broker older than this mqadmin: its groups come from the stats below
        for topic, groups in offsets.items():
            out.setdefault(topic, set()).update(groups)
    topics = await admin.topic_list()
    retry_groups = [
        t[len(RETRY_GROUP_TOPIC_PREFIX) :] for t in topics if t.startswith(RETRY_GROUP_TOPIC_PREFIX)
    ]
    for group in retry_groups:
        for _, addr in brokers:
            stats = await admin.consume_stats(addr, group)
            for row in stats.rows:
                out.setdefault(row.topic, set()).add(group)
    return out


def _group_topic(topic: str) -> bool:
    """A ``%RETRY%`` or ``%DLQ%`` topic (of a group, not a topic anyone sends to)."""
    return topic.startswith((RETRY_GROUP_TOPIC_PREFIX, DLQ_GROUP_TOPIC_PREFIX))


@admin_command("topicList")
@click.option(
    "-c",
    "--clusterModel",
    "cluster_model",
    is_flag=True,
    help="Show the cluster and consumer groups of every topic (not %RETRY%/%DLQ% topics).",
)
def topic_list(namesrv: str | None, as_json: bool, cluster_model: bool) -> None:
    """Fetch all topic list from name server."""

    async def body(admin: AdminClient) -> Any:
        topics = await admin.topic_list()
        if not cluster_model:
            return topics
        groups = await topic_groups(admin)
        info = await admin.cluster_info()
        rows = []
        for cname in sorted(info.cluster_addr_table):
            for topic in await admin.topic_list(cname):
                if _group_topic(topic):  # as RocketMQ's topicList -c
                    continue
                rows.append(
                    {
                        "clusterName": cname,
                        "topic": topic,
                        "consumerGroups": sorted(groups.get(topic, set())),
                    }
                )
        return rows

    result = run(namesrv, body)
    if as_json:
        emit_json(result)
    elif not cluster_model:
        lines(*result)
    else:
        table(
            ("#Cluster Name", "#Topic", "#Consumer Group"),
            (
                (r["clusterName"], r["topic"], group)
                for r in result
                for group in (r["consumerGroups"] or [""])
            ),
        )


@admin_command("updateTopic")
@click.option("-b", "--brokerAddr", "broker", help="Create the topic on this broker.")
@click.option(
    "-c", "--clusterName", "cluster", help="Create the topic on every broker of this cluster."
)
@click.option("-t", "--topic", required=True, help="Topic name.")
@click.option("-r", "--readQueueNums", "read_queues", type=int, default=8, show_default=True)
@click.option("-w", "--writeQueueNums", "write_queues", type=int, default=8, show_default=True)
@click.option(
    "-p",
    "--perm",
    type=click.IntRange(0, 7),
    default=6,
    show_default=True,
    help="2 W, 4 R, 6 RW (1 inherit).",
)
@click.option(
    "-o", "--order", type=click.BOOL, default=False, show_default=True, help="Ordered topic."
)
def update_topic(
    namesrv: str | None,
    as_json: bool,
    broker: str | None,
    cluster: str | None,
    topic: str,
    read_queues: int,
    write_queues: int,
    perm: int,
    order: bool,
) -> None:
    """Update or create topic."""
    if broker is None and cluster is None:
        fail("give -b brokerAddr or -c clusterName")
    try:
        config = TopicConfig(topic, read_queues, write_queues, perm, order=order)
    except ValueError as exc:
        fail(str(exc))

    async def body(admin: AdminClient) -> list[str]:
        targets = await admin.masters(cluster=cluster, broker_addr=broker)
        done = await on_each_broker(targets, lambda addr: admin.update_topic(addr, config))
        return [addr for addr, _ in done]

    done = run(namesrv, body)
    if as_json:
        emit_json({"topicConfig": config.to_wire(), "brokers": done})
        return
    lines(*(f"create topic to {addr} success." for addr in done))
    lines(java_object("TopicConfig", config.to_wire()))


async def delete_topic_everywhere(
    admin: AdminClient, topic: str, cluster: str | None = None
) -> list[str]:
    """Delete ``topic`` from the master brokers hosting it (``cluster``'s masters when given),
    then from the name servers (only ``cluster``'s part of its route when given), as
    RocketMQ's ``deleteTopic``; the addresses of the brokers it was deleted from."""
    if cluster is not None:
        targets = await admin.masters(cluster=cluster)
    else:
        targets = await admin.topic_masters(topic)
    # the name servers forget the topic only once every broker has deleted it
    done = await on_each_broker(targets, lambda addr: admin.delete_topic_in_broker(addr, topic))
    await admin.delete_topic_in_namesrv(topic, cluster)
    return [addr for addr, _ in done]


@admin_command("deleteTopic")
@click.option(
    "-c",
    "--clusterName",
    "cluster",
    help="Delete from this cluster's brokers (default: every broker hosting the topic).",
)
@click.option("-t", "--topic", required=True, help="Topic name.")
def delete_topic(namesrv: str | None, as_json: bool, cluster: str | None, topic: str) -> None:
    """Delete topic from broker and NameServer."""

    async def body(admin: AdminClient) -> list[str]:
        return await delete_topic_everywhere(admin, topic, cluster)

    done = run(namesrv, body)
    if as_json:
        emit_json({"topic": topic, "brokers": done})
        return
    lines(
        *(f"delete topic [{topic}] from broker [{addr}] success." for addr in done),
        f"delete topic [{topic}] from NameServer success.",
    )


@admin_command("topicRoute")
@click.option("-t", "--topic", required=True, help="Topic name.")
def topic_route(namesrv: str | None, as_json: bool, topic: str) -> None:
    """Examine topic route info."""

    async def body(admin: AdminClient) -> dict[str, Any]:
        return (await admin.topic_route(topic)).to_wire()

    route = run(namesrv, body)
    if as_json:
        emit_json(route)
        return
    brokers = {b["brokerName"]: b for b in route["brokerDatas"]}
    table(
        ("#ClusterName", "#BrokerName", "#BrokerAddrs", "#ReadQueue", "#WriteQueue", "#Perm"),
        (
            (
                brokers.get(q["brokerName"], {}).get("cluster", ""),
                q["brokerName"],
                " ".join(
                    f"{bid}:{addr}"
                    for bid, addr in sorted(
                        brokers.get(q["brokerName"], {}).get("brokerAddrs", {}).items()
                    )
                ),
                q["readQueueNums"],
                q["writeQueueNums"],
                q["perm"],
            )
            for q in sorted(route["queueDatas"], key=lambda q: q["brokerName"])
        ),
    )


async def topic_masters_in(
    admin: AdminClient, topic: str, cluster: str | None
) -> list[tuple[str, str]]:
    """``(broker name, master address)`` of the brokers hosting ``topic``, only those of
    ``cluster`` when given; MQClientError when there is none."""
    targets = await admin.topic_masters(topic)
    if cluster is None:
        return targets
    in_cluster = set(await admin.masters(cluster=cluster))
    targets = [target for target in targets if target in in_cluster]
    if not targets:
        raise MQClientError(
            ResponseCode.SYSTEM_ERROR, f"no broker of cluster {cluster} hosts topic {topic}"
        )
    return targets


@admin_command("topicStatus")
@click.option("-t", "--topic", required=True, help="Topic name.")
@click.option("-c", "--cluster", "cluster", help="Only the brokers of this cluster.")
def topic_status(namesrv: str | None, as_json: bool, topic: str, cluster: str | None) -> None:
    """Examine topic status: min/max offset and last update per queue.

    A broker that does not answer does not hide the others: their queues are printed, then
    the failed broker is named on stderr (status 1).
    """

    async def stats_of(admin: AdminClient, addr: str) -> list[dict[str, Any]]:
        return [
            {
                "brokerName": r.broker_name,
                "queueId": r.queue_id,
                "minOffset": r.min_offset,
                "maxOffset": r.max_offset,
                "lastUpdateTimestamp": r.last_update_timestamp,
            }
            for r in await admin.topic_stats(addr, topic)
        ]

    async def body(admin: AdminClient) -> EachBroker[list[dict[str, Any]]]:
        targets = await topic_masters_in(admin, topic, cluster)
        return await try_each_broker(targets, lambda addr: stats_of(admin, addr))

    result = run(namesrv, body)
    rows = sorted(
        (row for _, rows_of_broker in result.done for row in rows_of_broker),
        key=lambda r: (r["brokerName"], r["queueId"]),
    )
    if as_json:
        emit_json(rows)
    else:
        _print_topic_status(rows)
    fail_if_any_failed(result)


def _print_topic_status(rows: list[dict[str, Any]]) -> None:
    """The ``topicStatus`` table."""
    table(
        ("#Broker Name", "#QID", "#Min Offset", "#Max Offset", "#Last Updated"),
        (
            (
                r["brokerName"],
                r["queueId"],
                r["minOffset"],
                r["maxOffset"],
                fmt_time(r["lastUpdateTimestamp"]),
            )
            for r in rows
        ),
    )
