"""Writes the deterministic sample data the examples read (``python sql_examples/generate.py``).
The CSV files are committed; the tests regenerate them into a temp dir and compare. (events.csv
is the package's bundled demo data, spark_keyed_sql/data/events.csv, copied.)"""

from __future__ import annotations

import csv
import datetime as dt
import os
import random
import sys

T0 = dt.datetime(2026, 11, 1, 8, 0, 0)


def _fmt(t: dt.datetime) -> str:
    return t.strftime("%Y-%m-%d %H:%M:%S")


def page_views(rng: random.Random) -> list[dict]:
    rows = []
    for _i in range(300):
        t = T0 + dt.timedelta(seconds=rng.randrange(0, 4 * 3600))
        rows.append({"member_id": f"m{rng.randrange(8):02d}", "page": f"/p/{rng.randrange(20)}", "ts": _fmt(t)})
    return sorted(rows, key=lambda r: r["ts"])


def profiles(rng: random.Random) -> list[dict]:
    rows = []
    for m in range(8):
        for _v in range(rng.randrange(1, 4)):  # a changelog: several versions per member
            t = T0 + dt.timedelta(seconds=rng.randrange(0, 4 * 3600))
            rows.append({"member_id": f"m{m:02d}", "region": rng.choice(["eu", "us", "apac"]), "ts": _fmt(t)})
    return sorted(rows, key=lambda r: r["ts"])


def settings(rng: random.Random) -> list[dict]:
    rows = []
    for m in range(0, 8, 1):
        if m == 7:
            continue  # member 7 never sets anything: never joins
        for _v in range(rng.randrange(1, 3)):
            t = T0 + dt.timedelta(seconds=rng.randrange(0, 4 * 3600))
            rows.append({"member_id": f"m{m:02d}", "language": rng.choice(["en", "fr", "de"]), "ts": _fmt(t)})
    return sorted(rows, key=lambda r: r["ts"])


def ads(rng: random.Random) -> tuple[list[dict], list[dict]]:
    imps, clicks = [], []
    for i in range(120):
        t = T0 + dt.timedelta(seconds=rng.randrange(0, 3 * 3600))
        imps.append({"impression_id": f"i{i:03d}", "ad": f"ad{rng.randrange(5)}", "ts": _fmt(t)})
        r = rng.random()
        if r < 0.4:  # clicked within 10 minutes
            clicks.append({"impression_id": f"i{i:03d}", "ts": _fmt(t + dt.timedelta(seconds=rng.randrange(1, 600)))})
        elif r < 0.5:  # clicked too late: the impression has expired
            clicks.append(
                {"impression_id": f"i{i:03d}", "ts": _fmt(t + dt.timedelta(seconds=rng.randrange(601, 3600)))}
            )
    return sorted(imps, key=lambda r: r["ts"]), sorted(clicks, key=lambda r: r["ts"])


def transactions(rng: random.Random) -> tuple[list[dict], list[dict]]:
    tx, customers = [], []
    for i in range(200):
        t = T0 + dt.timedelta(seconds=rng.randrange(0, 6 * 3600))
        tx.append(
            {
                "tx_id": f"t{i:03d}",
                "customer_id": f"c{rng.randrange(10)}",
                "amount": round(rng.uniform(1, 500), 2),
                "merchant": rng.choice(["acme", "globex", "initech", "umbrella"]),
                "ts": _fmt(t),
            }
        )
    for c in range(9):  # customer c9's details never arrive: its transactions stay pending
        t = T0 + dt.timedelta(seconds=rng.randrange(0, 6 * 3600))
        customers.append(
            {"customer_id": f"c{c}", "name": f"Customer {c}", "tier": rng.choice(["gold", "silver"]), "ts": _fmt(t)}
        )
    return sorted(tx, key=lambda r: r["ts"]), sorted(customers, key=lambda r: r["ts"])


