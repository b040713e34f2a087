"""Every sql_examples/ file runs the way the CLI runs it, and its rows equal an oracle computed
here in plain Python from the same CSV files."""

import csv
import datetime as dt
import os
import re
import shlex
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import pytest
from cli_tables import printed_rows

from spark_keyed_sql import KeyedSQL, cli
from spark_keyed_sql.cli import read_sql_file, register_udfs, split_statements, udf_specs

ROOT = Path(__file__).resolve().parents[1]
EX = ROOT / "sql_examples"
DATA = EX / "data"
HOUR = dt.timedelta(hours=1)


def load(name):
    with open(DATA / f"{name}.csv") as f:
        rows = list(csv.DictReader(f))
    for r in rows:
        r["ts"] = dt.datetime.strptime(r["ts"], "%Y-%m-%d %H:%M:%S")
    return rows


def run_example(spark, rel):
    """What `spark-keyed-sql run <file>` does, in the test session."""
    path = EX / rel
    text = read_sql_file(str(path))
    ks = KeyedSQL(spark)
    register_udfs(ks, udf_specs(text, []), str(path.parent))
    *setup, last = split_statements(text)
    for s in setup:
        ks.sql(s)
    return [tuple(r) for r in ks.sql(last).collect()]


def by_key(rows, key):
    out = defaultdict(list)
    for r in rows:
        out[r[key]].append(r)
    for v in out.values():
        v.sort(key=lambda r: r["ts"])
    return out


def test_committed_data_is_what_generate_writes(tmp_path):
    sys.path.insert(0, str(EX))
    import generate

    written = [Path(p) for p in generate.write(str(tmp_path))]
    # every committed file is one generate writes (an empty or partial list checks nothing),
    # but events.csv: the package's bundled demo data, copied
    assert sorted([p.name for p in written] + ["events.csv"]) == sorted(p.name for p in DATA.glob("*.csv"))
    assert (DATA / "events.csv").read_text() == (ROOT / "spark_keyed_sql" / "data" / "events.csv").read_text()
    for p in written:
        assert p.read_text() == (DATA / p.name).read_text(), p


# ------------------------------------------------------------------ SAGE
def test_user_sessions(spark):
    expected = []
    for user, evs in by_key(load("events"), "user_id").items():
        total = 0.0
        for i, e in enumerate(evs):
            total = round(total + float(e["value"]), 2)
            expected.append((user, e["ts"], i + 1, total))
    assert run_example(spark, "sage/user_sessions.sql") == sorted(expected)


def test_counters(spark):
    counts = defaultdict(int)
    for e in load("events"):
        counts[e["category"]] += 1
    assert run_example(spark, "sage/counters.sql") == sorted(counts.items())


def test_time_windows(spark):
    counts = defaultdict(int)
    for e in load("events"):
        counts[(e["user_id"], e["ts"].replace(minute=0, second=0))] += 1
    assert run_example(spark, "sage/time_windows.sql") == sorted((u, h, n) for (u, h), n in counts.items())


def test_features(spark):
    expected = []
    for cat, evs in by_key(load("events"), "category").items():
        if len(evs) < 20:
            continue
        vals = [float(e["value"]) for e in evs[:20]]
        expected.append((cat, round(sum(vals) / 20, 6), 20, min(vals), max(vals)))
    got = run_example(spark, "sage/features.sql")
    assert [(c, pytest.approx(m, abs=1e-6), n, lo, hi) for c, m, n, lo, hi in got] == sorted(expected)


def test_keyed_and_unkeyed(spark):
    events = load("events")
    per_user = max(len(v) for v in by_key(events, "user_id").values())
    assert run_example(spark, "sage/keyed_and_unkeyed.sql") == [("global", len(events)), ("per key", per_user)]


# ------------------------------------------------------------------ Samza
def test_page_views_per_hour(spark):
    counts = defaultdict(int)
    for v in load("page_views"):
        counts[(v["member_id"], v["ts"].replace(minute=0, second=0))] += 1
    assert run_example(spark, "samza/page_views_per_hour.sql") == sorted((m, h, n) for (m, h), n in counts.items())


