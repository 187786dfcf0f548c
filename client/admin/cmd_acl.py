"""``mqadmin`` plain-ACL commands (RocketMQ 4.x's ``tools/command/acl``): updateAclConfig,
deleteAclConfig (alias deleteAccessConfig), updateGlobalWhiteAddr, clusterAclConfigVersion,
getAclConfig (alias getAccessConfigSubCommand).

Each takes ``-b brokerAddr`` or ``-c clusterName`` (every broker of the cluster). ``-a`` /
``-s`` name the account to change; the request itself is signed, as every command's, with
``--accessKey`` / ``--secretKey`` (or ``MINIMQ_ACCESS_KEY`` / ``MINIMQ_SECRET_KEY``, or
``$ROCKETMQ_HOME/conf/tools.yml``), which must be an ``admin: true`` account of the broker.
No secret is ever printed: the brokers mask them in getAclConfig.
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
    java_object,
    lines,
    main,
    on_each_broker,
    run,
    table,
    try_each_broker,
)
from client.admin.cmd_broker import need_target
from remoting.acl.edit import SECRET_MASK, AccountChange, split_addrs

VERSION_HEADERS = (
    "#Cluster Name",
    "#Broker Name",
    "#Broker Addr",
    "#AclFilePath",
    "#AclConfigVersionNum",
    "#AclLastUpdateTime",
)
"""clusterAclConfigVersion's columns (RocketMQ's ``ClusterAclConfigVersionListSubCommand``)."""
ACCOUNT_HEADERS = (
    "#AccessKey",
    "#SecretKey",
    "#WhiteRemoteAddress",
    "#Admin",
    "#DefaultTopicPerm",
    "#DefaultGroupPerm",
    "#TopicPerms",
    "#GroupPerms",
)
"""getAclConfig's account columns (the fields of RocketMQ's ``PlainAccessConfig``)."""

broker_option = click.option("-b", "--brokerAddr", "broker", help="Broker address (host:port).")
cluster_option = click.option(
    "-c", "--clusterName", "cluster", help="Every broker of this cluster."
)


async def _targets(
    admin: AdminClient, broker: str | None, cluster: str | None
) -> list[tuple[str, str]]:
    return await admin.masters(cluster=cluster, broker_addr=broker)


def _perm_list(text: str | None) -> tuple[str, ...] | None:
    """``-t`` / ``-g``: ``a=PUB,b=SUB`` as entries; ``""`` clears the list."""
    if text is None:
        return None
    return tuple(entry.strip() for entry in text.split(",") if entry.strip())


@admin_command("updateAclConfig")
@broker_option
@cluster_option
@click.option("-a", "account", required=True, help="accessKey of the account to add or change.")
@click.option("-s", "secret", required=True, help="Its secretKey (longer than 6 characters).")
@click.option("-w", "white", help='Its whiteRemoteAddress ("" removes it).')
@click.option("-i", "topic_perm", help="Its defaultTopicPerm: PUB, SUB, PUB|SUB or DENY.")
@click.option("-u", "group_perm", help="Its defaultGroupPerm: PUB, SUB, PUB|SUB or DENY.")
@click.option("-t", "topic_perms", help="Its topicPerms, e.g. topicA=DENY,topicD=SUB.")
@click.option("-g", "group_perms", help="Its groupPerms, e.g. groupA=DENY,groupB=SUB.")
@click.option("-m", "is_admin", type=click.BOOL, help="Its admin flag (true or false).")
def update_acl_config(
    namesrv: str | None,
    as_json: bool,
    broker: str | None,
    cluster: str | None,
    account: str,
    secret: str,
    white: str | None,
    topic_perm: str | None,
    group_perm: str | None,
    topic_perms: str | None,
    group_perms: str | None,
    is_admin: bool | None,
) -> None:
    """Update acl config yaml file in broker: add an account, or change the one with this
    accessKey (options not given keep its values)."""
    need_target(broker, cluster)
    change = AccountChange(
        account,
        secret,
        white_remote_address=white,
        admin=is_admin,
        default_topic_perm=topic_perm,
        default_group_perm=group_perm,
        topic_perms=_perm_list(topic_perms),
        group_perms=_perm_list(group_perms),
    )

    async def body(admin: AdminClient) -> list[str]:
        targets = await _targets(admin, broker, cluster)
        done = await on_each_broker(
            targets, lambda addr: admin.create_and_update_plain_access_config(addr, change)
        )
        return [addr for addr, _ in done]

    done = run(namesrv, body)
    shown = {**change.fields(), "secretKey": SECRET_MASK}
    if as_json:
        emit_json({"account": shown, "brokers": done})
        return
    lines(*(f"create or update plain access config to {addr} success." for addr in done))
    lines(java_object("PlainAccessConfig", {k: _java_value(v) for k, v in shown.items()}))


@admin_command("deleteAclConfig")
@broker_option
@cluster_option
@click.option("-a", "account", required=True, help="accessKey of the account to delete.")
def delete_acl_config(
    namesrv: str | None, as_json: bool, broker: str | None, cluster: str | None, account: str
) -> None:
    """Delete Acl Config Account in broker (not the account signing this request, nor the
    last admin account)."""
    need_target(broker, cluster)

    async def body(admin: AdminClient) -> list[str]:
        targets = await _targets(admin, broker, cluster)
        done = await on_each_broker(
            targets, lambda addr: admin.delete_plain_access_config(addr, account)
        )
        return [addr for addr, _ in done]

    done = run(namesrv, body)
    if as_json:
        emit_json({"accessKey": account, "brokers": done})
        return
    lines(*(f"delete plain access config account from {addr} success." for addr in done))
    lines(f"account's accesskey is:{account}")


main.add_command(main.commands["deleteAclConfig"], "deleteAccessConfig")


@admin_command("updateGlobalWhiteAddr")
@broker_option
@cluster_option
@click.option(
    "-g",
    "--globalWhiteRemoteAddresses",
    "addrs",
    required=True,
    help='The whole list, e.g. 10.10.103.*,192.168.0.* ("" removes it).',
)
@click.option("-p", "--aclFileFullPath", "acl_file", help="The broker's ACL file (optional).")
def update_global_white_addr(
    namesrv: str | None,
    as_json: bool,
    broker: str | None,
    cluster: str | None,
    addrs: str,
    acl_file: str | None,
) -> None:
    """Update global white address for acl Config File in broker (replaces the list)."""
    need_target(broker, cluster)
    entries = split_addrs(addrs)

    async def body(admin: AdminClient) -> list[str]:
        targets = await _targets(admin, broker, cluster)
        done = await on_each_broker(
            targets, lambda addr: admin.update_global_white_addr_config(addr, entries, acl_file)
        )
        return [addr for addr, _ in done]

    done = run(namesrv, body)
    if as_json:
        emit_json({"globalWhiteRemoteAddresses": entries, "brokers": done})
        return
    lines(*(f"update global white remote addresses to {addr} success." for addr in done))


@admin_command("clusterAclConfigVersion")
@broker_option
@cluster_option
def cluster_acl_config_version(
    namesrv: str | None, as_json: bool, broker: str | None, cluster: str | None
) -> None:
    """List all of acl config version information in cluster (a broker that does not answer
    is named on stderr, status 1, after the others)."""
    need_target(broker, cluster)

    async def body(admin: AdminClient) -> EachBroker[list[dict[str, Any]]]:
        targets = await _targets(admin, broker, cluster)

        async def rows(addr: str) -> list[dict[str, Any]]:
            info = await admin.examine_broker_cluster_acl_version_info(addr)
            return [
                {
                    "clusterName": info.cluster_name,
                    "brokerName": info.broker_name,
                    "brokerAddr": info.broker_addr,
                    "aclFilePath": path,
                    "aclConfigVersionNum": version.counter,
                    "aclLastUpdateTime": version.timestamp,
                }
                for path, version in sorted(info.all_versions.items())
            ]

        return await try_each_broker(targets, rows)

    result = run(namesrv, body)
    found = [row for _, rows in result.done for row in rows]
    if as_json:
        emit_json(found)
    else:
        table(
            VERSION_HEADERS,
            (
                (
                    r["clusterName"],
                    r["brokerName"],
                    r["brokerAddr"],
                    r["aclFilePath"],
                    r["aclConfigVersionNum"],
                    fmt_time(r["aclLastUpdateTime"]),
                )
                for r in found
            ),
        )
    fail_if_any_failed(result)


@admin_command("getAclConfig")
@broker_option
@cluster_option
def get_acl_config(
    namesrv: str | None, as_json: bool, broker: str | None, cluster: str | None
) -> None:
    """List all of acl config information in cluster: the global white addresses and every
    account, secretKey masked (a broker that does not answer is named on stderr, status 1)."""
    need_target(broker, cluster)

    async def body(admin: AdminClient) -> EachBroker[dict[str, Any]]:
        targets = await _targets(admin, broker, cluster)
        return await try_each_broker(targets, admin.examine_broker_cluster_acl_config)

    result = run(namesrv, body)
    if as_json:
        emit_json(dict(result.done))
    else:
        for addr, config in result.done:
            _print_acl_config(addr, config)
    fail_if_any_failed(result)


main.add_command(main.commands["getAclConfig"], "getAccessConfigSubCommand")


def _print_acl_config(addr: str, config: dict[str, Any]) -> None:
    lines(
        f"============{addr}============",
        f"globalWhiteRemoteAddresses: [{', '.join(config['globalWhiteAddrs'])}]",
    )
    table(ACCOUNT_HEADERS, (_account_row(a) for a in config["plainAccessConfigs"]))


def _java_value(value: Any) -> Any:
    """A list as Java's ``List.toString`` prints it (``[a, b]``); anything else as it is."""
    return f"[{', '.join(map(str, value))}]" if isinstance(value, list) else value


def _account_row(account: dict[str, Any]) -> tuple[Any, ...]:
    return (
        account.get("accessKey", ""),
        account.get("secretKey", ""),
        account.get("whiteRemoteAddress", ""),
        "true" if account.get("admin") else "false",
        account.get("defaultTopicPerm", ""),
        account.get("defaultGroupPerm", ""),
        ",".join(account.get("topicPerms", [])),
        ",".join(account.get("groupPerms", [])),
    )
