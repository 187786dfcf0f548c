"""``mqbroker`` / ``python -m broker``: run a broker (RocketMQ's ``BrokerStartup``).

Task tree::

    trio.run(_serve)
    └─ common.process.serve_until_signal   the first SIGTERM/SIGINT cancels the service;
       │                                   later ones are logged and ignored
       └─ BrokerController.run          see broker.controller

Rules:

- Settings, lowest first: defaults (``NAMESRV_ADDR`` is the default ``namesrvAddr`` and
  ``MINIMQ_BUSY_POLL_US`` the default ``busyPollMicros``, as in RocketMQ), ``-c FILE``
  (``.properties`` with RocketMQ's keys), ``-n``, then ``--<key> <value>`` for any broker or
  store key (``--listenPort 0``, ``--storePathRootDir /tmp/s``). An unknown key or bad value
  prints one line to stderr, exit 1. ``-n ""`` clears the ``namesrvAddr`` of the file and of
  ``NAMESRV_ADDR`` (RocketMQ passes an empty option value on): the broker registers nowhere.
- ``bindAddress`` (default 0.0.0.0) is the address to listen on, for the broker and its
  metrics; ``--bindAddress`` overrides it like any ``--<key>``.
- ``-p`` prints the effective settings as ``key=value`` lines (escaped as Java's
  ``Properties#store`` does, so ``-p`` output is a valid ``-c`` file) and exits 0.
- A disk ratio outside RocketMQ's bounds is clamped, and a ``mappedFileSizeConsumeQueue``
  that is not a multiple of 20 is rounded up to one, as RocketMQ's getters do, with one
  WARNING at startup naming the key, the value configured and the value used (``-p`` prints
  the value used). So is a ``brokerId`` other than 0 (used as
  0), and each RocketMQ key accepted without effect says why in one WARNING
  (:meth:`broker.config.BrokerConfig.compat_warnings`).
- Once serving (and after the first registration round), one line goes to stdout, flushed:
  ``The broker[<brokerName>, <brokerIP1>:<port>] boot success. serializeType=MSGPACK and name
  server is <namesrvAddr>``.
- Before serving, the soft ``RLIMIT_NOFILE`` is raised to the hard limit, as the JVM running
  RocketMQ does (``-XX:+MaxFDLimit``), logged at INFO as old -> new; the connection cap
  (half the soft limit, :func:`remoting.server.default_max_connections`) is computed after.
- SIGTERM or SIGINT runs the ordered shutdown and exits 0. A failure to start (bind, locked
  store) prints one line to stderr and exits 1. Logs go to stderr (and to
  ``--logFile`` if given).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from pathlib import Path

import click
import trio

from broker.config import BrokerConfig
from broker.controller import BrokerController
from common.compiled import build_description
from common.errors import first_leaf
from common.process import (
    config_file_option,
    fail,
    log_level_option,
    print_config_option,
    raise_open_files_limit,
    serve_until_signal,
    setup_logging,
    tune_gc,
)
from common.version import minimq_version
from store.errors import StoreError

log = logging.getLogger("broker")

PROGRAM = "mqbroker"

BOOT_LINE = (
    "The broker[{name}, {addr}] boot success. serializeType=MSGPACK and name server is {namesrv}"
)


def parse_overrides(args: Sequence[str]) -> dict[str, str]:
    """``["--key", "value", ...]`` -> ``{key: value}``; ValueError on anything else."""
    out: dict[str, str] = {}
    items = list(args)
    if len(items) % 2:
        raise ValueError(f"expected --<key> <value> pairs, got {' '.join(items)!r}")
    for flag, value in zip(items[::2], items[1::2], strict=True):
        if not flag.startswith("--") or len(flag) < 3:
            raise ValueError(f"expected --<key>, got {flag!r}")
        out[flag[2:]] = value
    return out


async def _serve(config: BrokerConfig) -> None:
    """Run a :class:`BrokerController` on ``bindAddress`` until SIGTERM or SIGINT."""
    controller = BrokerController(config, host=config.bind_address)

    def announce(port: int) -> None:
        addr, namesrv = controller.broker_addr, config.namesrv_addr or ""
        print(BOOT_LINE.format(name=config.broker_name, addr=addr, namesrv=namesrv), flush=True)
        log.info("minimq %s, hot path: %s", minimq_version(), build_description())

    acl = controller.acl
    await serve_until_signal(
        controller.run, announce, log, on_hangup=None if acl is None else acl.reload
    )
    log.info("broker process exiting")


@click.command(
    context_settings={
        "help_option_names": ["-h", "--help"],
        "ignore_unknown_options": True,
        "allow_extra_args": True,
    }
)
@config_file_option("Broker")
@click.option(
    "-n",
    "--namesrvAddr",
    "namesrv_addr",
    default=None,
    help=(
        "Name server addresses, host:port;host:port (overrides -c and NAMESRV_ADDR; "
        'an empty value "" clears them).'
    ),
)
@print_config_option
@click.option(
    "--bindAddress",
    "bind_address",
    default=None,
    help="Address to listen on (overrides bindAddress in -c). [default: 0.0.0.0]",
)
@log_level_option
@click.pass_context
def main(
    ctx: click.Context,
    config_file: str | None,
    namesrv_addr: str | None,
    print_config: bool,
    bind_address: str | None,
    log_level: str,
    log_file: str | None,
) -> None:
    """Start a minimq broker. Any broker or store key may be given as --<key> <value>."""
    try:
        overrides = parse_overrides(ctx.args)
        if bind_address is not None:
            overrides["bindAddress"] = bind_address
        config = BrokerConfig.load(
            None if config_file is None else Path(config_file),
            namesrv_addr,
            os.environ,
            overrides,
        )
    except (ValueError, OSError) as exc:
        fail(PROGRAM, f"bad config: {exc}")
    if print_config:
        click.echo(config.to_properties(), nl=False)
        return
    try:
        setup_logging(log_level, log_file)
    except OSError as exc:
        fail(PROGRAM, f"cannot open log file: {exc}")
    for warning in [*config.clamped_settings(), *config.compat_warnings()]:
        log.warning("%s", warning)
    raise_open_files_limit(log)  # before the server computes its connection cap from it
    try:
        tune_gc()
        trio.run(_serve, config)
    except* (OSError, StoreError, ValueError) as group:
        fail(PROGRAM, f"cannot start: {first_leaf(group)}")


if __name__ == "__main__":
    main()
