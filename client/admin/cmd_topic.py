"""``mqadmin`` topic commands: topicList, updateTopic, updateTopicPerm, deleteTopic, topicRoute,
topicClusterList, topicStatus."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
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
from common.route import MASTER_ID, PermName, TopicConfig, TopicRouteData
from common.topic import DLQ_GROUP_TOPIC_PREFIX, RETRY_GROUP_TOPIC_PREFIX
from common.topic_attributes import parse_to_map
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
@click.option(
    "-a",
    "--attributes",
    default="",
    help="Attribute changes, RocketMQ's +a=b,+c=d,-e (supported: queue.type=SimpleCQ|BatchCQ, "
    "set when the topic is created only).",
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
    attributes: str,
) -> None:
    """Update or create topic."""
    if broker is None and cluster is None:
        fail("give -b brokerAddr or -c clusterName")
    attributes = attributes.strip()
    try:
        modification = parse_to_map(attributes)  # RocketMQ's tool parses it before sending
        config = TopicConfig(topic, read_queues, write_queues, perm, order=order)
    except ValueError as exc:
        fail(str(exc))

    async def body(admin: AdminClient) -> list[str]:
        targets = await admin.masters(cluster=cluster, broker_addr=broker)
        done = await on_each_broker(
            targets, lambda addr: admin.update_topic(addr, config, attributes)
        )
        return [addr for addr, _ in done]

    done = run(namesrv, body)
    wire = config.to_wire()
    if modification:  # as RocketMQ's tool prints it: the changes asked for
        wire["attributes"] = modification
    if as_json:
        emit_json({"topicConfig": wire, "brokers": done})
        return
    lines(*(f"create topic to {addr} success." for addr in done))
    lines(java_object("TopicConfig", wire))


TOPIC_PERMS: dict[int, str] = {
    PermName.PERM_WRITE: "W",
    PermName.PERM_READ: "R",
    PermName.PERM_READ | PermName.PERM_WRITE: "RW",
}
"""The perms ``updateTopicPerm -p`` takes (RocketMQ's ``2:W; 4:R; 6:RW``)."""


def check_topic_perm(ctx: click.Context, param: click.Parameter, value: int) -> int:
    """An option callback: BadParameter unless ``value`` is 2, 4 or 6."""
    if value not in TOPIC_PERMS:
        raise click.BadParameter(f"{value} is not a topic perm: give 2 (W), 4 (R) or 6 (RW)")
    return value


@dataclass(frozen=True)
class PermUpdate:
    """One broker's part of ``updateTopicPerm``: the topic's config as the route has it on
    that broker, with the new perm, and the perm the route had."""

    broker_name: str
    broker_addr: str
    old_perm: int
    config: TopicConfig

    def with_attributes(self, held: TopicConfig | None) -> PermUpdate:
        """This update, its config showing the attributes the broker holds (an update keeps
        them: they are not sent)."""
        if held is None or not held.attributes:
            return self
        return dataclasses.replace(
            self, config=dataclasses.replace(self.config, attributes=dict(held.attributes))
        )

    def to_json(self, updated: bool) -> dict[str, Any]:
        """The broker's entry in ``--json`` (``updated``: the config was sent)."""
        return {
            "brokerName": self.broker_name,
            "brokerAddr": self.broker_addr,
            "oldPerm": self.old_perm,
            "perm": self.config.perm,
            "updated": updated,
            "topicConfig": self.config.to_wire(),
        }


def perm_updates(
    route: TopicRouteData, topic: str, perm: int, masters: list[tuple[str, str]]
) -> list[PermUpdate]:
    """For each ``(broker name, master address)``: the topic's config from that broker's
    ``QueueData`` in ``route`` (queue counts, sys flag) with ``perm``, as RocketMQ's
    ``updateTopicPerm`` builds it."""
    queue_datas = {qd.broker_name: qd for qd in route.queue_datas}
    updates = []
    for name, addr in masters:
        qd = queue_datas[name]
        config = TopicConfig(
            topic, qd.read_queue_nums, qd.write_queue_nums, perm, topic_sys_flag=qd.topic_sys_flag
        )
        updates.append(PermUpdate(name, addr, qd.perm, config))
    return updates


def route_masters(route: TopicRouteData) -> list[tuple[str, str]]:
    """``(broker name, master address)`` of each broker of ``route`` with queue data and a
    master, sorted by name."""
    with_queues = {qd.broker_name for qd in route.queue_datas}
    return sorted(
        (bd.broker_name, bd.broker_addrs[MASTER_ID])
        for bd in route.broker_datas
        if MASTER_ID in bd.broker_addrs and bd.broker_name in with_queues
    )


async def perm_targets(
    admin: AdminClient, route: TopicRouteData, topic: str, broker: str | None, cluster: str | None
) -> list[tuple[str, str]]:
    """The brokers ``updateTopicPerm`` changes: the master ``broker`` (an address) of a broker
    hosting ``topic``, else the masters of ``cluster`` hosting it; MQClientError when none."""
    masters = route_masters(route)
    if broker is not None:
        chosen = [target for target in masters if target[1] == broker]
        if not chosen:
            hosts = ", ".join(f"{name} {addr}" for name, addr in masters) or "none"
            raise MQClientError(
                ResponseCode.SYSTEM_ERROR,
                f"broker {broker} does not exist or is not the master of a broker hosting topic "
                f"{topic} (its masters: {hosts}); -b takes a master's address",
            )
        return chosen
    assert cluster is not None
    return await in_cluster(admin, masters, topic, cluster)


async def in_cluster(
    admin: AdminClient, targets: list[tuple[str, str]], topic: str, cluster: str
) -> list[tuple[str, str]]:
    """The ``(broker name, master address)`` of ``targets`` that are masters of ``cluster``;
    MQClientError when there is none."""
    masters = set(await admin.masters(cluster=cluster))
    chosen = [target for target in targets if target in masters]
    if not chosen:
        raise MQClientError(
            ResponseCode.SYSTEM_ERROR, f"no broker of cluster {cluster} hosts topic {topic}"
        )
    return chosen


@admin_command("updateTopicPerm")
@click.option("-b", "--brokerAddr", "broker", help="Change the topic on this master broker.")
@click.option(
    "-c", "--clusterName", "cluster", help="Change the topic on the masters of this cluster."
)
@click.option("-t", "--topic", required=True, help="Topic name.")
@click.option(
    "-p",
    "--perm",
    type=int,
    required=True,
    callback=check_topic_perm,
    help="The topic's new perm: 2 W, 4 R, 6 RW.",
)
def update_topic_perm(
    namesrv: str | None,
    as_json: bool,
    broker: str | None,
    cluster: str | None,
    topic: str,
    perm: int,
) -> None:
    """Update topic perm.

    The topic's queue counts come from its route (that broker's queue data); the new perm is
    sent to the broker (-b, a master's address; it wins over -c) or to each master of the
    cluster that hosts the topic (-c). With -b, a perm the route already shows is not sent.
    """
    if broker is None and cluster is None:
        fail("give -b brokerAddr or -c clusterName")

    async def body(admin: AdminClient) -> tuple[list[PermUpdate], bool]:
        route = await admin.topic_route(topic)
        targets = await perm_targets(admin, route, topic, broker, cluster)
        updates = perm_updates(route, topic, perm, targets)
        if broker is not None and updates[0].old_perm == perm:
            return updates, False  # as RocketMQ's: "new perm equals to the old one!"
        held = await refuse_wiped(admin, updates)
        updates = [u.with_attributes(held.get(u.broker_addr)) for u in updates]
        await on_each_broker(
            [(u.broker_name, u.broker_addr) for u in updates],
            lambda addr: admin.update_topic(addr, _config_for(updates, addr)),
        )
        return updates, True

    updates, sent = run(namesrv, body)
    if as_json:
        emit_json({"topic": topic, "perm": perm, "brokers": [u.to_json(sent) for u in updates]})
    elif not sent:
        lines("new perm equals to the old one!")
    else:
        lines(
            *(
                f"update topic perm from {u.old_perm} to {perm} in {u.broker_addr} success."
                for u in updates
            )
        )
        if broker is not None:
            lines(java_object("TopicConfig", updates[0].config.to_wire()) + ".")


async def refuse_wiped(
    admin: AdminClient, updates: list[PermUpdate]
) -> dict[str, TopicConfig | None]:
    """MQClientError when a broker already holds the new perm while the route shows another:
    the write bit is kept out of the routes by the broker's ``brokerPermission`` or by the
    name servers (wipeWritePerm), and an update that changes nothing on the broker does not
    change the routes (as RocketMQ 5's). Otherwise the config each broker holds, by address."""
    kept = []
    configs: dict[str, TopicConfig | None] = {}
    for update in updates:
        held = configs[update.broker_addr] = await admin.topic_config(
            update.broker_addr, update.config.topic_name
        )
        if held is not None and held.perm == update.config.perm != update.old_perm:
            kept.append(f"{update.broker_name} holds perm {held.perm}, routed {update.old_perm}")
    if kept:
        raise MQClientError(
            ResponseCode.SYSTEM_ERROR,
            f"the broker already holds the perm ({'; '.join(kept)}): its brokerPermission "
            "or wipeWritePerm keeps the write bit out of the routes (addWritePerm -b "
            "<brokerName> gives back a wiped one); nothing was changed",
        )
    return configs


def _config_for(updates: list[PermUpdate], addr: str) -> TopicConfig:
    """The config of the update for the broker at ``addr``."""
    return next(u.config for u in updates if u.broker_addr == addr)


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


async def topic_clusters(admin: AdminClient, topic: str) -> list[str]:
    """The clusters holding a broker of ``topic``'s route, sorted (RocketMQ's
    ``getTopicClusterList``); TopicRouteError when no name server knows the topic."""
    route = await admin.topic_route(topic)
    names = {bd.broker_name for bd in route.broker_datas}
    info = await admin.cluster_info()
    return sorted(c for c, brokers in info.cluster_addr_table.items() if names & set(brokers))


@admin_command("topicClusterList")
@click.option("-t", "--topic", required=True, help="Topic name.")
def topic_cluster_list(namesrv: str | None, as_json: bool, topic: str) -> None:
    """Get cluster info for topic: the clusters whose brokers host it, one a line."""

    async def body(admin: AdminClient) -> list[str]:
        return await topic_clusters(admin, topic)

    clusters = run(namesrv, body)
    if as_json:
        emit_json(clusters)
        return
    lines(*clusters)


async def topic_masters_in(
    admin: AdminClient, topic: str, cluster: str | None
) -> list[tuple[str, str]]:
    """``(broker name, master address)`` of the brokers hosting ``topic``, only those of
    ``cluster`` when given; MQClientError when there is none."""
    targets = await admin.topic_masters(topic)
    if cluster is None:
        return targets
    return await in_cluster(admin, targets, topic, cluster)


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
