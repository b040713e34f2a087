"""State encoding, layouts, the runner's binding and in-memory key state."""

from .attributes import AttributeLayout
from .binding import KeyBinding, KeyStore, TtlVariable, VariableStore
from .encoding import decode_value, dumps, encode_value, loads
from .memory import MemoryKeyState, MemoryKeyStore, MemoryTimers, memory_binding

__all__ = [
    "AttributeLayout",
    "KeyBinding",
    "KeyStore",
    "MemoryKeyState",
    "MemoryKeyStore",
    "MemoryTimers",
    "TtlVariable",
    "VariableStore",
    "decode_value",
    "dumps",
    "encode_value",
    "loads",
    "memory_binding",
]
