"""The ``minimq`` PySpark data source (Python Data Source API, PySpark >= 4.2)."""

from __future__ import annotations

from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    DataSourceWriter,
)
from pyspark.sql.types import (
    BinaryType,
    DataType,
    IntegerType,
    LongType,
    MapType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from client.spark.batch import BatchReader
from client.spark.options import OptionError, parse_read, parse_write
from client.spark.sink import BatchWriter, StreamWriter, check_schema
from client.spark.stream import StreamReader

FORMAT = "minimq"
SCHEMA = (
    "topic string, broker string, queue_id int, queue_offset long, msg_id string, tags string, "
    "keys string, body binary, properties map<string,string>, born_timestamp timestamp, "
    "store_timestamp timestamp, reconsume_times int"
)
"""The fixed schema of the source's rows."""

_FIELDS: tuple[tuple[str, DataType], ...] = (
    ("topic", StringType()),
    ("broker", StringType()),
    ("queue_id", IntegerType()),
    ("queue_offset", LongType()),
    ("msg_id", StringType()),
    ("tags", StringType()),
    ("keys", StringType()),
    ("body", BinaryType()),
    ("properties", MapType(StringType(), StringType())),
    ("born_timestamp", TimestampType()),
    ("store_timestamp", TimestampType()),
    ("reconsume_times", IntegerType()),
)
SCHEMA_STRUCT = StructType([StructField(name, t) for name, t in _FIELDS])
""":data:`SCHEMA` as a StructType (built here: parsing DDL needs a SparkContext, which Spark's
Python planner processes do not have)."""


def _field_ddl(field: StructField) -> str:
    """``name type`` with what ``simpleString`` leaves out: NOT NULL, and map values that
    may not be null."""
    t = field.dataType
    text = f"{field.name} {t.simpleString()}"
    if isinstance(t, MapType) and not t.valueContainsNull:
        text += " (values not null)"
    return text if field.nullable else f"{text} NOT NULL"


def _shape(schema: StructType) -> list[tuple[str, DataType, bool]]:
    return [(f.name, f.dataType, f.nullable) for f in schema.fields]


def check_fixed_schema(schema: StructType) -> None:
    """OptionError unless ``schema`` (Spark's, or the user's ``.schema(...)``) is
    :data:`SCHEMA`: the source's schema is fixed, as Kafka's is. Names, types and nullability
    are compared (field metadata is not)."""
    if _shape(schema) != _shape(SCHEMA_STRUCT):
        got = ", ".join(_field_ddl(f) for f in schema.fields)
        raise OptionError(
            "the minimq source has a fixed schema and cannot be set with a custom one "
            f"(.schema(...)); got {got}; the schema is {SCHEMA} (every column nullable). "
            "Select or cast columns after load() instead"
        )


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
        """A batch reader (OptionError for a user-specified schema that is not the fixed one)."""
        check_fixed_schema(schema)
        return BatchReader(parse_read(self.options, streaming=False))

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        """A micro-batch stream reader (OptionError for a schema that is not the fixed one)."""
        check_fixed_schema(schema)
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
