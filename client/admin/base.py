"""What every ``mqadmin`` command shares: the click group, ``-n``/``--json``, running a trio
coroutine against an :class:`~client.admin.admin_client.AdminClient`, failures as one line and
a non-zero exit code, and output (rich tables on stdout, JSON with ``--json``, progress bars on
stderr).
"""

from __future__ import annotations

import codecs
import errno
import json
import logging
import os
import sys
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, Final, Generic, NoReturn, TypeVar

import click
import trio
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn
from rich.table import Table
from rich.text import Text

from client.admin.admin_client import AdminClient
from client.config import NAMESRV_ADDR_ENV
from client.errors import MQClientError
from client.message import ReceivedMessage
from common.digits import parse_uint
from common.inner_batch import is_inner_batch
from common.message import MessageConst
from remoting.acl.config import TOOLS_FILE, AclConfigError, load_tools_credentials
from remoting.codes import ResponseCode

T = TypeVar("T")
F = TypeVar("F", bound=Callable[..., Any])

CONTEXT = {"help_option_names": ["-h", "--help"], "max_content_width": 100}


class AdminGroup(click.Group):
    """A click group whose usage errors are one line on stderr too (exit status 2)."""

    def main(
        self,
        args: Sequence[str] | None = None,
        prog_name: str | None = None,
        complete_var: str | None = None,
        standalone_mode: bool = True,
        **extra: Any,
    ) -> Any:
        """Run the command line; see :meth:`click.Command.main`."""
        prog_name = prog_name or "mqadmin"
        if not standalone_mode:
            return super().main(args, prog_name, complete_var, False, **extra)
        # the library's log records stay off stderr, where a failure is one line of ours
        root = logging.getLogger()
        if not any(isinstance(h, logging.NullHandler) for h in root.handlers):
            root.addHandler(logging.NullHandler())
        try:
            rv = super().main(args, prog_name, complete_var, False, **extra)
        except click.exceptions.NoArgsIsHelpError as exc:
            click.echo(exc.ctx.get_help() if exc.ctx else "", err=True)
            sys.exit(exc.exit_code)
        except click.ClickException as exc:
            ctx = getattr(exc, "ctx", None)
            if ctx is not None:
                name = ctx.info_name if ctx.info_name != prog_name else ""
            else:  # a parse error of the command's options carries no context
                name = self._command_in(sys.argv[1:] if args is None else args)
            where = f"mqadmin {name}".strip()
            hint = f" (see {where} -h)"
            click.echo(f"{where}: {' '.join(exc.format_message().split())}{hint}", err=True)
            sys.exit(exc.exit_code)
        except click.exceptions.Abort:
            click.echo("mqadmin: aborted", err=True)
            sys.exit(1)
        sys.exit(rv if isinstance(rv, int) else 0)

    def _command_in(self, args: Sequence[str]) -> str:
        """The command named on the command line, or ""."""
        return next((arg for arg in args if arg in self.commands), "")


@click.group(cls=AdminGroup, context_settings=CONTEXT)
def main() -> None:
    """minimq's admin tool, with RocketMQ's command names: mqadmin <command> -n host:port ...

    The name servers come from -n (host:port;host:port) or NAMESRV_ADDR.
    """


JAVA_WHITESPACE: Final = "".join(chr(code) for code in range(0x21))
"""What Java's ``String.trim()`` removes from either end: every character up to U+0020 (the
space, tabs, line ends and the other control characters), and nothing else."""


def java_trim(text: str) -> str:
    """``text`` without what Java's ``String.trim()`` removes from either end."""
    return text.strip(JAVA_WHITESPACE)


class TrimmedText(click.types.StringParamType):
    """Click's text type, trimmed as Java's ``String.trim()``: RocketMQ's mqadmin reads each
    option with ``commandLine.getOptionValue('x').trim()``, so ``-t " Orders "`` names the
    topic ``Orders`` and ``-p " hi "`` sends the body ``hi``."""

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> str:
        """The text of ``value`` (see :class:`click.types.StringParamType`), trimmed."""
        return java_trim(super().convert(value, param, ctx))


