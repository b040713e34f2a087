"""The errors of checkpoints and of moving state (in their own module: the checkpoint's
records and readers raise them, and the metadata record is read below ``checkpoint``)."""

from __future__ import annotations

from ..api.errors import KeyedSQLError

__all__ = ["CheckpointError", "MigrationError"]


class CheckpointError(KeyedSQLError):
    """A checkpoint is missing, belongs to another query, or cannot be read."""


class MigrationError(KeyedSQLError):
    """State that cannot be moved as asked (the message says what and why)."""
