"""One SparkSession for the whole run. The semantic suite runs once per execution engine:
tests take ``ks`` (parametrized over ENGINES); a test that an engine cannot pass says so with
``@pytest.mark.notyet("<engine>", reason=...)`` (Ibis-style), and is skipped there with the
reason shown. Tests that pick their paths themselves take ``ks_auto``."""

import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(__file__))

import progress_lines as progress  # noqa: E402

from spark_keyed_sql.engines import ENGINES as REGISTRY  # noqa: E402

ENGINES = sorted(REGISTRY)  # the engine matrix comes from the registry


def pytest_configure(config):
    config.addinivalue_line("markers", "notyet(*engines, reason): the engine does not support what the test checks")
    progress.install(config)


_LONG_MODULES = ("tests/cluster/", "tests/crash/")  # minutes per test: a line per test too


def pytest_collection_finish(session):
    progress.count_modules(item.nodeid for item in session.items)  # after -k / -m deselection


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
    from viewfs import mount_conf

    from spark_keyed_sql.local import local_session

    progress.note("starting the shared local SparkSession ...")
    s = local_session(
        "spark-keyed-sql tests", warehouse=str(tmp_path_factory.mktemp("warehouse")), conf=mount_conf(viewfs_root)
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
            pytest.skip(f"engine '{engine}' not supported: {m.kwargs.get('reason', '')}")
