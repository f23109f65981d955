"""`lc.createDataFrame` over local data other than lists (a pandas DataFrame, an Arrow
table): the driver numbers its rows in order and journals their values, as for lists; data
Spark holds is refused, saying what it is."""

from __future__ import annotations

import datetime as dt

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest
from pyspark.sql import functions as F

from agent import LineageRDD, UnsupportedOperation

pytestmark = pytest.mark.spark


def frame() -> pd.DataFrame:
    return pd.DataFrame(
        {
            "k": [3, 1, 2, 1, 5],
            "x": [0.5, np.nan, 2.25, -1.0, 4.0],
            "s": ["a", None, "c", "d", "e"],
            "t": pd.to_datetime(
                [
                    "2024-01-02 03:04:05",
                    "2023-05-06 00:00:00",
                    "2022-07-08 09:10:11",
                    None,
                    "2021-01-01 00:00:00",
                ]
            ),
        },
        index=[10, 20, 30, 40, 50],  # an index is not a column, in Spark as here
    )


def same(a: list, b: list) -> bool:
    def key(r):
        return tuple("nan" if isinstance(v, float) and np.isnan(v) else v for v in r)

    return [key(r) for r in a] == [key(r) for r in b]


def test_pandas_rows_are_numbered_in_order(lc, spark):
    pdf = frame()
    df = lc.createDataFrame(pdf)
    vanilla = spark.createDataFrame(pdf)
    assert df.columns == vanilla.columns and df.schema == vanilla.schema
    assert same(df.collect(), vanilla.collect())
    # Each output row traces back to its own source row, given back as a Row.
    q = df.where(F.col("k") == 1).select("k", "s")
    rows = q.collect()
    assert [tuple(r) for r in rows] == [(1, None), (1, "d")]
    ids = q.lineage().record_ids
    for i, want in zip(range(len(rows)), (1, 3)):
        back = LineageRDD(lc.repo, lc.run_id, ids[i : i + 1]).go_back_all().collect()
        assert same(back, [vanilla.collect()[want]])
    # A group traces back to its rows.
    agg = df.groupBy("k").agg(F.count("*").alias("n"))
    assert sorted(agg.collect()) == sorted(
        vanilla.groupBy("k").agg(F.count("*").alias("n")).collect()
    )
    back = agg.lineage().filter(lambda r: r["k"] == 1).go_back_all().collect()
    assert sorted(r["s"] or "" for r in back) == ["", "d"]


def test_pandas_with_a_schema_and_arrow_tables(lc, spark):
    pdf = frame()[["k", "s"]]
    df = lc.createDataFrame(pdf, "k LONG, s STRING")
    assert df.collect() == spark.createDataFrame(pdf, "k LONG, s STRING").collect()
    table = pa.table({"k": [1, 2], "d": [dt.date(2024, 1, 1), None]})
    df = lc.createDataFrame(table)
    assert df.collect() == spark.createDataFrame(table).collect()
    assert df.lineage().go_back_all().collect() == spark.createDataFrame(table).collect()


def test_distributed_data_is_refused_by_name(lc, spark):
    with pytest.raises(UnsupportedOperation, match="from an RDD"):
        lc.createDataFrame(spark.sparkContext.parallelize([(1,)]))
    with pytest.raises(UnsupportedOperation, match="from a Spark DataFrame"):
        lc.createDataFrame(spark.range(3))
    with pytest.raises(UnsupportedOperation, match="of a LineageContext"):
        lc.createDataFrame(lc.createDataFrame([(1,)], "a INT"))
    import pyspark.pandas as ps

    with pytest.raises(UnsupportedOperation, match="pandas-on-Spark"):
        lc.createDataFrame(ps.DataFrame({"a": [1, 2]}))
