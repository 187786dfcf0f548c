"""QUERY_MESSAGE: a query on a key many messages share, over an old time window, reads the
key's whole chain of newer index entries while the broker answers other requests; a maxNum of 0
or less finds nothing."""

from __future__ import annotations

from pathlib import Path

import pytest
import trio

from common.record import decode_records
from remoting.client import RemotingClient
from remoting.codes import RequestCode, ResponseCode
from remoting.command import RemotingCommand
from tests.broker.test_processors import TOPIC, running_broker
from tests.conftest import drain_dispatch, make_msg, put_and_dispatch

NEWER = 100_000
OLD = 64


async def test_other_requests_are_answered_while_a_query_walks_a_hot_key(tmp_path: Path) -> None:
    async with running_broker(
        tmp_path,
        mapped_file_size_commit_log=1 << 25,
        max_hash_slot_num=1024,
        max_index_num=NEWER * 2,
    ) as b:
        store = b.store
        old_time = b.clock.now
        store.put_messages([make_msg(TOPIC, b"old", keys="hot") for _ in range(OLD)])
        b.clock.advance(60_000)
        batch = [make_msg(TOPIC, b"new", keys="hot") for _ in range(1000)]
        for _ in range(NEWER // 1000):
            store.put_messages(batch)
        drain_dispatch(store)
        store.index.walk_step = 64  # pauses often: ~1,500 during the walk below
        answered_during_query = 0
        query_done = False

        async def query() -> None:
            nonlocal query_done
            resp = await b.call(
                RequestCode.QUERY_MESSAGE,
                topic=TOPIC,
                key="hot",
                maxNum="64",
                beginTimestamp=str(old_time),
                endTimestamp=str(old_time + 1000),
            )
            query_done = True
            assert resp.code == ResponseCode.SUCCESS, resp.remark
            assert [r.body for r in decode_records(resp.body)] == [b"old"] * OLD

        async def other_requests(client: RemotingClient) -> None:
            nonlocal answered_during_query
            while not query_done:
                req = RemotingCommand.request(
                    RequestCode.GET_MAX_OFFSET, {"topic": TOPIC, "queueId": "0"}, opaque=0
                )
                resp = await client.invoke(b.addr, req)
                assert resp.ext_fields["offset"] == str(OLD + NEWER)
                if not query_done:
                    answered_during_query += 1

        async with RemotingClient() as other, trio.open_nursery() as nursery:
            nursery.start_soon(query)
            nursery.start_soon(other_requests, other)
        assert answered_during_query >= 20, answered_during_query


@pytest.mark.parametrize("max_num", ["0", "-5"])
async def test_max_num_below_one_finds_nothing(tmp_path: Path, max_num: str) -> None:
    """As RocketMQ's ``min(maxNum, maxMsgsNumBatch)``: no message, not one."""
    async with running_broker(tmp_path) as b:
        put_and_dispatch(b.store, make_msg(TOPIC, b"m", keys="k"))
        window = {"beginTimestamp": "0", "endTimestamp": str(2**62)}
        found = await b.call(RequestCode.QUERY_MESSAGE, topic=TOPIC, key="k", maxNum="1", **window)
        assert found.code == ResponseCode.SUCCESS
        resp = await b.call(
            RequestCode.QUERY_MESSAGE, topic=TOPIC, key="k", maxNum=max_num, **window
        )
        assert resp.code == ResponseCode.QUERY_NOT_FOUND
        assert resp.body == b""
