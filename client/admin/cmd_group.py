"""``mqadmin`` consumer/producer group commands: updateSubGroup, deleteSubGroup,
consumerProgress, consumerConnection, producerConnection, allocateMQ, resetOffsetByTime,
skipAccumulatedMessage, cloneGroupOffset."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import click

from client import api
from client.admin.admin_client import AdminClient
from client.admin.base import (
    admin_command,
    emit_json,
    fail,
    fmt_time,
    java_object,
    lines,
    not_empty,
    on_each_broker,
    parse_timestamp,
    run,
    table,
)
from client.admin.cmd_topic import delete_topic_everywhere
from client.allocate import AllocateMessageQueueAveragely
from client.errors import MQClientError, TopicRouteError
from client.message import MessageQueue
from common.topic import RETRY_GROUP_TOPIC_PREFIX, dlq_topic, retry_topic
from remoting.admin_bodies import ConsumerConnection, QueueConsumeStats, QueueOffset
from remoting.codes import ResponseCode

SUB_GROUP_OPTIONS = {
    "consume_enable": "consumeEnable",
    "consume_from_min_enable": "consumeFromMinEnable",
    "broadcast": "consumeBroadcastEnable",
    "retry_queues": "retryQueueNums",
    "retry_max": "retryMaxTimes",
    "broker_id": "brokerId",
    "slowly": "whichBrokerWhenConsumeSlowly",
    "notify": "notifyConsumerIdsChangedEnable",
}


@admin_command("updateSubGroup")
@click.option("-b", "--brokerAddr", "broker", help="On this broker.")
@click.option("-c", "--clusterName", "cluster", help="On every broker of this cluster.")
@click.option("-g", "--groupName", "group", required=True, help="Consumer group name.")
@click.option("-s", "--consumeEnable", "consume_enable", type=click.BOOL)
@click.option("-m", "--consumeFromMinEnable", "consume_from_min_enable", type=click.BOOL)
@click.option("-d", "--consumeBroadcastEnable", "broadcast", type=click.BOOL)
@click.option("-q", "--retryQueueNums", "retry_queues", type=int)
@click.option("-r", "--retryMaxTimes", "retry_max", type=int)
@click.option("-i", "--brokerId", "broker_id", type=int)
@click.option("-w", "--whichBrokerWhenConsumeSlowly", "slowly", type=int)
@click.option("-a", "--notifyConsumerIdsChanged", "notify", type=click.BOOL)
def update_sub_group(
    namesrv: str | None,
    as_json: bool,
    broker: str | None,
    cluster: str | None,
    group: str,
    **settings: Any,
) -> None:
    """Update or create subscription group (options not given keep their current value)."""
    if broker is None and cluster is None:
        fail("give -b brokerAddr or -c clusterName")
    changes = {SUB_GROUP_OPTIONS[k]: v for k, v in settings.items() if v is not None}

    async def update(admin: AdminClient, addr: str) -> dict[str, Any]:
        config = (await admin.sub_groups(addr)).get(group, {"groupName": group})
        config.update(changes)
        await admin.update_sub_group(addr, config)
        # what the broker keeps (a new group's other settings are its defaults)
        return (await admin.sub_groups(addr)).get(group, config)

    async def body(admin: AdminClient) -> list[dict[str, Any]]:
        targets = await admin.masters(cluster=cluster, broker_addr=broker)
        done = await on_each_broker(targets, lambda addr: update(admin, addr))
        return [{"brokerAddr": addr, "config": stored} for addr, stored in done]

    done = run(namesrv, body)
    if as_json:
        emit_json(done)
        return
    for entry in done:
        lines(
            f"create subscription group to {entry['brokerAddr']} success.",
            java_object("SubscriptionGroupConfig", entry["config"]),
        )


@admin_command("deleteSubGroup")
@click.option("-b", "--brokerAddr", "broker", help="On this broker.")
@click.option(
    "-c",
    "--clusterName",
    "cluster",
    help="On every broker of this cluster; the group's %RETRY% and %DLQ% topics go too "
    "(from the cluster's brokers and the name servers).",
)
@click.option("-g", "--groupName", "group", required=True, help="Consumer group name.")
@click.option(
    "-r",
    "--removeOffset",
    "remove_offset",
    type=click.BOOL,
    default=False,
    show_default=True,
    help="Also remove the group's committed offsets on the brokers.",
)
def delete_sub_group(
    namesrv: str | None,
    as_json: bool,
    broker: str | None,
    cluster: str | None,
    group: str,
    remove_offset: bool,
) -> None:
    """Delete subscription group from broker.

    As RocketMQ's: with -c (and no -b) the group's %RETRY% and %DLQ% topics are deleted from
    the cluster and the name servers too; with -r true its committed offsets go as well.
    """
    if broker is None and cluster is None:
        fail("give -b brokerAddr or -c clusterName")
    whole_cluster = cluster if broker is None else None

    async def body(admin: AdminClient) -> dict[str, Any]:
        targets = await admin.masters(cluster=cluster, broker_addr=broker)
        done = await on_each_broker(
            targets,
            lambda addr: admin.delete_sub_group(addr, group, clean_offset=remove_offset),
        )
        brokers = [addr for addr, _ in done]
        topics = []
        if whole_cluster is not None:
            topics = await _delete_group_topics(admin, group, whole_cluster, brokers)
        return {
            "groupName": group,
            "clusterName": whole_cluster,
            "removeOffset": remove_offset,
            "brokers": brokers,
            "topicsDeleted": topics,
        }

    done = run(namesrv, body)
    if as_json:
        emit_json(done)
        return
    where = f" in cluster [{whole_cluster}]" if whole_cluster is not None else ""
    lines(
        *(
            f"delete subscription group [{group}] from broker [{a}]{where} success."
            for a in done["brokers"]
        ),
        *(
            f"delete topic [{t}] from cluster [{whole_cluster}] and NameServer success."
            for t in done["topicsDeleted"]
        ),
    )


async def _delete_group_topics(
    admin: AdminClient, group: str, cluster: str, brokers: Sequence[str]
) -> list[str]:
    """Delete ``group``'s ``%RETRY%`` and ``%DLQ%`` topics from ``cluster`` and the name servers
    (RocketMQ's ``deleteSubGroup -c``); the topics deleted. MQClientError when one could not be,
    saying that the group itself is gone from ``brokers``."""
    topics = [retry_topic(group), dlq_topic(group)]
    for topic in topics:
        try:
            await delete_topic_everywhere(admin, topic, cluster)
        except MQClientError as exc:
            raise MQClientError(
                ResponseCode.SYSTEM_ERROR,
                f"subscription group [{group}] deleted from broker(s) {', '.join(brokers)}, "
                f"but not its topic {topic}: {exc}",
            ) from None
    return topics


# ---------------------------------------------------------------------- progress


LMQ_CLUSTER_HELP = (
    "Cluster name or LMQ parent topic (RocketMQ 5.3's -c): RocketMQ looks up the route of an "
    "LMQ topic (%LMQ%...) or rmq_sys_wheel_timer with it and ignores it for any other topic; "
    "minimq has neither, so it changes nothing (the same brokers are asked)."
)
"""``-c`` of consumerProgress and resetOffsetByTime: accepted, so RocketMQ's command lines run
unchanged, and unused."""


async def connection(admin: AdminClient, group: str) -> ConsumerConnection | None:
    """The group's members as every broker sees them (merged), or None when offline."""
    merged: ConsumerConnection | None = None
    seen: dict[str, Any] = {}
    for _, addr in await admin.masters():
        cc = await admin.consumer_connection(addr, group)
        if cc is None:
            continue
        merged = merged or cc
        seen.update({c.client_id: c for c in cc.connections})
    if merged is None:
        return None
    return ConsumerConnection(
        tuple(seen[k] for k in sorted(seen)),
        merged.subscriptions,
        merged.consume_type,
        merged.message_model,
        merged.consume_from_where,
    )


async def readable_queues(
    admin: AdminClient, topics: Iterable[str]
) -> dict[str, list[MessageQueue]]:
    """Each topic's queues a group's members divide: the readable queues of its route, as a
    member's rebalance takes them (``topicRouteData2TopicSubscribeInfo``); not the queues of a
    broker where the topic is write-only, which nobody reads. A topic without a route has
    none."""
    out: dict[str, list[MessageQueue]] = {}
    for topic in sorted(set(topics)):
        try:
            out[topic] = api.subscribe_queues(topic, await admin.topic_route(topic))
        except TopicRouteError:
            out[topic] = []
    return out


def allocation(
    queues: Mapping[str, Sequence[MessageQueue]], cc: ConsumerConnection | None
) -> dict[MessageQueue, str]:
    """Which client (id) consumes each queue, assuming the default AVG strategy over each
    topic's ``queues`` (see :func:`readable_queues`); only the queues of topics the group
    subscribes to have one."""
    if cc is None or not cc.connections:
        return {}
    ids = sorted(c.client_id for c in cc.connections)
    out: dict[MessageQueue, str] = {}
    for topic in sorted(set(queues) & set(cc.subscriptions)):
        mqs = sorted(queues[topic])
        if cc.message_model == "BROADCASTING":
            out.update({mq: ",".join(ids) for mq in mqs})
            continue
        for cid in ids:
            for mq in AllocateMessageQueueAveragely().allocate("", cid, mqs, ids):
                out[mq] = cid
    return out


def allocate_averagely(
    queues: Sequence[MessageQueue], ips: Sequence[str]
) -> dict[str, list[MessageQueue]]:
    """Each of ``ips``' queues of ``queues`` under the default AVG strategy, both sorted as a
    rebalance sorts them (RocketMQ's ``allocateMQ`` keeps the order given)."""
    mqs, cids = sorted(queues), sorted(ips)
    strategy = AllocateMessageQueueAveragely()
    return {cid: strategy.allocate("", cid, mqs, cids) for cid in cids}


def ip_list(ctx: click.Context, param: click.Parameter, value: str) -> list[str]:
    """An option callback: the comma-separated entries of ``value``, trimmed, without empty
    ones or repeats; BadParameter when none is left."""
    ips = sorted({part.strip() for part in value.split(",") if part.strip()})
    if not ips:
        raise click.BadParameter("no IP given")
    return ips


@admin_command("allocateMQ")
@click.option("-t", "--topic", required=True, help="Topic name.")
@click.option(
    "-i",
    "--ipList",
    "ips",
    required=True,
    callback=ip_list,
    help="Consumers' client ids or IPs, separated by commas.",
)
def allocate_mq(namesrv: str | None, as_json: bool, topic: str, ips: list[str]) -> None:
    """Allocate MQ: which of the topic's readable queues each consumer of -i would take under
    the default AVG strategy (a rebalance's sorted queues and consumers)."""

    async def body(admin: AdminClient) -> dict[str, list[MessageQueue]]:
        queues = api.subscribe_queues(topic, await admin.topic_route(topic))
        return allocate_averagely(queues, ips)

    result = run(namesrv, body)
    if as_json:  # RocketMQ's RebalanceResult
        emit_json(
            {
                "result": {
                    ip: [
                        {"brokerName": mq.broker_name, "queueId": mq.queue_id, "topic": mq.topic}
                        for mq in mqs
                    ]
                    for ip, mqs in result.items()
                }
            }
        )
        return
    rows: list[tuple[str, str, int | str]] = []
    for ip, mqs in result.items():
        rows += [(ip, mq.broker_name, mq.queue_id) for mq in mqs] or [(ip, "", "")]
    table(("#IP", "#Broker Name", "#QID"), rows)


async def group_stats_and_tps(
    admin: AdminClient, group: str, topic: str = ""
) -> tuple[list[QueueConsumeStats], float]:
    """Every broker's consume stats of ``group``, sorted by topic, broker and queue, and the
    group's consume TPS over all brokers (its pulls a second over the last minute)."""
    rows: list[QueueConsumeStats] = []
    tps = 0.0
    for _, addr in await admin.masters():
        stats = await admin.consume_stats(addr, group, topic)
        rows.extend(stats.rows)
        tps += stats.consume_tps
    return sorted(rows, key=lambda r: (r.topic, r.broker_name, r.queue_id)), tps


async def group_stats(admin: AdminClient, group: str, topic: str = "") -> list[QueueConsumeStats]:
    """Every broker's consume stats of ``group``, sorted by topic, broker and queue."""
    return (await group_stats_and_tps(admin, group, topic))[0]


async def _progress_of_group(admin: AdminClient, group: str, topic: str) -> dict[str, Any]:
    rows, tps = await group_stats_and_tps(admin, group, topic)
    if not rows:
        raise MQClientError(
            ResponseCode.SYSTEM_ERROR,
            f"Not found the consumer group consume stats, because return offset table is empty, "
            f"maybe the consumer not consume any message (group {group})",
        )
    cc = await connection(admin, group)
    subscribed = {r.topic for r in rows} & set(cc.subscriptions if cc is not None else ())
    owners = allocation(await readable_queues(admin, subscribed), cc)
    queues = []
    for r in rows:
        owner = owners.get(MessageQueue(r.topic, r.broker_name, r.queue_id), "")
        queues.append(
            {
                "topic": r.topic,
                "brokerName": r.broker_name,
                "queueId": r.queue_id,
                "brokerOffset": r.broker_offset,
                "consumerOffset": r.consumer_offset,
                "pullOffset": max(r.pull_offset, r.consumer_offset),
                "clientId": owner,
                "clientIp": owner.split("@")[0] if owner else "",
                "diff": r.diff,
                "inflight": r.inflight,
                "lastTimestamp": r.last_timestamp,
            }
        )
    return {
        "group": group,
        "queues": queues,
        "consumeTps": tps,
        "diffTotal": sum(r.diff for r in rows),
        "inflightTotal": sum(r.inflight for r in rows),
    }


async def _all_groups(admin: AdminClient) -> list[dict[str, Any]]:
    topics = await admin.topic_list()
    groups = sorted(
        t[len(RETRY_GROUP_TOPIC_PREFIX) :] for t in topics if t.startswith(RETRY_GROUP_TOPIC_PREFIX)
    )
    out = []
    for group in groups:
        rows, tps = await group_stats_and_tps(admin, group)
        cc = await connection(admin, group)
        online = cc is not None and bool(cc.connections)
        out.append(
            {
                "group": group,
                "count": len(cc.connections) if cc else 0,
                "online": online,
                # a number, as consumerConnection's; null while no member is online
                "version": cc.connections[0].version if cc and online else None,
                "consumeType": _kind(cc.consume_type) if cc else "",
                "messageModel": cc.message_model if cc else "",
                "consumeTps": tps,
                "diffTotal": sum(r.diff for r in rows),
            }
        )
    return out


def _kind(consume_type: str) -> str:
    return {"CONSUME_PASSIVELY": "PUSH", "CONSUME_ACTIVELY": "PULL"}.get(consume_type, consume_type)


@admin_command("consumerProgress")
@click.option(
    "-g",
    "--groupName",
    "group",
    callback=not_empty,
    help="Consumer group (default: every group).",
)
@click.option("-t", "--topicName", "topic", default="", help="Only this topic.")
@click.option(
    "-s",
    "--showClientIP",
    "show_client_ip",
    type=click.BOOL,
    default=False,
    show_default=True,
    help="With -g: the #Client IP column, the member that consumes each queue.",
)
@click.option("-c", "--cluster", "cluster", help=LMQ_CLUSTER_HELP)
def consumer_progress(
    namesrv: str | None,
    as_json: bool,
    group: str | None,
    topic: str,
    show_client_ip: bool,
    cluster: str | None,
) -> None:
    """Query consumer's progress: per queue broker offset, consumer offset, diff and
    inflight (pulled, not committed yet)."""

    async def body(admin: AdminClient) -> Any:
        if group:
            return await _progress_of_group(admin, group, topic)
        return await _all_groups(admin)

    result = run(namesrv, body)
    if as_json:
        emit_json(result)
    elif group:
        _print_group_progress(result, show_client_ip)
    else:
        table(
            ("#Group", "#Count", "#Version", "#Type", "#Model", "#TPS", "#Diff Total"),
            (
                (
                    g["group"],
                    g["count"],
                    "OFFLINE" if g["version"] is None else g["version"],
                    g["consumeType"],
                    g["messageModel"],
                    f"{g['consumeTps']:.0f}",
                    g["diffTotal"],
                )
                for g in result
            ),
        )


def _print_group_progress(result: dict[str, Any], show_client_ip: bool) -> None:
    """``consumerProgress -g``'s table and totals, RocketMQ 5's; ``#Client IP`` only with
    ``-s true`` (as RocketMQ's)."""
    queues = result["queues"]
    headers = ["#Topic", "#Broker Name", "#QID", "#Broker Offset", "#Consumer Offset"]
    headers += ["#Client IP"] if show_client_ip else []
    headers += ["#Diff", "#Inflight", "#LastTime"]
    rows = []
    for q in queues:
        row = [q["topic"], q["brokerName"], q["queueId"], q["brokerOffset"], q["consumerOffset"]]
        row += [q["clientIp"] or "N/A"] if show_client_ip else []
        row += [q["diff"], q["inflight"], fmt_time(q["lastTimestamp"])]
        rows.append(row)
    table(headers, rows)
    lines(
        "",
        f"Consume TPS: {result['consumeTps']:.2f}",
        f"Consume Diff Total: {result['diffTotal']}",
        f"Consume Inflight Total: {result['inflightTotal']}",
    )


@admin_command("consumerConnection")
@click.option("-g", "--consumerGroup", "group", required=True, help="Consumer group name.")
def consumer_connection(namesrv: str | None, as_json: bool, group: str) -> None:
    """Query consumer's socket connection, client version and subscription."""

    async def body(admin: AdminClient) -> ConsumerConnection:
        cc = await connection(admin, group)
        if cc is None:
            raise MQClientError(
                ResponseCode.CONSUMER_NOT_ONLINE, f"the consumer group[{group}] not online"
            )
        return cc

    cc = run(namesrv, body)
    conns = [
        {
            "clientId": c.client_id,
            "clientAddr": c.client_addr,
            "language": c.language,
            "version": c.version,
        }
        for c in cc.connections
    ]
    if as_json:
        emit_json(
            {
                "connectionSet": conns,
                "subscriptionTable": cc.subscriptions,
                "consumeType": cc.consume_type,
                "messageModel": cc.message_model,
                "consumeFromWhere": cc.consume_from_where,
            }
        )
        return
    table(
        ("#", "#ClientId", "#ClientAddr", "#Language", "#Version"),
        (
            (f"{i:03d}", c["clientId"], c["clientAddr"], c["language"], c["version"])
            for i, c in enumerate(conns, 1)
        ),
    )
    lines("", "Below is subscription:")
    table(
        ("#", "#Topic", "#SubExpression"),
        ((f"{i:03d}", t, s) for i, (t, s) in enumerate(sorted(cc.subscriptions.items()), 1)),
    )
    lines(
        "",
        f"ConsumeType: {cc.consume_type}",
        f"MessageModel: {cc.message_model}",
        f"ConsumeFromWhere: {cc.consume_from_where}",
    )


@admin_command("producerConnection")
@click.option("-g", "--producerGroup", "group", required=True, help="Producer group name.")
@click.option("-t", "--topic", required=True, help="A topic the group sends to.")
def producer_connection(namesrv: str | None, as_json: bool, group: str, topic: str) -> None:
    """Query producer's socket connection and client version."""

    async def body(admin: AdminClient) -> list[dict[str, Any]]:
        seen: dict[str, dict[str, Any]] = {}
        for _, addr in await admin.topic_masters(topic):
            for c in await admin.producer_connection(addr, group):
                seen[c.client_id] = {
                    "clientId": c.client_id,
                    "clientAddr": c.client_addr,
                    "language": c.language,
                    "version": c.version,
                }
        if not seen:
            raise MQClientError(ResponseCode.SYSTEM_ERROR, f"the producer group[{group}] not exist")
        return [seen[k] for k in sorted(seen)]

    conns = run(namesrv, body)
    if as_json:
        emit_json({"connectionSet": conns})
        return
    table(
        ("#", "#ClientId", "#ClientAddr", "#Language", "#Version"),
        (
            (f"{i:04d}", c["clientId"], c["clientAddr"], c["language"], c["version"])
            for i, c in enumerate(conns, 1)
        ),
    )


# ---------------------------------------------------------------------- offsets


def force_option(help_text: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """``-f/--force`` of resetOffsetByTime and skipAccumulatedMessage (default true)."""
    return click.option(
        "-f", "--force", type=click.BOOL, default=True, show_default=True, help=help_text
    )


@admin_command("resetOffsetByTime")
@click.option("-g", "--group", required=True, help="Consumer group name.")
@click.option("-t", "--topic", required=True, help="Topic name.")
@click.option(
    "-s",
    "--timestamp",
    "when",
    required=True,
    help="now, milliseconds, -1 (skip to the end) or yyyy-MM-dd#HH:mm:ss:SSS.",
)
@force_option("Also move offsets forwards.")
@click.option("-c", "--cluster", "cluster", help=LMQ_CLUSTER_HELP)
@click.option("-b", "--broker", help="With -q: the broker address (host:port) of that queue.")
@click.option("-q", "--queue", "queue_id", type=click.IntRange(min=0), help="With -b: one queue.")
@click.option(
    "-o",
    "--offset",
    type=click.IntRange(min=0),
    help="With -b and -q: reset that queue to this offset (instead of by -s).",
)
def reset_offset_by_time(
    namesrv: str | None,
    as_json: bool,
    group: str,
    topic: str,
    when: str,
    force: bool,
    cluster: str | None,
    broker: str | None,
    queue_id: int | None,
    offset: int | None,
) -> None:
    """Reset consumer offset by timestamp (running consumers follow without a restart); with
    -b and -q only that queue, to -o offset when given, as RocketMQ's."""
    timestamp = parse_timestamp(when, "-s")
    one_queue = _one_queue_reset(broker, queue_id, offset)
    reset = OffsetReset(group, topic, timestamp, force, queue_id, offset)

    async def body(admin: AdminClient) -> list[dict[str, Any]]:
        if one_queue:
            return await reset.run(admin, await admin.masters(broker_addr=broker))
        return await reset.run(admin, await admin.topic_masters(topic))

    rows = run(namesrv, body)
    if as_json:
        emit_json(reset.to_json(rows))
        return
    if one_queue:
        lines(
            f"start reset consumer offset by specified, group[{group}], topic[{topic}], "
            f"queueId[{queue_id}], broker[{broker}], timestamp(string)[{when}], "
            f"timestamp(long)[{timestamp}]",
            *(f"reset consumer offset to {r['offset']}" for r in rows),
        )
        return
    lines(
        f"rollback consumer offset by specified consumerGroup[{group}], topic[{topic}], "
        f"force[{str(force).lower()}], timestamp(string)[{when}], timestamp(long)[{timestamp}]"
    )
    _print_offset_table(rows)


def _print_offset_table(rows: list[dict[str, Any]]) -> None:
    """The ``#brokerName #queueId #offset`` table of an offset reset."""
    table(
        ("#brokerName", "#queueId", "#offset"),
        ((r["brokerName"], r["queueId"], r["offset"]) for r in rows),
    )


@dataclass(frozen=True)
class OffsetReset:
    """One INVOKE_BROKER_TO_RESET_OFFSET on chosen brokers (``resetOffsetByTime``,
    ``skipAccumulatedMessage``): ``group``'s offsets of ``topic`` to the first message stored
    at or after ``timestamp`` (``-1``: the queues' max offsets), or of queue ``queue_id`` only
    (to ``offset`` when given)."""

    group: str
    topic: str
    timestamp: int
    force: bool
    queue_id: int | None = None
    offset: int | None = None

    async def run(
        self, admin: AdminClient, targets: Sequence[tuple[str, str]]
    ) -> list[dict[str, Any]]:
        """Reset on each ``(name, address)`` target (see :func:`on_each_broker`); the offsets
        set, as ``{"brokerName", "queueId", "offset"}`` rows."""
        done = await on_each_broker(targets, lambda addr: self._on(admin, addr))
        return [
            {"brokerName": e.broker_name, "queueId": e.queue_id, "offset": e.offset}
            for _, entries in done
            for e in entries
        ]

    async def _on(self, admin: AdminClient, addr: str) -> list[QueueOffset]:
        return await admin.reset_offset(
            addr,
            self.topic,
            self.group,
            self.timestamp,
            force=self.force,
            queue_id=self.queue_id,
            offset=self.offset,
        )

    def to_json(self, rows: list[dict[str, Any]]) -> dict[str, Any]:
        """What ``--json`` prints: the request and the offsets set."""
        return {
            "group": self.group,
            "topic": self.topic,
            "timestamp": self.timestamp,
            "force": self.force,
            "offsetTable": rows,
        }


SKIP_TIMESTAMP = -1
"""The reset timestamp that moves each queue to its max offset."""


@admin_command("skipAccumulatedMessage")
@click.option("-g", "--group", required=True, help="Consumer group name.")
@click.option("-t", "--topic", required=True, help="Topic name.")
@force_option("Also move offsets forwards (without it, nothing moves: the end is ahead).")
@click.option("-c", "--cluster", "cluster", help=LMQ_CLUSTER_HELP)
def skip_accumulated_message(
    namesrv: str | None, as_json: bool, group: str, topic: str, force: bool, cluster: str | None
) -> None:
    """Skip all messages that are accumulated (not consumed) currently: resetOffsetByTime to
    each queue's max offset (timestamp -1); running consumers follow without a restart."""
    reset = OffsetReset(group, topic, SKIP_TIMESTAMP, force)

    async def body(admin: AdminClient) -> list[dict[str, Any]]:
        return await reset.run(admin, await admin.topic_masters(topic))

    rows = run(namesrv, body)
    if as_json:
        emit_json(reset.to_json(rows))
        return
    _print_offset_table(rows)


def _one_queue_reset(broker: str | None, queue_id: int | None, offset: int | None) -> bool:
    """Whether ``resetOffsetByTime`` resets one queue (``-b`` and ``-q``); click's UsageError
    when ``-b`` or ``-q`` comes without the other, or ``-o`` without both (RocketMQ would
    silently reset every queue of the topic by ``-s`` instead)."""
    if (broker is None) != (queue_id is None):
        raise click.UsageError("-b and -q go together: they name the one queue to reset")
    if offset is not None and queue_id is None:
        raise click.UsageError("-o needs -b and -q: it is the offset of that one queue")
    return queue_id is not None


@admin_command("cloneGroupOffset")
@click.option("-s", "--srcGroup", "src", required=True, help="Copy offsets from this group.")
@click.option("-d", "--destGroup", "dst", required=True, help="To this group.")
@click.option("-t", "--topic", required=True, help="Topic name.")
@click.option(
    "-o",
    "--offline",
    type=click.BOOL,
    default=False,
    show_default=True,
    help="Copy the source's offsets even while it is online without subscribing to the topic "
    "(its left-over offsets there); RocketMQ's CLONE_GROUP_OFFSET offline.",
)
def clone_group_offset(
    namesrv: str | None, as_json: bool, src: str, dst: str, topic: str, offline: bool
) -> None:
    """Clone offset from other group.

    As RocketMQ's broker, the offsets of a topic the source group's online members do not
    subscribe to are left-overs, copied only with -o true.
    """

    async def body(admin: AdminClient) -> list[str]:
        await _check_clone_source(admin, src, topic, offline)
        targets = await admin.topic_masters(topic)
        done = await on_each_broker(
            targets, lambda addr: admin.clone_group_offset(addr, src, dst, topic, offline=offline)
        )
        return [addr for addr, _ in done]

    done = run(namesrv, body)
    if as_json:
        emit_json(
            {"srcGroup": src, "destGroup": dst, "topic": topic, "offline": offline, "brokers": done}
        )
        return
    lines(f"clone group offset success. srcGroup[{src}], destGroup=[{dst}], topic[{topic}]")


async def _check_clone_source(admin: AdminClient, src: str, topic: str, offline: bool) -> None:
    """MQClientError unless ``src`` has offsets on ``topic`` to copy (as RocketMQ's command: a
    source with nothing to copy, a typo say, is an error): its consume stats list the topic,
    or, with ``offline``, any broker of the topic holds its committed offsets there."""
    if any(r.topic == topic for r in await group_stats(admin, src, "")):
        return
    left_over = False
    for _, addr in await admin.topic_masters(topic):
        left_over = left_over or src in (await admin.consumer_offsets(addr)).get(topic, set())
    if left_over and offline:
        return
    if left_over:
        raise MQClientError(
            ResponseCode.SYSTEM_ERROR,
            f"source group {src} is online and does not subscribe to topic {topic}: its "
            "offsets there are left-overs, copied only with -o true",
        )
    raise MQClientError(
        ResponseCode.SYSTEM_ERROR, f"source group {src} has no offsets on topic {topic}"
    )
