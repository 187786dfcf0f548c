"""The ACL's pure core: permissions, address patterns, the accounts file, the request table,
signing and the validator (no sockets; the clock is a ManualClock)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from common.message import MessageConst
from common.record import MessageRecord
from common.subscription import SubscriptionData
from common.topic import SCHEDULE_TOPIC, TRANS_HALF_TOPIC
from remoting.acl.address import AddressPatternError, parse_address_pattern
from remoting.acl.config import (
    AclConfig,
    AclConfigError,
    load_tools_credentials,
    parse_acl_config,
)
from remoting.acl.permission import ANY, DENY, PUB, SUB, check_permission, parse_perm
from remoting.acl.resource import (
    ADMIN_CODES,
    Needs,
    half_message_needs,
    needed_perms,
    stored_topic,
    viewed_message_needs,
)
from remoting.acl.signing import (
    ACCESS_KEY,
    NONCE,
    SIGNATURE,
    TIMESTAMP,
    RequestSigner,
    SessionCredentials,
    signature_matches,
)
from remoting.acl.validator import AclValidator, NonceCache
from remoting.client_bodies import (
    ConsumerData,
    HeartbeatData,
    LockBatchBody,
    LockedQueue,
    encode_heartbeat,
    encode_lock_batch,
)
from remoting.codes import RequestCode
from remoting.command import RemotingCommand
from remoting.errors import RemoteProtocolError
from remoting.frame import FrameDecoder, encode_frame
from tests.conftest import ManualClock
from tests.remoting.strategies import commands, ext_values

SECRET = "s3cret-key-1"
ACCOUNTS = """
globalWhiteRemoteAddresses: []
accounts:
  - accessKey: producer1
    secretKey: s3cret-key-1
    admin: false
    defaultTopicPerm: DENY
    defaultGroupPerm: SUB
    topicPerms: [Orders=PUB, Audit=PUB|SUB, Secret=DENY]
    groupPerms: [blocked=DENY]
  - accessKey: everything
    secretKey: s3cret-key-2
    defaultTopicPerm: PUB|SUB
    defaultGroupPerm: SUB
    topicPerms: [Secret=DENY]
  - accessKey: rocketmq2
    secretKey: "12345678"
    admin: true
  - accessKey: lan-only
    secretKey: s3cret-key-3
    whiteRemoteAddress: 10.1.*
    defaultTopicPerm: PUB|SUB
