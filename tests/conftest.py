"""One SparkSession for the whole run. The semantic suite runs once per execution engine:
tests take ``ks`` (parametrized over ENGINES); a test that an engine cannot pass says so with
``@pytest.mark.notyet("<engine>", raises=<error>, reason=...)`` (Ibis-style), and is a strict
xfail there: it must fail with that error (another failure fails the test), so a capability
gained shows as an unexpected pass and a regression is not taken for the known gap. An engine the running Spark
does not have (transformWithState before Spark 4.0) is skipped with the version it needs.
Tests that pick their paths themselves take ``ks_auto``."""

import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(__file__))

import progress_lines as progress  # noqa: E402

from spark_keyed_sql.compat import Feature, features  # noqa: E402
from spark_keyed_sql.engines import ENGINES as REGISTRY  # noqa: E402
from spark_keyed_sql.engines import available  # noqa: E402

ENGINES = sorted(REGISTRY)  # the engine matrix comes from the registry
SPARK = features()  # what the installed PySpark has (the tests run a classic local session)
UNAVAILABLE = {e.name: e.requires for e in REGISTRY.values() if e not in available(SPARK)}


def _lacks(feature, what: str) -> str | None:
    if feature is None or SPARK.has(feature):
        return None
    return f"{what} needs Spark {'.'.join(map(str, feature.since))} ({feature.what}); this is {SPARK.describe()}"


def spark_lacks(path: str) -> str | None:
    """Why the running Spark cannot run a test path (None when it can): an engine's name, a
    path ending in ``_<engine>``, or ``table_function`` (the UDTF of plain spark.sql)."""
    if path == "table_function":
        return _lacks(Feature.UDTF_ANALYZE, "the table function in plain spark.sql")
    for engine, feature in UNAVAILABLE.items():
        if path == engine or path.endswith(f"_{engine}"):
            return _lacks(feature, f"engine '{engine}'")
    return None


def pytest_configure(config):
    config.addinivalue_line(
        "markers", "notyet(*engines, raises, reason): the engine does not support what the test checks"
    )
    config.addinivalue_line("markers", "spark_feature(name): needs compat.Feature[name] of the running Spark")
    progress.install(config)


_LONG_MODULES = ("tests/cluster/", "tests/crash/")  # minutes per test: a line per test too

# the longest modules first (seconds in make test, longest first): make test runs pytest-xdist's
# --dist loadfile with --no-loadscope-reorder, which hands modules to the two workers in this
# collection order (xdist's own order, most tests first, ran the notebooks' 8 tests last: one
# worker busy for minutes after the other had finished)
_LONGEST_FIRST = (
    "tests/crash/test_crash.py",  # ~410
    "tests/state/test_erase_tws.py",  # ~220
    "tests/test_notebooks.py",  # ~205
    "tests/native/test_native_stream.py",  # ~130
    "tests/sql/test_broadcast.py",  # ~105
    "tests/sql/test_several_inputs.py",  # ~105
    "tests/cluster/test_connect_smoke.py",  # ~90
    "tests/test_packaging.py",  # ~75
    "tests/differential/test_differential.py",  # ~75
)


def _module_rank(nodeid: str) -> int:
    module = nodeid.split("::", 1)[0]
    return _LONGEST_FIRST.index(module) if module in _LONGEST_FIRST else len(_LONGEST_FIRST)


