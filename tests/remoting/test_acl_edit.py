"""The ACL admin changes without a broker: the pure document edits (remoting.acl.edit), the wire
codecs (remoting.acl.wire), the atomic 0600 write (remoting.acl.acl_file) and AclService's
changes on real files under tmp_path."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from common.route import DataVersion
from remoting.acl.acl_file import install, write_atomic, write_temp
from remoting.acl.config import AclConfigError, parse_acl_config
from remoting.acl.edit import (
    FILE_HEADER,
    SECRET_MASK,
    AccountChange,
    AclEditError,
    checked,
    delete_account,
    masked_view,
    next_version,
    parse_document,
    render,
    replace_global_white_addrs,
    split_addrs,
    upsert_account,
)
from remoting.acl.permission import DENY, PUB, SUB
from remoting.acl.service import AclService
from remoting.acl.signing import RequestSigner, SessionCredentials
from remoting.acl.wire import (
    AclVersionInfo,
    change_fields,
    decode_acl_config,
    decode_change,
    decode_white_addrs,
    encode_acl_config,
)
from remoting.codes import RequestCode
from remoting.command import RemotingCommand
from remoting.headers import BadRequestError

FILE = """\
# hand written
globalWhiteRemoteAddresses: [10.10.103.*]
accounts:
  - accessKey: RocketMQ
    secretKey: 12345678
    whiteRemoteAddress: 192.168.0.*
    admin: false
    defaultTopicPerm: DENY
    defaultGroupPerm: SUB
    topicPerms: [topicA=DENY, topicB=PUB|SUB]
    groupPerms: [groupA=DENY]
  - accessKey: rocketmq2
    secretKey: "87654321"
    admin: true
