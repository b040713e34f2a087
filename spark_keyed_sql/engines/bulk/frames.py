"""A KeyedProcessor's ``rows`` (one pandas DataFrame per key, or its columns as numpy arrays
for ``rows_format = "numpy"``) cut from one frame per Arrow batch, instead of
``DataFrame.from_records`` per key (half of such a pass's time, measured).

Each key's frame is exactly what ``DataFrame.from_records(events, columns=names)`` builds for
that key's events: int64 (float64 with NaN when the key has a NULL), float64, bool (object
with a NULL), datetime64 (``ns`` in pandas 2, ``us`` in pandas 3: ``compat.pandas``), strings
as object (pandas 2) or pandas' ``str`` dtype with NULL as NaN (pandas 3), object for dates,
decimals, binary and nested values; a column NULL in every row of the key is object None. A
key whose columns all keep their batch dtype is a zero-copy slice (through pandas' block
manager); others are assembled from slices. Anything else (a type not listed, timestamps
outside datetime64[ns] on pandas 2, a pandas without these internals) gets ``None`` here and
the caller builds frames with ``from_records``.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ...api.rows import ColumnRows
from ...compat.pandas import record_dtypes
from ..arrow_rows import naive, pylist

__all__ = ["FrameSlicer", "frame_slicer"]

_NS_MIN, _NS_MAX = np.datetime64("1677-09-22", "us"), np.datetime64("2262-04-10", "us")


def _objects(values: list) -> np.ndarray:
    out = np.empty(len(values), dtype=object)
    out[:] = values
    return out


def frame_slicer(names: list[str], cols: list[Any], n: int) -> FrameSlicer | None:
    """A slicer over the batch's argument columns, or None (the caller uses from_records)."""
    try:
        import pandas as pd

        if not (hasattr(pd.DataFrame, "_from_mgr") and hasattr(pd.DataFrame, "_from_arrays")):
            return None
        slicer = FrameSlicer(names, cols, n)
        return slicer if slicer.ok else None
    except Exception:  # noqa: BLE001 - pandas internals moved: the public way is always correct
        return None


