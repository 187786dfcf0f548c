"""Run ``mqadmin`` in-process (click's CliRunner, in a worker thread with its own trio loop)
against the in-process cluster of :mod:`tests.client.inproc_cluster`."""

from __future__ import annotations

import json
from functools import partial
from typing import Any

import trio
from click.testing import CliRunner, Result

from client.admin.cli import main
from client.aio import ConsumeFrom, PushConsumer
from client.consume_service import ConsumeResult
from client.message import ReceivedMessage
from tests.client.inproc_cluster import TOPIC


async def mqadmin(*args: str, env: dict[str, str | None] | None = None) -> Result:
    """``mqadmin <args>``; the result has ``exit_code``, ``stdout`` and ``stderr``."""
    runner = CliRunner(env=env)
    invoke = partial(runner.invoke, main, list(args), catch_exceptions=True)
    result: Result = await trio.to_thread.run_sync(invoke)
    assert "Traceback" not in result.output, result.output
    return result


async def ok(*args: str) -> str:
    """``mqadmin <args>`` must succeed; its stdout."""
    result = await mqadmin(*args)
    assert result.exit_code == 0, (args, result.output, result.exception)
    return result.stdout


async def as_json(*args: str) -> Any:
    """``mqadmin <args> --json`` must succeed; its parsed stdout."""
    return json.loads(await ok(*args, "--json"))


async def fails(*args: str) -> str:
    """``mqadmin <args>`` must fail (exit code 1, or 2 for a usage error) with one line on
    stderr; that line."""
    result = await mqadmin(*args)
    assert result.exit_code in (1, 2), (args, result.output)
    assert result.stdout == "", result.stdout
    assert result.stderr.count("\n") == 1, result.stderr  # nothing else, not even a blank line
    err = result.stderr.strip()
    assert err, result.output
    assert err.startswith("mqadmin "), err
    return err


def headers_in(text: str, *headers: str) -> bool:
    """True when every header occurs in ``text``."""
    return all(h in text for h in headers)


def collecting_consumer(namesrv: str) -> tuple[PushConsumer, list[ReceivedMessage]]:
    """Push consumer ``cg`` on TOPIC from the first offset, and the list it collects into."""
    got: list[ReceivedMessage] = []

    def handle(msgs: list[ReceivedMessage]) -> ConsumeResult:
        got.extend(msgs)
        return ConsumeResult.SUCCESS

    consumer = PushConsumer("cg", namesrv, consume_from=ConsumeFrom.FIRST_OFFSET)
    consumer.subscribe(TOPIC, "*", handle)
    return consumer, got
