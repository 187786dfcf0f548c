"""Encrypted private keys: ``tls.server.keyPassword`` / ``tls.client.keyPassword`` (RocketMQ's
``TlsSystemConfig``), read from configs, kept secret, and used to load the key.

The encrypted keys are written from trustme's with ``cryptography`` (:func:`encrypt_key`);
handshakes run over real loopback sockets.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import trio

from broker.config import BrokerConfig
from client.config import TLS_CONFIG_FILE_ENV, ClientConfig, tls_settings_from_env
from client.errors import MQClientError
from namesrv.config import NamesrvConfig
from remoting.channel import Channel
from remoting.client import RemotingClient
from remoting.codes import RequestCode, ResponseCode
from remoting.command import RemotingCommand
from remoting.server import RemotingServer
from remoting.tls import TlsSetupError, client_ssl_context, server_ssl_context
from remoting.tls_config import (
    MASKED_PASSWORD,
    ClientAuth,
    ClientTlsConfig,
    parse_client_tls,
    parse_server_tls,
)
from tests.processes import console_script
from tests.remoting.tls_certs import Pki, encrypt_key, pki

__all__ = ["pki"]

LIMIT = 20
PASSWORD = "s3cret pass "  # a blank at the end is part of it
WRONG = "not-the-password"


@pytest.fixture
def locked(pki: Pki, tmp_path: Path) -> tuple[Path, Path]:
    """The server's and the client's keys, encrypted with :data:`PASSWORD` (PKCS#8 and the
    traditional form, one each)."""
    server = encrypt_key(pki.server_key, tmp_path / "server-key.enc.pem", PASSWORD)
    client = encrypt_key(
        pki.client_key, tmp_path / "client-key.enc.pem", PASSWORD, traditional=True
    )
    return server, client


def server_props(pki: Pki, key: Path, password: str | None) -> dict[str, str]:
    props = {**pki.server_properties(), "tls.server.keyPath": str(key)}
    if password is not None:
        props["tls.server.keyPassword"] = password
    return props


# ---------------------------------------------------------------------- settings


def test_the_password_keys_parse_as_given_and_empty_is_unset() -> None:
    server = parse_server_tls({"tls.server.keyPassword": PASSWORD})
    client = parse_client_tls(
        {"tls.client.certPath": "c", "tls.client.keyPath": "k", "tls.client.keyPassword": PASSWORD}
    )
    assert server.key_password == PASSWORD
    assert client.key_password == PASSWORD
    assert parse_server_tls({"tls.server.keyPassword": ""}).key_password is None


def test_passwords_stay_out_of_repr_and_are_masked_in_properties() -> None:
    server = parse_server_tls({"tls.server.keyPassword": PASSWORD})
    client = ClientTlsConfig(cert_path="c", key_path="k", key_password=PASSWORD)
    for config in (server, client):
        assert PASSWORD not in repr(config)
        shown = dict(config.properties())
        assert PASSWORD not in shown.values()
        assert MASKED_PASSWORD in shown.values()
        assert PASSWORD in dict(config.properties(reveal_password=True)).values()
    assert dict(ClientTlsConfig().properties())["tls.client.keyPassword"] == ""


def test_revealed_properties_read_back() -> None:
    server = parse_server_tls({"tls.server.keyPassword": PASSWORD})
    assert parse_server_tls(dict(server.properties(reveal_password=True))) == server


def test_a_client_key_password_without_a_key_is_refused_without_showing_it() -> None:
    with pytest.raises(ValueError, match=r"tls\.client\.keyPassword is set but") as info:
        ClientTlsConfig(enable=True, key_password=PASSWORD)
    assert PASSWORD not in str(info.value)


# ---------------------------------------------------------------------- loading keys


def test_encrypted_keys_load_with_the_right_password(pki: Pki, locked: tuple[Path, Path]) -> None:
    server_key, client_key = locked
    assert b"ENCRYPTED" in server_key.read_bytes()
    assert b"Proc-Type: 4,ENCRYPTED" in client_key.read_bytes()
    assert server_ssl_context(parse_server_tls(server_props(pki, server_key, PASSWORD)))
    client = ClientTlsConfig(
        enable=True,
        trust_cert_path=str(pki.ca),
        cert_path=str(pki.client_cert),
        key_path=str(client_key),
        key_password=PASSWORD,
    )
    assert client_ssl_context(client)


@pytest.mark.parametrize(
    ("password", "message"),
    [
        (WRONG, "cannot decrypt the private key with tls.server.keyPassword (wrong password?)"),
        (None, "the private key is encrypted and tls.server.keyPassword is not set"),
    ],
)
def test_a_wrong_or_missing_server_password_names_the_key_not_the_password(
    pki: Pki, locked: tuple[Path, Path], password: str | None, message: str
) -> None:
    server_key, _ = locked
    with pytest.raises(TlsSetupError) as info:
        server_ssl_context(parse_server_tls(server_props(pki, server_key, password)))
    text = str(info.value)
    assert text.startswith(f"tls.server.keyPath {server_key}: ")
    assert message in text
    assert WRONG not in text
    assert PASSWORD.strip() not in text


@pytest.mark.parametrize(
    ("password", "message"),
    [
        (WRONG, "cannot decrypt the private key with tls.client.keyPassword"),
        (None, "the private key is encrypted and tls.client.keyPassword is not set"),
    ],
)
def test_a_wrong_or_missing_client_password_names_the_key_not_the_password(
    pki: Pki, locked: tuple[Path, Path], password: str | None, message: str
) -> None:
    _, client_key = locked
    config = ClientTlsConfig(
        enable=True,
        trust_cert_path=str(pki.ca),
        cert_path=str(pki.client_cert),
        key_path=str(client_key),
        key_password=password,
    )
    with pytest.raises(TlsSetupError, match=f"tls.client.keyPath {client_key}: ") as info:
        client_ssl_context(config)
    assert message in str(info.value)
    assert WRONG not in str(info.value)


def test_a_decrypted_key_of_another_certificate_is_a_mismatch_not_a_bad_password(
    pki: Pki, tmp_path: Path
) -> None:
    other_key = encrypt_key(pki.client_key, tmp_path / "other.enc.pem", PASSWORD)
    with pytest.raises(TlsSetupError) as info:
        server_ssl_context(parse_server_tls(server_props(pki, other_key, PASSWORD)))
    assert "key values mismatch" in str(info.value)
    assert "wrong password" not in str(info.value)


async def test_mutual_tls_with_encrypted_keys_on_both_ends(
    pki: Pki, locked: tuple[Path, Path]
) -> None:
    server_key, client_key = locked
    props = {**server_props(pki, server_key, PASSWORD), "tls.server.need.client.auth": "require"}
    server_config = parse_server_tls(props)
    assert server_config.need_client_auth is ClientAuth.REQUIRE
    client_config = ClientTlsConfig(
        enable=True,
        trust_cert_path=str(pki.ca),
        cert_path=str(pki.client_cert),
        key_path=str(client_key),
        key_password=PASSWORD,
    )

    def echo(req: RemotingCommand, _: Channel) -> RemotingCommand:
        return RemotingCommand.response_to(req, ResponseCode.SUCCESS, body=req.body)

    server = RemotingServer(
        {RequestCode.SEND_MESSAGE: echo}, ssl_context=server_ssl_context(server_config)
    )
    with trio.fail_after(LIMIT):
        async with trio.open_nursery() as nursery:
            port = await nursery.start(server.run)
            async with RemotingClient(ssl_context=client_ssl_context(client_config)) as client:
                request = RemotingCommand.request(RequestCode.SEND_MESSAGE, {}, b"hi", opaque=0)
                answer = await client.invoke(f"127.0.0.1:{port}", request)
                assert answer.body == b"hi"
            nursery.cancel_scope.cancel()


# ---------------------------------------------------------------------- configs


def test_broker_config_takes_both_passwords_and_prints_them_masked(
    pki: Pki, locked: tuple[Path, Path], tmp_path: Path
) -> None:
    server_key, client_key = locked
    tls_file = tmp_path / "tls.properties"
    tls_file.write_text(
        f"tls.client.certPath={pki.client_cert}\ntls.client.keyPath={client_key}\n"
        f"tls.client.keyPassword={PASSWORD}\n"
    )
    config = BrokerConfig.load(
        None,
        None,
        {},
        {**server_props(pki, server_key, PASSWORD), "tls.config.file": str(tls_file)},
    )
    assert config.tls_server.key_password == PASSWORD
    assert config.tls_client.key_password == PASSWORD  # from tls.config.file
    for text in (config.to_properties(), config.to_properties(hide_secrets=True), repr(config)):
        assert PASSWORD.strip() not in text
    printed = config.to_properties()
    assert f"tls.server.keyPassword={MASKED_PASSWORD}\n" in printed
    assert f"tls.client.keyPassword={MASKED_PASSWORD}\n" in printed


def test_namesrv_config_masks_the_password_except_in_its_saved_copy(
    pki: Pki, locked: tuple[Path, Path]
) -> None:
    server_key, _ = locked
    config = NamesrvConfig.from_properties(server_props(pki, server_key, PASSWORD))
    assert config.tls_server.key_password == PASSWORD
    assert PASSWORD.strip() not in config.to_properties()
    saved = config.to_properties(reveal_password=True)
    assert "tls.server.keyPassword=s3cret pass \n" in saved


def test_client_config_takes_the_password_from_the_environment_file(
    pki: Pki, locked: tuple[Path, Path], tmp_path: Path
) -> None:
    _, client_key = locked
    tls_file = tmp_path / "tls.properties"
    props = {
        **pki.client_properties(),
        "tls.client.certPath": str(pki.client_cert),
        "tls.client.keyPath": str(client_key),
        "tls.client.keyPassword": PASSWORD,
    }
    tls_file.write_text("".join(f"{k}={v}\n" for k, v in props.items()))
    settings = tls_settings_from_env({TLS_CONFIG_FILE_ENV: str(tls_file)})
    assert settings["tls_key_password"] == PASSWORD
    config = ClientConfig(("127.0.0.1:9876",), **settings)  # type: ignore[arg-type]
    assert PASSWORD not in repr(config)
    assert config.tls().key_password == PASSWORD
    assert client_ssl_context(config.tls()) is not None
    with pytest.raises(MQClientError, match=r"tls\.client\.keyPassword is set but"):
        ClientConfig(("127.0.0.1:9876",), use_tls=True, tls_key_password=PASSWORD)


# ---------------------------------------------------------------------- processes


def test_mqbroker_print_config_masks_the_passwords(
    pki: Pki, locked: tuple[Path, Path], tmp_path: Path
) -> None:
    server_key, _ = locked
    props = server_props(pki, server_key, PASSWORD)
    overrides = [part for key, value in props.items() for part in (f"--{key}", value)]
    done = subprocess.run(
        [console_script("mqbroker"), "-p", "--storePathRootDir", str(tmp_path / "s"),
         *overrides],
        capture_output=True, text=True, timeout=30, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert f"tls.server.keyPassword={MASKED_PASSWORD}\n" in done.stdout
    assert PASSWORD.strip() not in done.stdout + done.stderr


@pytest.mark.parametrize(
    ("password", "message"),
    [
        (WRONG, "cannot decrypt the private key with tls.server.keyPassword"),
        (None, "the private key is encrypted and tls.server.keyPassword is not set"),
    ],
)
def test_mqnamesrv_refuses_to_start_with_a_wrong_or_missing_password(
    pki: Pki, locked: tuple[Path, Path], tmp_path: Path, password: str | None, message: str
) -> None:
    server_key, _ = locked
    conf = tmp_path / "namesrv.conf"
    props = {**server_props(pki, server_key, password), "kvConfigPath": str(tmp_path / "kv")}
    conf.write_text("".join(f"{k}={v}\n" for k, v in props.items()))
    done = subprocess.run(
        [console_script("mqnamesrv"), "-c", str(conf), "--listenPort", "0",
         "--bindAddress", "127.0.0.1"],
        capture_output=True, text=True, timeout=30, check=False,
    )  # fmt: skip
    assert done.returncode == 1, done.stderr
    assert f"cannot start: tls.server.keyPath {server_key}: {message}" in done.stderr
    assert WRONG not in done.stderr
    assert "Traceback" not in done.stderr


def test_mqbroker_refuses_to_start_with_a_wrong_password(
    pki: Pki, locked: tuple[Path, Path], tmp_path: Path
) -> None:
    server_key, _ = locked
    done = subprocess.run(
        [console_script("mqbroker"), "--listenPort", "0", "--bindAddress", "127.0.0.1",
         "--storePathRootDir", str(tmp_path / "store"), "--diskMaxUsedSpaceRatio", "95",
         "--tls.server.mode", "enforcing", "--tls.server.certPath", str(pki.server_cert),
         "--tls.server.keyPath", str(server_key), "--tls.server.keyPassword", WRONG],
        capture_output=True, text=True, timeout=30, check=False,
    )  # fmt: skip
    assert done.returncode == 1, done.stderr
    assert f"tls.server.keyPath {server_key}: cannot decrypt the private key" in done.stderr
    assert WRONG not in done.stderr
    assert "Traceback" not in done.stderr
