"""The Spark source's ``sql`` option and the ``tls.config.file`` option, pure (no Spark, no
broker): parsing, mutual exclusion with ``tags``, the subscription the pulls send, and where
the TLS file's keys end up (the file read in the process that builds the client, the ``tls.*``
options over it)."""

from __future__ import annotations

import pickle
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from client.spark.options import (
    OptionError,
    SecurityOptions,
    merge_tls,
    parse_read,
    parse_security,
    parse_write,
    tls_file_settings,
)
from common.sql_filter import EXPRESSION_SQL92, compile_sql
from common.subscription import EXPRESSION_TAG, MessageSelector, build_subscription

BASE = {"namesrv": "127.0.0.1:9876", "topic": "T"}


# ---------------------------------------------------------------------- sql


@pytest.mark.parametrize(
    ("options", "sql", "tags"),
    [
        ({}, None, "*"),
        ({"tags": "A || B"}, None, "A || B"),
        ({"sql": "a > 5"}, "a > 5", "*"),
        (
            {"SQL": "  region IN ('eu', 'us') AND TAGS = 'A' "},
            "region IN ('eu', 'us') AND TAGS = 'A'",
            "*",
        ),
        ({"sql": "b IS NULL OR b BETWEEN 1 AND 3"}, "b IS NULL OR b BETWEEN 1 AND 3", "*"),
    ],
)
def test_the_filter_options(options: dict[str, str], sql: str | None, tags: str) -> None:
    opts = parse_read({**BASE, **options}, streaming=True)
    assert (opts.sql, opts.tags) == (sql, tags)
    assert pickle.loads(pickle.dumps(opts)) == opts  # shipped to the executors
    sub = build_subscription("T", opts.expression)
    if sql is None:
        assert opts.expression == tags
        assert sub.expression_type == EXPRESSION_TAG
    else:
        assert opts.expression == MessageSelector(EXPRESSION_SQL92, sql)
        assert (sub.expression_type, sub.sub_string, sub.tags_set) == (EXPRESSION_SQL92, sql, ())
        assert not sub.matches_all  # one pull at a time, no gap counted as data loss


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"tags": "A", "sql": "a > 1"}, "options 'tags' and 'sql' exclude each other"),
        ({"tags": "*", "sql": "a > 1"}, "options 'tags' and 'sql' exclude each other"),
        ({"sql": "   "}, "option 'sql' is empty"),
        ({"sql": "a >"}, "option 'sql' is not a valid SQL92 selector"),
        ({"sql": "a > 5 AND"}, "option 'sql' is not a valid SQL92 selector"),
        ({"sql": "a = 'unterminated"}, "option 'sql' is not a valid SQL92 selector"),
        ({"sql": "a LIKE 'x%'"}, "option 'sql' is not a valid SQL92 selector"),
        ({"tags": "||"}, "option 'tags'"),
    ],
)
def test_bad_filter_options_fail_naming_the_option(options: dict[str, str], message: str) -> None:
    with pytest.raises(OptionError, match=message):
        parse_read({**BASE, **options}, streaming=False)


def test_the_sink_takes_no_filter_option() -> None:
    with pytest.raises(OptionError, match=r"unknown option\(s\) for the minimq sink: sql"):
        parse_write({**BASE, "sql": "a > 1"})


@given(st.text(max_size=40))
def test_any_sql_text_is_taken_exactly_when_the_brokers_parser_takes_it(text: str) -> None:
    """The option accepts what the brokers' own parser compiles and refuses the rest with an
    OptionError naming it, never another exception."""
    try:
        compile_sql(text.strip())
        valid = bool(text.strip())
    except ValueError:
        valid = False
    if valid:
        assert parse_read({**BASE, "sql": text}, streaming=False).sql == text.strip()
    else:
        with pytest.raises(OptionError, match="option 'sql'"):
            parse_read({**BASE, "sql": text}, streaming=False)


# ---------------------------------------------------------------------- tls.config.file


@pytest.mark.parametrize(
    ("props", "settings"),
    [
        ({"tls.enable": "true"}, (("use_tls", True),)),
        (
            {"tls.enable": "TRUE", "tls.client.trustCertPath": " /ca.pem ", "other": "x"},
            (("tls_trust_cert_path", "/ca.pem"), ("use_tls", True)),
        ),
        (
            {"tls.client.certPath": "/c.pem", "tls.client.keyPath": "/k.pem"},
            (("tls_cert_path", "/c.pem"), ("tls_key_path", "/k.pem")),
        ),
        (
            {"tls.client.authServer": "false", "tls.server.mode": "enforcing"},
            (("tls_auth_server", False),),
        ),
        ({"tls.enable": "false", "tls.test.mode.enable": "false"}, (("use_tls", False),)),
    ],
)
def test_tls_file_settings(props: dict[str, str], settings: tuple[object, ...]) -> None:
    assert tls_file_settings(props, "/etc/tls.properties") == settings


