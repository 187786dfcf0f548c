"""Spark connector: ``format("minimq")`` for PySpark >= 4.2 (``pip install ".[spark]"``).

::

    from client.spark import register
    register(spark)
    df = spark.read.format("minimq").option("namesrv", "127.0.0.1:9876").option("topic", "T").load()

Importing :mod:`client` never imports this package; importing this package does not import
pyspark either until :func:`register` or :class:`MinimqDataSource` is used (the pure modules
:mod:`client.spark.offsets` and :mod:`client.spark.options` work without it).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from client.spark.source import FORMAT, SCHEMA, MinimqDataSource

_LAZY = frozenset({"FORMAT", "SCHEMA", "MinimqDataSource"})


def register(spark: Any) -> None:
    """Make ``format("minimq")`` available in the SparkSession ``spark``."""
    from client.spark.source import MinimqDataSource

    spark.dataSource.register(MinimqDataSource)


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        from client.spark import source

        return getattr(source, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["FORMAT", "SCHEMA", "MinimqDataSource", "register"]
