"""The Spark connector against secured clusters (real processes, real Spark on local[2]):
a broker with ACL on (``accessKey`` / ``secretKey`` options for reads and writes), a name
server and broker enforcing TLS (``tls.*`` options), and one worker process holding clients of
two accounts side by side."""

from __future__ import annotations

import contextlib
import itertools
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import trio

from client import Message, MessageQueue, Producer
from client.spark.options import SecurityOptions, parse_read
from client.spark.pulling import QueueRange, read_range
from remoting.acl.signing import SessionCredentials
from remoting.client import RemotingClient
from remoting.codes import RequestCode, ResponseCode
from remoting.command import RemotingCommand
from remoting.tls import client_ssl_context
from tests.broker.test_acl import (
    ADMIN,
    PRODUCER,
    READER,
    acl_overrides,
    create_topic,
    write_accounts,
)
from tests.remoting.tls_certs import Pki, make_pki
from tests.spark.cluster import SyncCluster, sync_cluster

pytest.importorskip("pyspark")  # installed by the spark extra; see conftest

TOPIC = "Orders"
ROWS = 12
_seq = itertools.count()


def account_options(creds: SessionCredentials) -> dict[str, str]:
    return {"accessKey": creds.access_key, "secretKey": creds.secret_key}


def with_options(builder: Any, namesrv: str, **options: str) -> Any:
    builder = builder.format("minimq").option("namesrv", namesrv).option("topic", TOPIC)
    for key, value in options.items():
        builder = builder.option(key, value)
    return builder


def write(spark: Any, namesrv: str, bodies: list[str], **options: str) -> None:
    df = spark.createDataFrame([(b,) for b in bodies], "body string")
    with_options(df.write, namesrv, **options).mode("append").save()


def read_bodies(spark: Any, namesrv: str, **options: str) -> list[str]:
    rows = with_options(spark.read, namesrv, **options).load().collect()
    return sorted(bytes(r.body).decode() for r in rows)


@contextlib.contextmanager
def acl_cluster(root: Path) -> Iterator[SyncCluster]:
    """A plain name server and broker-a with ACL on (the accounts of tests/broker/test_acl.py,
    file chmod 600); topic Orders with 2 queues, created by the admin account."""
    acl_file = write_accounts(root / "plain_acl.yml")
    broker = {**acl_overrides(acl_file), "diskMaxUsedSpaceRatio": "95"}
    with sync_cluster(root, {"broker-a": broker}) as cluster:
        trio.run(create_topic, cluster.brokers["broker-a"], TOPIC)
        yield cluster


