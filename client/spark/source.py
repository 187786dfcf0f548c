"""The ``minimq`` PySpark data source (Python Data Source API, PySpark >= 4.2)."""

from __future__ import annotations

from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    DataSourceWriter,
)
from pyspark.sql.types import StructType

from client.spark.batch import BatchReader
from client.spark.options import parse_read, parse_write
from client.spark.sink import BatchWriter, StreamWriter, check_schema
from client.spark.stream import StreamReader

FORMAT = "minimq"
SCHEMA = (
    "topic string, broker string, queue_id int, queue_offset long, msg_id string, tags string, "
    "keys string, body binary, properties map<string,string>, born_timestamp timestamp, "
    "store_timestamp timestamp, reconsume_times int"
)
"""The fixed schema of the source's rows."""


class MinimqDataSource(DataSource):
    """``format("minimq")``: read topics (batch or streaming) and write DataFrames to topics.

    Options are validated when a query starts (see :mod:`client.spark.options`).
    """

    @classmethod
    def name(cls) -> str:
        """The format name, ``minimq``."""
        return FORMAT

    def schema(self) -> str:
        """The fixed source schema."""
        return SCHEMA

    def reader(self, schema: StructType) -> DataSourceReader:
        """A batch reader."""
        return BatchReader(parse_read(self.options, streaming=False))

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        """A micro-batch stream reader."""
        return StreamReader(parse_read(self.options, streaming=True))

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        """A batch sink (appends; ``overwrite`` makes no sense for a topic and is ignored)."""
        opts = parse_write(self.options)
        check_schema(schema, opts)
        return BatchWriter(opts)

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        """A streaming sink."""
        opts = parse_write(self.options)
        check_schema(schema, opts)
        return StreamWriter(opts)