"""


def _req(code: int, body: bytes = b"", **fields: str) -> RemotingCommand:
    return RemotingCommand.request(code, fields, body, opaque=1)


# ---------------------------------------------------------------------- permissions


@pytest.mark.parametrize(
    ("needed", "owned", "ok"),
    [
        (PUB, PUB, True),
        (SUB, PUB, False),
        (SUB, PUB | SUB, True),
        (PUB, PUB | SUB | DENY, False),  # DENY wins
        (ANY, SUB, True),
        (ANY, PUB, True),
        (ANY, DENY, False),
        (ANY, 0, False),
        (PUB | SUB, SUB, True),
    ],
)
def test_check_permission(needed: int, owned: int, ok: bool) -> None:
    assert check_permission(needed, owned) is ok


@pytest.mark.parametrize(
    ("text", "bits"),
    [("PUB", PUB), ("SUB", SUB), (" PUB|SUB ", PUB | SUB), ("SUB|PUB", PUB | SUB), ("DENY", DENY)],
)
def test_parse_perm(text: str, bits: int) -> None:
    assert parse_perm(text) == bits


@pytest.mark.parametrize("text", ["", "pub", "ALL", "PUB|", "PUB,SUB"])
def test_parse_perm_refuses_unknown(text: str) -> None:
    with pytest.raises(ValueError, match="bad permission"):
        parse_perm(text)


# ---------------------------------------------------------------------- addresses


@pytest.mark.parametrize(
    ("pattern", "ip", "ok"),
    [
        ("*", "1.2.3.4", True),
        ("*.*.*.*", "::1", True),
        ("192.168.0.*", "192.168.0.7", True),
        ("192.168.0.*", "192.168.1.7", False),
        ("192.168.*", "192.168.9.9", True),
        ("10.0.0.1-5", "10.0.0.5", True),
        ("10.0.0.1-5", "10.0.0.6", False),
        ("10.0.0.{1,3}", "10.0.0.3", True),
        ("10.0.0.{1,3}", "10.0.0.2", False),
        ("10.0.0.1,10.0.0.2", "10.0.0.2", True),
        ("10.0.0.1,10.0.0.2", "10.0.0.3", False),
        ("127.0.0.1", "127.0.0.1", True),
        ("::1", "::1", True),
        ("::1", "127.0.0.1", False),
    ],
)
def test_address_patterns(pattern: str, ip: str, ok: bool) -> None:
    assert parse_address_pattern(pattern).matches(ip) is ok


@pytest.mark.parametrize("pattern", ["", "10.0.0", "10.0.0.300", "10.0.0.5-1", "a.b.c.d", "1,x"])
def test_bad_address_patterns(pattern: str) -> None:
    with pytest.raises(AddressPatternError):
        parse_address_pattern(pattern)


# ---------------------------------------------------------------------- accounts file


def test_accounts_file_parsed_as_rocketmq() -> None:
    config = parse_acl_config(ACCOUNTS)
    p = config.accounts["producer1"]
    assert not p.admin
    assert (p.default_topic_perm, p.default_group_perm) == (DENY, SUB)
    assert p.resource_perms == {
        "Orders": PUB,
        "Audit": PUB | SUB,
        "Secret": DENY,
        "%RETRY%blocked": DENY,
    }
    assert config.accounts["rocketmq2"].secret_key == "12345678"  # a YAML number, as text
    assert config.accounts["rocketmq2"].admin
    assert config.accounts["rocketmq2"].default_topic_perm == DENY  # RocketMQ's default
    assert "s3cret" not in repr(p)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("accounts: [{accessKey: abcdefg, secretKey: short}]", "secretKey must be text longer"),
        ("accounts: [{accessKey: abc, secretKey: abcdefgh}]", "accessKey must be text longer"),
        (
            "accounts: [{accessKey: abcdefg, secretKey: abcdefgh, topicPerms: [T=ALL]}]",
            "bad permission 'ALL'",
        ),
        ("accounts: [{accessKey: abcdefg, secretKey: abcdefgh, topicPerms: [T]}]", "name=PERM"),
        ("accounts: [{accessKey: abcdefg, secretKey: abcdefgh, topicPerm: [T=PUB]}]", "unknown"),
        ("accounts: [{accessKey: abcdefg, secretKey: abcdefgh, admin: yes please}]", "admin"),
        (
            "accounts:\n  - {accessKey: abcdefg, secretKey: abcdefgh}\n"
            "  - {accessKey: abcdefg, secretKey: abcdefgh}",
            "appears twice",
        ),
        ("globalWhiteRemoteAddresses: [10.0.0]", "expected 4 parts"),
        ("accounts: {accessKey: x}", "list of maps"),
        ("- just a list", "top level must be a map"),
    ],
)
def test_malformed_accounts_refused(text: str, message: str) -> None:
    with pytest.raises(AclConfigError, match=message):
        parse_acl_config(text)


def test_yaml_error_does_not_echo_the_file() -> None:
    text = "accounts:\n  - accessKey: abcdefg\n    secretKey: [TOPSECRET-unclosed\n"
    with pytest.raises(AclConfigError) as info:
        parse_acl_config(text)
    assert "TOPSECRET" not in str(info.value)
    assert "line" in str(info.value)


def test_empty_file_has_no_account() -> None:
    assert parse_acl_config("") == AclConfig()


def test_tools_yml(tmp_path: Path) -> None:
    path = tmp_path / "tools.yml"
    assert load_tools_credentials(path) is None
    path.write_text("accessKey: rocketmq2\nsecretKey: 12345678\n")
    assert load_tools_credentials(path) == ("rocketmq2", "12345678")
    path.write_text("accessKey: rocketmq2\nsecretKey:\n")
    assert load_tools_credentials(path) is None
    path.write_text("accessKey: [\n")
    with pytest.raises(AclConfigError):
        load_tools_credentials(path)


# ---------------------------------------------------------------------- request table


def test_request_table() -> None:
    send_v2 = _req(RequestCode.SEND_MESSAGE_V2, a="pg", b="Orders")
    assert needed_perms(send_v2) == {"Orders": PUB}
    retry_send = _req(RequestCode.SEND_MESSAGE, producerGroup="g", topic="%RETRY%g")
    assert needed_perms(retry_send) == {"%RETRY%g": SUB}
    pull = _req(RequestCode.PULL_MESSAGE, consumerGroup="cg", topic="Orders")
    assert needed_perms(pull) == {"Orders": SUB, "%RETRY%cg": SUB}
    assert needed_perms(_req(RequestCode.CONSUMER_SEND_MSG_BACK, group="cg")) == {"%RETRY%cg": SUB}
    offsets = _req(RequestCode.UPDATE_CONSUMER_OFFSET, consumerGroup="cg", topic="T")
    assert needed_perms(offsets) == {"T": SUB, "%RETRY%cg": SUB}
    assert needed_perms(_req(RequestCode.QUERY_MESSAGE, topic="T")) == {"T": SUB}
    assert needed_perms(_req(RequestCode.PULL_MESSAGE)) == {}  # missing fields: handler's job
    heartbeat = encode_heartbeat(
        HeartbeatData(
            "c1",
            ("pg",),
            (ConsumerData("cg", subscriptions=(SubscriptionData("Orders"),)),),
        )
    )
    assert needed_perms(_req(RequestCode.HEART_BEAT, heartbeat)) == {
        "%RETRY%cg": SUB,
        "Orders": SUB,
    }
    assert needed_perms(_req(RequestCode.HEART_BEAT, b"\xc1")) == {}


def _lock_body(group: str, *topics: str) -> bytes:
    mqs = tuple(LockedQueue(t, "broker-a", i) for i, t in enumerate(topics))
    return encode_lock_batch(LockBatchBody(group, "c1", mqs))


TOPIC_QUEUE_CODES = (
    RequestCode.GET_MAX_OFFSET,
    RequestCode.GET_MIN_OFFSET,
    RequestCode.GET_EARLIEST_MSG_STORETIME,
    RequestCode.SEARCH_OFFSET_BY_TIMESTAMP,
)


G = "%RETRY%cg"
LOCK, UNLOCK = RequestCode.LOCK_BATCH_MQ, RequestCode.UNLOCK_BATCH_MQ


@pytest.mark.parametrize(
    ("request_", "needs"),
    [
        (_req(LOCK, _lock_body("cg", "A", "B")), {G: SUB, "A": SUB, "B": SUB}),
        (_req(UNLOCK, _lock_body("cg", "A", "A")), {G: SUB, "A": SUB}),
        (_req(LOCK, _lock_body("cg")), {G: SUB}),
        (_req(LOCK, b"\xc1"), {}),  # unparsable: the handler answers
        (_req(RequestCode.END_TRANSACTION, topic="T", producerGroup="pg"), {"T": PUB}),
        (_req(RequestCode.END_TRANSACTION, producerGroup="pg"), {}),  # a 4.9 client: no topic
        (_req(RequestCode.VIEW_MESSAGE_BY_ID, offset="0", topic="T"), {"T": SUB}),
        (_req(RequestCode.VIEW_MESSAGE_BY_ID, offset="0"), {}),
        *((_req(code, topic="T", queueId="0"), {"T": SUB}) for code in TOPIC_QUEUE_CODES),
        *((_req(code, topic=G, queueId="0"), {G: SUB}) for code in TOPIC_QUEUE_CODES),
        (
            _req(RequestCode.QUERY_CONSUMER_OFFSET, consumerGroup="cg", topic="T"),
            {"T": SUB, G: SUB},
        ),
        (_req(RequestCode.GET_CONSUMER_LIST_BY_GROUP, consumerGroup="cg"), {G: SUB}),
        (_req(RequestCode.GET_TOPIC_STATS_INFO, topic="T"), {}),  # signature only
    ],
)
def test_request_table_rows_of_rocketmq_5(request_: RemotingCommand, needs: Needs) -> None:
    assert needed_perms(request_) == needs


@settings(max_examples=100, deadline=None)
@given(
    st.text(min_size=1, max_size=20),
    st.lists(st.text(min_size=1, max_size=20), max_size=6),
    st.sampled_from([RequestCode.LOCK_BATCH_MQ, RequestCode.UNLOCK_BATCH_MQ]),
)
def test_lock_batch_needs_its_group_and_every_topic(
    group: str, topics: list[str], code: int
) -> None:
    got = needed_perms(_req(code, _lock_body(group, *topics)))
    assert got == {"%RETRY%" + group: SUB} | {t: SUB for t in topics}


@settings(max_examples=300, deadline=None)
@given(
    commands(),
    st.sampled_from(
        [
            *TOPIC_QUEUE_CODES,
            RequestCode.LOCK_BATCH_MQ,
            RequestCode.END_TRANSACTION,
            RequestCode.VIEW_MESSAGE_BY_ID,
            RequestCode.HEART_BEAT,
        ]
    ),
)
def test_request_table_never_raises(cmd: RemotingCommand, code: int) -> None:
    """Any header or body (hostile or not) gives needs, never an exception: the handler then
    answers what it cannot parse."""
    needs = needed_perms(dataclasses.replace(cmd, code=code))
    assert needs is not None  # only a server's lookup can say "cannot tell"
    assert all(isinstance(r, str) and r and perm in (PUB, SUB) for r, perm in needs.items())


def _record(topic: str, **props: str) -> MessageRecord:
    return MessageRecord(topic=topic, body=b"", properties=props)


@pytest.mark.parametrize(
    ("record", "topic"),
    [
        (_record("Orders"), "Orders"),
        (_record("%RETRY%cg"), "%RETRY%cg"),
        (_record(TRANS_HALF_TOPIC, **{MessageConst.REAL_TOPIC: "Orders"}), "Orders"),
        (_record(SCHEDULE_TOPIC, **{MessageConst.REAL_TOPIC: "%RETRY%cg"}), "%RETRY%cg"),
        (_record(TRANS_HALF_TOPIC), TRANS_HALF_TOPIC),  # no REAL_TOPIC: the stored one
        (_record("Orders", **{MessageConst.REAL_TOPIC: "Other"}), "Orders"),  # a client's word
    ],
)
def test_stored_topic(record: MessageRecord, topic: str) -> None:
    assert stored_topic(record) == topic
    assert viewed_message_needs(record) == {topic: SUB}


def test_half_message_needs_pub_on_its_real_topic() -> None:
    half = _record(TRANS_HALF_TOPIC, **{MessageConst.REAL_TOPIC: "Orders"})
    assert half_message_needs(half) == {"Orders": PUB}
    assert half_message_needs(_record("Orders")) == {}  # not a half message: handler refuses
    assert half_message_needs(_record(TRANS_HALF_TOPIC)) == {}
    assert half_message_needs(None) == {}
    assert viewed_message_needs(None) == {}


def test_admin_codes_cover_every_config_write() -> None:
    for code in (
        RequestCode.UPDATE_AND_CREATE_TOPIC,
        RequestCode.UPDATE_BROKER_CONFIG,
        RequestCode.DELETE_TOPIC_IN_BROKER,
        RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP,
        RequestCode.DELETE_SUBSCRIPTIONGROUP,
        RequestCode.INVOKE_BROKER_TO_RESET_OFFSET,
        RequestCode.REGISTER_BROKER,
        RequestCode.UNREGISTER_BROKER,
        RequestCode.UPDATE_NAMESRV_CONFIG,
        RequestCode.DELETE_TOPIC_IN_NAMESRV,
        RequestCode.PUT_KV_CONFIG,
    ):
        assert int(code) in ADMIN_CODES
    for code in (RequestCode.GET_ROUTEINFO_BY_TOPIC, RequestCode.SEND_MESSAGE_V2):
        assert int(code) not in ADMIN_CODES


# ---------------------------------------------------------------------- signing

CREDS = SessionCredentials("producer1", SECRET)


def _signer(clock: ManualClock | None = None) -> RequestSigner:
    clock = clock or ManualClock()
    return RequestSigner(CREDS, now_ms=clock)


@settings(max_examples=200, deadline=None)
@given(commands())
def test_verify_accepts_what_sign_made(cmd: RemotingCommand) -> None:
    signed = _signer()(cmd)
    assert signature_matches(SECRET.encode(), signed)
    assert not signature_matches(b"another-secret", signed)


@settings(max_examples=200, deadline=None)
@given(commands(), st.data())
def test_any_single_byte_change_fails(cmd: RemotingCommand, data: st.DataObject) -> None:
    """Flip one byte anywhere in the frame: if the signed parts (code, header, body) changed
    and the frame still decodes, the signature no longer matches."""
    signed = _signer()(cmd)
    frame = bytearray(encode_frame(signed))
    index = data.draw(st.integers(4, len(frame) - 1), label="index")
    frame[index] ^= data.draw(st.integers(1, 255), label="xor")
    decoder = FrameDecoder()
    try:
        decoder.receive_data(bytes(frame))
        decoder.receive_data(b"")
        changed = decoder.next_command()
    except RemoteProtocolError:
        return
    if changed is None:
        return
    same = (changed.code, changed.ext_fields, changed.body) == (
        signed.code,
        signed.ext_fields,
        signed.body,
    )
    assert signature_matches(SECRET.encode(), changed) is same


@settings(max_examples=200, deadline=None)
@given(commands(), st.data())
def test_tampered_body_or_header_fails(cmd: RemotingCommand, data: st.DataObject) -> None:
    signed = _signer()(cmd)
    if signed.body:
        body = bytearray(signed.body)
        body[data.draw(st.integers(0, len(body) - 1))] ^= 1
        assert not signature_matches(SECRET.encode(), dataclasses.replace(signed, body=bytes(body)))
    key = data.draw(st.sampled_from(sorted(k for k in signed.ext_fields if k != SIGNATURE)))
    value = data.draw(
        ext_values.filter(
            lambda v: v != signed.ext_fields[key] or type(v) is not type(signed.ext_fields[key])
        )
    )
    fields = {**signed.ext_fields, key: value}
    assert not signature_matches(SECRET.encode(), dataclasses.replace(signed, ext_fields=fields))
    code = dataclasses.replace(signed, code=signed.code ^ 1)
    assert not signature_matches(SECRET.encode(), code)


def test_field_boundaries_are_signed() -> None:
    """RocketMQ's values-only content makes a=ab,b=c equal a=a,b=bc; ours does not."""
    one = _signer()(_req(10, a="ab", b="c"))
    two = dataclasses.replace(one, ext_fields={**one.ext_fields, "a": "a", "b": "bc"})
    assert not signature_matches(SECRET.encode(), two)


