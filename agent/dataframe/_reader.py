"""`lc.read`: DataFrameReader's shape; every row gets its record id at the scan.

A row's id is (scan partition, position) under the partitions Spark planned for the query
that read it, and Spark plans them whenever it plans a query, with the session's settings of
that moment (`_scan.ScanConf`), from the files as listed when the DataFrame was read. So the
plan `lc.read` stores is checked again before each action (`ScanPlans`): a source no action
has read yet takes the plan of the settings then; one whose rows an earlier action already
numbered under another plan is refused (its rows would have two ids in one run).
"""

from __future__ import annotations

import threading
import weakref
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .._rdd import UnsupportedOperation
from .._splits import UnsupportedInput
from ._columns import Lineage, file_scan_id_sql, fresh, scan_id_sql, sql_name
from ._frame import LineageDataFrame
from ._recipe import Call, Source, frames_under, materialized, recipe_of, set_recipe
from ._scan import (
    ScanConf,
    by_file,
    check_options,
    local_path,
    nested,
    partitioned,
    plan_scan,
    scan_conf,
)

if TYPE_CHECKING:
    from ._session import FrameAgent

_FORMATS = ("csv", "json", "text", "parquet")


def _paths(path: Any) -> list[str]:
    if isinstance(path, str):
        return [path]
    if isinstance(path, list | tuple) and all(isinstance(p, str) for p in path):
        return list(path)
    raise TypeError(f"path must be a string or a list of strings, got {type(path).__name__}")


class LineageReader:
    """`lc.read`: csv, json (JSON lines), text and parquet, from local or shared paths."""

    def __init__(self, agent: FrameAgent) -> None:
        self._agent = agent
        self._format: str | None = None
        self._options: dict[str, Any] = {}
        self._schema: Any = None

    def format(self, source: str) -> LineageReader:
        self._format = source.lower()
        return self

    def option(self, key: str, value: Any) -> LineageReader:
        self._options[key] = value
        return self

    def options(self, **options: Any) -> LineageReader:
        self._options.update(options)
        return self

    def schema(self, schema: Any) -> LineageReader:
        self._schema = schema
        return self

    def load(
        self, path: Any = None, format: str | None = None, schema: Any = None, **options: Any
    ) -> LineageDataFrame:
        fmt = (format or self._format or "parquet").lower()
        if fmt not in _FORMATS:
            raise UnsupportedOperation(
                f"reading format {fmt!r} with lineage (supported: {', '.join(_FORMATS)})"
            )
        if path is None:
            raise UnsupportedOperation("load() without a path (tables) with lineage")
        opts = {**self._options, **{k: v for k, v in options.items() if v is not None}}
        return self._agent.scan(fmt, _paths(path), schema or self._schema, opts)

    def csv(self, path: Any, schema: Any = None, **options: Any) -> LineageDataFrame:
        return self.load(path, "csv", schema, **options)

    def json(self, path: Any, schema: Any = None, **options: Any) -> LineageDataFrame:
        return self.load(path, "json", schema, **options)

    def text(self, paths: Any, **options: Any) -> LineageDataFrame:
        return self.load(paths, "text", None, **options)

    def parquet(self, *paths: str, **options: Any) -> LineageDataFrame:
        return self.load(list(paths), "parquet", None, **options)

    def table(self, tableName: str) -> LineageDataFrame:
        """A Parquet table of the catalog (`saveAsTable`), read as its files with the
        table's schema: the rows `spark.read.table` gives, each with its id."""
        return table_scan(self._agent, tableName)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        raise UnsupportedOperation(f"DataFrameReader.{name} with lineage capture")


def table_scan(agent: FrameAgent, name: str) -> LineageDataFrame:
    """`lc.read.table(name)`: a catalog table whose provider is Parquet, as the files at its
    location (partitioned directories too) read with the table's schema. Refused, naming
    why, for other providers, views, and tables whose files Spark lists otherwise than the
    location holds them (partitions the catalog dropped or added elsewhere)."""
    spark = agent.spark
    vanilla = spark.read.table(name)  # Spark's own error for an unknown table
    if not agent.plumbing.capture:
        return LineageDataFrame(agent, vanilla, Lineage())
    info = {r[0]: r[1] for r in spark.sql(f"DESCRIBE TABLE EXTENDED {name}").collect() if r[0]}
    provider, location = str(info.get("Provider", "")).lower(), info.get("Location")
    if provider != "parquet" or not location:
        what = f"provider {provider}" if provider else "a view, or a table without files"
        raise UnsupportedOperation(
            f"read.table({name!r}) with lineage: only Parquet tables are read as their files "
            f"(this is {what}); read its files with lc.read"
        )
    frame = scanned(agent, "parquet", [location], vanilla.schema, {})
    recipe = recipe_of(frame)
    assert isinstance(recipe, Source) and recipe.scan is not None
    listed = {str(f[0]) for f in recipe.scan[3]["files"]}
    if {local_path(u) for u in vanilla.inputFiles()} != listed:
        raise UnsupportedInput(
            f"read.table({name!r}): the catalog's partitions of the table name other files "
            f"than its location {location} holds; read the files with lc.read"
        )
    return frame