"""
MTIME_MS = 1_700_000_000_000
NOW_MS = 1_800_000_000_000


def doc(text: str = FILE):  # type: ignore[no-untyped-def]
    return parse_document(text, MTIME_MS)


# ---------------------------------------------------------------------- documents


def test_a_hand_written_file_is_at_counter_zero_dated_by_its_mtime() -> None:
    assert doc().version == DataVersion(timestamp=MTIME_MS, counter=0)


def test_render_round_trips_through_the_loader() -> None:
    before = doc()
    text = render(before.data, before.version)
    assert text.startswith(FILE_HEADER)
    assert parse_acl_config(text) == before.config
    again = parse_document(text, 0)
    assert again.version == before.version  # kept in the file, as RocketMQ's dataVersion
    assert again.data == before.data
    # RocketMQ's shape, the keys in its order, the numeric secret quoted as text
    raw = yaml.safe_load(text)
    assert list(raw) == ["globalWhiteRemoteAddresses", "dataVersion", "accounts"]
    assert raw["dataVersion"] == [{"timestamp": MTIME_MS, "counter": 0}]
    assert list(raw["accounts"][0])[:3] == ["accessKey", "secretKey", "whiteRemoteAddress"]
    assert raw["accounts"][0]["secretKey"] == "12345678"


def test_an_account_appended_by_hand_to_a_written_file_loads() -> None:
    text = render(doc().data, DataVersion(NOW_MS, 3))
    text += "- accessKey: byhand01\n  secretKey: by-hand-secret\n"
    assert list(parse_acl_config(text).accounts) == ["RocketMQ", "rocketmq2", "byhand01"]


def test_a_bad_data_version_reads_as_none() -> None:
    assert doc(FILE + "dataVersion: [{counter: x}]\n").version.counter == 0
    assert doc(FILE + "dataVersion: [{counter: 4, timestamp: 9}]\n").version == DataVersion(9, 4)


@pytest.mark.parametrize(
    ("prev", "now", "expected"),
    [
        (DataVersion(100, 0), 200, DataVersion(200, 1)),
        (DataVersion(300, 7), 200, DataVersion(300, 8)),  # a clock stepped back: never earlier
    ],
)
def test_next_version(prev: DataVersion, now: int, expected: DataVersion) -> None:
    assert next_version(prev, now) == expected


def test_upsert_adds_an_account_at_the_end() -> None:
    change = AccountChange("newuser1", "new-secret-1", default_topic_perm="PUB")
    text, after = checked(upsert_account(doc(), change), DataVersion(NOW_MS, 1))
    assert list(after.config.accounts) == ["RocketMQ", "rocketmq2", "newuser1"]
    account = after.config.accounts["newuser1"]
    assert (account.secret_key, account.default_topic_perm, account.admin) == (
        "new-secret-1",
        PUB,
        False,
    )
    assert parse_acl_config(text) == after.config


def test_upsert_changes_only_what_is_given_and_clears_blanks() -> None:
    change = AccountChange(
        "RocketMQ", "changed-secret", default_group_perm="PUB|SUB", white_remote_address=""
    )
    _, after = checked(upsert_account(doc(), change), DataVersion(NOW_MS, 1))
    account = after.config.accounts["RocketMQ"]
    assert account.secret_key == "changed-secret"
    assert account.default_group_perm == PUB | SUB
    assert account.white_remote_address is None  # "" removed it
    assert account.resource_perms["topicB"] == PUB | SUB  # kept
    assert account.resource_perms["%RETRY%groupA"] == DENY  # kept
    cleared = AccountChange("RocketMQ", "changed-secret", topic_perms=())
    _, after = checked(upsert_account(doc(), cleared), DataVersion(NOW_MS, 1))
    assert "topicB" not in after.config.accounts["RocketMQ"].resource_perms
    assert list(after.config.accounts) == ["RocketMQ", "rocketmq2"]  # replaced in place


SECRET = "TOPSECRET-VALUE"


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        (AccountChange("short", SECRET), "accessKey must be text longer than 6"),
        (AccountChange("newuser1", "123456"), "secretKey must be text longer than 6"),
        (AccountChange("newuser1", SECRET, default_topic_perm="ALL"), "bad permission 'ALL'"),
        (AccountChange("newuser1", SECRET, topic_perms=("topicA",)), "expected name=PERM"),
        (AccountChange("newuser1", SECRET, group_perms=("g=PUSH",)), "bad permission 'PUSH'"),
        (AccountChange("newuser1", SECRET, white_remote_address="10.0.0.300"), "IPv4 part"),
        (AccountChange("newuser1", SECRET, white_remote_address="a.b.c.d"), "bad part 'a'"),
        (AccountChange("rocketmq2", SECRET, admin=False), "leave no admin account"),
    ],
)
def test_bad_changes_are_refused_with_the_reason_and_no_secret(
    change: AccountChange, reason: str
) -> None:
    with pytest.raises(AclEditError, match=reason) as caught:
        checked(upsert_account(doc(), change), DataVersion(NOW_MS, 1))
    assert SECRET not in str(caught.value)
    assert "123456" not in str(caught.value)


def test_delete() -> None:
    _, after = checked(delete_account(doc(), "RocketMQ", "rocketmq2"), DataVersion(NOW_MS, 1))
    assert list(after.config.accounts) == ["rocketmq2"]
    with pytest.raises(AclEditError, match="cannot delete itself"):
        delete_account(doc(), "rocketmq2", "rocketmq2")
    with pytest.raises(AclEditError, match="no account with accessKey 'nobody12'"):
        delete_account(doc(), "nobody12", "rocketmq2")
    with pytest.raises(AclEditError, match="leave no admin account"):  # the last admin
        checked(delete_account(doc(), "rocketmq2", "RocketMQ"), DataVersion(NOW_MS, 1))
    two_admins = doc(FILE + "  - {accessKey: admin002, secretKey: admin-secret, admin: true}\n")
    _, after = checked(delete_account(two_admins, "rocketmq2", "admin002"), DataVersion(1, 1))
    assert list(after.config.accounts) == ["RocketMQ", "admin002"]


def test_global_white_addrs() -> None:
    data = replace_global_white_addrs(doc(), ["127.0.0.*", "192.168.1.{1,2}"], "127.0.0.1")
    _, after = checked(data, DataVersion(NOW_MS, 1))
    assert [p.text for p in after.config.global_white_remote_addresses] == [
        "127.0.0.*",
        "192.168.1.{1,2}",
    ]
    data = replace_global_white_addrs(doc(), [], "127.0.0.1")
    assert "globalWhiteRemoteAddresses" not in data
    with pytest.raises(AclEditError, match=r"would leave out 127\.0\.0\.1"):
        replace_global_white_addrs(doc(), ["10.0.0.*"], "127.0.0.1")
    with pytest.raises(AclEditError, match="bad part 'x'"):
        replace_global_white_addrs(doc(), ["10.0.0.x"], "127.0.0.1")


@pytest.mark.parametrize(
    ("text", "entries"),
    [
        ("", []),
        ("10.10.103.*", ["10.10.103.*"]),
        (" 10.0.0.1 , 192.168.1.{1,2,3},, 10.0.0.2", ["10.0.0.1", "192.168.1.{1,2,3}", "10.0.0.2"]),
    ],
)
def test_split_addrs(text: str, entries: list[str]) -> None:
    assert split_addrs(text) == entries


def test_masked_view_holds_no_secret() -> None:
    view = masked_view(doc())
    assert view["globalWhiteAddrs"] == ["10.10.103.*"]
    first, second = view["plainAccessConfigs"]
    assert first == {
        "accessKey": "RocketMQ",
        "secretKey": SECRET_MASK,
        "whiteRemoteAddress": "192.168.0.*",
        "admin": False,
        "defaultTopicPerm": "DENY",
        "defaultGroupPerm": "SUB",
        "topicPerms": ["topicA=DENY", "topicB=PUB|SUB"],
        "groupPerms": ["groupA=DENY"],
    }
    assert second["secretKey"] == SECRET_MASK
    assert second["admin"] is True
    assert "12345678" not in repr(view)
    assert "87654321" not in repr(view)


_KEY = st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789-_", min_size=7, max_size=16)
_PERM = st.sampled_from(["PUB", "SUB", "PUB|SUB", "SUB|PUB", "DENY"])
_NAME = st.text(
    alphabet="abcdefghijklmnopqrstuvwxyzABCDEFGHIJ0123456789-_%", min_size=1, max_size=12
)
_CHANGE = st.builds(
    AccountChange,
    _KEY,
    st.one_of(_KEY, st.just("12345678"), st.just("0012345678")),
    white_remote_address=st.one_of(
        st.none(), st.sampled_from(["", "*", "10.0.0.*", "192.168.1.1-100", "10.1.1.{1,2}"])
    ),
    admin=st.one_of(st.none(), st.booleans()),
    default_topic_perm=st.one_of(st.none(), _PERM),
    default_group_perm=st.one_of(st.none(), _PERM),
    topic_perms=st.one_of(
        st.none(), st.lists(st.builds("{}={}".format, _NAME, _PERM), max_size=4).map(tuple)
    ),
    group_perms=st.one_of(
        st.none(), st.lists(st.builds("{}={}".format, _NAME, _PERM), max_size=4).map(tuple)
    ),
)


@settings(max_examples=60, deadline=None)
@given(changes=st.lists(_CHANGE, max_size=6))
def test_any_set_of_accounts_survives_the_file(changes: list[AccountChange]) -> None:
    """Accounts applied one by one, each written and read back: the file always loads as the
    document in force, with each account as last set."""
    current = doc()
    expected: dict[str, dict[str, object]] = {}
    for n, change in enumerate(changes, start=1):
        text, current = checked(upsert_account(current, change), DataVersion(NOW_MS, n))
        current = parse_document(text, 0)
        fields = change.fields()
        expected[change.access_key] = {**expected.get(change.access_key, {}), **fields}
    for key, fields in expected.items():
        account = current.config.accounts[key]
        assert account.secret_key == fields["secretKey"]
        if "admin" in fields:
            assert account.admin is fields["admin"]
        white = fields.get("whiteRemoteAddress")
        if white is not None:
            assert (
                account.white_remote_address.text if account.white_remote_address else ""
            ) == white
    assert current.version.counter == len(changes)


# ---------------------------------------------------------------------- wire


def test_change_header_round_trip() -> None:
    change = AccountChange(
        "newuser1",
        "new-secret-1",
        white_remote_address="10.0.0.*",
        admin=True,
        default_topic_perm="PUB",
        default_group_perm="SUB",
        topic_perms=("a=PUB", "b=SUB"),
        group_perms=(),
    )
    fields = change_fields(change)
    assert fields["topicPerms"] == "a=PUB,b=SUB"
    assert fields["admin"] == "true"
    assert decode_change(fields) == change
    bare = AccountChange("newuser1", "new-secret-1")
    assert set(change_fields(bare)) == {"accessKey", "secretKey"}
    assert decode_change(change_fields(bare)) == bare
    assert "new-secret-1" not in repr(change)


@pytest.mark.parametrize(
    ("fields", "reason"),
    [
        ({"secretKey": "abcdefgh"}, "accessKey is required"),
        ({"accessKey": "abcdefgh"}, "secretKey is required"),
        ({"accessKey": "abcdefgh", "secretKey": "abcdefgh", "admin": "yes"}, "true or false"),
        ({"accessKey": "abcdefgh", "secretKey": 12345678}, "secretKey must be text"),
    ],
)
def test_bad_change_headers(fields: dict[str, object], reason: str) -> None:
    with pytest.raises(BadRequestError, match=reason):
        decode_change(fields)  # type: ignore[arg-type]


def test_white_addrs_header() -> None:
    assert decode_white_addrs({"globalWhiteAddrs": "10.0.0.*,192.168.1.{1,2}"}) == (
        ["10.0.0.*", "192.168.1.{1,2}"],
        None,
    )
    assert decode_white_addrs({"globalWhiteAddrs": "", "aclFileFullPath": "/x.yml"}) == (
        [],
        "/x.yml",
    )
    with pytest.raises(BadRequestError, match="globalWhiteAddrs is required"):
        decode_white_addrs({})


def test_version_info_and_config_bodies() -> None:
    info = AclVersionInfo(
        "broker-a", "127.0.0.1:1", "c1", DataVersion(5, 2), {"/p.yml": DataVersion(5, 2)}
    )
    assert AclVersionInfo.from_fields(info.fields()) == info
    with pytest.raises(BadRequestError, match="missing field version"):
        AclVersionInfo.from_fields({})
    view = masked_view(doc())
    assert decode_acl_config(encode_acl_config(view)) == view
    with pytest.raises(BadRequestError):
        decode_acl_config(b"\x93")


# ---------------------------------------------------------------------- the file


def test_write_atomic_is_0600_and_leaves_no_temp_file(tmp_path: Path) -> None:
    path = tmp_path / "plain_acl.yml"
    path.write_text(FILE)
    path.chmod(0o644)
    leftover = tmp_path / "plain_acl.yml.tmp"
    leftover.write_text("junk")
    leftover.chmod(0o666)
    old_umask = os.umask(0)
    try:
        write_atomic(path, "accounts: []\n")
    finally:
        os.umask(old_umask)
    assert path.read_text() == "accounts: []\n"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert sorted(p.name for p in tmp_path.iterdir()) == ["plain_acl.yml"]


def test_a_crash_before_the_rename_leaves_the_old_file(tmp_path: Path) -> None:
    """The write's two steps in turn: after the first (a crash here), the file is the old one
    and loads; the second puts the new one in place."""
    path = tmp_path / "plain_acl.yml"
    path.write_text(FILE)
    tmp = write_temp(path, "accounts: []\n")
    assert path.read_text() == FILE
    assert parse_acl_config(path.read_text()) == doc().config
    assert stat.S_IMODE(tmp.stat().st_mode) == 0o600
    install(tmp, path)
    assert path.read_text() == "accounts: []\n"
    assert not tmp.exists()


# ---------------------------------------------------------------------- AclService


def _service(tmp_path: Path, text: str = FILE) -> AclService:
    path = tmp_path / "plain_acl.yml"
    path.write_text(text)
    path.chmod(0o600)
    return AclService(path, now_ms=lambda: NOW_MS)


def _signed(creds: SessionCredentials) -> RemotingCommand:
    signer = RequestSigner(creds, now_ms=lambda: NOW_MS)
    return signer(RemotingCommand.request(RequestCode.GET_BROKER_RUNTIME_INFO, {}, opaque=1))


def test_service_change_takes_effect_at_once_without_a_reload(tmp_path: Path) -> None:
    acl = _service(tmp_path)
    creds = SessionCredentials("newuser1", "new-secret-1")
    assert acl.validator.check(_signed(creds), "10.10.103.5:1") is not None
    version = acl.update_account(AccountChange(creds.access_key, creds.secret_key))
    assert version == DataVersion(NOW_MS, 1)
    assert acl.validator.check(_signed(creds), "10.10.103.5:1") is None
    assert not acl.reload_if_changed()  # the watch takes its own write for seen
    assert (acl.reloads, acl.changes) == (0, 1)
    on_disk = parse_document(acl.path.read_text(), 0)
    assert on_disk.version == DataVersion(NOW_MS, 1)
    assert "newuser1" in on_disk.config.accounts
    acl.delete_account("newuser1", "rocketmq2")
    assert (
        acl.validator.check(_signed(creds), "10.10.103.5:1")
        == "no ACL account for accessKey 'newuser1'"
    )
    assert acl.data_version.counter == 2


def test_service_refusal_leaves_the_file_as_it_was(tmp_path: Path) -> None:
    acl = _service(tmp_path)
    before = acl.path.read_bytes()
    with pytest.raises(AclEditError):
        acl.update_account(AccountChange("newuser1", "new-secret-1", default_topic_perm="NONE"))
    assert acl.path.read_bytes() == before
    assert acl.data_version.counter == 0
    assert acl.changes == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["plain_acl.yml"]


def test_service_keeps_a_hand_edit_not_yet_reloaded(tmp_path: Path) -> None:
    acl = _service(tmp_path)
    acl.path.write_text(FILE + "  - {accessKey: byhand01, secretKey: by-hand-secret}\n")
    acl.update_account(AccountChange("newuser1", "new-secret-1"))
    assert set(acl.validator.config.accounts) == {"RocketMQ", "rocketmq2", "byhand01", "newuser1"}
    assert set(parse_acl_config(acl.path.read_text()).accounts) == set(
        acl.validator.config.accounts
    )


def test_service_refuses_changes_while_the_file_does_not_load(tmp_path: Path) -> None:
    acl = _service(tmp_path)
    acl.path.write_text("accounts: [{accessKey: broken, admin: maybe}]\n")
    for _ in range(2):  # also once the watch has seen the bad file
        with pytest.raises(AclEditError, match="does not load"):
            acl.update_account(AccountChange("newuser1", "new-secret-1"))
    assert "broken" in acl.path.read_text()
    assert set(acl.validator.config.accounts) == {"RocketMQ", "rocketmq2"}  # still in force
    acl.path.write_text(FILE)  # fixed
    acl.update_account(AccountChange("newuser1", "new-secret-1"))
    assert "newuser1" in acl.validator.config.accounts


def test_service_load_errors_name_the_file(tmp_path: Path) -> None:
    with pytest.raises(AclConfigError, match=r"bad ACL file .*plain_acl\.yml"):
        _service(tmp_path, "accounts: 3\n")
