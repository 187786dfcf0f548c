"""``mqadmin`` name-server commands: wipeWritePerm, addWritePerm (RocketMQ's
``WipeWritePermSubCommand`` / ``AddWritePermSubCommand``), getNamesrvConfig,
updateNamesrvConfig, updateKvConfig, deleteKvConfig and updateOrderConf (RocketMQ's
``GetNamesrvConfigCommand``, ``UpdateNamesrvConfigCommand``, ``UpdateKvConfigCommand``,
``DeleteKvConfigCommand``, ``UpdateOrderConfCommand``).

Every one of them asks each name server of ``-n`` / ``NAMESRV_ADDR`` in turn, as RocketMQ's
do; one that fails does not stop the others, and then one line on stderr names it (with the
name servers where it was done) and the command exits 1.

wipeWritePerm and addWritePerm print one line per name server that answered, with the number
of topics it changed, as RocketMQ's::

    wipe write perm of broker[broker-a] in name server[127.0.0.1:9876] OK, 12

``-b`` is a broker name (``clusterList``'s ``#Broker Name``); a name no name
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
    fail,
    fail_if_any_failed,
    lines,
    on_each_broker,
    run,
    show_configs,
    try_each_broker,
    warn,
)
from client.errors import MQClientError
from common.route import NAMESPACE_ORDER_TOPIC_CONFIG
from remoting.codes import ResponseCode

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


NamesrvCall = Callable[[AdminClient, str], Awaitable[Any]]
"""``(admin, name server address) -> result``: one request to one name server."""


def on_each_namesrv(namesrv: str | None, call: NamesrvCall) -> list[str]:
    """``call`` on every name server, in turn; the addresses where it was done. One that
    fails does not stop the others; then the command fails naming it (see
    :func:`~client.admin.base.on_each_broker`)."""

    return run(namesrv, lambda admin: each_namesrv(admin, call))


async def each_namesrv(admin: AdminClient, call: NamesrvCall) -> list[str]:
    """:func:`on_each_namesrv` inside a command's body that does more with ``admin``."""
    targets = [(addr, addr) for addr in admin.namesrv_addrs]
    done = await on_each_broker(targets, lambda addr: call(admin, addr))
    return [addr for addr, _ in done]


@admin_command("getNamesrvConfig")
def get_namesrv_config(namesrv: str | None, as_json: bool) -> None:
    """Get configs of name server: the effective config of each name server of -n (as
    mqnamesrv -p prints it)."""

    async def body(admin: AdminClient) -> EachBroker[dict[str, str]]:
        targets = [(addr, addr) for addr in admin.namesrv_addrs]
        return await try_each_broker(targets, admin.namesrv_config)

    show_configs(run(namesrv, body), as_json)


@admin_command("updateNamesrvConfig")
@click.option("-k", "--key", required=True, help="Config key (see below).")
@click.option("-v", "--value", required=True, help="Config value.")
def update_namesrv_config(namesrv: str | None, as_json: bool, key: str, value: str) -> None:
    """Update configs of name server, on every name server of -n.

    Only scanNotActiveBrokerInterval, brokerChannelExpiredTime, productEnvName, clusterTest
    and orderMessageEnable change at runtime; a name server refuses any other key (and
    kvConfigPath, rocketmqHome: RocketMQ's configBlackList) and changes nothing. The change
    lasts until the name server restarts (put it in its -c file to keep it).
    """
    done = on_each_namesrv(
        namesrv, lambda admin, addr: admin.update_namesrv_config(addr, {key: value})
    )
    if as_json:
        emit_json({"key": key, "value": value, "namesrvAddrs": done})
        return
    lines(f"update name server config success!{_bracketed(done)}", f"{key} : {value}")


@admin_command("updateKvConfig")
@click.option("-s", "--namespace", required=True, help="The namespace.")
@click.option("-k", "--key", required=True, help="The key name.")
@click.option("-v", "--value", required=True, help="The key value.")
def update_kv_config(
    namesrv: str | None, as_json: bool, namespace: str, key: str, value: str
) -> None:
    """Create or update KV config, on every name server of -n (each saves it to its
    kvConfigPath, so it survives a restart)."""
    done = on_each_namesrv(
        namesrv, lambda admin, addr: admin.put_kv_config(addr, namespace, key, value)
    )
    if as_json:
        emit_json({"namespace": namespace, "key": key, "value": value, "namesrvAddrs": done})
        return
    lines("create or update kv config to namespace success.")


@admin_command("deleteKvConfig")
@click.option("-s", "--namespace", required=True, help="The namespace.")
@click.option("-k", "--key", required=True, help="The key name.")
def delete_kv_config(namesrv: str | None, as_json: bool, namespace: str, key: str) -> None:
    """Delete KV config, on every name server of -n (a key that is not there is no
    error)."""
    done = on_each_namesrv(
        namesrv, lambda admin, addr: admin.delete_kv_config(addr, namespace, key)
    )
    if as_json:
        emit_json({"namespace": namespace, "key": key, "namesrvAddrs": done})
        return
    lines("delete kv config from namespace success.")


