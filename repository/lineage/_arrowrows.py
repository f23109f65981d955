"""pyspark `Row`s of Arrow tables in bulk: what a big group's trace to Parquet source rows
returns (0.3-3 M rows at once).

The values are exactly those `Table.to_pylist()` makes (the same Python types: int, float,
Decimal, date, datetime, str, bytes, None, nested structs as dicts), but not made one by one
through pyarrow scalars (~1-2 us a value):

- integers, floats, booleans and date32 go through numpy (`tolist()` makes the same Python
  objects);
- strings and binaries through numpy's object conversion (pyarrow decodes in C++);
- a dictionary-encoded column (Parquet strings read as dictionaries) and a decimal or
  temporal column with few distinct values: each distinct value is made once, then taken by
  index with numpy (the values are immutable, so sharing them is safe);
- other decimals are parsed from their text (the same digits and exponent), several times
  faster than pyarrow's scalars;
- anything else (nested types, float16, ...): `to_pylist()`.
"""

from __future__ import annotations

from itertools import repeat
from typing import Any

import numpy as np

from journals import gc_paused

# Below this many values a column goes through `to_pylist()`: the bulk paths' set-up is not
# worth it.
_SMALL = 64
# date32 days of 0001-01-01 and 9999-12-31: Python's `date` range.
_DAY_MIN, _DAY_MAX = -719162, 2932896


def rows_of(table: Any) -> list:
    """pyspark `Row`s of `table`'s rows, in order: as `Row(**row)` of `table.to_pylist()`
    makes them (fields in column order, nested structs as dicts)."""
    from pyspark.sql import Row

    fields = list(table.column_names)
    if not fields:  # zip() of no columns would give no rows
        return [Row() for _ in range(table.num_rows)]
    # Millions of new containers would trigger the cyclic collector over and over (it cost
    # more than building the rows); none of them can form a cycle.
    with gc_paused():
        cols = [column_values(c) for c in table.columns]
        rows = list(map(tuple.__new__, repeat(Row), zip(*cols)))
        for row in rows:  # what Row(**kw) sets, without its per-row Python call
            row.__dict__["__fields__"] = fields
    return rows


def column_values(column: Any) -> list:
    """A column's (Array or ChunkedArray) Python values, as `to_pylist()` makes them."""
    chunks = column.chunks if hasattr(column, "chunks") else [column]
    if len(chunks) == 1:
        return _chunk_values(chunks[0])
    out: list = []
    for chunk in chunks:  # chunks of several row groups: each its own dictionary
        out.extend(_chunk_values(chunk))
    return out


def _chunk_values(arr: Any) -> list:
    import pyarrow as pa

    t = arr.type
    if len(arr) < _SMALL:
        return arr.to_pylist()
    if pa.types.is_dictionary(t):
        if _shareable(t.value_type) and len(arr.dictionary) * 4 <= len(arr):
            return _by_index(_chunk_values(arr.dictionary), arr.indices)
        return _chunk_values(arr.dictionary_decode())
    boolean = pa.types.is_boolean(t)
    if boolean or pa.types.is_integer(t) or pa.types.is_float32(t) or pa.types.is_float64(t):
        return _numeric(arr, boolean)
    if any(f(t) for f in (pa.types.is_string, pa.types.is_large_string)):
        return arr.to_numpy(zero_copy_only=False).tolist()
    if any(f(t) for f in (pa.types.is_binary, pa.types.is_large_binary)):
        return arr.to_numpy(zero_copy_only=False).tolist()
    decimal = pa.types.is_decimal(t)
    if not (decimal or pa.types.is_temporal(t)):
        return arr.to_pylist()
    try:
        encoded = arr.dictionary_encode()
    except pa.ArrowNotImplementedError:  # a type pyarrow cannot hash
        return arr.to_pylist()
    if len(encoded.dictionary) * 4 <= len(arr):
        return _by_index(_chunk_values(encoded.dictionary), encoded.indices)
    if decimal and t.scale >= 0:
        return _decimals(arr)
    if pa.types.is_date32(t):
        return _dates(arr)
    return arr.to_pylist()


def _shareable(t: Any) -> bool:
    """Whether values of type `t` are immutable Python objects (safe to share among rows)."""
    import pyarrow as pa

    return not (pa.types.is_nested(t) or pa.types.is_dictionary(t))


def _by_index(values: list, indices: Any) -> list:
    """values[i] for each index (a null index: None), taken by numpy."""
    table = np.empty(len(values) + 1, dtype=object)
    table[: len(values)] = values  # a slice assignment: values that are lists stay whole
    table[len(values)] = None  # nulls index past the values
    idx = indices.fill_null(len(values)).to_numpy(zero_copy_only=False)
    return table[idx].tolist()


def _numeric(arr: Any, boolean: bool) -> list:
    """Integers, floats, booleans: numpy's `tolist()`, nulls put back as None."""
    if not arr.null_count:
        return arr.to_numpy(zero_copy_only=False).tolist()
    values = arr.fill_null(False if boolean else 0).to_numpy(zero_copy_only=False)
    out = values.tolist()
    for k in np.flatnonzero(arr.is_null().to_numpy(zero_copy_only=False)).tolist():
        out[k] = None
    return out


def _dates(arr: Any) -> list:
    """date32 values through numpy's datetime64[D] (`tolist()` makes the same `date`s; a
    null, NaT, becomes None). Days outside `date`'s years 1-9999 would come out as ints:
    `to_pylist()` then raises its error, as before."""
    import pyarrow as pa
    import pyarrow.compute as pc

    bounds = pc.min_max(arr.view(pa.int32())).as_py()
    if bounds["min"] is not None and not (_DAY_MIN <= bounds["min"] <= bounds["max"] <= _DAY_MAX):
        return arr.to_pylist()
    return arr.to_numpy(zero_copy_only=False).tolist()


def _decimals(arr: Any) -> list:
    """Decimals of a non-negative scale from their text: the digits and exponent
    `to_pylist()` gives them."""
    from decimal import Decimal

    import pyarrow as pa
    import pyarrow.compute as pc

    text = pc.cast(arr, pa.string()).to_numpy(zero_copy_only=False).tolist()
    if not arr.null_count:
        return list(map(Decimal, text))
    return [None if v is None else Decimal(v) for v in text]
