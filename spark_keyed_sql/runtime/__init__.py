"""Engine-neutral execution: the per-key runner, plans and registered function specs, output
checking, fault points."""

from .keys import OrderSpec
from .plan import KeyedPlan
from .runner import KeyedRunner
from .spec import FunctionKind, FunctionSpec

__all__ = ["FunctionKind", "FunctionSpec", "KeyedPlan", "KeyedRunner", "OrderSpec"]
