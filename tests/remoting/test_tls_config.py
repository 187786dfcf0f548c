"""TLS settings (RocketMQ's ``TlsSystemConfig`` keys): parsing, checks, the config loaders,
the context builders' startup errors, and the plaintext decoder's hint about TLS bytes."""

from __future__ import annotations

import os
import ssl
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from broker.config import BrokerConfig
from client.config import ClientConfig, tls_settings_from_env
from client.errors import MQClientError
from common.properties import parse_properties
from namesrv.config import NamesrvConfig, updated_config
from remoting.errors import RemoteProtocolError
from remoting.frame import FrameDecoder
from remoting.tls import TlsSetupError, client_ssl_context, server_ssl_context, with_tls_config_file
from remoting.tls_config import (
    ClientAuth,
    ClientTlsConfig,
    ServerTlsConfig,
    TlsMode,
    looks_like_tls_record,
    parse_client_tls,
    parse_server_tls,
)
from tests.remoting.tls_certs import Pki, pki

__all__ = ["pki"]

FILES = {
    "tls.server.certPath": "/c.pem",
    "tls.server.keyPath": "/k.pem",
    "tls.server.trustCertPath": "/ca.pem",
}


@pytest.mark.parametrize(
    ("props", "expected"),
    [
        ({}, ServerTlsConfig()),
        ({"tls.server.mode": "disabled"}, ServerTlsConfig()),
        (
            {"tls.server.mode": " Enforcing ", **FILES},
            ServerTlsConfig(TlsMode.ENFORCING, ClientAuth.NONE, "/k.pem", "/c.pem", "/ca.pem"),
        ),
        (
            {"tls.server.mode": "enforcing", "tls.server.need.client.auth": "REQUIRE", **FILES},
            ServerTlsConfig(TlsMode.ENFORCING, ClientAuth.REQUIRE, "/k.pem", "/c.pem", "/ca.pem"),
        ),
        (
            {"tls.server.need.client.auth": "optional"},
            ServerTlsConfig(need_client_auth=ClientAuth.OPTIONAL),
        ),
        ({"tls.test.mode.enable": "false"}, ServerTlsConfig()),
    ],
)
def test_server_settings_parse(props: dict[str, str], expected: ServerTlsConfig) -> None:
    assert parse_server_tls(props) == expected


@pytest.mark.parametrize(
    ("props", "message"),
    [
        ({"tls.server.mode": "permissive"}, "downgrade to plaintext"),
        ({"tls.server.mode": "on"}, "tls.server.mode must be disabled | enforcing, got 'on'"),
        ({"tls.server.mode": "enforcing"}, "needs tls.server.certPath"),
        (
            {"tls.server.mode": "enforcing", "tls.server.certPath": "/c.pem"},
            "needs tls.server.keyPath",
        ),
        (
            {
                "tls.server.mode": "enforcing",
                "tls.server.need.client.auth": "require",
                "tls.server.certPath": "/c",
                "tls.server.keyPath": "/k",
            },
            "needs tls.server.trustCertPath",
        ),
        ({"tls.server.need.client.auth": "sometimes"}, "none | optional | require"),
        ({"tls.test.mode.enable": "true"}, "tls.test.mode.enable=true is not supported"),
    ],
)
def test_bad_server_settings_name_the_key(props: dict[str, str], message: str) -> None:
    with pytest.raises(ValueError, match=message.replace("|", r"\|")):
        parse_server_tls(props)


@pytest.mark.parametrize(
    ("props", "expected"),
    [
        ({}, ClientTlsConfig()),
        ({"tls.enable": "TRUE"}, ClientTlsConfig(enable=True)),
        (
            {"tls.enable": "true", "tls.client.authServer": "false"},
            ClientTlsConfig(enable=True, auth_server=False),
        ),
        (
            {
                "tls.enable": "true",
                "tls.client.trustCertPath": "/ca",
                "tls.client.certPath": "/c",
                "tls.client.keyPath": "/k",
            },
            ClientTlsConfig(True, True, "/ca", "/c", "/k"),
        ),
    ],
)
def test_client_settings_parse(props: dict[str, str], expected: ClientTlsConfig) -> None:
    assert parse_client_tls(props) == expected