def test_signer_repr_hides_secret() -> None:
    assert SECRET not in repr(_signer())
    assert SECRET not in repr(CREDS)


# ---------------------------------------------------------------------- validator


def _validator(clock: ManualClock, **kwargs: int) -> AclValidator:
    return AclValidator(parse_acl_config(ACCOUNTS), now_ms=clock, **kwargs)


def _signed(
    code: int, clock: ManualClock, key: str = "producer1", secret: str = SECRET, **fields: str
) -> RemotingCommand:
    signer = RequestSigner(SessionCredentials(key, secret), now_ms=clock)
    return signer(_req(code, **fields))


SEND = RequestCode.SEND_MESSAGE_V2
PULL = RequestCode.PULL_MESSAGE
PEER = "127.0.0.1:5555"


def test_validator_accepts_a_signed_permitted_request() -> None:
    clock = ManualClock()
    assert _validator(clock).check(_signed(SEND, clock, a="pg", b="Orders"), PEER) is None


@pytest.mark.parametrize(
    ("fields", "key", "secret", "code", "reason"),
    [
        ({"b": "Orders"}, "producer1", SECRET, PULL, "no SUB permission on topic:Orders"),
        ({"b": "Secret"}, "producer1", SECRET, SEND, "no PUB permission on topic:Secret"),
        ({"b": "Other"}, "producer1", SECRET, SEND, "no PUB permission on topic:Other"),
        ({"b": "Secret"}, "everything", "s3cret-key-2", SEND, "topic:Secret"),  # DENY wins
        (
            {"topic": "Audit", "consumerGroup": "blocked"},
            "producer1",
            SECRET,
            PULL,
            "no SUB permission on group:blocked",
        ),
        ({}, "producer1", SECRET, RequestCode.UPDATE_AND_CREATE_TOPIC, "needs an admin"),
        ({}, "nobody1", SECRET, SEND, "no ACL account for accessKey 'nobody1'"),
        ({"b": "Orders"}, "producer1", "wrong-secret", SEND, "signature check failed"),
        ({"b": "T"}, "lan-only", "s3cret-key-3", SEND, "not in the account's whiteRemoteAddress"),
    ],
)
def test_validator_refusals(
    fields: dict[str, str], key: str, secret: str, code: int, reason: str
) -> None:
    clock = ManualClock()
    if code == PULL and "topic" not in fields:
        fields = {"topic": fields["b"], "consumerGroup": "cg"}
    got = _validator(clock).check(_signed(code, clock, key, secret, **fields), PEER)
    assert got is not None
    assert reason in got
    assert secret not in got