def pytest_collection_modifyitems(config, items):
    """Tests on a path the running Spark lacks (an engine, the table function of plain
    spark.sql) or marked ``spark_feature("<Feature name>")`` are skipped, saying why; a case
    named in its test's ``slow_on("<id>", ...)`` (its id as pytest shows it, e.g. ``tws-numpy``
    for the ``ks`` engine and one parameter) is in the slow tier; the longest modules run first.
    (A conftest's hook runs after the fixture manager's regrouping, which would undo the sort,
    and before the mark plugin's, whose ``-m`` then deselects the slow_on cases.)"""
    named_slow: dict[tuple[str, str], set[str]] = {}  # (module, test) -> the ids its slow_on names
    seen: dict[tuple[str, str], set[str]] = {}
    for item in items:
        callspec = getattr(item, "callspec", None)
        slow_on = {i for m in item.iter_markers("slow_on") for i in m.args}
        if callspec is not None and slow_on:
            test = (item.nodeid.split("::", 1)[0], item.originalname)
            named_slow.setdefault(test, set()).update(slow_on)
            seen.setdefault(test, set()).add(callspec.id)
            if callspec.id in slow_on:
                item.add_marker(pytest.mark.slow)
        reasons = [_lacks(Feature[m.args[0]], item.name) for m in item.iter_markers("spark_feature")]
        if callspec is not None:
            reasons += [spark_lacks(v) for v in callspec.params.values() if isinstance(v, str)]
        why = next((r for r in reasons if r), None)
        if why:
            item.add_marker(pytest.mark.skip(reason=why))
    items.sort(key=lambda item: _module_rank(item.nodeid))  # stable: each module's own order kept
    if not any("[" in a for a in config.args):  # (all of a test's cases collected: no case picked by id)
        unknown = [f"{m}::{t}: {sorted(ids - seen[m, t])}" for (m, t), ids in named_slow.items() if ids - seen[m, t]]
        if unknown:
            raise pytest.UsageError(f"slow_on names no case of its test: {'; '.join(sorted(unknown))}")


def pytest_collection_finish(session):
    progress.count_modules(item.nodeid for item in session.items)  # after -k / -m deselection


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_node_collection_finished(node, ids):
    """Under pytest-xdist (make test): the controller collects nothing itself; a worker's ids."""
    progress.count_modules(ids)


def pytest_runtest_logreport(report):
    progress.test_ran(report.nodeid, report.duration)


def pytest_terminal_summary(terminalreporter):
    """Where the session's time went, by module (the --durations list names tests only)."""
    lines = progress.module_times()
    if lines and not hasattr(terminalreporter.config, "workerinput"):
        terminalreporter.write_sep("=", "longest modules (seconds of their tests, all workers)")
        for line in lines:
            terminalreporter.write_line(line)


def pytest_runtest_logstart(nodeid, location):
    """A line when each test module starts (how many tests, time so far); in the long
    cluster / crash modules a line per test as well."""
    progress.test_starts(nodeid, per_test=nodeid.startswith(_LONG_MODULES))


@pytest.fixture(scope="session")
def viewfs_root(tmp_path_factory):
    """The local directory behind ``viewfs://ks/data`` (tests/viewfs.py)."""
    return tmp_path_factory.mktemp("viewfs")


@pytest.fixture(scope="session")
def spark(tmp_path_factory, viewfs_root):
    from jvm_options import TEST_JAVA_OPTIONS
    from viewfs import mount_conf

    from spark_keyed_sql.local import local_session

    progress.note("starting the shared local SparkSession ...")
    conf = mount_conf(viewfs_root)
    if os.environ.get("KS_NATIVE") == "0":  # make test-python-path: every keyed step on the Python path
        conf["spark.keyedsql.native"] = "false"
    s = local_session(
        "spark-keyed-sql tests",
        warehouse=str(tmp_path_factory.mktemp("warehouse")),
        conf=conf,
        java_options=TEST_JAVA_OPTIONS,
    )
    yield s
    s.stop()


@pytest.fixture(scope="session", params=ENGINES)
def ks(request, spark):
    from spark_keyed_sql import KeyedSQL

    return KeyedSQL(spark, engine=request.param)


@pytest.fixture(scope="session")
def ks_auto(spark):
    from spark_keyed_sql import KeyedSQL

    return KeyedSQL(spark)


@pytest.fixture(autouse=True)
def _engine_markers(request):
    callspec = getattr(request.node, "callspec", None)
    engine = callspec.params.get("ks") if callspec is not None else None
    if engine is None:
        return
    for m in request.node.iter_markers("notyet"):
        if engine in m.args:
            if "raises" not in m.kwargs:
                raise pytest.UsageError(
                    f"{request.node.nodeid}: notyet({engine!r}) needs raises=<the error it fails with>"
                )
            request.applymarker(
                pytest.mark.xfail(
                    strict=True, raises=m.kwargs["raises"], reason=f"engine '{engine}': {m.kwargs.get('reason', '')}"
                )
            )