@pytest.mark.parametrize(
    ("props", "message"),
    [
        ({"tls.enable": "yes"}, "tls.enable must be true or false, got 'yes'"),
        ({"tls.client.certPath": "/c"}, "tls.client.certPath is set but tls.client.keyPath"),
        ({"tls.client.keyPath": "/k"}, "tls.client.keyPath is set but tls.client.certPath"),
    ],
)
def test_bad_client_settings_name_the_key(props: dict[str, str], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_client_tls(props)


paths = st.none() | st.text("abc/._-", min_size=1, max_size=8).map(lambda s: "/" + s)


@given(
    st.builds(
        ServerTlsConfig,
        mode=st.just(TlsMode.ENFORCING),
        need_client_auth=st.sampled_from(ClientAuth),
        key_path=paths.filter(bool),
        cert_path=paths.filter(bool),
        trust_cert_path=paths.filter(bool),
    ),
    st.builds(
        ClientTlsConfig,
        enable=st.booleans(),
        auth_server=st.booleans(),
        trust_cert_path=paths,
        cert_path=st.just("/c"),
        key_path=st.just("/k"),
    ),
)
def test_settings_read_back_from_their_properties(
    server: ServerTlsConfig, client: ClientTlsConfig
) -> None:
    assert parse_server_tls(dict(server.properties())) == server
    assert parse_client_tls(dict(client.properties())) == client


@pytest.mark.parametrize(
    ("prefix", "tls"),
    [
        (b"\x16\x03\x01\x02\x00", True),  # ClientHello
        (b"\x15\x03\x03\x00\x02", True),  # alert
        (b"\x00\x00\x00\x10", False),  # a frame's length prefix
        (b"\x16\x02", False),
        (b"\x16", False),
    ],
)
def test_tls_records_are_recognised(prefix: bytes, tls: bool) -> None:
    assert looks_like_tls_record(prefix) is tls


def test_the_plaintext_decoder_says_when_the_peer_speaks_tls() -> None:
    decoder = FrameDecoder()
    decoder.receive_data(b"\x16\x03\x01\x02\x00\x01\x00")
    with pytest.raises(RemoteProtocolError, match="the peer speaks TLS"):
        decoder.next_command()
    other = FrameDecoder()
    other.receive_data(b"\x7f\x00\x00\x00")
    with pytest.raises(RemoteProtocolError) as info:
        other.next_command()
    assert "TLS" not in str(info.value)


# ---------------------------------------------------------------------- loaders


def test_broker_config_reads_and_prints_tls_keys(pki: Pki) -> None:
    props = {**pki.server_properties("require"), **pki.client_properties(with_cert=True)}
    config = BrokerConfig.from_properties(props)
    assert config.tls_server == pki.server(ClientAuth.REQUIRE)
    assert config.tls_client == pki.client(with_cert=True)
    again = BrokerConfig.from_properties(parse_properties(config.to_properties()))
    assert again.tls_server == config.tls_server
    assert again.tls_client == config.tls_client
    assert BrokerConfig().tls_server.mode is TlsMode.DISABLED
    assert not BrokerConfig().tls_client.enable


def test_broker_command_line_overrides_beat_the_tls_config_file(tmp_path: Path) -> None:
    """``tls.config.file`` (RocketMQ's tls.properties) fills in TLS keys; keys given in the
    file or as ``--key value`` win over it."""
    tls_file = tmp_path / "tls.properties"
    tls_file.write_text(
        "tls.server.mode=enforcing\ntls.server.certPath=/from-file/c.pem\n"
        "tls.server.keyPath=/from-file/k.pem\nlistenPort=1\n"
    )
    conf = tmp_path / "broker.conf"
    conf.write_text(f"tls.config.file={tls_file}\n")
    config = BrokerConfig.load(conf, None, {}, {"tls.server.certPath": "/cli/c.pem"})
    assert config.tls_server.cert_path == "/cli/c.pem"
    assert config.tls_server.key_path == "/from-file/k.pem"
    assert config.tls_server.enabled
    assert config.listen_port == 10911  # only TLS keys are taken from the TLS file


def test_a_missing_tls_config_file_is_a_startup_error(tmp_path: Path) -> None:
    with pytest.raises(TlsSetupError, match=r"tls.config.file .*nope.properties"):
        with_tls_config_file({"tls.config.file": str(tmp_path / "nope.properties")})


def test_bad_broker_tls_settings_are_config_errors() -> None:
    with pytest.raises(ValueError, match=r"bad broker properties: tls\.server\.mode=enforcing"):
        BrokerConfig.from_properties({"tls.server.mode": "enforcing"})


def test_namesrv_config_reads_tls_keys_and_refuses_them_at_runtime(pki: Pki) -> None:
    props = {**pki.server_properties(), **pki.client_properties()}
    config = NamesrvConfig.from_properties(props)
    assert config.tls_server == pki.server()
    again = NamesrvConfig.from_properties(parse_properties(config.to_properties()))
    assert again == config
    with pytest.raises(ValueError, match=r"'tls\.server\.mode' is read only at start"):
        updated_config(config, {"tls.server.mode": "disabled"})


def test_client_tls_defaults_come_from_the_environment(tmp_path: Path, pki: Pki) -> None:
    tls_file = tmp_path / "tls.properties"
    tls_file.write_text(
        "".join(f"{k}={v}\n" for k, v in pki.client_properties(with_cert=True).items())
    )
    assert tls_settings_from_env({}) == {}
    from_file = tls_settings_from_env({"MINIMQ_TLS_CONFIG_FILE": str(tls_file)})
    assert from_file["use_tls"] is True
    assert from_file["tls_cert_path"] == str(pki.client_cert)
    switched_off = tls_settings_from_env(
        {"MINIMQ_TLS_CONFIG_FILE": str(tls_file), "MINIMQ_TLS_ENABLE": "false"}
    )
    assert switched_off["use_tls"] is False
    assert tls_settings_from_env({"MINIMQ_TLS_ENABLE": "true"})["use_tls"] is True
    with pytest.raises(MQClientError, match=r"tls\.enable must be true or false"):
        tls_settings_from_env({"MINIMQ_TLS_ENABLE": "1"})


def test_client_config_checks_its_tls_fields() -> None:
    assert not ClientConfig(("127.0.0.1:9876",)).use_tls
    with pytest.raises(MQClientError, match=r"tls\.client\.certPath is set"):
        ClientConfig(("127.0.0.1:9876",), tls_cert_path="/c.pem")


# ---------------------------------------------------------------------- contexts


def test_contexts_are_built_only_when_tls_is_on(pki: Pki) -> None:
    assert server_ssl_context(ServerTlsConfig()) is None
    assert client_ssl_context(ClientTlsConfig()) is None
    server = server_ssl_context(pki.server(ClientAuth.REQUIRE))
    assert server is not None
    assert server.minimum_version is ssl.TLSVersion.TLSv1_2
    assert server.verify_mode is ssl.CERT_REQUIRED
    client = client_ssl_context(pki.client(with_cert=True))
    assert client is not None
    assert client.check_hostname
    assert client.verify_mode is ssl.CERT_REQUIRED
    assert client.minimum_version is ssl.TLSVersion.TLSv1_2


def test_missing_or_bad_tls_files_are_named(pki: Pki, tmp_path: Path) -> None:
    missing = ServerTlsConfig(TlsMode.ENFORCING, cert_path=str(tmp_path / "no.pem"), key_path="/k")
    with pytest.raises(TlsSetupError, match=r"tls.server.certPath .*no.pem: no such file"):
        server_ssl_context(missing)
    swapped = ServerTlsConfig(
        TlsMode.ENFORCING, cert_path=str(pki.server_cert), key_path=str(pki.client_key)
    )
    with pytest.raises(TlsSetupError, match="cannot load the certificate and its private key"):
        server_ssl_context(swapped)
    garbage = tmp_path / "garbage.pem"
    garbage.write_text("not a certificate")
    with pytest.raises(TlsSetupError, match=r"tls\.client\.trustCertPath .*garbage\.pem"):
        client_ssl_context(ClientTlsConfig(enable=True, trust_cert_path=str(garbage)))
    if os.geteuid() != 0:  # root reads any file
        unreadable = tmp_path / "unreadable.pem"
        unreadable.write_bytes(pki.ca.read_bytes())
        unreadable.chmod(0)
        with pytest.raises(TlsSetupError, match="not readable"):
            client_ssl_context(ClientTlsConfig(enable=True, trust_cert_path=str(unreadable)))