def test_explicit_beats_default_and_admin_passes() -> None:
    clock = ManualClock()
    validator = _validator(clock)
    # producer1's default topic perm is DENY, but Audit is explicitly PUB|SUB
    pull = _signed(PULL, clock, topic="Audit", consumerGroup="cg")
    assert validator.check(pull, PEER) is None
    admin = _signed(RequestCode.UPDATE_AND_CREATE_TOPIC, clock, "rocketmq2", "12345678", topic="T")
    assert validator.check(admin, PEER) is None


def test_lookup_needs_are_checked_with_the_request_s_own() -> None:
    clock = ManualClock()
    validator = _validator(clock)
    end = RequestCode.END_TRANSACTION

    def half_of(topic: str) -> Callable[[RemotingCommand], Needs | None]:
        return lambda request: {topic: PUB}

    own = _signed(end, clock, topic="Orders", producerGroup="pg")
    assert validator.check(own, PEER, half_of("Orders")) is None
    lying = _signed(end, clock, topic="Orders", producerGroup="pg")  # the half is Secret's
    reason = validator.check(lying, PEER, half_of("Secret"))
    assert reason is not None
    assert "no PUB permission on topic:Secret" in reason
    admin = _signed(end, clock, "rocketmq2", "12345678", topic="Orders")
    assert validator.check(admin, PEER, half_of("Secret")) is None