ORDER_CONF_METHODS = ("get", "put", "delete")


@admin_command("updateOrderConf")
@click.option("-t", "--topic", required=True, help="Topic name.")
@click.option(
    "-v", "--orderConf", "order_conf", help="With -m put: brokerName1:num;brokerName2:num."
)
@click.option(
    "-m",
    "--method",
    required=True,
    type=click.Choice(ORDER_CONF_METHODS),
    help="put, get or delete.",
)
def update_order_conf(
    namesrv: str | None, as_json: bool, topic: str, order_conf: str | None, method: str
) -> None:
    """Create or update or delete order conf: the topic's entry of the name servers' KV
    namespace ORDER_TOPIC_CONFIG.

    put and delete go to every name server of -n; get asks them in turn until one answers. A
    name server with orderMessageEnable=true hands the entry to clients in the topic's route
    (orderTopicConf); a put warns about each name server where it is false.
    """
    if method == "get":
        _get_order_conf(namesrv, as_json, topic)
    elif method == "put":
        _put_order_conf(namesrv, as_json, topic, parse_order_conf(order_conf or ""))
    else:
        done = on_each_namesrv(
            namesrv,
            lambda admin, addr: admin.delete_kv_config(addr, NAMESPACE_ORDER_TOPIC_CONFIG, topic),
        )
        if as_json:
            emit_json({"topic": topic, "namesrvAddrs": done})
            return
        lines(f"delete orderConf success. topic=[{topic}]")


def parse_order_conf(text: str) -> str:
    """``-v`` checked to be ``brokerName:num`` items (num > 0) separated by ``;``, trimmed;
    a usage error naming the bad item otherwise (RocketMQ stores any text, and its clients then
    fail to parse a bad one)."""
    items = [item.strip() for item in text.split(";") if item.strip()]
    if not items:
        raise click.BadParameter("please set orderConf with option -v.", param_hint="-v")
    for item in items:
        name, sep, num = item.partition(":")
        if not sep or not name.strip() or not num.strip().isdigit() or int(num) <= 0:
            raise click.BadParameter(
                f"{item!r} is not brokerName:num (num > 0), e.g. broker-a:4;broker-b:4",
                param_hint="-v",
            )
    return ";".join(items)


def _get_order_conf(namesrv: str | None, as_json: bool, topic: str) -> None:
    """The topic's entry from the first name server that answers; a failure when it has
    none."""

    async def body(admin: AdminClient) -> str | None:
        errors: list[str] = []
        for addr in admin.namesrv_addrs:
            try:
                return await admin.get_kv_config(addr, NAMESPACE_ORDER_TOPIC_CONFIG, topic)
            except MQClientError as exc:
                errors.append(f"{addr}: {exc.reason}")
        raise MQClientError(
            ResponseCode.SYSTEM_ERROR, f"no name server answered ({'; '.join(errors)})"
        )

    conf = run(namesrv, body)
    if conf is None:
        fail(f"no order conf of topic {topic} (KV namespace {NAMESPACE_ORDER_TOPIC_CONFIG})")
    if as_json:
        emit_json({"topic": topic, "orderConf": conf})
        return
    lines(f"get orderConf success. topic=[{topic}], orderConf=[{conf}]")


def _put_order_conf(namesrv: str | None, as_json: bool, topic: str, conf: str) -> None:
    """Store the entry on every name server, then warn about the ones whose routes will not
    carry it (orderMessageEnable=false)."""

    async def body(admin: AdminClient) -> tuple[list[str], list[str]]:
        done = await each_namesrv(
            admin,
            lambda adm, addr: adm.put_kv_config(addr, NAMESPACE_ORDER_TOPIC_CONFIG, topic, conf),
        )
        return done, [a for a in done if not await _order_message_enabled(admin, a)]

    done, disabled = run(namesrv, body)
    if as_json:
        emit_json({"topic": topic, "orderConf": conf, "namesrvAddrs": done})
    else:
        lines(f"update orderConf success. topic=[{topic}], orderConf=[{conf}]")
    if disabled:
        warn(
            f"orderMessageEnable is false on {', '.join(disabled)}: routes from there do not "
            "carry orderTopicConf (mqadmin updateNamesrvConfig -k orderMessageEnable -v true)"
        )


async def _order_message_enabled(admin: AdminClient, addr: str) -> bool:
    """True when name server ``addr`` says ``orderMessageEnable=true`` (or cannot say)."""
    try:
        config = await admin.namesrv_config(addr)
    except MQClientError:
        return True
    return config.get("orderMessageEnable", "true").strip().lower() == "true"


def _bracketed(addrs: list[str]) -> str:
    """``[a, b]``, as Java prints a list."""
    return "[" + ", ".join(addrs) + "]"
