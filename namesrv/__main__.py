"""``mqnamesrv`` / ``python -m namesrv``: run a name server (RocketMQ's ``NamesrvStartup``).

Task tree::

    trio.run(_serve)
    └─ common.process.serve_until_signal   the first SIGTERM/SIGINT cancels the service;
       │                                   later ones are logged and ignored
       └─ NameServer.run                see namesrv.server

Rules:

- Settings come from ``-c FILE`` (a ``.properties`` file with RocketMQ's keys), then
  ``--listenPort`` / ``--bindAddress`` override it; defaults are RocketMQ's (9876, 0.0.0.0).
- With ``-c FILE``, FILE is the ``configStorePath`` whatever the file says (RocketMQ's
  ``NamesrvStartup``): ``mqadmin updateNamesrvConfig`` rewrites FILE (the old one kept as
  ``FILE.bak``), so a restart with the same ``-c`` keeps the update; the command-line
  overrides are not written into it. Without ``-c`` updates go to
  ``~/namesrv/namesrv.properties``, which is not read at start (as in RocketMQ).
- ``-p`` prints the effective settings as ``key=value`` lines (escaped, so that they read back
  with ``-c``) and exits 0.
- The name server reads no environment variable (``NAMESRV_ADDR`` is for brokers and clients).
- Once serving, one line goes to stdout (flushed):
  ``The Name Server boot success. listening on <host>:<port>`` with the bound port.
- Before serving, the soft ``RLIMIT_NOFILE`` is raised to the hard limit, as the JVM running
  RocketMQ does (``-XX:+MaxFDLimit``), logged at INFO as old -> new.
- The KV config is loaded from ``kvConfigPath`` before serving; when that file and its backup
  are both corrupt, one line on stderr names them and the process exits 1.
- TLS (``tls.server.*`` keys in the ``-c`` file, or in the file its ``tls.config.file`` names):
  a TLS file that is missing or cannot be loaded fails the start like a port that cannot be bound.
- SIGTERM or SIGINT stops the server and exits 0. A bad config file or a failure to bind prints
  one line to stderr and exits 1; click's usage errors keep exit code 2. Logs go to stderr (and to
  ``--logFile`` if given).
"""

from __future__ import annotations

import dataclasses
import logging
from pathlib import Path

import click
import trio

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
from common.properties import load_properties
from namesrv.config import NamesrvConfig
from namesrv.server import NameServer
from remoting.acl.config import AclConfigError
from remoting.tls import with_tls_config_file
from remoting.tls_config import split_tls_properties

log = logging.getLogger("namesrv")

PROGRAM = "mqnamesrv"

BOOT_LINE = "The Name Server boot success. listening on {host}:{port}"


def build_config(
    config_file: str | None, listen_port: int | None, bind_address: str | None
) -> tuple[NamesrvConfig, NamesrvConfig]:
    """The effective config (the file's properties, then the command-line overrides) and the
    file's own (the base of what an update saves: see :mod:`namesrv.server`).

    Raises ValueError (or OSError for an unreadable file) with a one-line message.
    """
    own = file_properties(config_file)
    props = with_tls_config_file(own)
    file_tls = tuple(split_tls_properties(own)[0].items())
    file_config = NamesrvConfig.from_properties(props)
    file_config = dataclasses.replace(file_config, file_tls_properties=file_tls)
    if listen_port is not None:
        props["listenPort"] = str(listen_port)
    if bind_address is not None:
        props["bindAddress"] = bind_address
    return NamesrvConfig.from_properties(props), file_config


def file_properties(config_file: str | None) -> dict[str, str]:
    """The ``-c`` file's own properties (none without one; ``tls.config.file`` not read in),
    its ``configStorePath`` being the file itself (RocketMQ's ``NamesrvStartup``: updates are
    saved where they are read)."""
    if config_file is None:
        return {}
    props = load_properties(config_file)
    props["configStorePath"] = str(Path(config_file).resolve())
    return props


async def _serve(server: NameServer) -> None:
    """Run ``server`` until SIGTERM or SIGINT."""

    def announce(port: int) -> None:
        print(BOOT_LINE.format(host=server.config.bind_address, port=port), flush=True)

    acl = server.acl
    await serve_until_signal(
        server.run, announce, log, on_hangup=None if acl is None else acl.reload
    )
    log.info("name server stopped")


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@config_file_option("Name server")
@print_config_option
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
@log_level_option
def main(
    config_file: str | None,
    print_config: bool,
    listen_port: int | None,
    bind_address: str | None,
    log_level: str,
    log_file: str | None,
) -> None:
    """Start a minimq name server."""
    try:
        config, file_config = build_config(config_file, listen_port, bind_address)
    except (ValueError, OSError) as exc:
        fail(PROGRAM, f"bad config: {exc}")
    if print_config:
        click.echo(config.to_properties(), nl=False)
        return
    try:
        setup_logging(log_level, log_file)
    except OSError as exc:
        fail(PROGRAM, f"cannot open log file: {exc}")
    raise_open_files_limit(log)  # before the server computes its connection cap from it
    try:
        server = NameServer(config, file_config=file_config)  # loads the KV config (and ACL)
    except AclConfigError as exc:
        fail(PROGRAM, f"cannot start: {exc}")
    except (ValueError, OSError) as exc:
        fail(PROGRAM, f"cannot load the KV config: {exc}")
    try:
        tune_gc()
        trio.run(_serve, server)
    except* OSError as group:
        fail(PROGRAM, f"cannot start: {first_leaf(group)}")


if __name__ == "__main__":
    main()
