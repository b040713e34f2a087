"""Engine-neutral execution: the per-key runner, plans and registered function specs, output
checking, fault points."""

from .plan import KeyedPlan
from .runner import KeyedRunner, OrderSpec
from .spec import FunctionKind, FunctionSpec

__all__ = ["FunctionKind", "FunctionSpec", "KeyedPlan", "KeyedRunner", "OrderSpec"]
