"""The supported (Spark minor, Python minor) pairs: the one list the matrix, the smoke tier and
the docs' compatibility page take them from.

Each Spark minor is paired with every Python from 3.10 to 3.13 that its PySpark release lists
among its classifiers (PySpark 3.5: 3.8-3.11; 4.0: 3.9-3.13; 4.1 and 4.2: 3.10-3.14; 4.3:
3.11-3.14). ``SPARK`` pins each minor to the newest patch release on the package index."""

from __future__ import annotations

__all__ = ["OLDEST", "NEWEST", "PAIRS", "REFERENCE", "SMOKE", "SPARK", "pythons_for", "venv_name"]

SPARK: dict[str, str] = {
    "3.5": "3.5.9",
    "4.0": "4.0.5",
    "4.1": "4.1.4",
    "4.2": "4.2.1",
    "4.3": "4.3.0",
}

_PYTHONS: dict[str, tuple[str, ...]] = {
    "3.5": ("3.10", "3.11"),
    "4.0": ("3.10", "3.11", "3.12", "3.13"),
    "4.1": ("3.10", "3.11", "3.12", "3.13"),
    "4.2": ("3.10", "3.11", "3.12", "3.13"),
    "4.3": ("3.11", "3.12", "3.13"),
}

PAIRS: list[tuple[str, str]] = [(s, p) for s in SPARK for p in _PYTHONS[s]]
# the pair CI runs the whole suite on (the machines' default Python, the newest Spark)
REFERENCE = ("4.3", "3.11")
# the smoke tier's ends: the oldest Python on the oldest Spark, the newest on the newest
OLDEST = ("3.5", "3.10")
NEWEST = ("4.3", "3.13")
# CI's smoke tier: every Spark minor but the reference pair's, each Python at least once (3.5 on
# 3.11: pip brings pandas 3 there, beside the oldest Spark). The oldest pair runs once, with every
# dependency at its lower bound (tools/smoke.py's LOWEST job); its run with the newest
# dependencies pip allows left CI on 2026-12-01 for CI's time budget, as the reference Spark on
# the newest Python (NEWEST) did on 2026-11-30: 4.2 runs on 3.13 here. `make test-smoke
# SMOKE_ARGS="--all-pythons"` or `make test-matrix` run every pair
SMOKE: list[tuple[str, str]] = [("3.5", "3.11"), ("4.0", "3.11"), ("4.1", "3.12"), ("4.2", "3.13")]


def pythons_for(spark: str) -> tuple[str, ...]:
    return _PYTHONS[spark]


def venv_name(spark: str, python: str) -> str:
    return f"spark{spark}-py{python}"
