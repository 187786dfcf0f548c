"""The SEND_BATCH_MESSAGE body: ``[body, properties, flag]`` arrays, the older maps still read."""

from __future__ import annotations

from typing import Any

import msgpack
import pytest

from client.message import Message
from client.producer import encode_batch
from common.batch_body import encode_batch_entries, entry_fields, plain_rows


def test_the_producer_sends_one_array_per_message() -> None:
    msgs = [Message("T", b"a", tags="x"), Message("T", b"bb", flag=3)]
    wire = msgpack.unpackb(encode_batch(msgs), raw=False)
    assert wire == [[b"a", {"TAGS": "x"}, 0], [b"bb", {}, 3]]


def test_rows_of_either_form_are_the_same() -> None:
    rows = [(b"a", {"k": "v"}, 1), (b"b", None, None)]
    arrays = msgpack.unpackb(encode_batch_entries(rows), raw=False)
    maps = [{"body": b"a", "properties": {"k": "v"}, "flag": 1}, {"body": b"b"}]
    assert list(map(tuple, plain_rows(arrays) or [])) == rows
    assert plain_rows(maps) == rows


@pytest.mark.parametrize(
    "wire",
    [
        [[b"a", None, None], {"body": b"b"}],  # the two forms mixed
        [[b"a", None]],  # too short
        [[b"a", None, None, None]],  # too long
        [["a", None, None]],  # a str body
        [[b"a", [], None]],  # properties not a map
        [[b"a", None, True]],  # a bool flag
        [[b"a", None, 1.0]],
        [{"properties": {}}],  # a map without a body
        [b"a"],
    ],
)
def test_anything_else_needs_a_closer_look(wire: list[Any]) -> None:
    assert plain_rows(wire) is None


@pytest.mark.parametrize(
    ("entry", "fields"),
    [
        ([b"a", {"k": "v"}, 2], (b"a", {"k": "v"}, 2)),
        ({"body": b"a"}, (b"a", None, None)),
        ({"body": 5, "flag": "x"}, (5, None, "x")),  # types are the caller's to check
        ([b"a", None], None),
        ({"flag": 1}, None),
        (7, None),
    ],
)
def test_entry_fields(entry: Any, fields: tuple[Any, ...] | None) -> None:
    assert entry_fields(entry) == fields
