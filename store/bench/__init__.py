"""Benchmarks of the message store, run with the ``mqbench`` command.

``mqbench store put|read|recover|backlog|group-commit|all`` drives a real
:class:`store.MessageStore` on real files (1 GiB commitlog files by default) the way the broker
will: puts under trio with :class:`store.services.StoreServices` running the reput loop in the
background. See BENCHMARKS.md at the repository root for the figures, the commands and the
profiles.

Modules:
- :mod:`store.bench.workload`: message generation, bench directories, latency and memory probes.
- :mod:`store.bench.store_bench`: the workloads themselves, returning plain result objects.
- :mod:`store.bench.group_commit`: concurrent SYNC_FLUSH puts against the disk's fsync rate.
- :mod:`store.bench.report`: rich tables, progress display and JSON output.
- :mod:`store.bench.cli`: the click command line.
"""

from store.bench.group_commit import GroupCommitResult, run_group_commit
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
    "GroupCommitResult",
    "PutParams",
    "PutRunResult",
    "ReadResult",
    "RecoverResult",
    "run_backlog",
    "run_group_commit",
    "run_put",
    "run_read",
    "run_recover",
]