def scanned(agent: FrameAgent, fmt: str, paths: list[str], schema: Any, opts: dict) -> Any:
    """(vanilla DataFrame, LineageDataFrame) of a file scan with its rows' ids."""
    spark = agent.spark
    # Refuse what cannot be traced before Spark reads anything (its errors would come first).
    conf = scan_conf(spark) if agent.plumbing.capture else None
    nested_parquet = conf is not None and fmt == "parquet" and nested(paths)
    scan = None
    if conf is not None and not nested_parquet:
        scan = plan_scan(spark, fmt, paths, opts, conf)
    elif nested_parquet:
        check_options(fmt, opts)
    reader = spark.read.format(fmt)
    if schema is not None:
        reader = reader.schema(schema)
    if opts:
        reader = reader.options(**opts)
    df = reader.load(paths if len(paths) != 1 else paths[0])
    if nested_parquet:
        if "_metadata" in df.columns:
            raise UnsupportedInput(
                f"parquet({','.join(paths)}): a column named _metadata hides Spark's file "
                "metadata, which rows under partitioned directories are numbered by"
            )
        # Spark's own listing (the files it will read, in its names for them).
        scan = plan_scan(spark, fmt, paths, opts, conf, listed=df.inputFiles())
    if scan is None or conf is None:
        return LineageDataFrame(agent, df, Lineage())
    cp = agent.plumbing.source_cp(fmt, len(scan["partitions"]), path=",".join(paths), scan=scan)
    scan_plans(agent).add(_Scan(cp.number, fmt, list(paths), scan, conf))
    h = fresh()
    # The id is projected directly over the scan, where monotonically_increasing_id() is
    # (scan partition, row index): see _columns.scan_id_sql. `selectExpr` of text: 7 py4j
    # round trips where `select("*", Column.alias(...))` takes ~25.
    if by_file(scan):
        ids = file_scan_id_sql(cp.number, scan["uris"], [f[1] for f in scan["files"]])
    else:
        ids = scan_id_sql(cp.number, checked="gzip" in scan)
    projection = f"{ids} AS {sql_name(h)}"
    frame = LineageDataFrame(
        agent,
        None,
        Lineage((h,), (), frozenset({cp.number})),
        make=lambda: df.selectExpr("*", projection),
    )
    set_recipe(frame, Source(cp.number, h, (fmt, list(paths), dict(opts), scan)))
    return frame


# -- the plan each action reads a scan with ------------------------------------------------


@dataclass
class _Scan:
    """A captured scan: `scan` is the plan in its capture point's descriptor (the very dict
    the descriptor and the source's recipe hold: changed in place, it is journaled with the
    run's descriptor after the action), made under `conf`; `numbered_by` names the first
    action that gave its rows ids under that plan (None: none yet)."""

    cp: int
    fmt: str
    paths: list[str]
    scan: dict
    conf: ScanConf
    numbered_by: str | None = None


