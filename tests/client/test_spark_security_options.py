"""The Spark connector's ACL and TLS options, pure (no Spark): parsing, what reaches the
client config, the instance-cache key, and that the secret shows in no repr or message."""

from __future__ import annotations

import pickle

import pytest
from hypothesis import given
from hypothesis import strategies as st

from client.spark.options import (
    NO_SECURITY,
    OptionError,
    SecurityOptions,
    acl_hint,
    parse_read,
    parse_security,
    parse_write,
)

BASE = {"namesrv": "127.0.0.1:9876", "topic": "T"}


@pytest.mark.parametrize(
    ("options", "expected"),
    [
        ({}, NO_SECURITY),
        ({"accessKey": "ak", "secretKey": "sk"}, SecurityOptions("ak", "sk")),
        ({"ACCESSKEY": " ak ", "secretkey": "sk"}, SecurityOptions("ak", "sk")),
        ({"accessKey": "", "secretKey": ""}, NO_SECURITY),
        ({"tls.enable": "TRUE"}, SecurityOptions(tls=(("use_tls", True),))),
        ({"tls.client.authServer": "false"}, SecurityOptions(tls=(("tls_auth_server", False),))),
        (
            {"tls.enable": "true", "tls.client.trustCertPath": "/ca.pem"},
            SecurityOptions(tls=(("tls_trust_cert_path", "/ca.pem"), ("use_tls", True))),
        ),
        (
            {"tls.client.certPath": "/c.pem", "tls.client.keyPath": "/k.pem"},
            SecurityOptions(tls=(("tls_cert_path", "/c.pem"), ("tls_key_path", "/k.pem"))),
        ),
        (
            {
                "tls.client.certPath": "/c.pem",
                "tls.client.keyPath": "/k.pem",
                "tls.client.keyPassword": "pw",
            },
            SecurityOptions(
                tls=(
                    ("tls_cert_path", "/c.pem"),
                    ("tls_key_password", "pw"),
                    ("tls_key_path", "/k.pem"),
                )
            ),
        ),
        ({"tls.client.trustCertPath": "  "}, NO_SECURITY),
    ],
)
def test_parse_security(options: dict[str, str], expected: SecurityOptions) -> None:
    assert parse_security(options) == expected
    assert parse_read({**BASE, **options}, streaming=False).security == expected
    assert parse_write({**BASE, **options}).security == expected


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"accessKey": "ak"}, "options 'accessKey' and 'secretKey' go together"),
        ({"secretKey": "TOPSECRET"}, "options 'accessKey' and 'secretKey' go together"),
        ({"tls.enable": "yes"}, "option 'tls.enable' must be true or false, got 'yes'"),
        ({"tls.client.authServer": "1"}, "option 'tls.client.authServer' must be true or false"),
        ({"tls.client.certPath": "/c.pem"}, "'tls.client.certPath' and 'tls.client.keyPath'"),
        ({"tls.client.keyPath": "/k.pem"}, "'tls.client.certPath' and 'tls.client.keyPath'"),
    ],
)
def test_bad_security_options_name_the_option(options: dict[str, str], message: str) -> None:
    with pytest.raises(OptionError) as refused:
        parse_read({**BASE, **options}, streaming=False)
    assert message in str(refused.value)
    assert "TOPSECRET" not in str(refused.value)


def test_config_kwargs_reach_the_client_config() -> None:
    security = parse_security(
        {
            "accessKey": "ak",
            "secretKey": "sk",
            "tls.enable": "true",
            "tls.client.authServer": "false",
            "tls.client.trustCertPath": "/ca.pem",
        }
    )
    config = security.client_config("127.0.0.1:9876")
    assert (config.access_key, config.secret_key) == ("ak", "sk")
    assert config.use_tls
    assert not config.tls_auth_server
    assert config.tls_trust_cert_path == "/ca.pem"
    assert config.rpc_hook() is not None
    assert NO_SECURITY.is_default
    assert not security.is_default
    assert NO_SECURITY.config_kwargs() == {}


def test_acl_hint_names_the_options_or_the_account_never_the_secret() -> None:
    assert "give the options 'accessKey' and 'secretKey'" in acl_hint(NO_SECURITY)
    hint = acl_hint(SecurityOptions("reader01", "TOPSECRET"))
    assert "reader01" in hint
    assert "TOPSECRET" not in hint


secrets = st.text(min_size=4, max_size=40).filter(lambda s: s.strip() == s and "'" not in s)


@given(secret=secrets, other=secrets)
def test_secret_in_no_repr_and_accounts_never_share_a_key(secret: str, other: str) -> None:
    """The secret is compared (an instance-cache key per account) but never shown."""
    opts = parse_read({**BASE, "accessKey": "ak", "secretKey": secret}, streaming=False)
    assert f"secret_key={secret!r}" not in repr(opts)
    assert "secret_key" not in repr(opts.security)
    with_key = parse_read(
        {
            **BASE,
            "tls.client.certPath": "/c.pem",
            "tls.client.keyPath": "/k.pem",
            "tls.client.keyPassword": secret,
        },
        streaming=False,
    )
    assert repr(secret) not in repr(with_key)
    assert with_key.security.client_config("127.0.0.1:9876").tls_key_password == secret
    assert pickle.loads(pickle.dumps(opts)) == opts
    second = SecurityOptions("ak", other)
    assert (opts.security == second) == (secret == other)
    if secret == other:
        assert hash(opts.security) == hash(second)
