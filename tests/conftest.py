import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(__file__))


@pytest.fixture(scope="session")
def spark():
    from spark_keyed_sql.local import local_session

    s = local_session("spark-keyed-sql tests")
    yield s
    s.stop()


@pytest.fixture(scope="session")
def ks(spark):
    from spark_keyed_sql import KeyedSQL

    return KeyedSQL(spark)
