"""Benchmarks of the message store, run with the ``mqbench`` command.

``mqbench store put|read|recover|backlog|all`` drives a real :class:`store.MessageStore` on real
files (1 GiB commitlog files by default) the way the broker will: puts under trio with
:class:`store.services.StoreServices` running the reput loop in the background. See
BENCHMARKS.md at the repository root for the figures, the commands and the profiles.

Modules:
- :mod:`store.bench.workload`: message generation, bench directories, latency and memory probes.
- :mod:`store.bench.store_bench`: the workloads themselves, returning plain result objects.
- :mod:`store.bench.report`: rich tables, progress display and JSON output.
- :mod:`store.bench.cli`: the click command line.
"""

from store.bench.store_bench import (
    BacklogResult,
    PutParams,
    PutRunResult,
    ReadResult,
    RecoverResult,
    run_backlog,
    run_put,
    run_read,
    run_recover,
)

__all__ = [
    "BacklogResult",
    "PutParams",
    "PutRunResult",
    "ReadResult",
    "RecoverResult",
    "run_backlog",
    "run_put",
    "run_read",
    "run_recover",
]
