"""What the stateful engines need of a SparkSession: transformWithState (engine ``tws``) the
RocksDB state store (``SESSION_SETTINGS``: ``KeyedSQL(spark)``, the CLI and the local session set
it), and Avro state encoding from a checkpoint's first run, what later allows evolving a state
schema (``TWS_STREAM_SETTINGS``: given to a tws stream only while it starts, as Spark copies the
session's conf then and keeps the encoding in the checkpoint; in the session it would fail the
user's own streaming aggregations, which Spark refuses in Avro), and RocksDB changelog
checkpointing unless the session says otherwise (``TWS_STREAM_DEFAULTS``: each batch's changes
kept as a changelog beside periodic snapshots, so Spark's change feed can tell which batches
changed a key, what a DELETE's audit reports; the setting Spark's docs recommend for RocksDB)."""

from __future__ import annotations

from pyspark.sql import SparkSession

__all__ = [
    "CHANGELOG_CONF",
    "ENCODING_CONF",
    "ROCKSDB_PROVIDER",
    "SESSION_SETTINGS",
    "TWS_STREAM_DEFAULTS",
    "TWS_STREAM_SETTINGS",
    "configure_session",
]

ROCKSDB_PROVIDER = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"

SESSION_SETTINGS = {
    "spark.sql.streaming.stateStore.providerClass": ROCKSDB_PROVIDER,
}
ENCODING_CONF = "spark.sql.streaming.stateStore.encodingFormat"
TWS_STREAM_SETTINGS = {ENCODING_CONF: "avro"}
CHANGELOG_CONF = "spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled"
TWS_STREAM_DEFAULTS = {CHANGELOG_CONF: "true"}


def configure_session(spark: SparkSession, settings: dict[str, str] = SESSION_SETTINGS) -> list[str]:
    """The settings the stateful engines need (``SESSION_SETTINGS``, or an engine's ``stream_conf``);
    returns what it changed."""
    changed = []
    for key, value in settings.items():
        before = spark.conf.get(key, None)
        if before != value:
            spark.conf.set(key, value)
            changed.append(f"session conf {key}: {before!r} -> {value!r}")
    return changed
