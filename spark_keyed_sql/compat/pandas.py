"""What ``pandas.DataFrame.from_records`` makes of Python values in the pandas installed here,
found by asking it once (not by version number): pandas 2 gives timestamps as
``datetime64[ns]`` and strings as ``object``; pandas 3 gives ``datetime64[us]`` and its ``str``
dtype (missing values NaN). A KeyedProcessor's ``rows`` are exactly what ``from_records`` builds,
and the engines that build them faster follow these answers."""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import Any

__all__ = ["RecordDtypes", "record_dtypes"]


@dataclass(frozen=True)
class RecordDtypes:
    timestamp_unit: str  # "ns" or "us": the unit of a column of naive datetimes
    string: Any  # the dtype of a column of str (numpy object, or pandas' str dtype)
    string_is_object: bool  # strings as an object column, NULL as None (else NULL as NaN)


@lru_cache(maxsize=1)
def record_dtypes() -> RecordDtypes:
    import datetime as dt

    import numpy as np
    import pandas as pd

    probe = pd.DataFrame.from_records(
        [{"t": dt.datetime(2000, 1, 1), "s": "a"}, {"t": None, "s": None}], columns=["t", "s"]
    )
    unit = np.datetime_data(probe["t"].dtype)[0]
    string = probe["s"].dtype
    return RecordDtypes(unit, string, string == np.dtype(object))