def test_a_lookup_that_cannot_tell_refuses_all_but_admins() -> None:
    clock = ManualClock()
    validator = _validator(clock)
    view = RequestCode.VIEW_MESSAGE_BY_ID

    def cannot_tell(request: RemotingCommand) -> Needs | None:
        return None

    reason = validator.check(_signed(view, clock, "everything", "s3cret-key-2"), PEER, cannot_tell)
    assert reason is not None
    assert "not a message the server can check" in reason
    admin = _signed(view, clock, "rocketmq2", "12345678")
    assert validator.check(admin, PEER, cannot_tell) is None


def _must_not_read(request: RemotingCommand) -> Needs | None:
    raise AssertionError("the store was read for a request that failed authentication")


@pytest.mark.parametrize(("key", "secret"), [("producer1", "wrong-secret"), ("nobody1", SECRET)])
def test_lookup_runs_only_after_authentication(key: str, secret: str) -> None:
    clock = ManualClock()
    validator = _validator(clock)
    forged = _signed(RequestCode.VIEW_MESSAGE_BY_ID, clock, key, secret, offset="0")
    assert validator.check(forged, PEER, _must_not_read) is not None
    assert validator.check(_req(RequestCode.VIEW_MESSAGE_BY_ID, offset="0"), PEER, _must_not_read)


