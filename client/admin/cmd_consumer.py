"""``mqadmin`` commands that ask a live consumer through a broker: consumerStatus, and the
consume-directly part of queryMsgById (``-g group -d clientId``)."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Final

import click

from client.admin.admin_client import AdminClient
from client.admin.base import admin_command, emit_json, java_object, lines, run, table
from client.errors import MQClientError
from client.message import ReceivedMessage
from common.message_id import decode_offset_msg_id
from remoting.codes import ResponseCode
from remoting.consumer_bodies import (
    PROP_CLIENT_VERSION,
    PROP_CONSUME_ORDERLY,
    PROP_CONSUME_TYPE,
    ConsumeMessageDirectlyResult,
    ConsumerRunningInfo,
    ProcessQueueInfo,
)

BLOCKED_AFTER_MS: Final = 60_000
"""A queue with cached messages and no consumption for this long is reported "maybe blocked"
(RocketMQ's ``analyzeProcessQueue``)."""


@dataclass(frozen=True)
class Member:
    """One online member of a group and a broker that sees it."""

    client_id: str
    broker_addr: str
    version: int


async def members(admin: AdminClient, group: str) -> list[Member]:
    """The group's online members (sorted by client id), each with the first master (in name
    order) that has it in its table; MQClientError when none is online."""
    found: dict[str, Member] = {}
    for _, addr in await admin.masters():
        cc = await admin.consumer_connection(addr, group)
        for c in cc.connections if cc else ():
            found.setdefault(c.client_id, Member(c.client_id, addr, c.version))
    if not found:
        raise MQClientError(
            ResponseCode.CONSUMER_NOT_ONLINE, f"the consumer group[{group}] not online"
        )
    return [found[k] for k in sorted(found)]


def _member(all_members: list[Member], group: str, client_id: str) -> Member:
    for m in all_members:
        if m.client_id == client_id:
            return m
    raise MQClientError(
        ResponseCode.SYSTEM_ERROR,
        f"The Consumer <{group}> <{client_id}> not online (online: "
        + ", ".join(m.client_id for m in all_members)
        + ")",
    )


# ---------------------------------------------------------------------- consumerStatus


@admin_command("consumerStatus")
@click.option("-g", "--consumerGroup", "group", required=True, help="Consumer group name.")
@click.option("-i", "--clientId", "client_id", help="Only this member, in full.")
@click.option(
    "-s",
    "--jstack",
    "jstack",
    is_flag=True,
    help="With -i: also the stacks of the threads of the member's process.",
)
def consumer_status(
    namesrv: str | None, as_json: bool, group: str, client_id: str | None, jstack: bool
) -> None:
    """Query consumer's internal data structure (each member's running info).

    Without -i: one line per online member and whether their subscriptions agree; with -i:
    that member's properties, subscriptions, offsets, process queues and per-topic pull and
    consume figures (RT in ms, TPS in messages a second, over the last minute; failed
    messages over the last hour), and with -s its process's thread stacks.
    """
    if jstack and client_id is None:
        raise click.UsageError("-s (jstack) needs -i clientId")

    async def body(admin: AdminClient) -> dict[str, ConsumerRunningInfo]:
        online = await members(admin, group)
        chosen = online if client_id is None else [_member(online, group, client_id)]
        return {
            m.client_id: await admin.consumer_running_info(
                m.broker_addr, group, m.client_id, jstack=jstack
            )
            for m in chosen
        }

    infos = run(namesrv, body)
    if client_id is not None:
        if as_json:
            emit_json(running_info_json(infos[client_id]))
        else:
            print_running_info(infos[client_id])
        return
    if as_json:
        emit_json(_summary_json(infos))
        return
    _print_summary(infos)


def running_info_json(info: ConsumerRunningInfo) -> dict[str, Any]:
    """``ConsumerRunningInfo`` as JSON, with RocketMQ's field names (``jstack`` only when
    the member sent its thread stacks)."""
    out: dict[str, Any] = {
        "properties": info.properties,
        "subscriptionSet": [
            {"topic": s.topic, "subString": s.sub_string, "expressionType": s.expression_type}
            for s in info.subscriptions
        ],
        "mqTable": [_queue_json(q) for q in info.queues],
        "statusTable": {
            topic: {
                "pullRT": s.pull_rt,
                "pullTPS": s.pull_tps,
                "consumeRT": s.consume_rt,
                "consumeOKTPS": s.consume_ok_tps,
                "consumeFailedTPS": s.consume_failed_tps,
                "consumeFailedMsgs": s.consume_failed_msgs,
            }
            for topic, s in info.status.items()
        },
    }
    if info.jstack is not None:
        out["jstack"] = info.jstack
    return out


def _queue_json(q: ProcessQueueInfo) -> dict[str, Any]:
    return {"topic": q.topic, "brokerName": q.broker_name, "queueId": q.queue_id, **_pq_fields(q)}


def _pq_fields(q: ProcessQueueInfo) -> dict[str, Any]:
    return {
        "commitOffset": q.commit_offset,
        "cachedMsgMinOffset": q.cached_msg_min_offset,
        "cachedMsgMaxOffset": q.cached_msg_max_offset,
        "cachedMsgCount": q.cached_msg_count,
        "cachedMsgSizeInMiB": q.cached_msg_size_in_mib,
        "locked": q.locked,
        "tryUnlockTimes": q.try_unlock_times,
        "lastLockTimestamp": q.last_lock_timestamp,
        "droped": q.droped,
        "lastPullTimestamp": q.last_pull_timestamp,
        "lastConsumeTimestamp": q.last_consume_timestamp,
    }


def print_running_info(info: ConsumerRunningInfo) -> None:
    """RocketMQ's ``ConsumerRunningInfo.formatString`` sections."""
    lines("#Consumer Properties#")
    lines(*(f"{k:<40}: {v}" for k, v in sorted(info.properties.items())))
    lines("", "", "#Consumer Subscription#")
    lines(
        *(
            f"{i:03d} Topic: {s.topic:<40} ClassFilter: {'false':<8} SubExpression: {s.sub_string}"
            for i, s in enumerate(info.subscriptions, 1)
        )
    )
    lines("", "", "#Consumer Offset#")
    table(
        ("#Topic", "#Broker Name", "#QID", "#Consumer Offset"),
        ((q.topic, q.broker_name, q.queue_id, q.commit_offset) for q in info.queues),
    )
    lines("", "", "#Consumer MQ Detail#")
    table(
        ("#Topic", "#Broker Name", "#QID", "#ProcessQueueInfo"),
        (
            (q.topic, q.broker_name, q.queue_id, java_object("ProcessQueueInfo", _pq_fields(q)))
            for q in info.queues
        ),
    )
    lines("", "", "#Consumer RT&TPS#")
    table(
        (
            "#Topic",
            "#Pull RT",
            "#Pull TPS",
            "#Consume RT",
            "#ConsumeOK TPS",
            "#ConsumeFailed TPS",
            "#ConsumeFailedMsgsInHour",
        ),
        (
            (
                topic,
                f"{s.pull_rt:.2f}",
                f"{s.pull_tps:.2f}",
                f"{s.consume_rt:.2f}",
                f"{s.consume_ok_tps:.2f}",
                f"{s.consume_failed_tps:.2f}",
                s.consume_failed_msgs,
            )
            for topic, s in sorted(info.status.items())
        ),
    )
    if info.jstack is not None:
        lines("", "", "#Consumer jstack#", info.jstack.rstrip("\n"))


def _kind(info: ConsumerRunningInfo) -> str:
    kind = info.properties.get(PROP_CONSUME_TYPE, "")
    return {"CONSUME_PASSIVELY": "PUSH", "CONSUME_ACTIVELY": "PULL"}.get(kind, kind)


def _summary_rows(infos: dict[str, ConsumerRunningInfo]) -> list[dict[str, Any]]:
    return [
        {
            "clientId": cid,
            "version": info.properties.get(PROP_CLIENT_VERSION, ""),
            "consumeType": _kind(info),
            "messageModel": info.properties.get("messageModel", ""),
            "orderly": info.properties.get(PROP_CONSUME_ORDERLY, "false") == "true",
            "queues": len(info.queues),
            "cachedMsgCount": sum(q.cached_msg_count for q in info.queues),
        }
        for cid, info in sorted(infos.items())
    ]


def same_subscription(infos: dict[str, ConsumerRunningInfo]) -> bool:
    """True when every member subscribes to the same topics with the same expressions
    (RocketMQ's ``analyzeSubscription``, without its two-minute grace after a start)."""
    return len({info.subscription_key() for info in infos.values()}) <= 1


def shared_queues(infos: dict[str, ConsumerRunningInfo]) -> list[str]:
    """The queues more than one clustering member holds (``topic@broker@queueId``): a
    rebalance that has not converged. RocketMQ's ``analyzeRebalance`` always says OK."""
    holders: dict[str, int] = {}
    for info in infos.values():
        if info.properties.get("messageModel") != "CLUSTERING":
            continue
        for q in info.queues:
            key = f"{q.topic}@{q.broker_name}@{q.queue_id}"
            holders[key] = holders.get(key, 0) + 1
    return sorted(k for k, n in holders.items() if n > 1)


def blocked_queues(infos: dict[str, ConsumerRunningInfo], now_ms: int) -> list[str]:
    """RocketMQ's ``analyzeProcessQueue`` lines for push members: an orderly queue not locked,
    or a concurrent queue with cached messages and nothing consumed for a minute."""
    out: list[str] = []
    for cid, info in sorted(infos.items()):
        if _kind(info) != "PUSH":
            continue
        orderly = info.properties.get(PROP_CONSUME_ORDERLY) == "true"
        for q in info.queues:
            mq = f"MessageQueue [topic={q.topic}, brokerName={q.broker_name}, queueId={q.queue_id}]"
            if orderly and info.properties.get("messageModel") == "CLUSTERING" and not q.locked:
                out.append(f"{cid} {mq} can't lock for a while, {now_ms - q.last_lock_timestamp}ms")
            idle = now_ms - q.last_consume_timestamp
            if not orderly and q.cached_msg_count > 0 and idle > BLOCKED_AFTER_MS:
                out.append(f"{cid} {mq} can't consume for a while, maybe blocked, {idle}ms")
    return out


def _summary_json(infos: dict[str, ConsumerRunningInfo]) -> dict[str, Any]:
    same = same_subscription(infos)
    return {
        "clients": _summary_rows(infos),
        "sameSubscription": same,
        "rebalanceOK": same and not shared_queues(infos),
        "sharedQueues": shared_queues(infos),
        "warnings": blocked_queues(infos, int(time.time() * 1000)),
    }


def _print_summary(infos: dict[str, ConsumerRunningInfo]) -> None:
    summary = _summary_json(infos)
    table(
        (
            "#Index",
            "#ClientId",
            "#Version",
            "#ConsumeType",
            "#MessageModel",
            "#Queues",
            "#CachedMsgs",
        ),
        (
            (
                f"{i:03d}",
                r["clientId"],
                r["version"],
                r["consumeType"],
                r["messageModel"],
                r["queues"],
                r["cachedMsgCount"],
            )
            for i, r in enumerate(summary["clients"], 1)
        ),
    )
    if not summary["sameSubscription"]:
        lines("", "", "WARN: Different subscription in the same group of consumer!!!")
        return
    lines("", "", "Same subscription in the same group of consumer")
    lines("", "", f"Rebalance {'OK' if summary['rebalanceOK'] else 'Failed'}")
    if summary["sharedQueues"]:
        lines("Queues held by more than one member: " + ", ".join(summary["sharedQueues"]))
    lines(*summary["warnings"])


# ---------------------------------------------------------------------- consume directly


async def consume_directly(
    admin: AdminClient, msg: ReceivedMessage, group: str, client_id: str
) -> ConsumeMessageDirectlyResult:
    """Have member ``client_id`` of ``group`` consume ``msg`` directly, through the broker that
    stored it (RocketMQ's ``DefaultMQAdminExt.consumeMessageDirectly``)."""
    host, port, _ = decode_offset_msg_id(msg.offset_msg_id)
    addr = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    return await admin.consume_message_directly(addr, group, client_id, msg)


def direct_result_json(msg_id: str, result: ConsumeMessageDirectlyResult) -> dict[str, Any]:
    """One consume-directly outcome as JSON (RocketMQ's field names)."""
    return {
        "msgId": msg_id,
        "order": result.order,
        "autoCommit": result.auto_commit,
        "consumeResult": result.consume_result.value,
        "remark": result.remark,
        "spentTimeMills": result.spent_time_mills,
    }


def print_direct_result(result: ConsumeMessageDirectlyResult) -> None:
    """RocketMQ's ``ConsumeMessageDirectlyResult.toString``."""
    fields = direct_result_json("", result)
    del fields["msgId"]
    lines(java_object("ConsumeMessageDirectlyResult", fields))