def test_acl_write_and_batch_read_need_the_account(
    spark: Any, tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    """Signed with the accessKey/secretKey options a write and a batch read go through;
    without them each fails naming the ACL refusal and the options to give; the secret is in
    no error, no log and no plan."""
    secret = READER.secret_key
    with acl_cluster(tmp_path / "acl") as cluster:
        ns = cluster.namesrv
        bodies = [f"signed-{i}" for i in range(ROWS)]
        write(spark, ns, bodies, **account_options(READER))
        with pytest.raises(Exception, match="AccessKey missing") as refused_write:
            write(spark, ns, ["unsigned"])
        assert "accessKey" in str(refused_write.value)

        assert read_bodies(spark, ns, **account_options(READER)) == sorted(bodies)
        with pytest.raises(Exception, match="AccessKey missing") as refused_read:
            read_bodies(spark, ns)
        assert "accessKey" in str(refused_read.value)

        plan = with_options(spark.read, ns, **account_options(READER)).load()
        plan_text = plan._jdf.queryExecution().toString()
    assert secret not in str(refused_write.value) + str(refused_read.value) + plan_text
    out, err = capfd.readouterr()
    assert secret not in out + err


def stream_bodies(spark: Any, namesrv: str, checkpoint: Path, **options: str) -> list[str]:
    """The bodies one availableNow run of a streaming read from the earliest offsets gets;
    the query's error (a StreamingQueryException with the source's message) if it failed."""
    rows: list[Any] = []
    query = (
        with_options(spark.readStream, namesrv, startingOffsets="earliest", **options)
        .load()
        .writeStream.foreachBatch(lambda df, _id: rows.extend(df.collect()))
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination(120)  # raises the query's error
    assert not query.isActive
    return sorted(bytes(r.body).decode() for r in rows)


def test_acl_streaming_read_needs_sub_on_the_topic(spark: Any, tmp_path: Path) -> None:
    """A streaming read signed by an account with SUB on the topic gets every row; one by an
    account with PUB only fails at its first trigger with the NO_PERMISSION hint naming the
    account (never its secret), before any task pulls; one without an account fails at once
    (no retries of refused offset requests) saying which options to give."""
    with acl_cluster(tmp_path / "acl") as cluster:
        ns = cluster.namesrv
        bodies = [f"streamed-{i}" for i in range(ROWS)]
        write(spark, ns, bodies, **account_options(PRODUCER))
        got = stream_bodies(spark, ns, tmp_path / "reader", **account_options(READER))
        assert got == sorted(bodies)
        with pytest.raises(Exception, match="no SUB permission on topic:Orders") as refused:
            stream_bodies(spark, ns, tmp_path / "producer", **account_options(PRODUCER))
        with pytest.raises(Exception, match="AccessKey missing") as unsigned:
            stream_bodies(spark, ns, tmp_path / "unsigned")
    text = str(refused.value)
    assert "AclRefusedError" in text
    assert f"check the ACL account '{PRODUCER.access_key}' of option 'accessKey'" in text
    assert PRODUCER.secret_key not in text
    assert "give the options 'accessKey' and 'secretKey'" in str(unsigned.value)


def test_a_worker_keeps_one_client_per_account(tmp_path: Path) -> None:
    """Executor pulls of two accounts in one process use two client instances: a wrong
    secret is refused even after the right one read through the same name server (a cache by
    name server alone would hand the signed instance to the second query)."""
    with acl_cluster(tmp_path / "acl") as cluster:
        ns = cluster.namesrv
        with Producer(group="pg", client_config=SecurityOptions(
            READER.access_key, READER.secret_key).client_config(ns)) as producer:  # fmt: skip
            for i in range(4):
                producer.send(Message(TOPIC, b"%d" % i), queue=MessageQueue(TOPIC, "broker-a", 0))
        qr = QueueRange(TOPIC, "broker-a", 0, 0, 4)
        good = SecurityOptions(READER.access_key, READER.secret_key)
        bad = SecurityOptions(READER.access_key, "not-the-secret")
        assert sum(b.num_rows for b in read_range(ns, qr, security=good)) == 4
        with pytest.raises(Exception, match="signature") as refused:
            list(read_range(ns, qr, security=bad))
        assert "not-the-secret" not in str(refused.value)
        assert bad.secret_key not in repr(bad)
        assert good != bad
        opts = parse_read(
            {"namesrv": ns, "topic": TOPIC, **account_options(ADMIN)}, streaming=False
        )
        assert ADMIN.secret_key not in repr(opts)


# ---------------------------------------------------------------------- TLS


def tls_namesrv_args(root: Path, pki: Pki) -> list[str]:
    conf = root / "namesrv.conf"
    props = {**pki.server_properties(), "kvConfigPath": str(root / "kv.json")}
    conf.write_text("".join(f"{k}={v}\n" for k, v in props.items()))
    return ["-c", str(conf)]


async def create_topic_over_tls(broker: str, pki: Pki) -> None:
    async with RemotingClient(ssl_context=client_ssl_context(pki.client())) as client:
        cmd = RemotingCommand.request(
            RequestCode.UPDATE_AND_CREATE_TOPIC,
            {"topic": TOPIC, "readQueueNums": 2, "writeQueueNums": 2, "perm": 6},
            opaque=next(_seq),
        )
        resp = await client.invoke(broker, cmd)
        assert resp.code == ResponseCode.SUCCESS, resp.remark


def test_batch_read_over_tls(spark: Any, tmp_path: Path) -> None:
    """Name server and broker enforce TLS: the tls.* options, or the tls.config.file file they
    override, carry the read; without them the query fails, as with a file that is missing."""
    pki = make_pki(tmp_path / "pki")
    root = tmp_path / "tls"
    root.mkdir()
    broker = {
        **pki.server_properties(),
        **pki.client_properties(),
        "diskMaxUsedSpaceRatio": "95",
    }
    with sync_cluster(root, {"broker-a": broker}, tls_namesrv_args(root, pki)) as cluster:
        ns = cluster.namesrv
        trio.run(create_topic_over_tls, cluster.brokers["broker-a"], pki)
        tls = SecurityOptions(tls=(("tls_trust_cert_path", str(pki.ca)), ("use_tls", True)))
        with Producer(group="pg", client_config=tls.client_config(ns)) as producer:
            for i in range(ROWS):
                producer.send(Message(TOPIC, b"tls-%d" % i))
        want = sorted(f"tls-{i}" for i in range(ROWS))
        options = {"tls.enable": "true", "tls.client.trustCertPath": str(pki.ca)}
        assert read_bodies(spark, ns, **options) == want
        with pytest.raises(Exception, match="no name server answered"):
            read_bodies(spark, ns)
        # tls.config.file: its keys, read on the driver and on the executors ...
        tls_file = root / "tls.properties"
        tls_file.write_text(f"tls.enable=true\ntls.client.trustCertPath={pki.ca}\n")
        assert read_bodies(spark, ns, **{"tls.config.file": str(tls_file)}) == want
        # ... with the tls.* options over them (the file says plaintext here)
        tls_file.write_text(f"tls.enable=false\ntls.client.trustCertPath={pki.ca}\n")
        with pytest.raises(Exception, match="no name server answered"):
            read_bodies(spark, ns, **{"tls.config.file": str(tls_file)})
        both = {"tls.config.file": str(tls_file), "tls.enable": "true"}
        assert read_bodies(spark, ns, **both) == want
        with pytest.raises(Exception, match=r"option 'tls\.config\.file': cannot read"):
            read_bodies(spark, ns, **{"tls.config.file": str(root / "missing.properties")})
