"""What KeyedSQL(spark) changes in the session is listed by side_effects(), and skipped with
configure=False."""

import pytest
from keyed_functions import Count

from spark_keyed_sql import KeyedSQL, KeyedSQLError

PROVIDER = "spark.sql.streaming.stateStore.providerClass"


@pytest.fixture
def bare_conf(spark):
    """The session without the state store settings; put back after."""
    before = {k: spark.conf.get(k, None) for k in (PROVIDER, "spark.sql.streaming.stateStore.encodingFormat")}
    for k in before:
        spark.conf.unset(k)
    yield
    for k, v in before.items():
        if v is None:
            spark.conf.unset(k)
        else:
            spark.conf.set(k, v)


def test_the_settings_made_are_listed(spark, bare_conf):
    ks = KeyedSQL(spark)
    effects = ks.side_effects()
    assert "RocksDB" in spark.conf.get(PROVIDER)
    assert any(PROVIDER in e and "RocksDBStateStoreProvider" in e for e in effects), effects
    again = KeyedSQL(spark).side_effects()  # the settings are in place now: a second one changes none
    assert not any("session conf" in e for e in again), again


def test_configure_false_changes_nothing(spark, bare_conf):
    ks = KeyedSQL(spark, configure=False)
    assert spark.conf.get(PROVIDER, None) is None
    assert all("session conf" not in e and "pythonExec" not in e for e in ks.side_effects())


@pytest.mark.spark_feature("TRANSFORM_WITH_STATE")
def test_tws_without_the_rocksdb_store_says_what_to_set(spark, bare_conf):
    ks = KeyedSQL(spark, configure=False)
    ks.register("se_count", Count, returns="n bigint")
    spark.createDataFrame([("u1", 1.0)], "user_id string, value double").createOrReplaceTempView("se_events")
    with pytest.raises(KeyedSQLError, match=r"engine 'tws' .*needs the RocksDB state store.*configure=False"):
        ks.sql(
            # (native = false: the class would otherwise run as Spark SQL, no engine at all)
            "SELECT * FROM se_events GROUP BY KEY user_id WITH STATE se_count(value) "
            "OPTIONS (engine = 'tws', native = false)"
        ).collect()
