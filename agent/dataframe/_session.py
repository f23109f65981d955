"""The DataFrame side of one `LineageContext`: sources, aggregates, views, outputs."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from pyspark.sql import functions as F

from journals import record_id_base

from .._rdd import UnsupportedOperation
from ._columns import Lineage, collected, fresh
from ._frame import LineageDataFrame
from ._outputs import Outputs
from ._plumbing import Plumbing, pickled
from ._recipe import Source, set_recipe
from ._udf import LineageUDFRegistration, vanilla_names

if TYPE_CHECKING:
    from .._context import LineageContext

from ._policy import AGGREGATE_POLICIES, DEFAULT_AGGREGATES


class FrameAgent:
    """Per-context state of the DataFrame agent."""

    def __init__(
        self, lc: LineageContext, spark: Any, aggregates: str = DEFAULT_AGGREGATES
    ) -> None:
        if aggregates not in AGGREGATE_POLICIES:
            raise ValueError(
                f"aggregates must be one of {', '.join(AGGREGATE_POLICIES)}, got {aggregates!r}"
            )
        self.plumbing = Plumbing(lc)
        self.spark = spark
        self.aggregates = aggregates
        self.outputs = Outputs(self)
        self.views: dict[str, LineageDataFrame] = {}
        self.udfs = LineageUDFRegistration(self)
        self.plumbing.on_failure = self.udfs.blame
        self._lock = threading.Lock()
        # Set while `lc.replay` rebuilds a query: its operators journal nothing (the run's
        # lineage is the captured one).
        self.replaying = False

    def release(self) -> None:
        """Drop what only the context could use (the views for `lc.sql`, the action frames
        for `lc.replay`, the UDF call sites' inputs for culprits), once it is gone: they
        point back here, and would otherwise keep their plans alive until Python's cyclic
        GC. Frames the user holds still work."""
        with self._lock:
            self.views.clear()
        self.plumbing.release()
        self.udfs.release()

    def capture_python(self, modules: tuple[str, ...]) -> Any:
        """Build Python functions (UDFs, taps) that run capture code inside this."""
        return self.plumbing.capture_python(modules)

    # -- sources -----------------------------------------------------------------------------

    def scan(self, fmt: str, paths: list[str], schema: Any, opts: dict) -> LineageDataFrame:
        from ._reader import scanned

        return scanned(self, fmt, paths, schema, opts)

    def create(self, data: Any, schema: Any = None, **kwargs: Any) -> LineageDataFrame:
        """`createDataFrame`: rows get ids (cp, 0, index) and their values are journaled.
        Local data only (lists, pandas DataFrames, NumPy arrays, Arrow tables...: the driver
        holds it and numbers its rows, in order); Spark's distributed data has no row order
        the driver could number."""
        _refuse_distributed(data)
        df = self.spark.createDataFrame(data, schema, **kwargs)
        if not self.plumbing.capture:
            return LineageDataFrame(self, df, Lineage())
        from pyspark.sql.types import LongType, StructField, StructType

        # The driver holds the data: it numbers the rows itself (no id is assigned by Spark)
        # and journals their values, so traces return them as Rows.
        rows = df.collect()
        cp = self.plumbing.source_cp("createDataFrame", 1)
        h = fresh()
        base = record_id_base(cp.number, 0)
        schema2 = StructType([*df.schema.fields, StructField(h, LongType(), False)])
        data2 = [(*tuple(r), base + i) for i, r in enumerate(rows)]
        out = self.spark.createDataFrame(data2, schema2, verifySchema=False)
        self.plumbing.journal(cp, len(rows), values=pickled(rows))
        frame = LineageDataFrame(self, out, Lineage((h,), (), frozenset({cp.number})))
        set_recipe(frame, Source(cp.number, h))
        return frame

    # -- operators ---------------------------------------------------------------------------

    def frame_of(self, other: Any, op: str) -> LineageDataFrame:
        if isinstance(other, LineageDataFrame):
            if other._agent is not self:
                raise UnsupportedOperation(f"{op} of DataFrames from two LineageContexts")
            return other
        raise UnsupportedOperation(
            f"{op} with a DataFrame not made through this LineageContext (its rows have no "
            "lineage): read or create it with lc.read / lc.createDataFrame"
        )

    def aggregate(
        self,
        frame: LineageDataFrame,
        group: Callable[[Any], Any],
        cols: list,
        exprs: list,
        kind: str = "groupBy",
    ) -> LineageDataFrame:
        """groupBy/rollup/cube/groupingSets(...).agg(...): each group also collects its
        rows' ids (`group` applies the grouping, over `cols`, to a DataFrame). A groupBy over
        an input cheap and safe to recompute collects them lazily: only when a filter on
        its output (HAVING) or a limit (top-k, `show`, `take`) asks, for the surviving
        groups (`_lazyagg`)."""
        from ._lazyagg import lazy_aggregate

        lin = frame._lin
        name = fresh()
        out_lin = Lineage((), (name,), lin.cps)

        def eager() -> Any:
            grouped = group(frame._src(*cols, *exprs))
            return vanilla_names(grouped.agg(*exprs, collected(F, lin, name)), (*cols, *exprs))

        lazy = lazy_aggregate(frame, kind, cols, exprs, self.aggregates)
        if lazy is None:
            return LineageDataFrame(self, eager(), out_lin)
        # Any use but a filter or a limit builds the eager aggregate (on first use).
        out = LineageDataFrame(self, None, out_lin, make=eager)
        out._lazy = lazy
        return out

    def sql(self, text: str, args: Any = None, **kwargs: Any) -> LineageDataFrame:
        from ._sql import run_sql

        return run_sql(self, text, args, kwargs)

    # -- views -------------------------------------------------------------------------------

    def register_view(self, name: str, frame: LineageDataFrame, replace: bool) -> None:
        if replace:
            frame._df.createOrReplaceTempView(name)
        else:
            frame._df.createTempView(name)
        with self._lock:
            self.views[name.lower()] = frame


def _refuse_distributed(data: Any) -> None:
    """UnsupportedOperation for `createDataFrame` over data Spark holds (an RDD, a Spark or
    pandas-on-Spark DataFrame), naming it; local data (a pandas DataFrame too) passes."""
    kind = type(data)
    module = kind.__module__ or ""
    if isinstance(data, LineageDataFrame):
        raise UnsupportedOperation(
            "createDataFrame from a DataFrame of a LineageContext (it has its rows' lineage "
            "already: use it as it is)"
        )
    if not module.startswith("pyspark"):
        return  # (a pandas frame answers hasattr with its columns: it is not asked)
    if kind.__name__ == "RDD" or hasattr(data, "_jrdd"):
        raise UnsupportedOperation(
            "createDataFrame from an RDD with lineage (its rows have no lineage: use "
            "lc.parallelize / lc.textFile and the RDD API, or pass local data)"
        )
    if module.startswith("pyspark.pandas"):
        raise UnsupportedOperation(
            "createDataFrame from a pandas-on-Spark DataFrame with lineage (its rows have no "
            "lineage: read its files with lc.read, or pass local data, e.g. its to_pandas())"
        )
    if kind.__name__ == "DataFrame":
        raise UnsupportedOperation(
            "createDataFrame from a Spark DataFrame with lineage (its rows have no lineage: "
            "read its files with lc.read, or transform a DataFrame made through the context)"
        )
