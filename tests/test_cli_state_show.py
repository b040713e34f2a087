"""`spark-keyed-sql state show`: rows in key order (the change feed by batch, then key), so
that --limit shows the same keys each time, whatever the key's name."""

from cli_tables import printed_rows
from keyed_functions import Count

from spark_keyed_sql import KeyedSQL, cli


def test_state_and_change_feed_in_key_order_with_a_dotted_key_name(spark, tmp_path, capsys):
    ks = KeyedSQL(spark, engine="bulk")
    ks.register("show_tally", Count, returns="n bigint")
    src, cp, out = str(tmp_path / "in"), str(tmp_path / "cp"), str(tmp_path / "out")
    batches = [["k3", "k1", "k9", "k1"], ["k2", "k9", "k0"]]  # keys arriving out of order
    sql = f"SELECT `u.id`, n FROM parquet.`{src}` GROUP BY KEY `u.id` WITH STATE show_tally(seq) ORDER BY seq"
    seq = 0
    for keys in batches:
        rows = []
        for k in keys:
            rows.append((k, seq))
            seq += 1
        spark.createDataFrame(rows, "`u.id` string, seq bigint").coalesce(1).write.mode("append").parquet(src)
        ks.run(sql, checkpoint=cp, output=out)
    # the oracle: counts per key over both batches, keys sorted
    counts = {}
    for keys in batches:
        for k in keys:
            counts[k] = counts.get(k, 0) + 1
    assert cli.main(["state", "show", cp, "--limit", "3"]) == 0
    shown = printed_rows(capsys.readouterr().out)
    assert [(r[0], int(r[1])) for r in shown] == sorted(counts.items())[:3], shown
    # the change feed: a row per key a batch changed, by batch and then key
    assert cli.main(["state", "show", cp, "--changes"]) == 0
    feed = printed_rows(capsys.readouterr().out)
    header_free = [(int(r[-1]), r[0]) for r in feed]  # (batch_id, the last column; the key, the first)
    expected = sorted({(b, k) for b, keys in enumerate(batches) for k in keys})
    assert header_free == expected, feed
