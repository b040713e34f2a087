"""State encoding, layouts and stores."""

from .attributes import AttributeLayout
from .encoding import decode_value, dumps, encode_value, loads
from .memory import MemoryKeyState, MemoryTimers, MemoryVariable

__all__ = [
    "AttributeLayout",
    "MemoryKeyState",
    "MemoryTimers",
    "MemoryVariable",
    "decode_value",
    "dumps",
    "encode_value",
    "loads",
]
