"""KeyedSQL: register stateful classes on a SparkSession and run them."""

from __future__ import annotations

import inspect
import os
import sys
from typing import Any

from pyspark.sql import DataFrame, SparkSession

from .api.errors import SchemaError, UnknownFunctionError
from .runtime.base import Engine
from .runtime.columns import parse_column_list, parse_order_list
from .runtime.plan import KeyedPlan
from .runtime.spec import FunctionSpec
from .runtime.tws import TransformWithStateEngine
from .runtime.udtf import make_table_function

__all__ = ["KeyedSQL", "ROCKSDB_PROVIDER", "configure_session"]

ROCKSDB_PROVIDER = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"

ENGINES: dict[str, type[Engine]] = {"tws": TransformWithStateEngine}


def configure_session(spark: SparkSession) -> None:
    """Settings the stateful engines need: RocksDB state store, Avro state encoding."""
    spark.conf.set("spark.sql.streaming.stateStore.providerClass", ROCKSDB_PROVIDER)
    # Avro encoding from the first run is what later allows evolving a state schema.
    spark.conf.set("spark.sql.streaming.stateStore.encodingFormat", "avro")


def _ship_by_value(cls: type) -> None:
    """Classes from a user's own module (a test file, a notebook, a script next to the data)
    are sent to executors by value, so executors need not be able to import that module."""
    from pyspark import cloudpickle

    mod = sys.modules.get(cls.__module__)
    if mod is None or cls.__module__ == "__main__":
        return
    path = getattr(mod, "__file__", None) or ""
    if "site-packages" in path or "dist-packages" in path or cls.__module__.startswith("spark_keyed_sql"):
        return
    try:
        cloudpickle.register_pickle_by_value(mod)
    except (ValueError, TypeError):
        pass


class KeyedSQL:
    """The entry point: ``ks = KeyedSQL(spark)``; ``ks.register(...)``; ``ks.sql(...)``."""

    def __init__(self, spark: SparkSession, *, engine: str = "tws"):
        if engine not in ENGINES:
            raise SchemaError(f"unknown engine {engine!r}; choose one of {sorted(ENGINES)}")
        self.spark = spark
        self.default_engine = engine
        self.functions: dict[str, FunctionSpec] = {}
        configure_session(spark)
        python = os.environ.get("PYSPARK_PYTHON")
        if python is None:
            os.environ["PYSPARK_PYTHON"] = sys.executable

    # ------------------------------------------------------------------ registry
    def register(self, name: str, cls: type, returns: str | None = None, **kwargs: Any) -> FunctionSpec:
        """Register ``cls`` as ``name``: usable in ``GROUP BY KEY ... WITH STATE name(...)``
        and as the table function ``name(TABLE(t), key => '...', order_by => '...')``."""
        spec = FunctionSpec.build(name, cls, returns, kwargs)
        if inspect.isclass(cls):
            _ship_by_value(cls)
        from pyspark.sql.functions import udtf

        self.spark.udtf.register(name, udtf(make_table_function(spec)))
        self.functions[name.lower()] = spec
        return spec

    def function(self, name: str) -> FunctionSpec:
        spec = self.functions.get(name.lower())
        if spec is None:
            known = ", ".join(sorted(self.functions)) or "none registered yet"
            raise UnknownFunctionError(f"unknown function '{name}' (registered: {known}); call ks.register first")
        return spec

    # ------------------------------------------------------------------ execution
    def apply(
        self,
        df: DataFrame,
        function: str,
        key: str | list[str] | None = None,
        order_by: str | list[str] | None = None,
        *,
        args: list[str] | None = None,
        initial_state: DataFrame | None = None,
        engine: str | None = None,
    ) -> DataFrame:
        """Run a registered function over ``df`` (batch or streaming), keyed by ``key``.

        The result has the key columns followed by the function's ``returns`` columns. The
        event dict / rows frame holds ``args`` (default: every column of ``df``)."""
        spec = self.function(function)
        keys = parse_column_list(key, "key")
        order = parse_order_list(order_by)
        columns = {c.lower(): c for c in df.columns}
        arg_cols = list(df.columns) if args is None else parse_column_list(args, "args")
        for what, cols in (("key", keys), ("order_by", [o.column for o in order]), ("argument", arg_cols)):
            missing = [c for c in cols if c.lower() not in columns]
            if missing:
                raise SchemaError(
                    f"{function}: {what} column(s) {missing} not in the source (columns: {', '.join(df.columns)})"
                )
        keys = [columns[k.lower()] for k in keys]
        arg_cols = [columns[c.lower()] for c in arg_cols]
        plan = KeyedPlan(spec, keys, arg_cols, order, initial_state)
        name = engine or self.default_engine
        if name not in ENGINES:
            raise SchemaError(f"unknown engine {name!r}; choose one of {sorted(ENGINES)}")
        return ENGINES[name]().apply(df, plan)

    def sql(self, query: str) -> DataFrame:
        """Run Spark SQL; statements without the keyed clause go to ``spark.sql`` unchanged."""
        return self.spark.sql(query)