TRIMMED_TEXT: Final = TrimmedText()


class AdminCommand(click.Command):
    """An ``mqadmin`` command: the value of each of its text options is trimmed
    (:class:`TrimmedText`), whether given on the command line or by its environment variable.
    Numbers and booleans are read by click's types, which allow spaces around them too."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        for param in self.params:
            if type(param.type) is click.types.StringParamType:
                param.type = TRIMMED_TEXT


ACCESS_KEY_ENV: Final = "MINIMQ_ACCESS_KEY"
"""Environment variable of ``--accessKey`` (so that a secret need not be on the command
line, where ``ps`` shows it)."""
SECRET_KEY_ENV: Final = "MINIMQ_SECRET_KEY"
"""Environment variable of ``--secretKey``."""
ROCKETMQ_HOME_ENV: Final = "ROCKETMQ_HOME"
"""Where ``conf/tools.yml`` is looked for (RocketMQ's ``MixAll.ROCKETMQ_HOME_ENV``)."""
_CREDENTIALS = "minimq.credentials"


def _keep_credential(ctx: click.Context, param: click.Parameter, value: str | None) -> None:
    """Keep ``--accessKey`` / ``--secretKey`` in the context for :func:`run`."""
    if value and param.name:
        ctx.meta.setdefault(_CREDENTIALS, {})[param.name] = value


def _credential_options(fn: F) -> F:
    for flag, name, env in (
        ("--accessKey", "access_key", ACCESS_KEY_ENV),
        ("--secretKey", "secret_key", SECRET_KEY_ENV),
    ):
        fn = click.option(
            flag,
            name,
            envvar=env,
            expose_value=False,
            callback=_keep_credential,
            help=f"ACL {flag[2:]} to sign requests with (or ${env}; default: "
            f"${ROCKETMQ_HOME_ENV}/conf/{TOOLS_FILE}, as RocketMQ's mqadmin).",
        )(fn)
    return fn


def admin_credentials() -> tuple[str, str]:
    """``(accessKey, secretKey)`` to sign with: ``--accessKey`` / ``--secretKey`` (or their
    environment variables), else ``$ROCKETMQ_HOME/conf/tools.yml`` (RocketMQ's
    ``AclUtils#getAclRPCHook``), else none (``("", "")``: requests are not signed)."""
    ctx = click.get_current_context(silent=True)
    given: dict[str, str] = ctx.meta.get(_CREDENTIALS, {}) if ctx is not None else {}
    if given:
        if len(given) != 2:
            fail("give both --accessKey and --secretKey (or neither)")
        return given["access_key"], given["secret_key"]
    try:
        keys = tools_credentials()
    except AclConfigError as exc:
        fail(str(exc))
    return keys if keys is not None else ("", "")


def tools_credentials() -> tuple[str, str] | None:
    """``(accessKey, secretKey)`` of ``$ROCKETMQ_HOME/conf/tools.yml`` (RocketMQ's
    ``AclUtils#getAclRPCHook``): None when ``ROCKETMQ_HOME`` is unset, the file is absent or a
    key is blank; AclConfigError when the file cannot be read or parsed. The fallback of every
    tool (``mqadmin``, ``mqbench``) given no account."""
    home = os.environ.get(ROCKETMQ_HOME_ENV, "")
    if not home:
        return None
    return load_tools_credentials(Path(home) / "conf" / TOOLS_FILE)


def admin_command(name: str) -> Callable[[F], F]:
    """Register a command named ``name`` with the shared ``-n``, ``--json`` and ACL
    (``--accessKey`` / ``--secretKey``) options; its text option values are trimmed as
    RocketMQ's (:class:`AdminCommand`)."""

    def decorate(fn: F) -> F:
        fn = _credential_options(fn)
        fn = click.option("--json", "as_json", is_flag=True, help="Print JSON instead of tables.")(
            fn
        )
        fn = click.option(
            "-n",
            "--namesrvAddr",
            "namesrv",
            envvar="NAMESRV_ADDR",
            help="Name server address list, e.g. 127.0.0.1:9876;127.0.0.2:9876.",
        )(fn)
        main.command(name, cls=AdminCommand, context_settings=CONTEXT)(fn)
        return fn

    return decorate


# ---------------------------------------------------------------------- running


def fail(reason: str) -> NoReturn:
    """Print ``mqadmin: <command>: <reason>`` on stderr (one line) and exit with status 1."""
    ctx = click.get_current_context(silent=True)
    name = ctx.info_name if ctx is not None else "mqadmin"
    one_line = " ".join(reason.split())
    click.echo(f"mqadmin {name}: {one_line}", err=True)
    sys.exit(1)


def warn(reason: str) -> None:
    """Print ``mqadmin <command>: warning: <reason>`` on stderr (one line); the command goes
    on (stdout stays its result)."""
    ctx = click.get_current_context(silent=True)
    name = ctx.info_name if ctx is not None else "mqadmin"
    click.echo(f"mqadmin {name}: warning: {' '.join(reason.split())}", err=True)


def _first_error(exc: BaseException) -> BaseException:
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return exc


def run(namesrv: str | None, body: Callable[[AdminClient], Awaitable[T]]) -> T:
    """Run ``body(admin)`` under ``trio.run``; any failure ends the process via :func:`fail`."""
    given = namesrv or os.environ.get(NAMESRV_ADDR_ENV, "")  # as the library reads it
    if not any(part.strip() for part in given.split(";")):
        # the library's own wording names its keyword argument, not -n
        fail(f"no name server address: give -n host:port[;host:port] or set {NAMESRV_ADDR_ENV}")

    access_key, secret_key = admin_credentials()

    async def go() -> T:
        async with AdminClient(namesrv, access_key=access_key, secret_key=secret_key) as admin:
            return await body(admin)

    try:
        return trio.run(go)
    except KeyboardInterrupt:
        fail("interrupted")
    except BaseException as exc:
        err = _first_error(exc)
        if isinstance(err, SystemExit):
            raise err from None
        if isinstance(err, StdoutClosed):
            raise err from None  # click ends the command quietly (status 1)
        if isinstance(err, MQClientError):
            fail(str(err))
        if isinstance(err, (ValueError, OSError, trio.TooSlowError)):
            fail(f"{type(err).__name__}: {err}")
        raise


@dataclass(frozen=True)
class EachBroker(Generic[T]):
    """What :func:`try_each_broker` did: the results of the brokers that answered, in turn,
    and the reason of each that failed."""

    done: list[tuple[str, T]]
    """``(address, result)`` of each broker where the action was done."""
    failed: list[str] = field(default_factory=list)
    """``address: reason`` of each broker that failed."""

    def summary(self) -> str:
        """``failed on <addr>: <reason>; done on <addr>, ...``: one line naming each failed
        broker and the brokers where the action was done (``none``)."""
        done = ", ".join(addr for addr, _ in self.done) or "none"
        return f"failed on {'; '.join(self.failed)}; done on {done}"


async def try_each_broker(
    targets: Sequence[tuple[str, str]], action: Callable[[str], Awaitable[T]]
) -> EachBroker[T]:
    """``action(address)`` on each ``(name, address)`` target, in turn; a broker that fails
    does not stop the others (as RocketMQ's ``updateBrokerConfig -c`` and ``brokerStatus -c``,
    which go on to the next broker). With one target, its own MQClientError is raised as it
    is."""
    done: list[tuple[str, T]] = []
    failed: list[str] = []
    for _, addr in targets:
        try:
            done.append((addr, await action(addr)))
        except MQClientError as exc:
            if len(targets) == 1:
                raise
            failed.append(f"{addr}: {exc.reason}")
    return EachBroker(done, failed)


async def on_each_broker(
    targets: Sequence[tuple[str, str]], action: Callable[[str], Awaitable[T]]
) -> list[tuple[str, T]]:
    """``(address, action(address))`` of each ``(name, address)`` target, in turn.

    A broker that fails does not stop the others (see :func:`try_each_broker`): with several
    targets, MQClientError then names each failed broker with its reason and the brokers
    where ``action`` was done (:meth:`EachBroker.summary`), so the one line tells the operator
    what changed. With one target, its own error is raised as it is.
    """
    result = await try_each_broker(targets, action)
    if result.failed:
        raise MQClientError(ResponseCode.SYSTEM_ERROR, result.summary())
    return result.done


def fail_if_any_failed(result: EachBroker[Any]) -> None:
    """After a read command printed what the brokers that answered gave: when any broker
    failed, :func:`fail` with :meth:`EachBroker.summary` (one line on stderr, status 1)."""
    if result.failed:
        fail(str(MQClientError(ResponseCode.SYSTEM_ERROR, result.summary())))


# ---------------------------------------------------------------------- output


CONSOLE_SETTINGS: dict[str, Any] = {"highlight": False, "markup": False, "emoji": False}
"""Text is printed as given: a value with ``[/x]`` or ``:smile:`` in it is neither markup nor an
emoji code."""


TABLE_PIPE_WIDTH: Final = 1 << 24
"""The console width of a table in a file or a pipe: wider than any row (rich prints a table
only as wide as its widest row), so no column is folded."""


class StdoutClosed(BrokenPipeError):
    """Stdout's reader has gone (``mqadmin printMsg | head``) while a command printed: the
    command stops there with status 1 and nothing on stderr, as click ends one whose output
    comes after :func:`run` and rich one printing a table. A broken pipe to a broker stays a
    failure with its one-line reason."""

    def __init__(self) -> None:
        super().__init__(errno.EPIPE, "stdout closed")


def console(*, stderr: bool = False, width: int | None = None) -> Console:
    """A rich console on the current stdout (or stderr) that prints text as given (see
    :data:`CONSOLE_SETTINGS`); ``width`` columns wide (default 240) when not a terminal."""
    file = sys.stderr if stderr else sys.stdout
    out = Console(file=file, **CONSOLE_SETTINGS)
    if not out.is_terminal:
        out = Console(file=file, width=width or 240, **CONSOLE_SETTINGS)
    return out


def echo(text: str, *, nl: bool = True) -> None:
    """``click.echo`` on stdout; :class:`StdoutClosed` when its reader has gone."""
    try:
        click.echo(text, nl=nl)
    except BrokenPipeError as exc:
        raise StdoutClosed from exc


def emit_json(data: Any) -> None:
    """Print ``data`` as indented JSON."""
    echo(json.dumps(data, indent=2, ensure_ascii=False, sort_keys=False))


class JsonArrayWriter:
    """Writes a JSON array to stdout item by item, in exactly the text :func:`emit_json` gives
    for the whole list, so a long listing needs no list in memory. Use as a context manager:
    the closing bracket is written when the block ends without an error."""

    def __init__(self) -> None:
        self._count = 0

    def __enter__(self) -> JsonArrayWriter:
        return self

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        if exc_type is None:
            echo("\n]" if self._count else "[]")

    def extend(self, items: Iterable[Any]) -> None:
        """Write each item of ``items`` as the array's next element."""
        parts = []
        for item in items:
            text = json.dumps(item, indent=2, ensure_ascii=False, sort_keys=False)
            lead = "[\n  " if not self._count else ",\n  "
            parts.append(lead + text.replace("\n", "\n  "))
            self._count += 1
        echo("".join(parts), nl=False)


def table(headers: Sequence[str], rows: Iterable[Sequence[Any]], title: str | None = None) -> None:
    """Print a rich table with RocketMQ's ``#Header`` names, every value in full (as RocketMQ's
    ``printf`` tables): in a terminal, a column too narrow for a value folds it onto more
    lines; in a file or a pipe, each row is one line as wide as it needs."""
    out = console(width=TABLE_PIPE_WIDTH)
    cells = [tuple("" if v is None else str(v) for v in row) for row in rows]
    plain = None if out.is_terminal or title is not None else plain_table(headers, cells)
    if plain is not None:
        echo(plain, nl=False)
        return
    t = Table(title=title, box=None, header_style="bold", pad_edge=False)
    for header in headers:
        t.add_column(header, overflow="fold")
    for row in cells:
        t.add_row(*(Text(v) for v in row))
    out.print(t)


def plain_table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str | None:
    """The text rich prints for :func:`table` in a file or a pipe (each cell padded to its
    column's width, columns two spaces apart), built directly: about 100 times faster for a
    long listing. None when a value is not printable ASCII, whose width only rich knows."""
    columns = [list(headers), *(list(row) for row in rows)]
    if not all(v.isascii() and v.isprintable() for row in columns for v in row):
        return None
    widths = [max(len(row[i]) for row in columns) for i in range(len(headers))]
    return "".join(
        "  ".join(v.ljust(w) for v, w in zip(row, widths, strict=True)) + "\n" for row in columns
    )


def lines(*texts: str) -> None:
    """Print plain lines, as given (a terminal wraps a long one; nothing is cut)."""
    out = console()
    for text in texts:
        out.print(text, soft_wrap=True)


def config_blocks(configs: Iterable[tuple[str, Mapping[str, str]]]) -> None:
    """Print each ``(address, config)`` as RocketMQ's getBrokerConfig and getNamesrvConfig
    do: a ``============<address>============`` line, then ``key  =  value`` lines."""
    for addr, config in configs:
        lines(f"============{addr}============")
        lines(*(f"{k:<50}=  {v}" for k, v in config.items()))


def show_configs(result: EachBroker[dict[str, str]], as_json: bool) -> None:
    """Print the configs each server gave (``--json``: one object by address, else
    :func:`config_blocks`), then fail if a server did not answer."""
    if as_json:
        emit_json(dict(result.done))
    else:
        config_blocks(result.done)
    fail_if_any_failed(result)


def java_object(name: str, fields: Mapping[str, Any]) -> str:
    """``Name [key=value, ...]``, as RocketMQ's tools print a config object (``true`` and
    ``false`` for booleans, ``{k=v, ...}`` for maps)."""

    def value(v: Any) -> str:
        if isinstance(v, Mapping):  # Java's Map.toString
            return "{" + ", ".join(f"{k}={value(x)}" for k, x in v.items()) + "}"
        return str(v).lower() if isinstance(v, bool) else str(v)

    return f"{name} [" + ", ".join(f"{k}={value(v)}" for k, v in fields.items()) + "]"


def fmt_time(ms: int) -> str:
    """``yyyy-MM-dd HH:mm:ss`` local time (RocketMQ's format); ``N/A`` for 0."""
    if ms <= 0:
        return "N/A"
    return datetime.fromtimestamp(ms / 1000).strftime("%Y-%m-%d %H:%M:%S")


def fmt_time_ms(ms: int) -> str:
    """``yyyy-MM-dd HH:mm:ss,SSS`` local time."""
    if ms <= 0:
        return "N/A"
    dt = datetime.fromtimestamp(ms / 1000)
    return dt.strftime("%Y-%m-%d %H:%M:%S") + f",{ms % 1000:03d}"


def parse_timestamp(text: str, option: str | None = None) -> int:
    """``now``, milliseconds since the epoch (``-1`` allowed), or RocketMQ's
    ``yyyy-MM-dd#HH:mm:ss:SSS`` (local time; as Java's ``SimpleDateFormat``, the last field is
    a count of milliseconds: ``:5`` is 5 ms, ``:1234`` 1.234 s); click's BadParameter naming
    ``option`` (``-s``, say) otherwise."""
    text = text.strip()
    if text.lower() == "now":
        return time.time_ns() // 1_000_000
    millis = parse_uint(text.removeprefix("-"))
    if millis is not None:
        return -millis if text.startswith("-") else millis
    seconds, _, ms_field = text.rpartition(":")
    ms = parse_uint(ms_field)
    try:
        if ms is None:
            raise ValueError(ms_field)
        dt = datetime.strptime(seconds, "%Y-%m-%d#%H:%M:%S")
    except ValueError:
        raise click.BadParameter(
            f"{text!r}: expected now, milliseconds or yyyy-MM-dd#HH:mm:ss:SSS", param_hint=option
        ) from None
    return int(dt.timestamp()) * 1000 + ms


def progress(description: str) -> Progress:
    """A transient progress bar on stderr, when stderr is a terminal (else nothing, not even
    the blank line a finished bar leaves)."""
    err = console(stderr=True)
    return Progress(
        TextColumn("[progress.description]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        console=err,
        transient=True,
        disable=not err.is_terminal,
    )


def check_charset(ctx: click.Context, param: click.Parameter, value: str) -> str:
    """A ``-c/--charset`` callback: the name of a text encoding Python knows, or BadParameter
    before anything is read."""
    try:
        info = codecs.lookup(value)
    except LookupError:
        raise click.BadParameter(f"unknown charset {value!r}") from None
    if not getattr(info, "_is_text_encoding", True):
        raise click.BadParameter(f"{value!r} is not a text encoding")
    return value


def not_empty(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    """An option callback: BadParameter for a given but empty (or blank) value, which would
    otherwise read as "not given" (every group, say)."""
    if value is not None and not value.strip():
        raise click.BadParameter("must not be empty")
    return value


charset_option = click.option(
    "-c",
    "--charset",
    default="utf-8",
    show_default=True,
    callback=check_charset,
    help="Body charset.",
)
"""The ``-c/--charset`` option of the commands that print bodies."""


def message_json(msg: ReceivedMessage, charset: str = "utf-8") -> dict[str, Any]:
    """A message as a JSON map (RocketMQ's ``MessageExt`` field names)."""
    return {
        "msgId": msg.msg_id,
        "offsetMsgId": msg.offset_msg_id,
        "topic": msg.topic,
        "brokerName": msg.queue.broker_name,
        "queueId": msg.queue.queue_id,
        "queueOffset": msg.queue_offset,
        "commitLogOffset": msg.commitlog_offset,
        "tags": msg.tags,
        "keys": msg.keys,
        "reconsumeTimes": msg.reconsume_times,
        "bornTimestamp": msg.born_timestamp,
        "storeTimestamp": msg.store_timestamp,
        "bornHost": msg.born_host,
        "storeHost": msg.store_host,
        "sysFlag": msg.sys_flag,
        "properties": dict(msg.properties),
        "body": msg.body.decode(charset, "replace"),
    }


def print_message(msg: ReceivedMessage, charset: str = "utf-8") -> None:
    """RocketMQ's ``queryMsgById`` detail lines."""
    rows = [
        ("OffsetID", msg.offset_msg_id),
        ("Msg ID", msg.msg_id),
        ("Topic", msg.topic),
        ("Tags", f"[{msg.tags or ''}]"),
        ("Keys", f"[{' '.join(msg.keys)}]"),
        ("Broker Name", msg.queue.broker_name),
        ("Queue ID", str(msg.queue.queue_id)),
        ("Queue Offset", str(msg.queue_offset)),
        ("CommitLog Offset", str(msg.commitlog_offset)),
        ("Reconsume Times", str(msg.reconsume_times)),
        ("Born Timestamp", fmt_time_ms(msg.born_timestamp)),
        ("Store Timestamp", fmt_time_ms(msg.store_timestamp)),
        ("Born Host", msg.born_host),
        ("Store Host", msg.store_host),
        ("System Flag", str(msg.sys_flag)),
        ("Properties", json.dumps(dict(msg.properties), ensure_ascii=False)),
        ("Message Body", _body_text(msg, charset)),
    ]
    lines(*(f"{k + ':':<21}{v}" for k, v in rows))


def _body_text(msg: ReceivedMessage, charset: str) -> str:
    """The body as text; for an inner batch (a BatchCQ topic's record, found by its offset
    id) what it holds instead of its encoded entries."""
    if is_inner_batch(msg.sys_flag):
        num = msg.properties.get(MessageConst.PROPERTY_INNER_NUM, "?")
        return (
            f"[inner batch of {num} messages, {len(msg.body)} bytes; queue offsets "
            f"{msg.queue_offset}.. (consume them, or queryMsgByOffset)]"
        )
    return msg.body.decode(charset, "replace")
