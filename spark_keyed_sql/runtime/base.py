"""The engine interface: (source DataFrame, plan) -> DataFrame."""

from __future__ import annotations

from abc import ABC, abstractmethod

from pyspark.sql import DataFrame
from pyspark.sql import types as T

from ..api.errors import SchemaError
from ..state.spark_types import to_spark
from .plan import KeyedPlan

__all__ = ["Engine", "output_schema"]


class Engine(ABC):
    name: str = ""
    # False: a stream runs per micro-batch (ks.start / ks.run), with no streaming DataFrame to return
    streams_as_dataframe: bool = True

    @abstractmethod
    def apply(self, df: DataFrame, plan: KeyedPlan) -> DataFrame:
        """Run ``plan`` over ``df`` (batch or streaming); the result has the key columns
        followed by the function's ``returns`` columns."""


def output_schema(source: T.StructType, plan: KeyedPlan) -> T.StructType:
    by_name = {f.name: f for f in source.fields}
    fields = [T.StructField(k, by_name[k].dataType, True) for k in plan.key_columns]
    assert plan.spec.returns is not None
    taken = {k.lower() for k in plan.key_columns}
    for f in plan.spec.returns.fields:
        if f.name.lower() in taken:
            raise SchemaError(
                f"function '{plan.spec.name}': returns column '{f.name}' has the same name as key column "
                f"'{f.name}'; rename it in returns="
            )
        fields.append(T.StructField(f.name, to_spark(f.type), True))
        taken.add(f.name.lower())
    for c in plan.passthrough:
        if c.lower() in taken:
            raise SchemaError(f"function '{plan.spec.name}': pass-through column '{c}' clashes with an output column")
        fields.append(T.StructField(c, by_name[c].dataType, True))
    return T.StructType(fields)
