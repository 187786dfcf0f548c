"""mqadmin queryHalfMessages against two in-process brokers holding half messages."""

from __future__ import annotations

from pathlib import Path

from remoting.client import RemotingClient
from tests.admin.harness import as_json, fails, headers_in, ok
from tests.broker.txn_helpers import COMMIT, end_fields, end_tx, send_half
from tests.client.inproc_cluster import TOPIC, cluster

NO_CHECKS = {"transactionCheckInterval": "3600000"}


async def test_query_half_messages_lists_the_pending_ones_of_a_group(tmp_path: Path) -> None:
    async with cluster(tmp_path, overrides=NO_CHECKS) as c, RemotingClient() as client:
        a, b = c.brokers["broker-a"], c.brokers["broker-b"]
        pending_a = await send_half(client, a, b"a1", group="pg1", topic=TOPIC, queue_id=3)
        decided = await send_half(client, a, b"a2", group="pg1", topic=TOPIC)
        pending_b = await send_half(client, b, b"b1", group="pg1", topic=TOPIC)
        await send_half(client, b, b"other", group="pg2", topic=TOPIC)
        resp = await end_tx(client, a, end_fields(decided, COMMIT, group="pg1"))
        assert resp.remark != "already decided"

        doc = await as_json("queryHalfMessages", "-n", c.namesrv, "-g", "pg1")
        rows = doc["halfMessages"]
        assert [(r["brokerName"], r["msgId"]) for r in rows] == [
            ("broker-a", pending_a.ext_fields["transactionId"]),
            ("broker-b", pending_b.ext_fields["transactionId"]),
        ]
        assert rows[0]["topic"] == TOPIC
        assert rows[0]["queueId"] == 3
        assert rows[0]["checkTimes"] == 0
        assert rows[0]["producerGroup"] == "pg1"

        text = await ok("queryHalfMessages", "-n", c.namesrv, "-g", "pg1", "-b", a)
        assert headers_in(text, "#Topic", "#QID", "#Transaction Id", "#Check Times")
        assert str(pending_a.ext_fields["transactionId"]) in text
        assert str(pending_b.ext_fields["transactionId"]) not in text
        none = await as_json("queryHalfMessages", "-n", c.namesrv, "-g", "nobody")
        assert none["halfMessages"] == []
        # an empty group is a mistake, not "every producer group"
        for empty in ("", " "):
            err = await fails("queryHalfMessages", "-n", c.namesrv, "-g", empty)
            assert "Invalid value for '-g' / '--producerGroup': must not be empty" in err
