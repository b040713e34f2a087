# README command 1: `make demo`   README command 2: `make test`
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: test-python-path bench-broadcast bench-erase bench-stream demo test test-smoke test-matrix bench-rounds bench-profile bench-versions test-slow test-cluster lint venv check-java clean bench bench-quick crash fuzz notebooks notebooks-refresh

# .venv: the reference pair (this Python, the newest PySpark the `spark` extra allows)
$(STAMP): pyproject.toml
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 10) else "Python 3.10+ is needed, found " + sys.version.split()[0])'
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[dev]'
	@touch $(STAMP)

venv: $(STAMP)

check-java:
	@command -v java >/dev/null 2>&1 || { [ -n "$$JAVA_HOME" ] && [ -x "$$JAVA_HOME/bin/java" ]; } || { \
	  echo "Java was not found: Spark needs Java 17 or 21. Install it (e.g. apt-get install openjdk-17-jre-headless) or set JAVA_HOME." >&2; exit 1; }

demo: check-java $(STAMP)
	PYSPARK_PYTHON=$(abspath $(PY)) $(PY) -m spark_keyed_sql.demo

# CI: ruff, the whole suite on the reference pair (its 40 slowest tests listed: CI's time budget),
# then the smoke tier on every other Spark minor. The suite runs on TEST_WORKERS pytest-xdist
# workers, a module on one worker (module fixtures stay shared), each worker one SparkSession:
# a Spark test leaves a core idle a third of its time (startup, triggers, Python round trips),
# and two workers on 2 cores took the suite from 43-52 to 34 minutes. TEST_WORKERS=0: one process.
TEST_WORKERS ?= 2
test: check-java $(STAMP)
	$(PY) -m ruff check spark_keyed_sql tests bench sql_examples tools
	$(PY) -m ruff format --check spark_keyed_sql tests bench sql_examples tools
	PYSPARK_PYTHON=$(abspath $(PY)) $(PY) -m pytest -q -m "not slow and not cluster" -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder --durations=40 $(PYTEST_ARGS)
	$(PY) tools/smoke.py

# the smoke tier alone (SMOKE_ARGS="3.5 4.1": those Spark minors)
test-smoke: check-java $(STAMP)
	$(PY) tools/smoke.py $(SMOKE_ARGS)

# the whole suite on every supported (Spark, Python) pair, a venv each (hours) -> docs/compatibility.md
# (MATRIX_ARGS="--spark 3.5,4.0 --python 3.10")
test-matrix: check-java $(STAMP)
	$(PY) tools/matrix.py $(MATRIX_ARGS)

# the whole suite with native plans off (spark.keyedsql.native=false): the steps make test runs as
# Spark SQL (docs/native.md) on the Python path instead, under the same tests
test-python-path: check-java $(STAMP)
	KS_NATIVE=0 PYSPARK_PYTHON=$(abspath $(PY)) $(PY) -m pytest -q -m "not slow and not cluster" $(PYTEST_ARGS)

test-slow: check-java $(STAMP)
	PYSPARK_PYTHON=$(abspath $(PY)) $(PY) -m pytest -q -m slow $(PYTEST_ARGS)

# JupyterLab over notebooks/ with the `notebooks` extra (not run by CI); Ctrl-C stops it
NB_PORT ?= 8888
notebooks: check-java $(STAMP)
	$(PY) -m pip install -q -e '.[notebooks]'
	@echo "JupyterLab: http://127.0.0.1:$(NB_PORT)/lab  (the token is in the URL JupyterLab prints below)"
	PYSPARK_PYTHON=$(abspath $(PY)) $(VENV)/bin/jupyter lab --no-browser --ip=127.0.0.1 --port=$(NB_PORT) --ServerApp.port_retries=0 --notebook-dir=notebooks $(if $(filter 0,$(shell id -u)),--allow-root)

# re-execute the notebooks and save their outputs (tests/test_notebooks.py compares against them)
notebooks-refresh: check-java $(STAMP)
	KS_NOTEBOOKS_REFRESH=1 PYSPARK_PYTHON=$(abspath $(PY)) $(PY) -m pytest -q tests/test_notebooks.py -k reproduces

# the standalone-cluster and Spark Connect suites (CI's make test leaves them out: minutes of
# cluster start-up; the last result is recorded in docs/operations.md)
test-cluster: check-java $(STAMP)
	PYSPARK_PYTHON=$(abspath $(PY)) $(PY) -m pytest -q -m cluster tests/cluster $(PYTEST_ARGS)

lint: $(STAMP)
	$(PY) -m ruff check spark_keyed_sql tests bench sql_examples tools
	$(PY) -m ruff format --check spark_keyed_sql tests bench sql_examples tools