def test_profile_settings_join(spark):
    changes = [(r["member_id"], r["ts"], "profile", r["region"]) for r in load("profiles")]
    changes += [(r["member_id"], r["ts"], "settings", r["language"]) for r in load("settings")]
    expected, latest = [], defaultdict(dict)
    for m, ts, side, value in sorted(changes):
        latest[m][side] = value
        if len(latest[m]) == 2:
            expected.append((m, ts, latest[m]["profile"], latest[m]["settings"]))
    got = run_example(spark, "samza/profile_settings_join.sql")
    assert got == expected
    assert not any(m == "m07" for m, *_ in got)  # never set anything: never joins


def test_page_views_with_region(spark):
    events = [(r["member_id"], r["ts"], 0, "profile", r["region"]) for r in load("profiles")]
    events += [(r["member_id"], r["ts"], 1, "view", r["page"]) for r in load("page_views")]
    expected, region = [], {}
    for m, ts, _, kind, value in sorted(events):
        if kind == "profile":
            region[m] = value
        else:
            expected.append((m, ts, value, region.get(m)))
    assert run_example(spark, "samza/page_views_with_region.sql") == sorted(expected, key=lambda r: (r[0], r[1], r[2]))


def test_ad_click_join(spark):
    clicks = defaultdict(list)
    for c in load("ad_clicks"):
        clicks[c["impression_id"]].append(c["ts"])
    expected = []
    for imp in load("ad_impressions"):
        in_time = sorted(
            t for t in clicks[imp["impression_id"]] if dt.timedelta(0) <= t - imp["ts"] <= dt.timedelta(minutes=10)
        )
        if in_time:
            expected.append((imp["impression_id"], imp["ad"], "clicked", int((in_time[0] - imp["ts"]).total_seconds())))
        else:
            expected.append((imp["impression_id"], imp["ad"], "expired", None))
    got = run_example(spark, "samza/ad_click_join.sql")
    assert got == sorted(expected)
    assert {o for _, _, o, _ in got} == {"clicked", "expired"}


# ------------------------------------------------------------------ Flink
def test_latest_transaction(spark):
    expected = []
    for c, txs in sorted(by_key(load("transactions"), "customer_id").items()):
        last = txs[-1]
        expected.append((c, float(last["amount"]), last["merchant"], last["ts"], len(txs)))
    assert run_example(spark, "flink/latest_transaction.sql") == expected


def test_enrichment_join(spark):
    customers = {c["customer_id"]: c for c in load("customers")}
    expected = []
    for c, txs in by_key(load("transactions"), "customer_id").items():
        info = customers.get(c)
        if info is None:
            continue  # details never arrive: transactions stay pending in ListState
        spend = defaultdict(float)
        before = [t for t in txs if t["ts"] < info["ts"]]
        after = [t for t in txs if t["ts"] >= info["ts"]]
        for t in before + after:  # waiting ones are released first, in arrival order
            spend[t["merchant"]] = round(spend[t["merchant"]] + float(t["amount"]), 2)
            expected.append(
                (c, t["tx_id"], float(t["amount"]), t["merchant"], info["name"], info["tier"], spend[t["merchant"]])
            )
    got = run_example(spark, "flink/enrichment_join.sql")
    assert got == sorted(expected, key=lambda r: (r[0], r[1]))
    assert not any(c == "c9" for c, *_ in got)


# ------------------------------------------------------------------ sessions
def event_time_sessions_oracle():
    expected = []
    for user, cs in by_key(load("clicks"), "user_id").items():
        cur = [cs[0]["ts"]]
        for c in cs[1:]:
            if c["ts"] - cur[-1] > dt.timedelta(minutes=30):
                expected.append((user, cur[0], cur[-1], len(cur)))
                cur = [c["ts"]]
            else:
                cur.append(c["ts"])
        expected.append((user, cur[0], cur[-1], len(cur)))  # closed at end of input
    return sorted(expected)


def test_event_time_sessions(spark):
    assert run_example(spark, "sessions/event_time_sessions.sql") == event_time_sessions_oracle()


def _as_of(changes, t):
    """The rows of ``changes`` (dicts with ``ts``) at or before ``t``, in time order."""
    return [c for c in sorted(changes, key=lambda c: c["ts"]) if c["ts"] <= t]


