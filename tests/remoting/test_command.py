"""RemotingCommand: flags, constructors and the to_wire/from_wire validation."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given

from remoting.codes import LanguageCode, RequestCode, ResponseCode
from remoting.command import RemotingCommand
from remoting.errors import (
    LocalProtocolError,
    ProtocolError,
    RemoteProtocolError,
    RemotingConnectError,
    RemotingError,
    RemotingSendRequestError,
    RemotingTimeoutError,
)
from tests.compiled import is_compiled
from tests.remoting.strategies import commands


def test_request_defaults() -> None:
    req = RemotingCommand.request(RequestCode.PULL_MESSAGE, {"topic": "T", "queueId": 3}, opaque=7)
    assert req.code == 11
    assert req.opaque == 7
    assert req.flag == 0
    assert not req.is_response
    assert not req.is_oneway
    assert req.ext_fields == {"topic": "T", "queueId": 3}
    assert req.body == b""
    assert req.language == LanguageCode.PYTHON


def test_request_copies_ext_fields() -> None:
    fields: dict[str, str | int | float | bool | bytes | None] = {"a": "1"}
    req = RemotingCommand.request(RequestCode.SEND_MESSAGE, fields, b"x", opaque=1)
    fields["a"] = "2"
    assert req.ext_fields == {"a": "1"}


def test_oneway_flag() -> None:
    req = RemotingCommand.request(RequestCode.HEART_BEAT, opaque=1, oneway=True)
    assert req.flag == 2
    assert req.is_oneway
    assert not req.is_response


def test_response_to_copies_opaque_and_sets_flag() -> None:
    req = RemotingCommand.request(RequestCode.SEND_MESSAGE, {"topic": "T"}, b"hello", opaque=42)
    resp = RemotingCommand.response_to(
        req, ResponseCode.SUCCESS, remark="ok", ext_fields={"msgId": "ABC"}
    )
    assert resp.opaque == 42
    assert resp.flag == 1
    assert resp.is_response
    assert not resp.is_oneway
    assert resp.code == ResponseCode.SUCCESS
    assert resp.remark == "ok"
    assert resp.ext_fields == {"msgId": "ABC"}
    assert resp.body == b""


def test_frozen() -> None:
    cmd = RemotingCommand.request(RequestCode.SEND_MESSAGE, opaque=1)
    with pytest.raises(AttributeError):
        cmd.opaque = 2  # type: ignore[misc]
    assert hash(cmd) == hash(RemotingCommand.request(RequestCode.SEND_MESSAGE, opaque=1))


def test_to_wire_omits_empty_fields() -> None:
    wire = RemotingCommand.request(RequestCode.SEND_MESSAGE, opaque=5).to_wire()
    assert wire == {"code": 10, "language": 3, "version": 0, "opaque": 5, "flag": 0}
    assert all(type(v) is int for v in wire.values())


@given(commands())
def test_wire_round_trip(cmd: RemotingCommand) -> None:
    assert RemotingCommand.from_wire(cmd.to_wire()) == cmd


def test_from_wire_defaults() -> None:
    cmd = RemotingCommand.from_wire({"code": 10, "opaque": 1})
    assert cmd == RemotingCommand(code=10, opaque=1, language=LanguageCode.OTHER)


def test_from_wire_keeps_unknown_code_and_language() -> None:
    cmd = RemotingCommand.from_wire({"code": 9999, "opaque": 1, "language": 77, "extra": [1]})
    assert cmd.code == 9999
    assert cmd.language == 77


GOOD: dict[str, Any] = {"code": 10, "opaque": 1}


@pytest.mark.parametrize(
    ("wire", "match"),
    [
        ([1, 2], "must be a map"),
        ({"opaque": 1}, "no 'code'"),
        ({"code": 10}, "no 'opaque'"),
        ({**GOOD, "code": "10"}, "'code' must be an int"),
        ({**GOOD, "code": True}, "'code' must be an int"),
        ({**GOOD, "opaque": 1.5}, "'opaque' must be an int"),
        ({**GOOD, "opaque": 2**31}, "signed 32-bit"),
        ({**GOOD, "flag": None}, "'flag' must be an int"),
        ({**GOOD, "language": "JAVA"}, "'language' must be an int"),
        ({**GOOD, "language": 2**40}, "'language' = 1099511627776 does not fit"),
        ({**GOOD, "version": b"1"}, "'version' must be an int"),
        ({**GOOD, "remark": 3}, "'remark' must be a str"),
        ({**GOOD, "body": "text"}, "'body' must be bytes"),
        ({**GOOD, "extFields": [("a", "b")]}, "'extFields' must be a map"),
        ({**GOOD, "extFields": {1: "b"}}, "key 1 must be a str"),
        ({**GOOD, "extFields": {"a": [1]}}, r"extFields\['a'\] must be"),
        ({**GOOD, "extFields": {"a": {"b": 1}}}, r"extFields\['a'\] must be"),
    ],
)
def test_from_wire_rejects(wire: object, match: str) -> None:
    with pytest.raises(RemoteProtocolError, match=match):
        RemotingCommand.from_wire(wire)


@pytest.mark.parametrize(
    "make",
    [
        lambda: RemotingCommand(code=10, opaque=2**31),
        lambda: RemotingCommand(code="10", opaque=1),  # type: ignore[arg-type]
        lambda: RemotingCommand(code=10, opaque=1, body="x"),  # type: ignore[arg-type]
        lambda: RemotingCommand(code=10, opaque=1, language=-(2**31) - 1),
        lambda: RemotingCommand(code=10, opaque=1, ext_fields={"a": [1]}),  # type: ignore
    ],
)
def test_to_wire_rejects(make: Callable[[], RemotingCommand]) -> None:
    # the compiled build checks a field's declared type as it is set: a TypeError at once
    compiled = is_compiled("remoting.command")
    refused = (LocalProtocolError, TypeError) if compiled else LocalProtocolError
    with pytest.raises(refused):
        make().to_wire()


def test_protocol_error_is_abstract() -> None:
    with pytest.raises(TypeError):
        ProtocolError("x")
    assert issubclass(LocalProtocolError, ProtocolError)
    assert issubclass(RemoteProtocolError, ProtocolError)
    assert issubclass(ProtocolError, RemotingError)


def test_io_errors_carry_data() -> None:
    assert RemotingConnectError("127.0.0.1:9876").addr == "127.0.0.1:9876"
    err = RemotingTimeoutError("127.0.0.1:10911", 3.0)
    assert (err.addr, err.timeout) == ("127.0.0.1:10911", 3.0)
    assert "3.0" in str(err)
    assert RemotingSendRequestError("h:1").addr == "h:1"