# full benchmark (1k / 100k / 1M keys, 2M rows; about an hour on 2 cores) -> BENCHMARKS.md
bench: check-java $(STAMP)
	PYSPARK_PYTHON=$(abspath $(PY)) $(PY) bench/run.py $(BENCH_ARGS)

# W1 through native, the mapInArrow floor and bulk, alternating rounds in one session (a few
# minutes; ROUNDS_ARGS="--keys 1000000 --rounds 5", or --root DIR for another checkout)
bench-rounds: check-java $(STAMP)
	PYSPARK_PYTHON=$(abspath $(PY)) $(PY) bench/rounds.py $(ROUNDS_ARGS)

# the Python path's pass for W1 in-process (no Spark): CPU a key and a row against a no-work pass
# and the hand-written floor, and where a key's time goes (PROFILE_ARGS="--profile": cProfile too)
bench-profile: $(STAMP)
	$(PY) bench/profile_keys.py $(PROFILE_ARGS)

# W1 through ks.run increments on bulk: native plan, the Python path and native = 'auto' side by side,
# on one checkpoint's copies (STREAM_ARGS="--keys 1000000 --touched 1000,100000,300000 --rounds 5")
# -> BENCHMARKS.md
bench-stream: check-java $(STAMP)
	PYSPARK_PYTHON=$(abspath $(PY)) $(PY) bench/stream_native.py $(STREAM_ARGS)

# erasing 1,000 of 1M keys of state against one ordinary batch over them (bulk), side by side
# (ERASE_ARGS="--keys 1000000 --erase 1000 --rounds 2") -> BENCHMARKS.md
bench-erase: check-java $(STAMP)
	PYSPARK_PYTHON=$(abspath $(PY)) $(PY) bench/erase.py $(ERASE_ARGS)

# what a 10,000-row broadcast input adds to W1 at 100k keys (bulk), side by side with W1 and a
# join (BROADCAST_ARGS="--keys 100000 --table 10000 --rounds 3") -> BENCHMARKS.md
bench-broadcast: check-java $(STAMP)
	PYSPARK_PYTHON=$(abspath $(PY)) $(PY) bench/broadcast.py $(BROADCAST_ARGS)

# W1 and W2 at 100k keys on the oldest and the newest Spark, side by side -> BENCHMARKS.md
# (VERSIONS_ARGS="--spark 3.5,4.0,4.3 --repeat 3")
bench-versions: check-java $(STAMP)
	$(PY) bench/versions.py $(VERSIONS_ARGS)

# full crash run (20+ SIGKILLs per engine, inside lease writes too) -> figures in docs/reliability.md
# (CRASH_ARGS="--loops 3": 200+ kills; "--lock /tmp/spark.lock": a flock around each run)
crash: check-java $(STAMP)
	PYSPARK_PYTHON=$(abspath $(PY)) $(PY) tests/crash/full.py $(CRASH_ARGS)

# the SQL fuzzer with many more examples than CI's fixed-seed run, the native planner's generated
# classes (5,000 one-shot, ~10 min; 5,000 on streams: two ks.run increments each, in two shards on two
# workers, 2.5-3 hours (one worker ran ~25 examples a minute idle, ~12 beside other work); each
# example that passed every check is a line in fuzz-stream.log, so a run cut short still counts),
# and the differential test with more seeds on every (class, path) pair (CI runs one seed on a selection)
fuzz: check-java $(STAMP)
	KS_FUZZ_EXAMPLES=5000 PYSPARK_PYTHON=$(abspath $(PY)) $(PY) -m pytest -q tests/sql/test_fuzz.py
	KS_NATIVE_EXAMPLES=5000 PYSPARK_PYTHON=$(abspath $(PY)) $(PY) -m pytest -q tests/native/test_native.py -k generated
	KS_FUZZ_LOG=$(abspath fuzz-stream.log) KS_NATIVE_STREAM_EXAMPLES=$${KS_NATIVE_STREAM_EXAMPLES:-5000} KS_NATIVE_STREAM_SHARDS=2 PYSPARK_PYTHON=$(abspath $(PY)) $(PY) -m pytest -q -n 2 --dist load tests/native/test_native_stream.py -k generated
	KS_DIFF_EXAMPLES=$${KS_DIFF_EXAMPLES:-5} KS_DIFF_ALL=1 PYSPARK_PYTHON=$(abspath $(PY)) $(PY) -m pytest -q tests/differential

# quick benchmark (1k / 10k keys, 200k rows; a few minutes) -> bench-quick.md
bench-quick: check-java $(STAMP)
	PYSPARK_PYTHON=$(abspath $(PY)) $(PY) bench/run.py --quick --out bench-quick.md $(BENCH_ARGS)

clean:
	rm -rf $(VENV) .venvs .pytest_cache build dist *.egg-info
