"""The plain-ACL admin requests (50-54) on a real in-process broker (real sockets on
127.0.0.1, the accounts file under tmp_path): who may send them, what they change, and that
a change is in force for the very next request."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import trio

from remoting.acl.edit import SECRET_MASK, AccountChange, parse_document
from remoting.acl.signing import SessionCredentials
from remoting.acl.wire import (
    AclVersionInfo,
    change_fields,
    decode_acl_config,
    delete_fields,
    white_addrs_fields,
)
from remoting.codes import (
    DELETE_ACL_CONFIG_FAILED,
    UPDATE_AND_CREATE_ACL_CONFIG_FAILED,
    UPDATE_GLOBAL_WHITE_ADDRS_CONFIG_FAILED,
    RequestCode,
    ResponseCode,
)
from remoting.command import RemotingCommand
from tests.broker.inprocess import req, running_broker, send_req
from tests.broker.test_acl import (
    ADMIN,
    PRODUCER,
    READER,
    TOPIC,
    acl_broker,
    create_topic,
    signed_client,
)

NEWCOMER = SessionCredentials("newcomer1", "newcomer-secret")


def update_req(change: AccountChange) -> RemotingCommand:
    return req(RequestCode.UPDATE_AND_CREATE_ACL_CONFIG, **change_fields(change))


def every_admin_req() -> list[RemotingCommand]:
    return [
        update_req(AccountChange(NEWCOMER.access_key, NEWCOMER.secret_key, admin=True)),
        req(RequestCode.DELETE_ACL_CONFIG, **delete_fields(PRODUCER.access_key)),
        req(RequestCode.GET_BROKER_CLUSTER_ACL_INFO),
        req(RequestCode.UPDATE_GLOBAL_WHITE_ADDRS_CONFIG, **white_addrs_fields(["127.0.0.1"])),
        req(RequestCode.GET_BROKER_CLUSTER_ACL_CONFIG),
    ]


async def test_only_admin_accounts_may_send_them(tmp_path: Path) -> None:
    async with acl_broker(tmp_path) as (broker, addr):
        acl_file = tmp_path / "plain_acl.yml"
        before = acl_file.read_bytes()
        for creds, reason in ((None, "AccessKey missing"), (READER, "needs an admin account")):
            async with signed_client(creds) as client:
                for request in every_admin_req():
                    resp = await client.invoke(addr, request)
                    assert resp.code == ResponseCode.NO_PERMISSION, (request.code, resp.remark)
                    assert reason in resp.remark
        assert acl_file.read_bytes() == before
        assert broker.acl is not None
        assert broker.acl.changes == 0
        async with signed_client(ADMIN) as admin:
            for request in every_admin_req():
                resp = await admin.invoke(addr, request)
                assert resp.code == ResponseCode.SUCCESS, (request.code, resp.remark)
        assert broker.acl.changes == 3


async def test_acl_off_answers_an_error(tmp_path: Path) -> None:
    expected = [
        UPDATE_AND_CREATE_ACL_CONFIG_FAILED,
        DELETE_ACL_CONFIG_FAILED,
        ResponseCode.SYSTEM_ERROR,
        UPDATE_GLOBAL_WHITE_ADDRS_CONFIG_FAILED,
        ResponseCode.SYSTEM_ERROR,
    ]
    async with running_broker(tmp_path) as (_, addr), signed_client(None) as client:
        for request, code in zip(every_admin_req(), expected, strict=True):
            resp = await client.invoke(addr, request)
            assert resp.code == code, (request.code, resp.remark)
            assert "ACL is not enabled on this broker (aclEnable=false)" in resp.remark
    assert not (tmp_path / "store" / "config" / "plain_acl.yml").exists()


async def test_a_new_account_works_at_once_and_a_deleted_one_is_refused_at_once(
    tmp_path: Path,
) -> None:
    async with acl_broker(tmp_path) as (broker, addr), signed_client(ADMIN) as admin:
        await create_topic(addr)
        assert broker.acl is not None
        async with signed_client(NEWCOMER) as newcomer:
            resp = await newcomer.invoke(addr, send_req(TOPIC, b"before"))
            assert resp.code == ResponseCode.NO_PERMISSION
            change = AccountChange(
                NEWCOMER.access_key, NEWCOMER.secret_key, topic_perms=(f"{TOPIC}=PUB",)
            )
            resp = await admin.invoke(addr, update_req(change))
            assert resp.code == ResponseCode.SUCCESS, resp.remark
            resp = await newcomer.invoke(addr, send_req(TOPIC, b"after"))
            assert resp.code == ResponseCode.SUCCESS, resp.remark
            resp = await admin.invoke(
                addr, req(RequestCode.DELETE_ACL_CONFIG, **delete_fields(NEWCOMER.access_key))
            )
            assert resp.code == ResponseCode.SUCCESS, resp.remark
            resp = await newcomer.invoke(addr, send_req(TOPIC, b"gone"))
            assert resp.code == ResponseCode.NO_PERMISSION
            assert "no ACL account for accessKey 'newcomer1'" in resp.remark
        assert broker.acl.reloads == 0  # in force without the file watch
        assert broker.acl.reload_if_changed() is False  # and the watch sees nothing new


async def test_refusals_change_nothing_and_hold_no_secret(tmp_path: Path) -> None:
    async with acl_broker(tmp_path) as (broker, addr), signed_client(ADMIN) as admin:
        acl_file = tmp_path / "plain_acl.yml"
        before = acl_file.read_bytes()
        cases = [
            (update_req(AccountChange("newuser1", "short")), "secretKey must be text longer"),
            (
                update_req(AccountChange("newuser1", "TOPSECRET-1", default_topic_perm="ALL")),
                "bad permission 'ALL'",
            ),
            (
                update_req(AccountChange("newuser1", "TOPSECRET-1", white_remote_address="1.2.3")),
                "bad address pattern",
            ),
            (
                update_req(AccountChange(ADMIN.access_key, "TOPSECRET-1", admin=False)),
                "leave no admin account",
            ),
            (
                req(RequestCode.DELETE_ACL_CONFIG, **delete_fields(ADMIN.access_key)),
                "cannot delete itself",
            ),
            (req(RequestCode.DELETE_ACL_CONFIG, **delete_fields("nobody99")), "no account"),
            (req(RequestCode.DELETE_ACL_CONFIG), "accessKey is required"),
            (
                req(RequestCode.UPDATE_GLOBAL_WHITE_ADDRS_CONFIG, **white_addrs_fields(["10.9.*"])),
                "would leave out 127.0.0.1",
            ),
            (
                req(
                    RequestCode.UPDATE_GLOBAL_WHITE_ADDRS_CONFIG,
                    **white_addrs_fields([], str(tmp_path / "other.yml")),
                ),
                "is not this broker's ACL file",
            ),
        ]
        for request, reason in cases:
            resp = await admin.invoke(addr, request)
            assert resp.code != ResponseCode.SUCCESS, request
            assert reason in resp.remark, resp.remark
            assert "TOPSECRET" not in resp.remark
        assert acl_file.read_bytes() == before
        assert broker.acl is not None
        assert broker.acl.data_version.counter == 0


async def test_versions_masked_config_and_the_file_written(tmp_path: Path) -> None:
    async with acl_broker(tmp_path) as (broker, addr), signed_client(ADMIN) as admin:
        acl_file = tmp_path / "plain_acl.yml"

        async def version() -> AclVersionInfo:
            resp = await admin.invoke(addr, req(RequestCode.GET_BROKER_CLUSTER_ACL_INFO))
            assert resp.code == ResponseCode.SUCCESS, resp.remark
            return AclVersionInfo.from_fields(resp.ext_fields)

        first = await version()
        assert (first.broker_name, first.broker_addr) == (broker.config.broker_name, addr)
        assert first.cluster_name == broker.config.broker_cluster_name
        assert first.version.counter == 0
        assert first.all_versions == {str(acl_file): first.version}
        for n, perm in enumerate(("PUB", "SUB"), start=1):
            change = AccountChange(
                NEWCOMER.access_key, NEWCOMER.secret_key, default_topic_perm=perm
            )
            assert (await admin.invoke(addr, update_req(change))).code == ResponseCode.SUCCESS
            now = await version()
            assert now.version.counter == n
            assert now.version.timestamp >= first.version.timestamp
        resp = await admin.invoke(
            addr,
            req(RequestCode.UPDATE_GLOBAL_WHITE_ADDRS_CONFIG, **white_addrs_fields(["127.0.0.*"])),
        )
        assert resp.code == ResponseCode.SUCCESS, resp.remark
        assert (await version()).version.counter == 3

        resp = await admin.invoke(addr, req(RequestCode.GET_BROKER_CLUSTER_ACL_CONFIG))
        assert resp.code == ResponseCode.SUCCESS, resp.remark
        for secret in (
            ADMIN.secret_key,
            PRODUCER.secret_key,
            READER.secret_key,
            NEWCOMER.secret_key,
        ):
            assert secret.encode() not in resp.body
        config = decode_acl_config(resp.body)
        assert config["globalWhiteAddrs"] == ["127.0.0.*"]
        by_key = {a["accessKey"]: a for a in config["plainAccessConfigs"]}
        assert set(by_key) == {"producer1", "reader01", "rocketmq2", "newcomer1"}
        assert {a["secretKey"] for a in by_key.values()} == {SECRET_MASK}
        assert by_key["newcomer1"]["defaultTopicPerm"] == "SUB"
        assert by_key["rocketmq2"]["admin"] is True

        # the file: 0600, no temp file left, loads as what is in force, version kept in it
        assert stat.S_IMODE(acl_file.stat().st_mode) == 0o600
        assert sorted(n for n in os.listdir(tmp_path) if n.startswith("plain_acl")) == [
            "plain_acl.yml"
        ]
        on_disk = parse_document(acl_file.read_text(), 0)
        assert broker.acl is not None
        assert on_disk.config == broker.acl.validator.config
        assert on_disk.version.counter == 3


async def test_concurrent_changes_lose_none(tmp_path: Path) -> None:
    count = 12
    async with acl_broker(tmp_path) as (broker, addr):

        async def add(n: int) -> None:
            async with signed_client(ADMIN) as admin:
                change = AccountChange(f"user{n:04d}", f"secret-{n:04d}", default_topic_perm="PUB")
                resp = await admin.invoke(addr, update_req(change))
                assert resp.code == ResponseCode.SUCCESS, resp.remark

        async with trio.open_nursery() as nursery:
            for n in range(count):
                nursery.start_soon(add, n)
        on_disk = parse_document((tmp_path / "plain_acl.yml").read_text(), 0)
        added = {f"user{n:04d}" for n in range(count)}
        assert added <= set(on_disk.config.accounts)
        assert on_disk.version.counter == count
        assert broker.acl is not None
        assert added <= set(broker.acl.validator.config.accounts)