def clicks_for_sessions(rng: random.Random) -> list[dict]:
    rows = []
    for u in range(6):
        t = T0
        for _ in range(rng.randrange(5, 15)):
            t += dt.timedelta(minutes=rng.choice([1, 3, 7, 12, 45, 90]))  # 45/90: the session ends
            rows.append({"user_id": f"user_{u}", "url": f"/page/{rng.randrange(9)}", "ts": _fmt(t)})
    return sorted(rows, key=lambda r: r["ts"])


CURRENCIES = ("USD", "GBP", "JPY", "CHF")


def payments(rng: random.Random) -> list[dict]:
    rows = []
    for i in range(150):
        t = T0 + dt.timedelta(seconds=rng.randrange(0, 6 * 3600))
        rows.append(
            {
                "payment_id": f"p{i:03d}",
                "customer_id": f"c{rng.randrange(8)}",
                "currency": rng.choice(CURRENCIES),
                "amount": round(rng.uniform(1, 300), 2),
                "ts": _fmt(t),
            }
        )
    return sorted(rows, key=lambda r: (r["ts"], r["payment_id"]))


def fx_rates(rng: random.Random) -> list[dict]:
    """Rates to EUR changing during the day: USD, GBP and JPY known from before the first
    payment, CHF only from 10:00, JPY withdrawn (an empty rate) at 13:00."""
    start = {"USD": 0.92, "GBP": 1.17, "JPY": 0.0062}
    rows = [{"currency": c, "rate": r, "ts": _fmt(T0 - dt.timedelta(hours=1))} for c, r in start.items()]
    for c, r in start.items():
        for _v in range(3):
            t = T0 + dt.timedelta(seconds=rng.randrange(0, 6 * 3600))
            rows.append({"currency": c, "rate": round(r * rng.uniform(0.95, 1.05), 5), "ts": _fmt(t)})
    rows.append({"currency": "CHF", "rate": 1.05, "ts": _fmt(T0 + dt.timedelta(hours=2))})
    rows.append({"currency": "JPY", "rate": "", "ts": _fmt(T0 + dt.timedelta(hours=5))})
    return sorted(rows, key=lambda r: (r["ts"], r["currency"]))


def fraud_rules() -> list[dict]:
    """Rules added and removed during the day (Flink's broadcast-state pattern)."""
    h = lambda n: _fmt(T0 + dt.timedelta(hours=n))  # noqa: E731
    return [
        {"rule_id": "large_amount", "op": "add", "kind": "amount", "threshold": 400.0, "ts": h(0)},
        {"rule_id": "big_spender", "op": "add", "kind": "total", "threshold": 1500.0, "ts": h(1)},
        {"rule_id": "large_amount", "op": "add", "kind": "amount", "threshold": 300.0, "ts": h(2)},
        {"rule_id": "big_spender", "op": "remove", "kind": "", "threshold": "", "ts": h(3)},
        {"rule_id": "medium_amount", "op": "add", "kind": "amount", "threshold": 200.0, "ts": h(4)},
    ]


def write(out_dir: str) -> list[str]:
    rng = random.Random(2026)
    imps, clicks = ads(rng)
    tx, customers = transactions(rng)
    tables = {
        "page_views": page_views(rng),
        "profiles": profiles(rng),
        "settings": settings(rng),
        "ad_impressions": imps,
        "ad_clicks": clicks,
        "transactions": tx,
        "customers": customers,
        "clicks": clicks_for_sessions(rng),
    }
    more = random.Random(46)  # (its own generator: the files above stay as they were)
    tables |= {"payments": payments(more), "fx_rates": fx_rates(more), "fraud_rules": fraud_rules()}
    os.makedirs(out_dir, exist_ok=True)
    written = []
    for name, rows in tables.items():
        path = os.path.join(out_dir, f"{name}.csv")
        with open(path, "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=list(rows[0]))
            w.writeheader()
            w.writerows(rows)
        written.append(path)
    return written


if __name__ == "__main__":
    here = os.path.dirname(os.path.abspath(__file__))
    for p in write(sys.argv[1] if len(sys.argv) > 1 else os.path.join(here, "data")):
        print(p)
