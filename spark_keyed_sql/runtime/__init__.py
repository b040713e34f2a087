"""Engines behind one interface, the table-function adapter and KeyedTester."""

from .plan import KeyedPlan
from .runner import KeyedRunner, OrderSpec
from .spec import FunctionSpec
from .tester import KeyedTester

__all__ = ["FunctionSpec", "KeyedPlan", "KeyedRunner", "KeyedTester", "OrderSpec"]