@pytest.mark.parametrize(
    ("props", "message"),
    [
        ({"tls.enable": "yes"}, "tls.enable must be true or false, got 'yes'"),
        ({"tls.client.authServer": "0"}, "tls.client.authServer must be true or false"),
        ({"tls.enable": "true", "tls.test.mode.enable": "true"}, "tls.test.mode.enable=true"),
        ({}, "sets none of the client TLS keys"),
        ({"tls.server.mode": "enforcing", "tls.client.trustCertPath": ""}, "sets none"),
    ],
)
def test_bad_tls_files_name_the_option_and_the_file(props: dict[str, str], message: str) -> None:
    with pytest.raises(OptionError) as refused:
        tls_file_settings(props, "/etc/tls.properties")
    assert str(refused.value).startswith("option 'tls.config.file' (/etc/tls.properties): ")
    assert message in str(refused.value)


def test_merge_tls_lets_the_overrides_win() -> None:
    base = (("tls_trust_cert_path", "/file-ca.pem"), ("use_tls", True))
    assert merge_tls(base, (("use_tls", False),)) == (
        ("tls_trust_cert_path", "/file-ca.pem"),
        ("use_tls", False),
    )
    assert merge_tls(base, ()) == base
    assert merge_tls((), base) == base


def write_tls_file(path: Path, text: str) -> str:
    path.write_text(text)
    return str(path)


def test_the_file_is_read_where_the_client_is_built_and_options_win(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("MINIMQ_TLS_CONFIG_FILE", raising=False)
    monkeypatch.delenv("MINIMQ_TLS_ENABLE", raising=False)
    path = write_tls_file(
        tmp_path / "tls.properties",
        "tls.enable=true\ntls.client.trustCertPath=/file-ca.pem\ntls.client.authServer=true\n",
    )
    options = {"tls.config.file": path, "tls.client.trustCertPath": "/option-ca.pem"}
    security = parse_security(options)
    assert security == SecurityOptions(
        tls=(("tls_trust_cert_path", "/option-ca.pem"),), tls_config_file=path
    )
    assert not security.is_default  # its own client instance in a worker
    assert parse_write({**BASE, **options}).security == security
    config = pickle.loads(pickle.dumps(security)).client_config("127.0.0.1:9876")
    assert (config.use_tls, config.tls_trust_cert_path) == (True, "/option-ca.pem")
    # an executor builds its client from its own copy of the file, read then
    write_tls_file(tmp_path / "tls.properties", "tls.enable=false\n")
    config = security.client_config("127.0.0.1:9876")
    assert (config.use_tls, config.tls_trust_cert_path) == (False, "/option-ca.pem")


def test_the_environment_fills_only_what_file_and_options_leave_out(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    env_file = write_tls_file(tmp_path / "env.properties", "tls.client.trustCertPath=/env-ca.pem\n")
    monkeypatch.setenv("MINIMQ_TLS_CONFIG_FILE", env_file)
    monkeypatch.delenv("MINIMQ_TLS_ENABLE", raising=False)
    path = write_tls_file(tmp_path / "tls.properties", "tls.enable=true\n")
    config = parse_security({"tls.config.file": path}).client_config("127.0.0.1:9876")
    assert (config.use_tls, config.tls_trust_cert_path) == (True, "/env-ca.pem")


def test_a_client_certificate_may_be_split_between_file_and_options(tmp_path: Path) -> None:
    path = write_tls_file(tmp_path / "tls.properties", "tls.client.certPath=/c.pem\n")
    security = parse_security({"tls.config.file": path, "tls.client.keyPath": "/k.pem"})
    assert dict(security.tls_settings()) == {"tls_cert_path": "/c.pem", "tls_key_path": "/k.pem"}
    with pytest.raises(OptionError, match=r"give both \(as options or in the file of"):
        parse_security({"tls.config.file": path})


@pytest.mark.parametrize(
    ("name", "text", "message"),
    [
        ("missing.properties", None, "cannot read {path} on host "),
        ("dir", "", "cannot read {path} on host "),
        ("bad-escape.properties", "tls.enable=\\u12\n", "bad-escape.properties:1"),
        ("bad-bool.properties", "tls.enable=sometimes\n", "tls.enable must be true or false"),
        ("server.properties", "tls.server.mode=enforcing\n", "sets none of the client TLS keys"),
    ],
)
def test_an_unusable_file_fails_at_start_naming_the_option(
    tmp_path: Path, name: str, text: str | None, message: str
) -> None:
    path = tmp_path / name
    if name == "dir":
        path.mkdir()
    elif text is not None:
        path.write_text(text)
    with pytest.raises(OptionError) as refused:
        parse_read({**BASE, "tls.config.file": str(path)}, streaming=True)
    assert "option 'tls.config.file'" in str(refused.value)
    assert message.format(path=path) in str(refused.value)


def test_a_file_gone_on_an_executor_fails_its_client_naming_the_option(tmp_path: Path) -> None:
    path = tmp_path / "tls.properties"
    path.write_text("tls.enable=true\n")
    security = parse_security({"tls.config.file": str(path)})
    path.unlink()
    with pytest.raises(OptionError, match="must be readable at this path on the driver and on"):
        security.client_config("127.0.0.1:9876")