class FrameSlicer:
    def __init__(self, names: list[str], cols: list[Any], n: int):
        import pandas as pd

        self.pd = pd
        # a fresh RangeIndex per key (an index is mutable through .name: never shared), made
        # without RangeIndex's argument checks where pandas has the constructor (4x cheaper)
        simple = getattr(pd.RangeIndex, "_simple_new", None)
        self.index = (lambda m: simple(range(m))) if simple is not None else pd.RangeIndex
        self.n = n
        self.names = list(names)
        self.columns = pd.Index(names)
        self.ok = True
        self.cols: list[tuple] = []  # (primary array, alternative array | None, NULL prefix counts | None, kind)
        dtypes = record_dtypes()
        unit = dtypes.timestamp_unit
        for c in cols:
            c = naive(c)
            if isinstance(c, pa.ChunkedArray):
                c = c.combine_chunks()
            t = c.type
            nulls = c.null_count
            prefix = None
            if nulls:
                valid = c.is_valid().to_numpy(zero_copy_only=False)
                prefix = np.concatenate(([0], np.cumsum(~valid)))
            if pa.types.is_floating(t):
                prim, alt, kind = c.cast(pa.float64()).to_numpy(zero_copy_only=False), None, "float"
            elif pa.types.is_integer(t):
                if nulls:
                    prim = c.cast(pa.int64()).fill_null(0).to_numpy(zero_copy_only=False)
                    alt = c.cast(pa.float64(), safe=False).to_numpy(zero_copy_only=False)  # as pandas does: rounded
                else:
                    prim, alt = c.cast(pa.int64()).to_numpy(zero_copy_only=False), None
                kind = "int"
            elif pa.types.is_boolean(t):
                prim = c.fill_null(False).to_numpy(zero_copy_only=False)
                alt = _objects(c.to_pylist()) if nulls else None
                kind = "bool"
            elif pa.types.is_timestamp(t) and t.unit != "ns":
                if unit == "ns":
                    lo, hi = pc.min_max(c).values()
                    if lo.is_valid and (
                        np.datetime64(lo.value, t.unit) < _NS_MIN or np.datetime64(hi.value, t.unit) > _NS_MAX
                    ):
                        self.ok = False  # outside datetime64[ns]: from_records decides
                prim, alt, kind = c.to_numpy(zero_copy_only=False).astype(f"datetime64[{unit}]"), None, "ts"
            elif (pa.types.is_string(t) or pa.types.is_large_string(t)) and not dtypes.string_is_object:
                # pandas' str dtype for the frame; numpy rows are its to_numpy(): objects, NULL as NaN
                prim = pd.array(pylist(c), dtype=dtypes.string)
                alt = _objects([np.nan if v is None else v for v in pylist(c)])
                kind = "str"
            elif (
                pa.types.is_string(t)
                or pa.types.is_large_string(t)
                or pa.types.is_date32(t)
                or pa.types.is_decimal(t)
                or pa.types.is_binary(t)
            ):
                prim, alt, kind = _objects(pylist(c)), None, "object"
            elif pa.types.is_list(t) or pa.types.is_struct(t) or pa.types.is_map(t):
                prim, alt, kind = _objects(c.to_pylist()), None, "object"
            else:
                self.ok = False
                prim, alt, kind = None, None, "other"
            if isinstance(prim, np.ndarray) and not prim.flags.writeable:
                prim = prim.copy()
            self.cols.append((prim, alt, prefix, kind))
        if self.ok:
            arrays = [p for p, _, _, _ in self.cols]
            self.base = pd.DataFrame._from_arrays(
                arrays, columns=self.columns, index=pd.RangeIndex(n), verify_integrity=False
            )
            self.mgr = self.base._mgr
            self.any_nulls = any(p is not None and k != "object" for _, _, p, k in self.cols)
            # numpy rows: each column's to_numpy() (pandas' str column gives objects)
            self.prims = [(name, a if k == "str" else p) for name, (p, a, _, k) in zip(self.names, self.cols)]

    def _arrays(self, s: int, e: int, numpy: bool = False) -> tuple[list[Any], bool]:
        """The key's column arrays (rows ``s`` to ``e``), and whether any differs from a slice
        of its batch column (a NULL in an int or bool column, or NULL in every row).
        ``numpy``: as ``to_numpy()`` of the frame's columns."""
        m = e - s
        arrays = []
        special = False
        for prim, alt, prefix, kind in self.cols:
            k = 0 if prefix is None else int(prefix[e] - prefix[s])
            if kind == "object" or (k == 0 and not (numpy and kind == "str")):
                arrays.append(prim[s:e])
            elif k == m:  # NULL in every row of the key: object None, as from_records makes it
                special = True
                arrays.append(np.full(m, None, dtype=object))
            elif kind in ("int", "bool") or (numpy and kind == "str"):
                special = special or kind != "str"
                arrays.append(alt[s:e])
            else:  # float / timestamp / str: NaN / NaT are already in the primary array
                arrays.append(prim[s:e])
        return arrays, special

    def frame(self, s: int, e: int) -> Any:
        """The frame of rows ``s`` to ``e`` (one key's), indexed from 0."""
        pd = self.pd
        m = e - s
        if self.any_nulls:
            arrays, special = self._arrays(s, e)
            if special:
                return pd.DataFrame._from_arrays(
                    arrays, columns=self.columns, index=self.index(m), verify_integrity=False
                )
        mgr = self.mgr.get_slice(slice(s, e), axis=1)
        mgr.set_axis(1, self.index(m))
        return pd.DataFrame._from_mgr(mgr, axes=mgr.axes)

    def column_rows(self, s: int, e: int) -> ColumnRows:
        """Rows ``s`` to ``e`` as numpy columns: each ``frame(s, e)[c].to_numpy()``."""
        if self.any_nulls:
            arrays, _ = self._arrays(s, e, numpy=True)
            return ColumnRows(dict(zip(self.names, arrays)), e - s)
        return ColumnRows({name: col[s:e] for name, col in self.prims}, e - s)
