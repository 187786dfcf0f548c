"""mqadmin checkMsgSendRT and clusterRT against an in-process name server and brokers (real
sockets on 127.0.0.1): the counts and queues of the sends, not their timings."""

from __future__ import annotations

import json
import signal
import subprocess
from collections import Counter
from pathlib import Path

import trio

from client.admin.cmd_send_rt import CHECK_HEADERS, CLUSTER_RT_HEADERS, RT_TOPIC
from tests.admin.harness import as_json, headers_in, mqadmin, ok
from tests.client.inproc_cluster import TOPIC, cluster
from tests.processes import console_script, read_log

LIMIT = 60.0


async def test_check_msg_send_rt_sends_to_each_queue_in_turn(tmp_path: Path) -> None:
    async with cluster(tmp_path) as c:
        report = await as_json("checkMsgSendRT", "-n", c.namesrv, "-t", TOPIC, "-a", "16")
        sends = report["sends"]
        assert len(sends) == 16
        assert all(s["sendResult"] for s in sends)
        queues = Counter((s["brokerName"], s["queueId"]) for s in sends)
        assert queues == {(b, q): 2 for b in ("broker-a", "broker-b") for q in range(4)}
        text = await ok("checkMsgSendRT", "-n", c.namesrv, "-t", TOPIC, "-a", "3", "-s", "10")
        rows = text.splitlines()
        assert headers_in(rows[0], *CHECK_HEADERS)
        assert len(rows) == 5
        assert rows[-1].startswith("Avg RT: ")
        assert all(" true " in row for row in rows[1:4])


async def test_cluster_rt_counts_each_brokers_sends(tmp_path: Path) -> None:
    async with cluster(tmp_path) as c:
        rows = await as_json("clusterRT", "-n", c.namesrv, "-a", "5", "-s", "64")
        assert [(r["clusterName"], r["brokerName"]) for r in rows] == [
            ("DefaultCluster", "broker-a"),
            ("DefaultCluster", "broker-b"),
        ]
        assert [(r["successCount"], r["failCount"]) for r in rows] == [(5, 0), (5, 0)]
        stats = await as_json("topicStatus", "-n", c.namesrv, "-t", RT_TOPIC)
        stored = {(r["brokerName"], r["queueId"]): r["maxOffset"] for r in stats}
        assert stored[("broker-a", 0)] == stored[("broker-b", 0)] == 5  # each its own five
        assert sum(stored.values()) == 10
        text = await ok("clusterRT", "-n", c.namesrv, "-a", "2", "-c", "DefaultCluster")
        lines = text.splitlines()
        assert headers_in(lines[0], *CLUSTER_RT_HEADERS)
        assert [line.split()[3:] for line in lines[1:]] == [["2", "0"], ["2", "0"]]
        tlog = await ok("clusterRT", "-n", c.namesrv, "-a", "2", "-p", "true", "-m", "room1")
        assert [line.split("|")[1:4] for line in tlog.splitlines()] == [
            ["room1", "DefaultCluster", "broker-a"],
            ["room1", "DefaultCluster", "broker-b"],
        ]


async def test_cluster_rt_counts_failed_sends_and_exits_1(tmp_path: Path) -> None:
    async with cluster(tmp_path) as c:
        await ok("wipeWritePerm", "-n", c.namesrv, "-b", "broker-b")
        result = await mqadmin("clusterRT", "-n", c.namesrv, "-a", "3", "--json")
        assert result.exit_code == 1, result.output
        rows = {r["brokerName"]: (r["successCount"], r["failCount"]) for r in _json(result.stdout)}
        assert rows == {"broker-a": (3, 0), "broker-b": (0, 3)}
        assert "3 of 6 sends failed" in result.stderr


async def test_cluster_rt_of_an_unknown_cluster_fails(tmp_path: Path) -> None:
    async with cluster(tmp_path, brokers=("broker-a",)) as c:
        result = await mqadmin("clusterRT", "-n", c.namesrv, "-c", "NoSuchCluster")
        assert result.exit_code == 1
        assert (
            result.stderr.strip()
            == "mqadmin clusterRT: CODE: 1 DESC: cluster [NoSuchCluster] not exist"
        )


async def test_cluster_rt_interval_repeats_until_ctrl_c(tmp_path: Path) -> None:
    """With -i, rounds repeat; SIGINT (Ctrl+C) ends the process."""
    async with cluster(tmp_path, brokers=("broker-a",)) as c:
        err_path = tmp_path / "mqadmin.err"
        argv = [console_script("mqadmin"), "clusterRT", "-n", c.namesrv, "-a", "1", "-i", "1"]
        with err_path.open("wb") as err:
            proc = await trio.lowlevel.open_process(argv, stdout=subprocess.PIPE, stderr=err)
        try:
            assert proc.stdout is not None
            seen = b""
            with trio.fail_after(LIMIT):
                while seen.count(b"broker-a") < 2:  # two rounds
                    chunk = await proc.stdout.receive_some()
                    assert chunk, read_log(err_path)
                    seen += chunk
                proc.send_signal(signal.SIGINT)
                assert await proc.wait() == 1
            assert "interrupted" in read_log(err_path)
        finally:
            if proc.returncode is None:
                proc.kill()
            with trio.move_on_after(5, shield=True):
                await proc.wait()


def _json(text: str) -> list[dict[str, object]]:
    data: list[dict[str, object]] = json.loads(text)
    return data
