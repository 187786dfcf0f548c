"""``mqnamesrv`` / ``python -m namesrv``: run a name server (RocketMQ's ``NamesrvStartup``).

Task tree::

    trio.run(_serve)
    └─ signal receiver (SIGTERM, SIGINT)   cancels the nursery on the first signal
       └─ nursery
          └─ NameServer.run                see namesrv.server

Rules:

- Settings come from ``-c FILE`` (a ``.properties`` file with RocketMQ's keys), then
  ``--listenPort`` / ``--bindAddress`` override it; defaults are RocketMQ's (9876, 0.0.0.0).
- ``-p`` prints the effective settings as ``key=value`` lines and exits 0.
- Once serving, one line goes to stdout (flushed):
  ``The Name Server boot success. listening on <host>:<port>`` with the bound port.
- SIGTERM or SIGINT stops the server and exits 0. A bad config file or a failure to bind prints
  one line to stderr and exits 1; click's usage errors keep exit code 2. Logs go to stderr.
"""

from __future__ import annotations

import logging
import signal
import sys

import click
import trio

from common.errors import first_leaf
from namesrv.config import NamesrvConfig, load_properties
from namesrv.server import NameServer

log = logging.getLogger("namesrv")

BOOT_LINE = "The Name Server boot success. listening on {host}:{port}"


def build_config(
    config_file: str | None, listen_port: int | None, bind_address: str | None
) -> NamesrvConfig:
    """The effective config: the file's properties, then the command-line overrides.

    Raises ValueError (or OSError for an unreadable file) with a one-line message.
    """
    props = load_properties(config_file) if config_file is not None else {}
    if listen_port is not None:
        props["listenPort"] = str(listen_port)
    if bind_address is not None:
        props["bindAddress"] = bind_address
    return NamesrvConfig.from_properties(props)


async def _serve(config: NamesrvConfig) -> None:
    """Run a :class:`NameServer` until SIGTERM or SIGINT."""
    server = NameServer(config)
    with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
        async with trio.open_nursery() as nursery:
            port = await nursery.start(server.run)
            print(BOOT_LINE.format(host=config.bind_address, port=port), flush=True)
            async for signum in signals:
                log.info("received %s; shutting down", signal.Signals(signum).name)
                nursery.cancel_scope.cancel()
                break
    log.info("name server stopped")


def _fail(message: str) -> None:
    click.echo(f"mqnamesrv: error: {message}", err=True)
    sys.exit(1)


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.option(
    "-c",
    "--configFile",
    "config_file",
    type=click.Path(dir_okay=False),
    default=None,
    help="Name server config properties file.",
)
@click.option(
    "-p",
    "--printConfigItem",
    "print_config",
    is_flag=True,
    help="Print all config items and exit.",
)
@click.option(
    "--listenPort",
    "listen_port",
    type=click.IntRange(0, 65535),
    default=None,
    help="Port to listen on (0 picks a free one). [default: 9876]",
)
@click.option(
    "--bindAddress",
    "bind_address",
    default=None,
    help="Address to bind. [default: 0.0.0.0]",
)
@click.option(
    "--logLevel",
    "log_level",
    type=click.Choice(["DEBUG", "INFO", "WARNING", "ERROR"], case_sensitive=False),
    default="INFO",
    show_default=True,
    help="Log level (logs go to stderr).",
)
def main(
    config_file: str | None,
    print_config: bool,
    listen_port: int | None,
    bind_address: str | None,
    log_level: str,
) -> None:
    """Start a minimq name server."""
    try:
        config = build_config(config_file, listen_port, bind_address)
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
        trio.run(_serve, config)
    except* OSError as group:
        _fail(f"cannot start: {first_leaf(group)}")


if __name__ == "__main__":
    main()
