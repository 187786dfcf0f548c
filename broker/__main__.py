"""``mqbroker`` / ``python -m broker``: run a broker (RocketMQ's ``BrokerStartup``).

Task tree::

    trio.run(_serve)
    └─ signal receiver (SIGTERM, SIGINT)   the first signal cancels the broker; later ones
       │                                   are logged and ignored (shutdown is not cut short)
       └─ nursery
          └─ BrokerController.run          see broker.controller

Rules:

- Settings, lowest first: ``-c FILE`` (``.properties`` with RocketMQ's keys), ``NAMESRV_ADDR``,
  ``-n``, then ``--<key> <value>`` for any broker or store key (``--listenPort 0``,
  ``--storePathRootDir /tmp/s``). An unknown key or bad value prints one line to stderr, exit 1.
- ``--bindAddress`` (not a RocketMQ broker key, default 0.0.0.0) is the address to listen on.
- ``-p`` prints the effective settings as ``key=value`` lines and exits 0.
- Once serving (and after the first registration round), one line goes to stdout, flushed:
  ``The broker[<brokerName>, <brokerIP1>:<port>] boot success. serializeType=MSGPACK and name
  server is <namesrvAddr>``.
- SIGTERM or SIGINT runs the ordered shutdown and exits 0. A failure to start (bind, locked
  store) prints one line to stderr and exits 1. Logs go to stderr.
"""

from __future__ import annotations

import logging
import os
import signal
import sys
from collections.abc import Sequence
from pathlib import Path

import click
import trio

from broker.config import BrokerConfig
from broker.controller import BrokerController
from common.errors import first_leaf
from store.errors import StoreError

log = logging.getLogger("broker")

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


async def _serve(config: BrokerConfig, host: str) -> None:
    """Run a :class:`BrokerController` until SIGTERM or SIGINT."""
    controller = BrokerController(config, host=host)
    broker_scope = trio.CancelScope()

    async def run_broker(*, task_status: trio.TaskStatus[int]) -> None:
        with broker_scope:
            await controller.run(task_status=task_status)
        nursery.cancel_scope.cancel()  # the broker is done: stop waiting for signals

    with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
        async with trio.open_nursery() as nursery:
            await nursery.start(run_broker)
            print(
                BOOT_LINE.format(
                    name=config.broker_name,
                    addr=controller.broker_addr,
                    namesrv=config.namesrv_addr or "",
                ),
                flush=True,
            )
            async for signum in signals:
                name = signal.Signals(signum).name
                if broker_scope.cancel_called:
                    log.warning("received %s; shutdown already in progress", name)
                else:
                    log.info("received %s; shutting down", name)
                    broker_scope.cancel()
    log.info("broker process exiting")


def _fail(message: str) -> None:
    click.echo(f"mqbroker: error: {message}", err=True)
    sys.exit(1)


@click.command(
    context_settings={
        "help_option_names": ["-h", "--help"],
        "ignore_unknown_options": True,
        "allow_extra_args": True,
    }
)
@click.option(
    "-c",
    "--configFile",
    "config_file",
    type=click.Path(dir_okay=False),
    default=None,
    help="Broker config properties file.",
)
@click.option(
    "-n",
    "--namesrvAddr",
    "namesrv_addr",
    default=None,
    help="Name server addresses, host:port;host:port (overrides NAMESRV_ADDR).",
)
@click.option(
    "-p",
    "--printConfigItem",
    "print_config",
    is_flag=True,
    help="Print all config items and exit.",
)
@click.option(
    "--bindAddress",
    "bind_address",
    default="0.0.0.0",
    show_default=True,
    help="Address to listen on.",
)
@click.option(
    "--logLevel",
    "log_level",
    type=click.Choice(["DEBUG", "INFO", "WARNING", "ERROR"], case_sensitive=False),
    default="INFO",
    show_default=True,
    help="Log level (logs go to stderr).",
)
@click.pass_context
def main(
    ctx: click.Context,
    config_file: str | None,
    namesrv_addr: str | None,
    print_config: bool,
    bind_address: str,
    log_level: str,
) -> None:
    """Start a minimq broker. Any broker or store key may be given as --<key> <value>."""
    try:
        overrides = parse_overrides(ctx.args)
        config = BrokerConfig.load(
            None if config_file is None else Path(config_file),
            namesrv_addr,
            os.environ,
            overrides,
        )
    except (ValueError, OSError) as exc:
        _fail(f"bad config: {exc}")
        return
    if print_config:
        click.echo(config.to_properties(), nl=False)
        return
    logging.basicConfig(
        level=log_level.upper(),
        stream=sys.stderr,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    try:
        trio.run(_serve, config, bind_address)
    except* (OSError, StoreError, ValueError) as group:
        _fail(f"cannot start: {first_leaf(group)}")


if __name__ == "__main__":
    main()
