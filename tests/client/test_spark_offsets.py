"""The Spark connector's pure parts (offsets, options) and that ``import client`` stays free of
pyspark; no Spark needed."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from client.spark.offsets import (
    OffsetError,
    dumps,
    from_nested,
    parse_spec,
    resolve,
    split_limit,
    to_nested,
    unknown_queues,
)
from client.spark.options import OptionError, parse_read, parse_write

A0, A1, B0 = ("T", "broker-a", 0), ("T", "broker-a", 1), ("T", "broker-b", 0)


def test_import_client_does_not_import_pyspark() -> None:
    code = (
        "import client, client.blocking, client.spark.offsets, client.spark.options, sys; "
        "assert 'pyspark' not in sys.modules and 'pyarrow' not in sys.modules"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_nested_round_trip_uses_string_queue_ids() -> None:
    offsets = {A0: 5, A1: 7, B0: 0}
    nested = to_nested(offsets)
    assert nested == {"T": {"broker-a": {"0": 5, "1": 7}, "broker-b": {"0": 0}}}
    assert from_nested(json.loads(dumps(offsets))) == offsets


@pytest.mark.parametrize(
    "bad",
    [
        [],
        {"T": 1},
        {"T": {"b": 3}},
        {"T": {"b": {"x": 1}}},
        {"T": {"b": {"0": "1"}}},
        {"T": {"b": {"0": -3}}},
        {"T": {"b": {"-1": 0}}},
        {"T": {"b": {"0": True}}},
    ],
)
def test_from_nested_rejects_bad_shapes(bad: object) -> None:
    with pytest.raises(OffsetError, match="startingOffsets"):
        from_nested(bad, "startingOffsets")


def test_parse_spec_and_resolve() -> None:
    assert parse_spec(" Earliest ", "s") == "earliest"
    assert parse_spec("latest", "s") == "latest"
    spec = parse_spec('{"T": {"broker-a": {"0": -2, "1": -1}}}', "s")
    bounds = {A0: (3, 10), A1: (0, 4), B0: (2, 9)}
    assert resolve(spec, bounds, default="latest") == {A0: 3, A1: 4, B0: 9}
    assert resolve(spec, bounds, default="earliest") == {A0: 3, A1: 4, B0: 2}
    assert resolve("earliest", bounds, default="latest") == {A0: 3, A1: 0, B0: 2}
    assert resolve("latest", bounds, default="earliest") == {A0: 10, A1: 4, B0: 9}
    assert unknown_queues({("T", "broker-c", 0): 1, A0: 1}, bounds) == [("T", "broker-c", 0)]
    with pytest.raises(OffsetError, match="endingOffsets"):
        parse_spec("{oops", "endingOffsets")


def test_split_limit_is_proportional_to_backlog() -> None:
    start = {A0: 0, A1: 0, B0: 0}
    assert split_limit(start, {A0: 30, A1: 30, B0: 0}, 20) == {A0: 10, A1: 10, B0: 0}
    assert split_limit(start, {A0: 20, A1: 10, B0: 0}, 20) == {A0: 13, A1: 6, B0: 0}
    # everything fits: the latest offsets
    assert split_limit(start, {A0: 5, A1: 5, B0: 5}, 20) == {A0: 5, A1: 5, B0: 5}
    # a share below one message is rounded up so the queue moves
    got = split_limit({A0: 100, A1: 0, B0: 0}, {A0: 1100, A1: 1, B0: 0}, 10)
    assert got == {A0: 109, A1: 1, B0: 0}
    # a new queue (missing from start) counts from 0
    assert split_limit({A0: 0}, {A0: 10, B0: 10}, 10) == {A0: 5, B0: 5}
    with pytest.raises(OffsetError):
        split_limit(start, start, 0)


def test_parse_read_options() -> None:
    opts = parse_read(
        {
            "NameSrv": "h:1",
            "topic": "a, b,a",
            "maxoffsetspertrigger": "100",
            "tags": "X || Y",
            "failOnDataLoss": "False",
            "startingOffsets": "earliest",
            "group": "g",
        },
        streaming=True,
    )
    assert opts.namesrv == "h:1"
    assert opts.topics == ("a", "b")
    assert opts.max_offsets_per_trigger == 100
    assert opts.tags == "X || Y"
    assert opts.fail_on_data_loss is False
    assert opts.starting == "earliest"
    assert opts.group == "g"
    assert opts.pull_batch_size == 32
    assert opts.ending is None


@pytest.mark.parametrize(
    ("options", "name"),
    [
        ({"topic": "t"}, "namesrv"),
        ({"namesrv": "h:1"}, "topic"),
        ({"namesrv": "h:1", "topic": "t", "bogus": "1"}, "bogus"),
        ({"namesrv": "h:1", "topic": "t", "maxOffsetsPerTrigger": "0"}, "maxOffsetsPerTrigger"),
        ({"namesrv": "h:1", "topic": "t", "pullBatchSize": "x"}, "pullBatchSize"),
        ({"namesrv": "h:1", "topic": "t", "failOnDataLoss": "yes"}, "failOnDataLoss"),
        ({"namesrv": "h:1", "topic": "t", "endingOffsets": "latest"}, "endingOffsets"),
        ({"namesrv": "h:1", "topic": "t", "startingOffsets": "x"}, "startingOffsets"),
        ({"namesrv": "h:1", "topic": "t,,u"}, "topic"),
        ({"namesrv": "h:1", "topic": "t", "startingTimestamp": "-5"}, "startingTimestamp"),
    ],
)
def test_parse_read_names_the_bad_option(options: dict[str, str], name: str) -> None:
    with pytest.raises(OptionError, match=name):
        parse_read(options, streaming=True)


def test_parse_write_options() -> None:
    opts = parse_write({"namesrv": "h:1", "checkpointLocation": "/x", "batchsize": "10"})
    assert (opts.topic, opts.batch_size, opts.group) == (None, 10, "minimq-spark-sink")
    with pytest.raises(OptionError, match="startingOffsets"):
        parse_write({"namesrv": "h:1", "startingOffsets": "earliest"})
    with pytest.raises(OptionError, match="batchSize"):
        parse_write({"namesrv": "h:1", "batchSize": "0"})
