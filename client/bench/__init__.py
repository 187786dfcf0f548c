"""Client benchmarks, run with ``mqbench produce|consume|latency|backlog|push|rebalance``.

Producers and consumers run in worker processes against a running cluster or a local name
server and broker started for the run. The store's own benchmarks (``mqbench store ...``) live
in :mod:`store.bench`; this package does not import them (the client does not depend on the
store).

Modules:
- :mod:`client.bench.cluster`: the local name server + broker processes.
- :mod:`client.bench.protocol`: the pipe protocol between ``mqbench`` and its workers.
- :mod:`client.bench.workers`: the worker processes (producers, consumers, latency pair).
- :mod:`client.bench.push`: the push-consumer worker (``mqbench push``).
- :mod:`client.bench.rebalance`: group-member processes and convergence (``mqbench rebalance``).
- :mod:`client.bench.runner`: spawning and synchronising workers; filling a topic.
- :mod:`client.bench.stats`: aggregation, tables and JSON.
- :mod:`client.bench.cli`: the click command line (``mqbench``).
- :mod:`client.bench.push_cli`: ``mqbench push`` and ``mqbench rebalance`` (loaded lazily).
"""
