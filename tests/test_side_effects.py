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


ENCODING = "spark.sql.streaming.stateStore.encodingFormat"
CHANGELOG = "spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled"


@pytest.fixture
def encoding_restored(spark):
    before = {k: spark.conf.get(k, None) for k in (ENCODING, CHANGELOG)}
    yield
    for k, v in before.items():
        if v is None:
            spark.conf.unset(k)
        else:
            spark.conf.set(k, v)


def _events(spark, path, users):
    spark.createDataFrame([(u, float(i)) for i, u in enumerate(users)], "user_id string, value double").write.mode(
        "append"
    ).parquet(path)


def test_a_users_own_streaming_aggregation_runs_in_a_keyed_sql_session(spark, tmp_path, encoding_restored):
    """KeyedSQL(spark) no longer sets Avro state encoding in the session (Spark refuses it for a
    streaming aggregation: a dashboard count beside a keyed stream failed at start). The shared
    session may hold Avro from an earlier test that took a streaming tws DataFrame: unset first."""
    spark.conf.unset(ENCODING)
    KeyedSQL(spark)
    assert spark.conf.get(ENCODING, None) in (None, "unsaferow")  # (Spark's default, however it reports it)
    users = ["u1", "u2", "u1", "u3", "u1", "u2"]
    src = str(tmp_path / "in")
    _events(spark, src, users)
    counts = spark.readStream.schema("user_id string, value double").parquet(src).groupBy("user_id").count()
    q = (
        counts.writeStream.outputMode("complete")
        .format("memory")
        .queryName("own_counts")
        .option("checkpointLocation", str(tmp_path / "cp"))
        .trigger(availableNow=True)
        .start()
    )
    q.awaitTermination()
    want = sorted((u, users.count(u)) for u in set(users))
    assert sorted(tuple(r) for r in spark.table("own_counts").collect()) == want


@pytest.mark.spark_feature("TRANSFORM_WITH_STATE")
def test_a_tws_stream_starts_in_avro_and_leaves_the_session_as_it_was(spark, tmp_path):
    import json

    ks = KeyedSQL(spark, engine="tws")
    ks.register("se_count_tws", Count, returns="n bigint")
    src, cp = str(tmp_path / "in"), tmp_path / "cp"
    users = ["a", "b", "a"]
    _events(spark, src, users)
    before, changelog = spark.conf.get(ENCODING, None), spark.conf.get(CHANGELOG, None)
    sql = f"SELECT user_id, n FROM parquet.`{src}` GROUP BY KEY user_id WITH STATE se_count_tws(value)"
    ks.run(sql, checkpoint=str(cp), output=str(tmp_path / "out"))
    assert spark.conf.get(ENCODING, None) == before
    assert spark.conf.get(CHANGELOG, None) == changelog  # (started with it, the session left as it was)
    if changelog is None:  # (unless an earlier test's session says otherwise)
        assert list(cp.rglob("*.changelog"))  # RocksDB changelogs: what a DELETE's audit reads
    offsets = [p for p in cp.rglob("offsets/0") if p.is_file()]
    assert offsets, sorted(str(p) for p in cp.rglob("*"))[:20]
    metadata = json.loads(offsets[0].read_text().splitlines()[1])
    assert metadata["conf"][ENCODING] == "avro"
    got = sorted(tuple(r) for r in spark.read.parquet(str(tmp_path / "out")).collect())
    seen: dict = {}
    want = []
    for u in users:
        seen[u] = seen.get(u, 0) + 1
        want.append((u, seen[u]))
    assert got == sorted(want)


@pytest.mark.spark_feature("TRANSFORM_WITH_STATE")
def test_an_aggregation_beside_a_keyed_tws_step_in_one_stream_says_what_to_do(spark, tmp_path):
    ks = KeyedSQL(spark, engine="tws")
    ks.register("se_count_agg", Count, returns="n bigint")
    src = str(tmp_path / "in")
    _events(spark, src, ["a", "b"])
    sql = (
        f"SELECT user_id, max(n) AS n FROM (SELECT user_id, n FROM parquet.`{src}` GROUP BY KEY user_id "
        "WITH STATE se_count_agg(value)) GROUP BY user_id"
    )
    with pytest.raises(KeyedSQLError, match=r"ks.run: this streaming statement has a stateful aggregation .* ks.sql"):
        ks.run(sql, checkpoint=str(tmp_path / "cp"), output=str(tmp_path / "out"))


@pytest.mark.spark_feature("TRANSFORM_WITH_STATE")
def test_a_tws_stream_you_start_yourself_gets_avro_through_the_session(spark, tmp_path, encoding_restored):
    """ks.apply / ks.sql over a stream on tws returns a DataFrame the user starts: the session then
    holds the Avro encoding its checkpoint needs, and side_effects says so."""
    import json

    spark.conf.unset(ENCODING)
    spark.conf.unset(CHANGELOG)
    ks = KeyedSQL(spark, engine="tws")
    ks.register("se_count_own", Count, returns="n bigint")
    src, cp, out = str(tmp_path / "in"), tmp_path / "cp", str(tmp_path / "out")
    users = ["a", "b", "a"]
    _events(spark, src, users)
    stream = spark.readStream.schema("user_id string, value double").parquet(src)
    df = ks.apply(stream, "se_count_own", key="user_id")
    assert spark.conf.get(ENCODING, None) == "avro"
    assert any(ENCODING in e and "start" in e for e in ks.side_effects()), ks.side_effects()
    assert spark.conf.get(CHANGELOG) == "true"
    assert any(CHANGELOG in e for e in ks.side_effects()), ks.side_effects()
    q = df.writeStream.format("parquet").option("path", out).option("checkpointLocation", str(cp))
    q = q.trigger(availableNow=True).start()
    q.awaitTermination(300)
    offsets = [p for p in cp.rglob("offsets/0") if p.is_file()]
    assert json.loads(offsets[0].read_text().splitlines()[1])["conf"][ENCODING] == "avro"
    seen: dict = {}
    want = []
    for u in users:
        seen[u] = seen.get(u, 0) + 1
        want.append((u, seen[u]))
    assert sorted(tuple(r) for r in spark.read.parquet(out).collect()) == sorted(want)


@pytest.mark.spark_feature("TRANSFORM_WITH_STATE")
def test_a_users_own_changelog_setting_is_kept(spark, tmp_path, encoding_restored):
    """RocksDB changelog checkpointing is a default a tws stream starts with, not an override: a
    session that turned it off runs its tws streams without changelogs (and a DELETE's audit
    then knows no output batch)."""
    spark.conf.set(CHANGELOG, "false")
    ks = KeyedSQL(spark, engine="tws")
    ks.register("se_count_off", Count, returns="n bigint")
    src, cp = str(tmp_path / "in"), tmp_path / "cp"
    _events(spark, src, ["a", "b", "a"])
    sql = f"SELECT user_id, n FROM parquet.`{src}` GROUP BY KEY user_id WITH STATE se_count_off(value)"
    ks.run(sql, checkpoint=str(cp), output=str(tmp_path / "out"))
    assert spark.conf.get(CHANGELOG) == "false"
    assert not list(cp.rglob("*.changelog")) and list(cp.rglob("*.zip"))
    assert not any(CHANGELOG in e for e in ks.side_effects()), ks.side_effects()