def test_currency_conversion(spark):
    """Each payment at the rate of its currency as of its time (an empty rate withdraws it)."""
    rates = load("fx_rates")
    expected, totals = [], defaultdict(float)
    for p in sorted(load("payments"), key=lambda p: (p["customer_id"], p["ts"], p["payment_id"])):
        rate = None
        for r in _as_of([r for r in rates if r["currency"] == p["currency"]], p["ts"]):
            rate = float(r["rate"]) if r["rate"] else None
        if rate is None:
            continue
        eur = round(float(p["amount"]) * rate, 2)
        totals[p["customer_id"]] = round(totals[p["customer_id"]] + eur, 2)
        expected.append((p["customer_id"], p["payment_id"], p["ts"], eur, totals[p["customer_id"]]))
    got = run_example(spark, "flink/currency_conversion.sql")
    assert got == expected
    # the data shows what the example is for: payments skipped for want of a rate, rates changing
    assert 0 < len(got) < len(load("payments"))
    assert (
        len(
            {
                round(e / float(p["amount"]), 5)
                for (_, pid, _, e, _) in got
                for p in load("payments")
                if p["payment_id"] == pid and p["currency"] == "USD"
            }
        )
        > 1
    )


def test_rules_engine(spark):
    """Each transaction against the rules in force at its time (added, changed, removed)."""
    changes = load("fraud_rules")
    expected, totals = [], defaultdict(float)
    for tx in sorted(load("transactions"), key=lambda t: (t["customer_id"], t["ts"])):
        rules = {}
        for c in _as_of(changes, tx["ts"]):
            if c["op"] == "remove":
                rules.pop(c["rule_id"], None)
            else:
                rules[c["rule_id"]] = (c["kind"], float(c["threshold"]))
        amount = float(tx["amount"])
        totals[tx["customer_id"]] = round(totals[tx["customer_id"]] + amount, 2)
        for rule_id, (kind, threshold) in sorted(rules.items()):
            if (amount if kind == "amount" else totals[tx["customer_id"]]) > threshold:
                expected.append((tx["customer_id"], tx["tx_id"], tx["ts"], rule_id))
    got = run_example(spark, "flink/rules_engine.sql")
    assert got == sorted(expected, key=lambda r: (r[0], r[2], r[1], r[3]))
    assert {r[3] for r in got} == {"large_amount", "big_spender", "medium_amount"}


# ------------------------------------------------------------------ the CLI itself
def _cli(*args, cwd=ROOT):
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable)
    return subprocess.run(
        [sys.executable, "-m", "spark_keyed_sql.cli", *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        env=env,
        timeout=600,
    )


def test_cli_help_documents_every_command():
    top = _cli("--help")
    assert top.returncode == 0
    for cmd in ("run", "explain", "state"):
        assert cmd in top.stdout
    assert "--checkpoint" in _cli("run", "--help").stdout
    state = _cli("state", "--help").stdout
    assert "show" in state and "migrate" in state
    assert "--transform" in _cli("state", "migrate", "--help").stdout


def test_readme_cli_commands_run_as_documented(spark, tmp_path, capsys, monkeypatch):
    """The README's CLI block, command by command (in this process, on the test session), with
    its /tmp paths moved into tmp_path; what each prints is checked against the CSV data."""
    block = re.search(r"```bash\n(\.venv/bin/spark-keyed-sql .*?)```", (ROOT / "README.md").read_text(), re.S).group(1)
    commands = [shlex.split(line)[1:] for line in block.strip().splitlines()]
    assert [c[0] for c in commands] == ["run", "explain", "run", "state"]
    monkeypatch.chdir(ROOT)
    printed = []
    for argv in commands:
        argv = [a.replace("/tmp/ks-", f"{tmp_path}/ks-") for a in argv]
        assert cli.main(argv) == 0, argv
        printed.append(capsys.readouterr().out)
    sessions = [(u, str(start), str(end), str(n)) for u, start, end, n in event_time_sessions_oracle()]
    assert [tuple(r) for r in printed_rows(printed[0])] == sessions
    assert "click_sessions" in printed[1] and "user_id" in printed[1]
    events = by_key(load("events"), "user_id")
    n = sum(len(v) for v in events.values())
    assert f"1 batch(es), {n} rows in, {n} rows out, {len(events)} keys touched" in printed[2]
    state = {r[0]: r[1] for r in printed_rows(printed[3])}
    assert state == {u: str(len(v)) for u, v in events.items()}


@pytest.mark.slow
def test_cli_run_explain_and_state(tmp_path):
    out = _cli("run", "sql_examples/sage/user_sessions.sql", "--limit", "3")
    assert out.returncode == 0, out.stderr
    assert "session_count" in out.stdout and "3 row(s)" in out.stdout
    assert "engine 'bulk'" in _cli("explain", "sql_examples/sage/user_sessions.sql").stdout
