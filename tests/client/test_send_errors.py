"""The error of a send whose every attempt failed says each thing once."""

from __future__ import annotations

from client.errors import MQClientError, RequestTimeoutError
from client.producer import _exhausted


def test_a_send_that_timed_out_says_so_once_with_a_readable_time() -> None:
    inner = RequestTimeoutError("request 310 to 127.0.0.1:10911", 2.9999913)
    assert str(inner).endswith("request 310 to 127.0.0.1:10911 timed out after 3 s")
    what = f"Send [1] times, still failed, cost [3000]ms, Topic: T, errors: broker-b: {inner}"
    outer = _exhausted(what, inner, 3.0)
    assert isinstance(outer, RequestTimeoutError)  # the outcome is unknown
    assert outer.__cause__ is inner
    assert str(outer).count("timed out after") == 1
    assert str(outer).endswith("timed out after 3 s")


def test_a_send_refused_everywhere_is_a_plain_client_error() -> None:
    refused = MQClientError(17, "no route")
    outer = _exhausted("Send [2] times, still failed", refused, 3.0)
    assert type(outer) is MQClientError
    assert "timed out" not in str(outer)
