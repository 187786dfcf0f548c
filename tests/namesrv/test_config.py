"""Tests for namesrv/config.py: .properties parsing and NamesrvConfig conversion."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from common.properties import load_properties, parse_properties
from namesrv.__main__ import build_config
from namesrv.config import NamesrvConfig
from namesrv.server import NameServer
from remoting.tls import with_tls_config_file


def test_defaults_match_rocketmq() -> None:
    config = NamesrvConfig()
    assert config.listen_port == 9876
    assert config.scan_not_active_broker_interval_ms == 5000
    assert config.broker_channel_expired_time_ms == 120_000


def test_parse_separators_comments_and_blanks() -> None:
    text = (
        "# comment\n"
        "! another comment\n"
        "\n"
        "   \n"
        "a=1\n"
        "b : 2\n"
        "  c   =   three words  \n"
        "d 4\n"
        "e\n"
        "f=\n"
        "g=x=y:z\n"
        "a=override\n"
    )
    assert parse_properties(text) == {
        "a": "override",
        "b": "2",
        "c": "three words  ",  # kept, as Java does; convert_value trims
        "d": "4",
        "e": "",
        "f": "",
        "g": "x=y:z",
    }


def test_parse_continuation_and_escapes() -> None:
    text = (
        "list=a,\\\n    b,\\\n    c\n"
        "key\\=with\\:sep=v\ntab=x\\ty\nuni=\\u00e9\nslash=c:\\\\dir\\\\\n"
    )
    assert parse_properties(text) == {
        "list": "a,b,c",
        "key=with:sep": "v",
        "tab": "x\ty",
        "uni": "é",
        "slash": "c:\\dir\\",
    }


def test_parse_continuation_at_end_of_file() -> None:
    assert parse_properties("k=v\\") == {"k": "v"}


def test_parse_bad_unicode_escape() -> None:
    with pytest.raises(ValueError, match="uXXXX"):
        parse_properties("k=\\uZZ")


def test_load_properties_and_from_properties(tmp_path: Path) -> None:
    path = tmp_path / "namesrv.properties"
    path.write_text(
        "listenPort=9877\nscanNotActiveBrokerInterval: 1000\norderMessageEnable = TRUE\n"
        "rocketmqHome=/opt/rocketmq\n",
        encoding="utf-8",
    )
    config = NamesrvConfig.from_properties(load_properties(path))
    assert config.listen_port == 9877
    assert config.scan_not_active_broker_interval_ms == 1000
    assert config.order_message_enable is True
    assert config.rocketmq_home == "/opt/rocketmq"
    assert config.broker_channel_expired_time_ms == 120_000


def test_to_properties_round_trip() -> None:
    config = NamesrvConfig(listen_port=1234, cluster_test=True, kv_config_path="/kv.json")
    text = config.to_properties()
    assert "listenPort=1234\n" in text
    assert "clusterTest=true\n" in text
    assert NamesrvConfig.from_properties(parse_properties(text)) == config


def test_to_properties_escapes_backslashes_and_leading_space() -> None:
    """-p output reads back with -c: Properties#store's escaping of what it writes."""
    config = NamesrvConfig(kv_config_path="C:\\data\\new\\kv.json", rocketmq_home=" home")
    text = config.to_properties()
    assert "kvConfigPath=C:\\\\data\\\\new\\\\kv.json\n" in text
    assert parse_properties(text)["kvConfigPath"] == "C:\\data\\new\\kv.json"
    assert parse_properties(text)["rocketmqHome"] == " home"


@pytest.mark.parametrize(
    ("props", "message"),
    [
        ({"listenPrt": "1"}, "unknown namesrv property 'listenPrt'"),
        ({"listenPort": "abc"}, "property 'listenPort': expected an integer, got 'abc'"),
        ({"clusterTest": "yes"}, "property 'clusterTest': expected true or false, got 'yes'"),
        ({"listenPort": "70000"}, "listenPort must be in [0, 65535]"),
        ({"scanNotActiveBrokerInterval": "0"}, "scanNotActiveBrokerInterval must be > 0 ms, got 0"),
        (
            {"scanNotActiveBrokerInterval": "-5"},
            "scanNotActiveBrokerInterval must be > 0 ms, got -5",
        ),
        ({"brokerChannelExpiredTime": "0"}, "brokerChannelExpiredTime must be > 0 ms, got 0"),
    ],
)
def test_from_properties_errors(props: dict[str, str], message: str) -> None:
    with pytest.raises(ValueError, match="propert") as info:
        NamesrvConfig.from_properties(props)
    assert message in str(info.value)


def test_a_saved_update_keeps_the_tls_keys_as_the_c_file_gave_them(tmp_path: Path) -> None:
    """The keys of ``tls.config.file`` (a key password among them) are read in for the run,
    but a saved update writes only the ``-c`` file's own TLS keys: no password is copied into
    the ``-c`` file, and later edits of ``tls.properties`` still take effect."""
    tls_file = tmp_path / "tls.properties"
    tls_file.write_text(
        "tls.server.mode=enforcing\n"
        "tls.server.certPath=/etc/minimq/server.pem\n"
        "tls.server.keyPath=/etc/minimq/server-key.pem\n"
        "tls.server.keyPassword=s3cret\n",
        encoding="utf-8",
    )
    conf = tmp_path / "namesrv.conf"
    conf.write_text(f"listenPort=9999\ntls.config.file={tls_file}\n", encoding="utf-8")
    config, file_config = build_config(str(conf), None, None)
    assert config.tls_server.enabled
    assert config.tls_server.key_password == "s3cret"
    server = NameServer(config, file_config=file_config)
    server.apply_config(dataclasses.replace(config, broker_channel_expired_time_ms=7000))
    saved = load_properties(conf)
    assert saved["brokerChannelExpiredTime"] == "7000"
    assert saved["tls.config.file"] == str(tls_file)
    assert not [key for key in saved if key.startswith("tls.server.")]
    reread = NamesrvConfig.from_properties(with_tls_config_file(saved))
    assert reread.tls_server == config.tls_server


def test_a_config_not_read_from_a_file_saves_its_effective_tls_keys() -> None:
    config = NamesrvConfig.from_properties(
        {
            "tls.server.mode": "enforcing",
            "tls.server.certPath": "/etc/minimq/server.pem",
            "tls.server.keyPath": "/etc/minimq/server-key.pem",
            "tls.server.keyPassword": "s3cret",
        }
    )
    saved = parse_properties(config.to_stored_properties())
    assert saved["tls.server.mode"] == "enforcing"
    assert saved["tls.server.keyPassword"] == "s3cret"  # it must read back at the next start
