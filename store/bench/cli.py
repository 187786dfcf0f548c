"""``mqbench``: the benchmark command line.

``mqbench store put|read|recover|backlog|all [options]``; ``--json`` prints one JSON object per
workload on stdout, otherwise a rich progress display (stderr) and a table per workload.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any, TypeVar

import click
from rich.console import Console
from rich.table import Table

from common.benchkit import one_line_errors
from common.process import tune_gc
from store.bench import report, stacks
from store.bench.group_commit import GroupCommitResult, run_group_commit
from store.bench.store_bench import (
    RECOVER_VARIANTS,
    BenchError,
    PutMode,
    PutParams,
    RecoverVariant,
    run_backlog,
    run_put,
    run_read,
    run_recover,
)
from store.bench.workload import (
    GIB,
    DiskSpaceError,
    NullProgress,
    ProgressHook,
    bench_dir,
    machine_info,
)

F = TypeVar("F", bound=Callable[..., Any])
R = TypeVar("R")

_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}


class ByteSize(click.ParamType[int, Any]):
    """A size in bytes: ``1073741824``, ``512M``, ``1G`` (binary units, optional ``iB``/``B``)."""

    name = "size"

    def __init__(self, minimum: int = 1) -> None:
        self.minimum = minimum

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> int:
        """Parse ``value``."""
        if isinstance(value, int):
            return value
        text = str(value).strip().upper().removesuffix("B").removesuffix("I")
        unit = text[-1:] if text[-1:] in _UNITS else ""
        number = text[: len(text) - len(unit)] if unit else text
        try:
            size = int(float(number) * _UNITS[unit])
        except ValueError:
            self.fail(f"{value!r} is not a size like 1G, 512M or 4096", param, ctx)
        if size < self.minimum:
            self.fail(f"{value!r} is less than the minimum of {self.minimum} bytes", param, ctx)
        return size


BYTE_SIZE = ByteSize()


class Session:
    """What every workload command shares: output mode, directories, repeats, profiling."""

    def __init__(
        self,
        *,
        json_out: bool,
        directory: Path | None,
        keep: bool,
        repeat: int,
        profile: Path | None,
    ) -> None:
        self.json = json_out
        self.directory = directory
        self.keep = keep
        self.repeat = max(1, repeat)
        self.profile = profile
        self.out = Console()
        if not self.out.is_terminal:
            self.out.width = 160  # tables in logs and pipes stay on one line per row
        self.err = Console(stderr=True)
        self.machine = machine_info()
        self._machine_shown = False

    @contextlib.contextmanager
    def progress(self) -> Iterator[ProgressHook]:
        """A rich progress display, or nothing with ``--json``."""
        if self.json:
            yield NullProgress()
            return
        with report.RichProgress(self.err) as p:
            yield p

    def runs(self, label: str, once: Callable[[Path, ProgressHook], R]) -> list[R]:
        """Run ``once`` ``repeat`` times, each in a fresh bench directory."""
        results: list[R] = []
        with _profiled(self.profile, self.err, quiet=self.json):
            for _ in range(self.repeat):
                with bench_dir(self.directory, label, keep=self.keep) as root:
                    if self.keep and not self.json:
                        self.err.print(f"store directory: {root}")
                    with self.progress() as hook:
                        results.append(once(root, hook))
        return results

    def emit(
        self, workload: str, runs: Sequence[Any], summary: report.Summary, table: Table
    ) -> None:
        """Print a workload's JSON object or its table."""
        if self.json:
            click.echo(report.json_report(workload, self.machine, runs, summary))
            return
        if not self._machine_shown:
            self.out.print(report.machine_line(self.machine), style="dim")
            self._machine_shown = True
        self.out.print(table)


