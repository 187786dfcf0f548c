"""A push-consumer group member run as its own process by the end-to-end tests.

``python -m tests.e2e.push_member --namesrv H:P --group G --topic T [--orderly]
[--broadcasting --instance-name N --offset-dir D] [--fail-first K] [--handler-ms MS]
[--persist-interval S] [--heartbeat-interval S] [--suspend-ms MS]
[--request-timeout S] [--pull-max-idle-ms MS]``

It consumes ``T`` with the blocking :class:`client.PushConsumer` (from the first offset) and
writes one JSON object per line to stdout, flushed at once, so a test reading the pipe sees
every event even if this process is killed right after:

- ``{"event": "started", "client_id": ..., "pid": ...}`` once subscribed;
- ``{"event": "begin", "queue": [broker, qid], "offset": ...}`` as a handler call starts;
- ``{"event": "msg", "body": ..., "queue": [broker, qid], "offset": ..., "topic": ...,
  "msg_id": ..., "reconsume": ..., "attempt": ..., "ok": ..., "t0": ..., "t1": ...}`` for each
  handler call on a message (``t0``/``t1``: wall-clock start and end of the call; ``ok``: the
  handler returned SUCCESS; ``attempt``: how many times this process has seen the body);
- ``{"event": "assignment", "queues": [[topic, broker, qid], ...], "t": ...}`` whenever the
  assignment (polled every 50 ms in the main thread) changes;
- ``{"event": "closed"}`` after SIGTERM closed the consumer (offsets persisted, locks
  released); the process then exits 0.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

from client import (
    ClientConfig,
    ConsumeFrom,
    ConsumeResult,
    MessageModel,
    PushConsumer,
    ReceivedMessage,
)

POLL_S = 0.05
"""How often the main thread looks at the assignment."""

_out_lock = threading.Lock()


def emit(event: str, **fields: Any) -> None:
    """Write one JSON line to stdout and flush it (handler threads and the main thread)."""
    line = json.dumps({"event": event, **fields}, separators=(",", ":"))
    with _out_lock:
        sys.stdout.write(line + "\n")
        sys.stdout.flush()


class Handler:
    """Logs every call; fails the first ``fail_first`` attempts of each body."""

    def __init__(self, fail_first: int, handler_s: float) -> None:
        self.fail_first = fail_first
        self.handler_s = handler_s
        self.attempts: Counter[bytes] = Counter()
        self._lock = threading.Lock()

    def __call__(self, msgs: list[ReceivedMessage]) -> ConsumeResult:
        t0 = time.time()
        for m in msgs:
            emit("begin", queue=[m.queue.broker_name, m.queue.queue_id], offset=m.queue_offset)
        if self.handler_s:
            time.sleep(self.handler_s)  # widens the handler's interval for overlap checks
        ok = True
        attempts = []
        with self._lock:
            for m in msgs:
                self.attempts[m.body] += 1
                attempts.append(self.attempts[m.body])
                ok = ok and self.attempts[m.body] > self.fail_first
        t1 = time.time()
        for m, attempt in zip(msgs, attempts, strict=True):
            emit(
                "msg",
                body=m.body.decode(),
                queue=[m.queue.broker_name, m.queue.queue_id],
                offset=m.queue_offset,
                topic=m.topic,
                msg_id=m.msg_id,
                reconsume=m.reconsume_times,
                attempt=attempt,
                ok=ok,
                t0=t0,
                t1=t1,
            )
        return ConsumeResult.SUCCESS if ok else ConsumeResult.RECONSUME_LATER


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The command line (see the module docstring)."""
    parser = argparse.ArgumentParser(prog="push_member")
    parser.add_argument("--namesrv", required=True)
    parser.add_argument("--group", required=True)
    parser.add_argument("--topic", required=True)
    parser.add_argument("--orderly", action="store_true")
    parser.add_argument("--broadcasting", action="store_true")
    parser.add_argument("--instance-name", default="DEFAULT")
    parser.add_argument("--offset-dir", type=Path, default=None)
    parser.add_argument("--fail-first", type=int, default=0)
    parser.add_argument("--handler-ms", type=float, default=0.0)
    parser.add_argument("--persist-interval", type=float, default=5.0)
    add_client_options(parser)
    return parser.parse_args(argv)


def add_client_options(parser: argparse.ArgumentParser) -> None:
    """The options both member programs take: client instance timings and stall detection."""
    parser.add_argument("--heartbeat-interval", type=float, default=30.0)
    parser.add_argument("--suspend-ms", type=int, default=15_000)
    parser.add_argument("--request-timeout", type=float, default=3.0)
    parser.add_argument("--pull-max-idle-ms", type=int, default=120_000)


def main(argv: list[str] | None = None) -> int:
    """Consume until SIGTERM; returns the exit code."""
    args = parse_args(argv)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    model = MessageModel.BROADCASTING if args.broadcasting else MessageModel.CLUSTERING
    handler = Handler(args.fail_first, args.handler_ms / 1000)
    config = ClientConfig.create(
        args.namesrv,
        heartbeat_broker_interval_s=args.heartbeat_interval,
        request_timeout_s=args.request_timeout,
    )
    with PushConsumer(
        args.group,
        client_config=config,
        consume_from=ConsumeFrom.FIRST_OFFSET,
        message_model=model,
        orderly=args.orderly,
        instance_name=args.instance_name,
        offset_dir=args.offset_dir,
        persist_interval=args.persist_interval,
        suspend_timeout_ms=args.suspend_ms,
        pull_max_idle_ms=args.pull_max_idle_ms,
    ) as consumer:
        consumer.subscribe(args.topic, "*", handler)
        # the client id is what the brokers list as the group's member (allocation order)
        client_id = consumer.client_id
        emit("started", client_id=client_id, pid=os.getpid())
        last: list[list[Any]] | None = None
        while not stop.wait(POLL_S):
            queues = [[q.topic, q.broker_name, q.queue_id] for q in consumer.assignment()]
            if queues != last:
                emit("assignment", queues=queues, t=time.time())
                last = queues
    emit("closed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
