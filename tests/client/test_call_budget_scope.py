"""A call budget (``with_call_budget``) ends with its call. The call that opens a broker
connection must not hand its budget to that connection's tasks (the dialer, the reader, the
handlers of what the broker sends): they serve every user of the client instance, and the
tasks they start in turn (a push consumer's offset reset and the queues it re-creates) would
give their requests the budget's long timeouts for as long as it lasts."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import trio
import trio.lowlevel

from client.aio import (
    ClientConfig,
    ClientInstance,
    MessageQueue,
    PullConsumer,
    with_call_budget,
)
from client.instance import _call_deadline
from tests.client.inproc_cluster import TOPIC, cluster


def all_tasks() -> Iterator[trio.lowlevel.Task]:
    """Every task of this trio run."""
    todo = [trio.lowlevel.current_root_task()]
    while todo:
        task = todo.pop()
        if task is None:
            continue
        yield task
        todo.extend(t for nursery in task.child_nurseries for t in nursery.child_tasks)


async def test_the_tasks_of_a_connection_a_budgeted_call_opened_carry_no_budget(
    tmp_path: Path,
) -> None:
    async with cluster(tmp_path, brokers=("broker-a",)) as c:
        instance = ClientInstance(ClientConfig.create(c.namesrv))
        async with instance, PullConsumer("g_pull", c.namesrv, instance=instance) as pull:
            before = {id(t) for t in all_tasks()}
            # the instance's first broker call: it dials the broker and starts the reader
            await with_call_budget(60.0, pull.committed, MessageQueue(TOPIC, "broker-a", 0))
            started = [t for t in all_tasks() if id(t) not in before]
            assert started  # the connection's tasks
            leaked = [(t.name, t.context.get(_call_deadline)) for t in started]
            assert [(name, d) for name, d in leaked if d is not None] == []