@contextlib.contextmanager
def _profiled(path: Path | None, console: Console, *, quiet: bool) -> Iterator[None]:
    """Profile the block with pyinstrument into ``path`` (.html, .json speedscope, else text)."""
    if path is None:
        yield
        return
    try:
        from pyinstrument import Profiler
        from pyinstrument.renderers import HTMLRenderer, SpeedscopeRenderer
    except ImportError:
        raise click.ClickException(
            "--profile needs pyinstrument: pip install -e '.[profile]'"
        ) from None
    profiler = Profiler(interval=0.0005, async_mode="disabled")
    profiler.start()
    try:
        yield
    finally:
        profiler.stop()
        if path.suffix == ".html":
            text = profiler.output(HTMLRenderer())
        elif path.suffix == ".json":
            text = profiler.output(SpeedscopeRenderer())
        else:
            text = profiler.output_text(unicode=True, show_all=False)
        path.write_text(text, encoding="utf-8")
        if not quiet:
            console.print(f"profile written to {path}")


def common_options(f: F) -> F:
    """Options every workload takes."""
    options = [
        click.option(
            "--dir",
            "directory",
            type=click.Path(file_okay=False, path_type=Path),
            default=None,
            help="Parent directory for the bench store (default ./bench-data); a fresh "
            "sub-directory is made and deleted afterwards.",
        ),
        click.option("--keep", is_flag=True, help="Keep the store directory afterwards."),
        click.option("--json", "json_out", is_flag=True, help="One JSON object per workload."),
        click.option(
            "--repeat", type=click.IntRange(1), default=1, show_default=True, help="Runs."
        ),
        click.option(
            "--body-size", type=click.IntRange(0), default=128, show_default=True, help="Bytes."
        ),
        click.option(
            "--commitlog-file-size",
            type=ByteSize(minimum=4096),
            default=GIB,
            show_default="1G",
            help="Size of each commitlog file.",
        ),
        click.option(
            "--profile",
            type=click.Path(dir_okay=False, path_type=Path),
            default=None,
            help="Write a pyinstrument profile (.html, .json for speedscope, else text).",
        ),
    ]
    for option in reversed(options):
        f = option(f)
    return f


def _session(kw: dict[str, Any]) -> Session:
    tune_gc()  # the store runs here as in a broker process (see common.process)
    return Session(
        json_out=kw.pop("json_out"),
        directory=kw.pop("directory"),
        keep=kw.pop("keep"),
        repeat=kw.pop("repeat"),
        profile=kw.pop("profile"),
    )


@contextlib.contextmanager
def _bench_errors() -> Iterator[None]:
    with one_line_errors(BenchError, DiskSpaceError):
        yield


@click.group()
def main() -> None:
    """minimq benchmarks."""


@main.group(name="store")
def store_group() -> None:
    """Benchmarks of the message store (real files, default sizes)."""


# -- workloads -------------------------------------------------------------------------------
def do_put(s: Session, params: PutParams) -> None:
    """Run and report the put workload."""
    with _bench_errors():
        runs = s.runs("put", lambda root, hook: run_put(root, params, hook))
    summary = report.summarise_put(runs)
    s.emit("put", runs, summary, report.put_table(runs, summary))


def do_read(s: Session, count: int, body_size: int, max_msgs: int, file_size: int) -> None:
    """Run and report the read workload."""
    with _bench_errors():
        runs = s.runs(
            "read",
            lambda root, hook: run_read(
                root,
                count,
                body_size=body_size,
                max_msgs=max_msgs,
                commitlog_file_size=file_size,
                progress=hook,
            ),
        )
    summary = report.summarise_read(runs)
    s.emit("read", runs, summary, report.read_table(runs, summary))


def do_recover(
    s: Session,
    size: int,
    body_size: int,
    variants: Sequence[RecoverVariant],
    cold: bool,
    file_size: int,
) -> None:
    """Run and report the recovery workload."""
    with _bench_errors():
        runs = s.runs(
            "recover",
            lambda root, hook: run_recover(
                root,
                size,
                body_size=body_size,
                variants=variants,
                cold=cold,
                commitlog_file_size=file_size,
                progress=hook,
            ),
        )
    summary = report.summarise_recover(runs)
    s.emit("recover", runs, summary, report.recover_table(runs, summary))


def do_backlog(s: Session, params: PutParams) -> None:
    """Run and report the backlog workload."""
    with _bench_errors():
        runs = s.runs("backlog", lambda root, hook: run_backlog(root, params, hook))
    summary = report.summarise_backlog(runs)
    s.emit("backlog", runs, summary, report.backlog_table(runs, summary))