def test_unsigned_request_refused() -> None:
    reason = _validator(ManualClock()).check(_req(SEND, b="Orders"), PEER)
    assert reason is not None
    assert "AccessKey missing" in reason


def test_timestamp_window() -> None:
    """R9: a request dated within ±300 s of the server's clock passes, outside it fails."""
    client, server = ManualClock(), ManualClock()
    validator = _validator(server)
    for skew_ms, ok in ((299_000, True), (-299_000, True), (301_000, False), (-301_000, False)):
        client.now = server.now + skew_ms
        reason = validator.check(_signed(SEND, client, a="pg", b="Orders"), PEER)
        assert (reason is None) is ok, (skew_ms, reason)
        if not ok:
            assert reason is not None
            assert "from the server's clock" in reason


def test_replayed_request_refused() -> None:
    clock = ManualClock()
    validator = _validator(clock)
    request = _signed(SEND, clock, a="pg", b="Orders")
    assert validator.check(request, PEER) is None
    reason = validator.check(request, PEER)
    assert reason is not None
    assert "replayed" in reason
    clock.advance(400_000)  # past the window: refused for its timestamp, still
    assert validator.check(request, PEER) is not None


def test_global_white_list_restricts_but_never_skips_the_signature() -> None:
    clock = ManualClock()
    config = parse_acl_config(
        ACCOUNTS.replace(
            "globalWhiteRemoteAddresses: []", "globalWhiteRemoteAddresses: [127.0.0.*]"
        )
    )
    validator = AclValidator(config, now_ms=clock)
    assert validator.check(_signed(SEND, clock, a="pg", b="Orders"), "10.9.9.9:1") is not None
    unsigned = _req(SEND, b="Orders")
    assert validator.check(unsigned, PEER) is not None  # listed, yet unsigned: refused
    forged = _signed(SEND, clock, secret="not-the-secret", b="Orders")
    assert validator.check(forged, PEER) is not None
    assert validator.check(_signed(SEND, clock, a="pg", b="Orders"), PEER) is None


