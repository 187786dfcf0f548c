"""The ``mqadmin`` console script: ``mqadmin <command> -n host:port [options] [--json]``.

Commands keep RocketMQ's names and flags (``clusterList``, ``topicList``, ``updateTopic``,
``consumerProgress``, ...); ``mqadmin -h`` lists them and ``mqadmin <command> -h`` shows the
options. Tables go to stdout with RocketMQ's column headers, ``--json`` prints JSON instead,
progress bars go to stderr, and a failure prints one line on stderr and exits with status 1.
"""

from __future__ import annotations

from client.admin import (
    cmd_acl,
    cmd_broker,
    cmd_consumer,
    cmd_group,
    cmd_message,
    cmd_namesrv,
    cmd_queue,
    cmd_send_rt,
    cmd_stats,
    cmd_topic,
    cmd_transaction,
)
from client.admin.base import main

COMMAND_MODULES = (
    cmd_acl,
    cmd_broker,
    cmd_consumer,
    cmd_group,
    cmd_message,
    cmd_namesrv,
    cmd_queue,
    cmd_send_rt,
    cmd_stats,
    cmd_topic,
    cmd_transaction,
)
"""Importing these registers their commands on :data:`main`."""

__all__ = ["main"]

if __name__ == "__main__":
    main()