@store_group.command()
@common_options
@click.option("--count", type=click.IntRange(1), default=1_000_000, show_default=True)
@click.option("--batch", type=click.IntRange(1), default=32, show_default=True)
@click.option("--queues", type=click.IntRange(1), default=4, show_default=True)
@click.option(
    "--mode",
    type=click.Choice(["trio", "sync"]),
    default="trio",
    show_default=True,
    help="trio: StoreServices running, reput in the background (the broker's way); "
    "sync: put_messages and dispatch_pending interleaved in one loop.",
)
@click.option(
    "--yield-every",
    type=click.IntRange(1),
    default=1,
    show_default=True,
    help="trio mode: put calls between two trio checkpoints.",
)
def put(**kw: Any) -> None:
    """Batched (or, with --batch 1, single) puts, including dispatch to queues and index."""
    s = _session(kw)
    mode: PutMode = kw["mode"]
    params = PutParams(
        count=kw["count"],
        batch=kw["batch"],
        body_size=kw["body_size"],
        queues=kw["queues"],
        mode=mode,
        yield_every=kw["yield_every"],
        commitlog_file_size=kw["commitlog_file_size"],
    )
    do_put(s, params)


@store_group.command()
@common_options
@click.option("--count", type=click.IntRange(1), default=1_000_000, show_default=True)
@click.option("--max", "max_msgs", type=click.IntRange(1), default=32, show_default=True)
def read(**kw: Any) -> None:
    """Sequential reads of a pre-filled queue with get_messages."""
    s = _session(kw)
    do_read(s, kw["count"], kw["body_size"], kw["max_msgs"], kw["commitlog_file_size"])


@store_group.command()
@common_options
@click.option("--size", type=BYTE_SIZE, default=GIB, show_default="1G", help="Commitlog bytes.")
@click.option(
    "--variant",
    "variants",
    type=click.Choice(RECOVER_VARIANTS),
    multiple=True,
    help="Which shutdowns to recover from (repeatable; default all, in order).",
)
@click.option("--cold", is_flag=True, help="Drop the store's files from the page cache first.")
def recover(**kw: Any) -> None:
    """Time MessageStore.open() on a filled store after a clean shutdown and simulated crashes."""
    s = _session(kw)
    variants: Sequence[RecoverVariant] = kw["variants"] or RECOVER_VARIANTS
    do_recover(s, kw["size"], kw["body_size"], variants, kw["cold"], kw["commitlog_file_size"])


@store_group.command()
@common_options
@click.option("--count", type=click.IntRange(1), default=10_000_000, show_default=True)
@click.option("--batch", type=click.IntRange(1), default=32, show_default=True)
def backlog(**kw: Any) -> None:
    """Write a backlog with no consumer and watch anonymous memory (RssAnon)."""
    s = _session(kw)
    params = PutParams(
        count=kw["count"],
        batch=kw["batch"],
        body_size=kw["body_size"],
        commitlog_file_size=kw["commitlog_file_size"],
        chunk=8192,
    )
    do_backlog(s, params)


def do_group_commit(
    s: Session,
    writers: Sequence[int],
    duration_s: float,
    body_size: int,
    file_size: int,
    fsync_probe_s: float,
) -> None:
    """Run and report the group-commit workload, once per writer count (and repeat)."""
    runs: list[GroupCommitResult] = []

    def once(n: int) -> Callable[[Path, ProgressHook], GroupCommitResult]:
        def run(root: Path, hook: ProgressHook) -> GroupCommitResult:
            return run_group_commit(
                root,
                n,
                duration_s,
                body_size=body_size,
                commitlog_file_size=file_size,
                fsync_probe_s=fsync_probe_s,
                progress=hook,
            )

        return run

    with _bench_errors():
        for n in writers:
            runs += s.runs("group-commit", once(n))
    summary = report.summarise_group_commit(runs)
    s.emit("group-commit", runs, summary, report.group_commit_table(runs, summary))


