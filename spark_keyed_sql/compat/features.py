"""Which Spark release brought which feature this package uses, and what a session has.

A session's features follow the Spark that runs its queries: for a classic session the PySpark
here; for a Spark Connect session the older of the client (whose API must have the call) and
the server (which must run it). Engines declare the feature they need (``Engine.requires``);
``auto`` passes over an engine the session lacks, and an explicit request gets one
:class:`~spark_keyed_sql.api.errors.SparkVersionError` naming the feature and the version."""

from __future__ import annotations

import threading
from dataclasses import dataclass
from enum import Enum
from typing import Any

from ..api.errors import SparkVersionError
from .versions import parse_version, require_pyspark

__all__ = ["Feature", "SparkFeatures", "features", "require"]


class Feature(Enum):
    """(what it is, the release that brought it, the release that brought it to Spark Connect)."""

    TRANSFORM_WITH_STATE = ("transformWithState (engine 'tws')", (4, 0), (4, 1))
    TRANSFORM_WITH_STATE_ROWS = ("row-based transformWithState", (4, 1), (4, 1))
    STATE_READER = ("Spark's statestore and state-metadata readers", (4, 0), (4, 0))
    UDTF_ANALYZE = ("Python UDTFs with analyze (the table-function form in plain spark.sql)", (4, 0), (4, 0))

    def __init__(self, what: str, since: tuple[int, int], since_on_connect: tuple[int, int]):
        self.what = what
        self.since = since
        self.since_on_connect = since_on_connect

    def needs(self, connect: bool) -> tuple[int, int]:
        return self.since_on_connect if connect else self.since


def _text(v: tuple[int, ...]) -> str:
    return ".".join(str(x) for x in v)


@dataclass(frozen=True)
class SparkFeatures:
    """The features of one session (or, without one, of the PySpark installed here)."""

    client: tuple[int, int, int]  # the PySpark in this process
    server: tuple[int, int, int]  # the Spark that runs the queries (the client's own when classic)
    connect: bool = False

    @property
    def version(self) -> tuple[int, int, int]:
        return min(self.client, self.server)

    def has(self, feature: Feature) -> bool:
        return self.version[:2] >= feature.needs(self.connect)

    def describe(self) -> str:
        if self.connect:
            return f"Spark Connect: server Spark {_text(self.server)}, client PySpark {_text(self.client)}"
        return f"Spark {_text(self.server)}"

    def require(self, feature: Feature, where: str = "") -> None:
        """One error naming the feature, the release it needs and the release here."""
        if self.has(feature):
            return
        needed = feature.needs(self.connect)
        on = " through Spark Connect" if self.connect and needed != feature.since else ""
        prefix = f"{where}: " if where else ""
        raise SparkVersionError(
            f"{prefix}{feature.what} needs Spark {_text(needed)} or newer{on}; this session runs {self.describe()} "
            "(docs/compatibility.md lists what each version has)"
        )

    def missing(self) -> list[Feature]:
        return [f for f in Feature if not self.has(f)]


_LOCK = threading.Lock()
_BY_SESSION: dict[int, tuple[Any, SparkFeatures]] = {}


def features(spark: Any | None = None) -> SparkFeatures:
    """The features of ``spark`` (a SparkSession, classic or Connect), or of the installed PySpark."""
    info = require_pyspark()
    if spark is None:
        return SparkFeatures(info.version, info.version)
    with _LOCK:
        hit = _BY_SESSION.get(id(spark))
        if hit is not None and hit[0] is spark:
            return hit[1]
    connect = type(spark).__module__.startswith("pyspark.sql.connect")
    try:
        server = parse_version(spark.version) if connect else info.version
    except Exception:  # a server that does not say: take the client's
        server = info.version
    found = SparkFeatures(info.version, server, connect)
    with _LOCK:
        _BY_SESSION[id(spark)] = (spark, found)
    return found


def require(spark: Any | None, feature: Feature, where: str = "") -> None:
    features(spark).require(feature, where)
