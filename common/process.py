"""What every minimq server process does around its service: signals, logs, failures.

Rules:

- :func:`serve_until_signal` starts the service, announces its bound port, and on the first
  SIGTERM or SIGINT cancels it, also while it is still starting (nothing is announced then);
  later signals are logged and ignored, so a second Ctrl-C cannot cut an ordered shutdown
  short. If the service ends by itself, the process ends too. With ``on_hangup``, each SIGHUP
  calls it (the ACL reloads its accounts file); without, SIGHUP keeps its default action.
- Servers tune Python's cycle collector before serving (:func:`tune_gc`): by default it runs
  every 700 net new container objects, and took 5-13 % of the time per message in the store's
  put benchmark (`mqbench store put`).
- The broker raises its soft ``RLIMIT_NOFILE`` to the hard limit before serving
  (:func:`raise_open_files_limit`), as the JVM running RocketMQ does (``-XX:+MaxFDLimit``, on
  by default on Linux): its connection cap and its store's files share what the OS allows.
- Servers log to stderr (:func:`setup_logging`), and also to a file with ``--logFile PATH``
  (appended, same format); a failure to start is one line on stderr and exit code 1
  (:func:`fail`).
"""

from __future__ import annotations

import gc
import logging
import resource
import signal
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import NoReturn, Protocol, TypeVar

import click
import trio

F = TypeVar("F", bound=Callable[..., object])


class Service(Protocol):
    """A service's ``run``: reports its bound port through ``task_status``."""

    def __call__(self, *, task_status: trio.TaskStatus[int]) -> Awaitable[None]: ...


class _Announcer:
    """The ``task_status`` of a service run in place: ``started`` announces its port."""

    def __init__(self, announce: Callable[[int], None]) -> None:
        self._announce = announce

    def started(self, value: int | None = None) -> None:
        assert value is not None, "a service reports its bound port"
        self._announce(value)


async def serve_until_signal(
    run: Service,
    announce: Callable[[int], None],
    log: logging.Logger,
    *,
    on_hangup: Callable[[], object] | None = None,
) -> None:
    """Run ``run`` until SIGTERM or SIGINT (see the module rules). Signals are watched from
    the start: one that comes while the service still starts (recovering its store,
    registering) stops it there, before it announces anything."""
    service_scope = trio.CancelScope()

    async def stop_on_signal(signals: AsyncIterator[int]) -> None:
        async for signum in signals:
            name = signal.Signals(signum).name
            if signum == signal.SIGHUP and on_hangup is not None:
                log.info("received %s; reloading", name)
                on_hangup()
            elif service_scope.cancel_called:
                log.warning("received %s; shutdown already in progress", name)
            else:
                log.info("received %s; shutting down", name)
                service_scope.cancel()

    watched = [signal.SIGTERM, signal.SIGINT]
    if on_hangup is not None:
        watched.append(signal.SIGHUP)
    with trio.open_signal_receiver(*watched) as signals:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(stop_on_signal, signals)
            with service_scope:
                await run(task_status=_Announcer(announce))
            nursery.cancel_scope.cancel()  # the service is done: stop waiting for signals


SERVER_GC_THRESHOLDS = (50_000, 20, 10)
"""Cycle-collector thresholds of a server process (Python's defaults are 700, 10, 10).

Collections start when container objects outnumber those freed by the first figure, so a
server that frees what it allocates (nearly everything per message does) rarely collects,
while one that piles up cyclic garbage still does, after at most that many objects."""


def tune_gc() -> None:
    """Freeze what exists (modules, settings: never garbage) and collect far less often.

    Frozen objects are skipped by every later collection. Call once, before serving; a library
    never calls this on its user's behalf.
    """
    gc.collect()
    gc.freeze()
    gc.set_threshold(*SERVER_GC_THRESHOLDS)


def raise_open_files_limit(log: logging.Logger) -> int:
    """Raise the soft ``RLIMIT_NOFILE`` to the hard limit (the JVM's ``-XX:+MaxFDLimit``);
    return the soft limit in force afterwards. Logs old -> new at INFO; a refusal by the OS
    is logged as a WARNING and the limit stays. Call once, before serving; a library never
    calls this on its user's behalf."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == hard:
        return soft
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    except (ValueError, OSError) as exc:
        log.warning("cannot raise the open files limit from %d to %d: %s", soft, hard, exc)
        return soft
    log.info("open files limit (RLIMIT_NOFILE) raised from %d to %d", soft, hard)
    return hard


def setup_logging(level: str, log_file: str | None = None) -> None:
    """Log to stderr at ``level`` with timestamps, and also append to ``log_file`` if given."""
    handlers: list[logging.Handler] = [logging.StreamHandler(sys.stderr)]
    if log_file:
        handlers.append(logging.FileHandler(log_file, encoding="utf-8"))
    logging.basicConfig(
        level=level.upper(),
        handlers=handlers,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )


def fail(program: str, message: str) -> NoReturn:
    """Print ``<program>: error: <message>`` to stderr and exit 1."""
    click.echo(f"{program}: error: {message}", err=True)
    sys.exit(1)


def config_file_option(what: str) -> Callable[[F], F]:
    """The ``-c/--configFile`` option (a ``.properties`` file) of a server command."""
    return click.option(
        "-c",
        "--configFile",
        "config_file",
        type=click.Path(dir_okay=False),
        default=None,
        help=f"{what} config properties file.",
    )


def print_config_option(f: F) -> F:
    """The ``-p/--printConfigItem`` flag: print the effective settings and exit."""
    option = click.option(
        "-p",
        "--printConfigItem",
        "print_config",
        is_flag=True,
        help="Print all config items and exit.",
    )
    return option(f)


def log_level_option(f: F) -> F:
    """The ``--logLevel`` and ``--logFile`` options every server command takes."""
    level = click.option(
        "--logLevel",
        "log_level",
        type=click.Choice(["DEBUG", "INFO", "WARNING", "ERROR"], case_sensitive=False),
        default="INFO",
        show_default=True,
        help="Log level (logs go to stderr).",
    )
    log_file = click.option(
        "--logFile",
        "log_file",
        type=click.Path(dir_okay=False),
        default=None,
        help="Also append the logs to this file.",
    )
    return level(log_file(f))