@store_group.command(name="group-commit")
@common_options
@click.option(
    "--writers",
    type=click.IntRange(1),
    multiple=True,
    default=(1, 8, 32),
    show_default=True,
    help="Concurrent putters (repeatable: one run per value).",
)
@click.option(
    "--duration",
    type=click.FloatRange(0, min_open=True),
    default=4.0,
    show_default=True,
    help="Seconds each run puts for.",
)
@click.option(
    "--fsync-probe",
    type=click.FloatRange(0, min_open=True),
    default=2.0,
    show_default=True,
    help="Seconds of write + fsync before each run, for the disk's own rate.",
)
def group_commit(**kw: Any) -> None:
    """SYNC_FLUSH puts from concurrent tasks sharing flushes, against the disk's fsync rate."""
    s = _session(kw)
    do_group_commit(
        s,
        kw["writers"],
        kw["duration"],
        kw["body_size"],
        kw["commitlog_file_size"],
        kw["fsync_probe"],
    )


@store_group.command(name="all")
@common_options
def all_workloads(**kw: Any) -> None:
    """Every workload in sequence, with the issue's default sizes.

    The backlog runs first, so that its RssAnon reading is not inflated by memory the other
    workloads leave in the process's allocator.
    """
    s = _session(kw)
    body, file_size = kw["body_size"], kw["commitlog_file_size"]
    batched = PutParams(body_size=body, commitlog_file_size=file_size)
    do_backlog(s, replace(batched, count=10_000_000, chunk=8192))
    do_put(s, batched)
    do_put(s, replace(batched, batch=1))
    do_read(s, 1_000_000, body, 32, file_size)
    do_recover(s, GIB, body, RECOVER_VARIANTS, False, file_size)
    do_group_commit(s, (1, 8, 32), 4.0, body, file_size, 2.0)


@main.command(name="stacks")
@click.argument("raw", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option(
    "--include",
    default=None,
    help="Keep only stacks through a frame whose function name contains this.",
)
@click.option(
    "--exclude",
    multiple=True,
    help="Drop stacks through a frame whose function name contains this (repeatable).",
)
@click.option("--us-per-msg", type=float, default=None, help="Measured cost to scale by.")
@click.option("--top", type=click.IntRange(1), default=25, show_default=True)
@click.option("--by", type=click.Choice(["self", "inclusive"]), default="self", show_default=True)
def stacks_command(
    raw: Path,
    include: str | None,
    exclude: tuple[str, ...],
    us_per_msg: float | None,
    top: int,
    by: str,
) -> None:
    """Per-function breakdown of a py-spy raw profile (py-spy record --format raw)."""
    summary = stacks.summarise(stacks.load_raw(raw), include=include, exclude=exclude)
    console = Console()
    if not console.is_terminal:
        console.width = 160
    console.print(stacks.summary_table(summary, top=top, us_per_msg=us_per_msg, by=by))


@store_group.command(name="batchcq")
@click.option("--batches", type=click.IntRange(1), default=20_000, show_default=True)
@click.option("--batch", type=click.IntRange(1, 0x7FFF), default=32, show_default=True)
@click.option("--body-size", type=click.IntRange(0), default=128, show_default=True)
@click.option(
    "--dir",
    "directory",
    type=click.Path(file_okay=False, path_type=Path),
    default=Path("bench-data"),
    show_default=True,
    help="Parent directory of the two bench stores (deleted afterwards).",
)
@click.option("--json", "json_out", is_flag=True, help="One JSON object per side.")
def batchcq(batches: int, batch: int, body_size: int, directory: Path, json_out: bool) -> None:
    """µs per message to put and dispatch inner batches (BatchCQ) vs ordinary batches."""
    import json

    from store.bench.batch_cq import as_rows, run_batch_cq

    tune_gc()
    with _bench_errors():
        results = run_batch_cq(directory, batches=batches, batch=batch, body_size=body_size)
    if json_out:
        for row in as_rows(results):
            click.echo(json.dumps(row))
        return
    table = Table(title=f"{batches} batches of {batch} messages, {body_size}-byte bodies")
    for column in ("kind", "messages", "put µs/msg", "dispatch µs/msg"):
        table.add_column(column)
    for r in results:
        table.add_row(
            r.kind, str(r.messages), f"{r.put_us_per_msg:.3f}", f"{r.dispatch_us_per_msg:.3f}"
        )
    Console().print(table)


if __name__ == "__main__":
    main()
