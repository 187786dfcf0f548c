"""A pull-consumer group member (``PullConsumer.subscribe``) run as its own process by the
end-to-end tests.

``python -m tests.e2e.pull_member --namesrv H:P --group G --topic T [--api blocking|aio]
[--heartbeat-interval S] [--suspend-ms MS] [--request-timeout S] [--auto-commit-interval S]
[--pull-max-idle-ms MS]``

It polls ``T`` with the blocking :class:`client.PullConsumer` (or, with ``--api aio``, the
trio-native one) in group mode (from the first offset, auto-commit on) and writes one JSON
object per line to stdout, flushed at once, in the event format of
:mod:`tests.e2e.push_member` (so :class:`tests.e2e.push_group.Group` reads it):

- ``{"event": "started", "client_id": ..., "pid": ...}`` once subscribed;
- ``{"event": "msg", "body": ..., "queue": [broker, qid], "offset": ..., "ok": true,
  "t0": ..., "t1": ...}`` for each message a poll returned (``t0`` = ``t1``: the wall-clock
  time the poll returned; with ``--api aio`` read right after the poll returns, in the same
  thread and task step, while the blocking API's caller may wait milliseconds for the GIL
  after its poll returned, long enough for a SIGSTOP to fall in between);
- ``{"event": "assignment", "queues": [[topic, broker, qid], ...], "t": ...}`` whenever the
  assignment (looked at after every poll) changes;
- ``{"event": "closed"}`` after SIGTERM closed the consumer (positions committed); the process
  then exits 0.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
import time
from typing import Any

import trio

from client import ClientConfig, ConsumeFrom, PullConsumer, ReceivedMessage, aio
from client.instance import ClientInstance
from tests.e2e.push_member import add_client_options, emit

POLL_S = 0.05
"""How long one poll waits for messages."""


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The command line (see the module docstring)."""
    parser = argparse.ArgumentParser(prog="pull_member")
    parser.add_argument("--namesrv", required=True)
    parser.add_argument("--group", required=True)
    parser.add_argument("--topic", required=True)
    parser.add_argument("--api", choices=("blocking", "aio"), default="blocking")
    parser.add_argument("--auto-commit-interval", type=float, default=5.0)
    add_client_options(parser)
    return parser.parse_args(argv)


def report(msgs: list[ReceivedMessage], t: float) -> None:
    """One ``msg`` event per message a poll returned at wall-clock time ``t``."""
    for m in msgs:
        queue = [m.queue.broker_name, m.queue.queue_id]
        emit("msg", body=m.body.decode(), queue=queue, offset=m.queue_offset, ok=True, t0=t, t1=t)


class Assignment:
    """Emits an ``assignment`` event when the queues change."""

    def __init__(self) -> None:
        self.last: list[list[Any]] | None = None

    def update(self, assigned: list[aio.MessageQueue]) -> None:
        """Report ``assigned`` if it differs from the last report."""
        queues = [[q.topic, q.broker_name, q.queue_id] for q in assigned]
        if queues != self.last:
            emit("assignment", queues=queues, t=time.time())
            self.last = queues


def run_blocking(args: argparse.Namespace, config: ClientConfig, stop: threading.Event) -> None:
    """Poll with the blocking consumer until ``stop``."""
    with PullConsumer(args.group, client_config=config, **options(args)) as consumer:
        consumer.subscribe(args.topic)
        emit("started", client_id=consumer.client_id, pid=os.getpid())
        assignment = Assignment()
        while not stop.is_set():
            msgs = consumer.poll(timeout=POLL_S)
            report(msgs, time.time())
            assignment.update(consumer.assignment())


async def run_aio(args: argparse.Namespace, config: ClientConfig, stop: threading.Event) -> None:
    """Poll with the trio-native consumer until ``stop``."""
    async with (
        ClientInstance(config) as instance,
        aio.PullConsumer(args.group, instance=instance, **options(args)) as consumer,
    ):
        consumer.subscribe(args.topic)
        emit("started", client_id=instance.client_id, pid=os.getpid())
        assignment = Assignment()
        while not stop.is_set():
            msgs = await consumer.poll_for(POLL_S)
            report(msgs, time.time())  # no checkpoint since the poll returned
            assignment.update(consumer.assignment())


def options(args: argparse.Namespace) -> dict[str, Any]:
    """The consumer's options from the command line."""
    return {
        "consume_from": ConsumeFrom.FIRST_OFFSET,
        "suspend_timeout_ms": args.suspend_ms,
        "auto_commit_interval": args.auto_commit_interval,
        "pull_max_idle_ms": args.pull_max_idle_ms,
    }


def main(argv: list[str] | None = None) -> int:
    """Poll until SIGTERM; returns the exit code."""
    args = parse_args(argv)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    config = ClientConfig.create(
        args.namesrv,
        heartbeat_broker_interval_s=args.heartbeat_interval,
        request_timeout_s=args.request_timeout,
    )
    if args.api == "aio":
        trio.run(run_aio, args, config, stop)
    else:
        run_blocking(args, config, stop)
    emit("closed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