def test_nonce_cache_is_bounded_and_safe() -> None:
    cache = NonceCache(capacity=3, window_ms=1000)
    now = 10_000
    for i in range(3):
        assert cache.admit(("k", f"n{i}"), now + i, now) is None
    assert cache.admit(("k", "n3"), now + 3, now) is None  # evicts n0 (ts 10000)
    assert len(cache) == 3
    assert cache.floor_ms == now
    reason = cache.admit(("k", "n0"), now, now)  # the forgotten one cannot come back
    assert reason is not None
    assert "replay cache full" in reason
    assert cache.admit(("k", "n1"), now + 1, now) is not None  # still remembered
    assert cache.admit(("k", "late"), now + 5000, now + 5000) is None  # old ones expired
    assert len(cache) == 1


def test_nonce_checked_only_after_the_signature() -> None:
    """A forged request must not burn a legitimate client's nonce."""
    clock = ManualClock()
    validator = _validator(clock)
    good = _signed(SEND, clock, a="pg", b="Orders")
    forged = dataclasses.replace(good, ext_fields={**good.ext_fields, SIGNATURE: "AAAA"})
    assert validator.check(forged, PEER) is not None
    assert validator.check(good, PEER) is None


def test_signed_fields_present() -> None:
    signed = _signer()(_req(SEND, b="Orders"))
    assert {ACCESS_KEY, SIGNATURE, TIMESTAMP, NONCE} <= set(signed.ext_fields)
    assert signed.ext_fields[TIMESTAMP] == str(ManualClock().now)
