"""Streaming queries started by ks.start / ks.run: their checkpoint, lifecycle and failures."""

from .failures import from_spark_failure, from_stream_failure, translating
from .queries import metrics, run, start

__all__ = ["from_spark_failure", "from_stream_failure", "metrics", "run", "start", "translating"]
