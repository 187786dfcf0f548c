"""Every ``mqadmin`` example line in the README runs, as written, against a live cluster.

The quick start's addresses are replaced by the test cluster's (ephemeral ports) and the
``<offsetMsgId>`` and ``<msgId>`` placeholders by a real message's ids; a producer of ``pg``
and a push consumer of ``cg`` run meanwhile so the connection commands have something to
show. Destructive examples (``deleteSubGroup``, ``deleteTopic``, ``updateBrokerConfig``) run
last.
"""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from pathlib import Path

import trio

from client import ConsumeFrom, ConsumeResult, Message, MessageQueue, Producer, PushConsumer
from tests.e2e.cluster import in_thread, running_cluster

README = Path(__file__).resolve().parents[2] / "README.md"
MQADMIN = str(Path(sys.executable).parent / "mqadmin")
LAST = ("updateBrokerConfig", "deleteSubGroup", "deleteTopic")


def readme_examples() -> list[tuple[str, str]]:
    """``(command, example line)`` from the README's mqadmin table, destructive ones last."""
    rows = re.findall(r"^\| `(\w+)` \| `(mqadmin [^`]+)`", README.read_text(), flags=re.M)
    return sorted(rows, key=lambda r: (r[0] in LAST, LAST.index(r[0]) if r[0] in LAST else 0))


def run_examples(namesrv: str, broker: str) -> list[tuple[str, int, str]]:
    """Blocking: run every example with a producer and a consumer alive; failures returned."""
    with (
        Producer("pg", namesrv) as producer,
        PushConsumer("cg", namesrv, consume_from=ConsumeFrom.FIRST_OFFSET) as consumer,
    ):
        order = Message("Orders", b"order 42", tags="TagA", keys=["order-42"])
        sent = producer.send(order, queue=MessageQueue("Orders", "broker-a", 0))
        consumer.subscribe("Orders", "*", lambda msgs: ConsumeResult.SUCCESS)
        failures = []
        for command, line in readme_examples():
            line = line.replace("127.0.0.1:9876", namesrv).replace("127.0.0.1:10911", broker)
            line = line.replace("<offsetMsgId>", sent.offset_msg_id)
            line = line.replace("<msgId>", sent.msg_id)
            argv = [MQADMIN, *shlex.split(line)[1:]]
            done = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)
            if done.returncode != 0:
                failures.append((command, done.returncode, done.stderr.strip()[-300:]))
        return failures


def test_the_readme_lists_the_examples() -> None:
    commands = [c for c, _ in readme_examples()]
    assert len(commands) >= 22
    assert commands[-3:] == list(LAST)


async def test_readme_mqadmin_examples_run(tmp_path: Path) -> None:
    with trio.fail_after(240):
        async with running_cluster(tmp_path, {"broker-a": {}}) as cluster:
            broker = cluster.brokers["broker-a"].addr
            # the examples create Orders on DefaultCluster first (updateTopic sorts early)
            failures = await in_thread(run_examples, cluster.namesrv_addr, broker)
    assert failures == []
