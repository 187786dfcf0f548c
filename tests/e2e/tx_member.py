"""A transactional producer-group member run as its own process by the end-to-end tests.

``python -m tests.e2e.tx_member --namesrv H:P --group G --topic T --check STATE
[--hold BODY]``

It starts the blocking :class:`client.TransactionProducer` of ``G`` with a checker answering
``STATE`` (COMMIT_MESSAGE, ROLLBACK_MESSAGE or UNKNOW) and learns ``T``'s route (so the brokers
know it as a member), then writes one JSON object per line to stdout, flushed at once:

- ``{"event": "ready", "pid": ...}`` once the producer is started and known to the brokers;
- ``{"event": "check", "body": ..., "msg_id": ..., "topic": ..., "queue_id": ...,
  "answer": ...}`` for every check a broker asks (the checker runs in a worker thread);
- with ``--hold BODY``: ``{"event": "half", "body": ..., "msg_id": ...}`` from inside the local
  transaction of a message ``BODY`` sent after ``ready``; the local transaction then never
  ends (the test kills the process);
- ``{"event": "closed"}`` after SIGTERM closed the producer; the process then exits 0.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import threading
from typing import Any

from client import LocalTransactionState, Message, ReceivedMessage, TransactionProducer

_out_lock = threading.Lock()


def emit(event: str, **fields: Any) -> None:
    """Write one JSON line to stdout and flush it."""
    line = json.dumps({"event": event, **fields}, separators=(",", ":"))
    with _out_lock:
        sys.stdout.write(line + "\n")
        sys.stdout.flush()


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The command line (see the module docstring)."""
    parser = argparse.ArgumentParser(prog="tx_member")
    parser.add_argument("--namesrv", required=True)
    parser.add_argument("--group", required=True)
    parser.add_argument("--topic", required=True)
    parser.add_argument("--check", choices=[s.name for s in LocalTransactionState], required=True)
    parser.add_argument("--hold", default=None)
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    """Serve checks (and hold one transaction open) until SIGTERM; returns the exit code."""
    args = parse_args(argv)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    answer = LocalTransactionState[args.check]

    def checker(msg: ReceivedMessage) -> LocalTransactionState:
        emit(
            "check",
            body=msg.body.decode(),
            msg_id=msg.msg_id,
            topic=msg.topic,
            queue_id=msg.queue.queue_id,
            answer=answer.name,
        )
        return answer

    def hold(msg: Message, arg: object) -> LocalTransactionState:
        emit("half", body=msg.body.decode(), msg_id=msg.uniq_key)
        stop.wait()  # never decides while the process lives
        return LocalTransactionState.UNKNOW

    with TransactionProducer(group=args.group, namesrv=args.namesrv, checker=checker) as p:
        p.fetch_publish_queues(args.topic)
        emit("ready", pid=os.getpid())
        if args.hold is not None:
            threading.Thread(
                target=p.send_in_transaction,
                args=(Message(args.topic, args.hold.encode()), hold),
                daemon=True,
            ).start()
        stop.wait()
    emit("closed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
