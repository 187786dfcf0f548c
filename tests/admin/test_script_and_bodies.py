"""The installed ``mqadmin`` console script, and the admin body codecs."""

from __future__ import annotations

import subprocess

import msgpack
import pytest

from remoting import admin_bodies as b
from remoting.headers import BadRequestError
from tests.processes import REPO, console_script


def test_console_script_fails_with_one_line_on_an_unreachable_name_server() -> None:
    proc = subprocess.run(
        [console_script("mqadmin"), "topicList", "-n", "127.0.0.1:1"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 1
    assert proc.stdout == ""
    assert proc.stderr.count("\n") == 1
    assert proc.stderr.startswith("mqadmin topicList: ")
    assert "no name server answered" in proc.stderr


def test_console_script_without_name_server_address() -> None:
    proc = subprocess.run(
        [console_script("mqadmin"), "clusterList"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env={"PATH": "/usr/bin:/bin"},
    )
    assert proc.returncode == 1
    assert "NAMESRV_ADDR" in proc.stderr
    assert proc.stderr.count("\n") == 1


def test_bodies_round_trip() -> None:
    rows = [b.TopicOffset("T", "broker-a", 0, 1, 5, 123)]
    assert b.decode_topic_stats(b.encode_topic_stats(rows)) == rows
    stats = b.ConsumeStats((b.QueueConsumeStats("T", "broker-a", 1, 9, 4, 77),), 0.0)
    assert b.decode_consume_stats(b.encode_consume_stats(stats)) == stats
    assert stats.rows[0].diff == 5
    conns = (b.Connection("ip@1", "127.0.0.1:5", "PYTHON", 0),)
    cc = b.ConsumerConnection(conns, {"T": "a || b"}, "CONSUME_PASSIVELY", "CLUSTERING", "X")
    assert b.decode_consumer_connection(b.encode_consumer_connection(cc)) == cc
    assert b.decode_producer_connection(b.encode_producer_connection(conns)) == conns
    entries = [b.QueueOffset("T", "broker-b", 3, 42)]
    assert b.decode_reset_offset(b.encode_reset_offset(entries)) == entries


BAD_BODIES = [
    b"\xc1",  # not msgpack
    msgpack.packb(1),  # not a map
    msgpack.packb({"offsetTable": 1}),  # not a list
    msgpack.packb({"offsetTable": [{"topic": "T"}]}),  # fields missing
    msgpack.packb(
        {"offsetTable": [{"topic": "T", "brokerName": "b", "queueId": "0", "offset": 1}]}
    ),
]


@pytest.mark.parametrize("body", BAD_BODIES)
def test_bad_bodies_raise_bad_request(body: bytes) -> None:
    with pytest.raises(BadRequestError):
        b.decode_reset_offset(body)


def test_update_broker_config_help_names_the_brokers_runtime_keys() -> None:
    from broker.processors.admin_stats import LIVE_KEYS
    from client.admin.cmd_broker import RUNTIME_BROKER_KEYS

    assert set(RUNTIME_BROKER_KEYS) == set(LIVE_KEYS)