class ScanPlans:
    """The captured scans of one context and the plan their rows' ids are made with.

    Before each action (`before_action`), every scan the action reads is planned again under
    the session's settings of that moment, from the files as listed at `lc.read` (Spark lists
    them once, when the DataFrame is read, and plans the partitions each time it plans a
    query). The same partitions: nothing changes. Other partitions: a scan no action has
    numbered yet takes them (its descriptor is journaled after the action, so traces read
    rows with the plan that made their ids); a scan an earlier action numbered under other
    partitions raises UnsupportedInput naming the settings, before anything runs: its rows
    would have two ids in one run, and the capture point one plan. A new capture point for
    the new plan would keep the job running, but the ids are literals in the Spark plans
    already built over the source; `lc.read` again gives one."""

    def __init__(self, spark: Any) -> None:
        self.spark = spark
        self._lock = threading.Lock()
        self._scans: dict[int, _Scan] = {}

    def add(self, scan: _Scan) -> None:
        with self._lock:
            self._scans[scan.cp] = scan

    def conf_of(self, cp: int) -> ScanConf | None:
        """The settings the plan of scan `cp` was made under (None: not a scan of here)."""
        with self._lock:
            s = self._scans.get(cp)
            return None if s is None else s.conf

    def read_by(self, frame: Any) -> list[_Scan]:
        """The captured scans of `frame`'s query whose ids it may record: see `sources_of`."""
        cps = sources_of(frame)
        with self._lock:
            return [self._scans[n] for n in sorted(cps) if n in self._scans]

    def before_action(self, frame: Any, action: str) -> None:
        """Make each scan `frame` reads carry the plan Spark will read it with now (see the
        class doc); raises UnsupportedInput, before the action runs, where that cannot be."""
        scans = self.read_by(frame)
        if not scans:
            return
        conf = scan_conf(self.spark)
        with self._lock:
            new: list[tuple[_Scan, dict[str, Any]]] = []
            refused: list[str] = []
            for s in scans:
                if conf == s.conf:
                    continue
                plan = partitioned(s.scan, conf)
                if plan["partitions"] == s.scan["partitions"]:
                    continue  # other settings, the same partitions (e.g. files far smaller)
                if s.numbered_by is None:
                    new.append((s, plan))
                else:
                    refused.append(_refusal(s, conf))
            if refused:
                raise UnsupportedInput(
                    f"{action}: " + "; ".join(refused) + ". Spark plans a scan's partitions "
                    "with the settings of the moment it runs a query, and a row's id is its "
                    "position in its partition, so its rows would have other ids in the same "
                    "run: set the settings back for actions over these sources, or read them "
                    "again with lc.read (a source takes the settings of its first action)"
                )
            for s, plan in new:
                s.scan.update(plan)  # in place: the descriptor and the recipe hold it
                s.conf = conf
            for s in scans:
                if s.numbered_by is None:
                    s.numbered_by = action


def sources_of(frame: Any) -> set[int]:
    """The source capture points whose ids an action over `frame` may make: those of every
    source its calls read (an anti join's other side, whose ids a failing UDF names as
    culprits), and those its rows carry. Not past an eager checkpoint: its rows and their
    ids were made when it ran (that job planned its sources then), and later jobs read them
    from the checkpoint, under any settings. An `lc.sql` frame counts those its rows carry:
    its recipe holds every view of the context, read or not."""
    out: set[int] = set()
    cut = False
    for o in frames_under(frame, views=False, past=lambda call: not materialized(call)):
        recipe = recipe_of(o)
        if isinstance(recipe, Source):
            out.add(recipe.cp)
        elif isinstance(recipe, Call):
            cut = cut or materialized(recipe)
        elif isinstance(o, LineageDataFrame):
            out |= carried(o)  # lc.sql, or a frame without a recipe
    # Without a checkpoint on the way, every id the rows carry comes from a source read.
    return out if cut else out | carried(frame)


def carried(frame: Any) -> set[int]:
    """The source capture points of the ids `frame`'s rows carry (through group records)."""
    return frame._agent.plumbing.source_cps(frame._lin.cps)


def _refusal(s: _Scan, now: ScanConf) -> str:
    changed = ", ".join(s.conf.changes(now)) or "the default parallelism"
    return (
        f"the {s.fmt} source {','.join(s.paths)} (capture point {s.cp}) had its rows "
        f"numbered by {s.numbered_by} under other scan settings ({changed})"
    )


# Per Plumbing (one per context): its ScanPlans. Weak: nothing here keeps a context alive.
_PLANS: weakref.WeakKeyDictionary[Any, ScanPlans] = weakref.WeakKeyDictionary()
_PLANS_LOCK = threading.Lock()


def scan_plans(agent: FrameAgent) -> ScanPlans:
    """`agent`'s ScanPlans, checked before each of its actions from the first scan on."""
    plumbing = agent.plumbing
    with _PLANS_LOCK:
        plans = _PLANS.get(plumbing)
        if plans is None:
            plans = _PLANS[plumbing] = ScanPlans(agent.spark)
            # Every action of this context (rows to the driver, writes) first brings the
            # plans of the scans it reads up to date. (The plans hold no reference back.)
            plumbing.before_action = plans.before_action
    return plans
