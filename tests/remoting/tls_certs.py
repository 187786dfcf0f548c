"""Throw-away certificates for the TLS tests (``trustme``, from the ``test`` extra), as PEM
files under a test's ``tmp_path``, and the settings that use them."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest

from remoting.tls_config import ClientAuth, ClientTlsConfig, ServerTlsConfig, TlsMode

trustme = pytest.importorskip(
    "trustme", reason="the TLS tests need trustme (pip install -e .[test])"
)


@dataclass(frozen=True)
class Pki:
    """A CA, a server certificate for 127.0.0.1 / localhost and a client certificate it signed,
    plus a second CA that signed none of them."""

    ca: Path
    server_cert: Path
    server_key: Path
    client_cert: Path
    client_key: Path
    other_ca: Path

    def server(
        self, need_client_auth: ClientAuth = ClientAuth.NONE, *, trust: Path | None = None
    ) -> ServerTlsConfig:
        """Enforcing server settings; client certificates are checked against ``trust`` (the
        CA by default) when ``need_client_auth`` asks for them."""
        return ServerTlsConfig(
            mode=TlsMode.ENFORCING,
            need_client_auth=need_client_auth,
            cert_path=str(self.server_cert),
            key_path=str(self.server_key),
            trust_cert_path=str(trust or self.ca),
        )

    def client(self, *, trust: Path | None = None, with_cert: bool = False) -> ClientTlsConfig:
        """Client settings trusting ``trust`` (the CA by default), with the client
        certificate when ``with_cert``."""
        return ClientTlsConfig(
            enable=True,
            trust_cert_path=str(trust or self.ca),
            cert_path=str(self.client_cert) if with_cert else None,
            key_path=str(self.client_key) if with_cert else None,
        )

    def server_properties(self, need_client_auth: str = "none") -> dict[str, str]:
        """The same as broker.conf / namesrv keys."""
        return {
            "tls.server.mode": "enforcing",
            "tls.server.need.client.auth": need_client_auth,
            "tls.server.certPath": str(self.server_cert),
            "tls.server.keyPath": str(self.server_key),
            "tls.server.trustCertPath": str(self.ca),
        }

    def client_properties(self, *, with_cert: bool = False) -> dict[str, str]:
        """Client keys (``tls.enable``, ``tls.client.*``) as a tls.properties file holds them."""
        props = {"tls.enable": "true", "tls.client.trustCertPath": str(self.ca)}
        if with_cert:
            props["tls.client.certPath"] = str(self.client_cert)
            props["tls.client.keyPath"] = str(self.client_key)
        return props


def make_pki(root: Path, *, server_names: tuple[str, ...] = ("127.0.0.1", "localhost")) -> Pki:
    """Write a fresh :class:`Pki` under ``root``."""
    root.mkdir(parents=True, exist_ok=True)
    ca = trustme.CA()
    other = trustme.CA()
    server = ca.issue_cert(*server_names)
    client = ca.issue_cert("client@minimq.test")
    paths = {name: root / f"{name}.pem" for name in ("ca", "sc", "sk", "cc", "ck", "other")}
    ca.cert_pem.write_to_path(str(paths["ca"]))
    other.cert_pem.write_to_path(str(paths["other"]))
    server.cert_chain_pems[0].write_to_path(str(paths["sc"]))
    server.private_key_pem.write_to_path(str(paths["sk"]))
    client.cert_chain_pems[0].write_to_path(str(paths["cc"]))
    client.private_key_pem.write_to_path(str(paths["ck"]))
    return Pki(
        ca=paths["ca"],
        server_cert=paths["sc"],
        server_key=paths["sk"],
        client_cert=paths["cc"],
        client_key=paths["ck"],
        other_ca=paths["other"],
    )


@pytest.fixture
def pki(tmp_path: Path) -> Pki:
    """A fresh :class:`Pki` under ``tmp_path / "pki"``."""
    return make_pki(tmp_path / "pki")


def encrypt_key(plain: Path, dest: Path, password: str, *, traditional: bool = False) -> Path:
    """Write the unencrypted PEM key ``plain`` to ``dest`` encrypted with ``password``: PKCS#8
    (``BEGIN ENCRYPTED PRIVATE KEY``), or OpenSSL's traditional ``Proc-Type: 4,ENCRYPTED``
    form. trustme cannot make one; ``cryptography``, which trustme depends on, can."""
    from cryptography.hazmat.primitives import serialization

    key = serialization.load_pem_private_key(plain.read_bytes(), password=None)
    fmt = (
        serialization.PrivateFormat.TraditionalOpenSSL
        if traditional
        else serialization.PrivateFormat.PKCS8
    )
    encryption = serialization.BestAvailableEncryption(password.encode())
    dest.write_bytes(key.private_bytes(serialization.Encoding.PEM, fmt, encryption))
    return dest
