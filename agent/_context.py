"""`LineageContext`: Titian's entry point, in Python, durable in a provenance repository."""

from __future__ import annotations

import time
import uuid
import weakref
from collections.abc import Callable, Iterable
from typing import Any

from journals import TRANSPORTS
from repository import BadInput, Culprit, ProvenanceRepository

from ._compile import SparkCompiler
from ._deferred import NARROW_POLICIES
from ._interpreter import check_capture_python
from ._plan import FrameSource, ParallelSource, PlanNode, TextSource
from ._planner import Planner
from ._rdd import CapturedRDD
from ._spark_trace import SPARK_THRESHOLD
from ._splits import compute_splits, list_input_files
from ._trace import LineageRDD
from .dataframe._policy import AGGREGATE_POLICIES, DEFAULT_AGGREGATES

_ON_ERROR = ("fail", "skip")


class LineageContext:
    """Wraps a SparkSession or SparkContext; sources made through it capture lineage into
    `repo`, a `ProvenanceRepository` opened by this (driver) process.

    - `run_id`: names this run in the repository (default: time + random suffix).
    - `on_error`: "fail" (default) records the input whose processing raised (a FAIL event)
      and fails the job as Spark would; "skip" records it, drops the record and goes on.
    - `capture=False` runs the same pipelines without recording lineage (`lineage()` then
      has nothing to trace).
    - `transport`: how executors hand their journals over (default: the repository's
      `RepositoryConfig.transport`). "auto": into the journal containers where an executor
      sees them (a shared filesystem), else streamed to a receiver this context starts in
      the driver on `spark.driver.host` (cluster masters only: local executors always see
      the containers); "shared": always the containers; "socket": always the receiver.
      Either way a task returns only once its lineage is durable in the repository.
    - `openlineage`: an OpenLineage client (anything with `emit(event)`) to send each action's
      RunEvents through; None (default): the client configured the standard way
      (`OPENLINEAGE_URL`, `OPENLINEAGE_CONFIG`, `openlineage.yml`), off when none is; False:
      off. `openlineage_namespace` / `openlineage_job`: the jobs' namespace (default
      `OPENLINEAGE_NAMESPACE`, else "default") and name prefix (default: the app name). See
      `agent._openlineage`.
    - `spark_threshold`: a trace of this context's lineage whose frontier grows past this
      many records goes on as Spark jobs over the event logs (None: only when asked, with
      `go_back_all(spark=True)` and the like). See `LineageRDD`.
    - `narrow`: "eager" (default) records every association of a map-side combiner's narrow
      chain; "deferred" records the combiner's keys and coarse input groups, and traces
      re-derive the exact associations by re-running the chain on those groups' records
      (much less lineage on disk, traces of frequent keys slower; see `agent._deferred`).
    """

    def __init__(
        self,
        spark: Any,
        repo: ProvenanceRepository,
        *,
        run_id: str | None = None,
        on_error: str = "fail",
        capture: bool = True,
        transport: str | None = None,
        openlineage: Any = None,
        openlineage_namespace: str | None = None,
        openlineage_job: str | None = None,
        aggregates: str = DEFAULT_AGGREGATES,
        narrow: str = "eager",
        spark_threshold: int | None = SPARK_THRESHOLD,
    ) -> None:
        sc, session = _context_and_session(spark)
        if sc is None and session is None:
            raise TypeError(f"LineageContext needs a SparkSession or SparkContext, got {spark!r}")
        if not isinstance(repo, ProvenanceRepository):
            raise TypeError(f"LineageContext needs a ProvenanceRepository, got {repo!r}")
        if repo.read_only:
            raise BadInput("LineageContext needs a repository opened for writing (its owner)")
        if on_error not in _ON_ERROR:
            raise BadInput(f"on_error must be one of {', '.join(_ON_ERROR)}, got {on_error!r}")
        if not (isinstance(openlineage, bool) or openlineage is None) and not callable(
            getattr(openlineage, "emit", None)
        ):
            raise BadInput(
                f"openlineage must be an OpenLineage client (with emit), got {openlineage!r}"
            )
        mode = repo.config.transport if transport is None else transport
        if mode not in TRANSPORTS:
            raise BadInput(f"transport must be one of {', '.join(TRANSPORTS)}, got {mode!r}")
        if aggregates not in AGGREGATE_POLICIES:
            raise BadInput(
                f"aggregates must be one of {', '.join(AGGREGATE_POLICIES)}, got {aggregates!r}"
            )
        if spark_threshold is not None and (
            isinstance(spark_threshold, bool)
            or not isinstance(spark_threshold, int)
            or spark_threshold < 0
        ):
            raise BadInput(
                f"spark_threshold must be a record count or None, got {spark_threshold!r}"
            )
        if narrow not in NARROW_POLICIES:
            raise BadInput(f"narrow must be one of {', '.join(NARROW_POLICIES)}, got {narrow!r}")
        self.sc = sc  # None under Spark Connect: DataFrames and SQL only
        if sc is not None:
            from ._py4j import install_acyclic_proxies

            install_acyclic_proxies()  # JVM plans released when dropped, not at cyclic GC
        self.spark = session
        if sc is not None:
            check_capture_python(sc)  # fails now, not in every task, if workers cannot capture
        self.repo = repo
        self.run_id = run_id or f"run-{time.strftime('%Y%m%dT%H%M%S')}-{uuid.uuid4().hex[:6]}"
        self.on_error = on_error
        self.narrow = narrow
        self.capture = capture
        # Under Spark Connect (no SparkContext here) the server's workers are taken to share
        # this machine's files, as a local master's do.
        local = sc is None or str(sc.master).startswith("local")
        if sc is None and mode == "socket":
            raise BadInput("transport='socket' needs a classic SparkSession (not Spark Connect)")
        if mode == "socket" or (mode == "auto" and not local):
            host, bind = driver_address(sc, local)
            repo.start_receiver(host, bind_host=bind)
        self.transport = mode
        self.writer_spec = repo.writer_spec(mode)
        # Plumbing for front-ends (this RDD agent, a DataFrame agent): names, capture points,
        # the run descriptor, actions and outputs. Users need not touch it.
        app, version = _app_and_version(sc, session)
        self.planner = Planner(
            repo,
            self.run_id,
            app=app,
            spark_version=version,
            sc=sc,
            spark_threshold=spark_threshold,
        )
        self._aggregates = aggregates
        self._frames: Any = None
        self._compiler = SparkCompiler(
            sc, self.run_id, self.writer_spec, capture=capture, on_error=on_error
        )
        self.openlineage = self._openlineage(openlineage, openlineage_namespace, openlineage_job)

    def _openlineage(self, client: Any, namespace: str | None, job: str | None) -> Any:
        """The OpenLineage emitter listening to this context's actions, or None (off)."""
        if client is False or not self.capture:
            return None
        from . import _openlineage

        if client is None or client is True:
            client = _openlineage.client_from_environment()
            if client is None:
                return None
        emitter = _openlineage.OpenLineageEmitter(
            client,
            self.repo,
            app=_app_and_version(self.sc, self.spark)[0],
            namespace=namespace,
            job_name=job,
        )
        self.planner.add_listener(emitter)
        return emitter

    # -- DataFrames and SQL ------------------------------------------------------------------

    @property
    def _dataframes(self) -> Any:
        if self._frames is None:
            if self.spark is None:
                raise BadInput("DataFrames need a SparkSession (this context has a SparkContext)")
            from .dataframe import FrameAgent

            self._frames = FrameAgent(self, self.spark, self._aggregates)
            # Nothing the agent holds points back here, so this context is freed as soon as
            # it is dropped; the agent then drops its views and replay frames.
            weakref.finalize(self, self._frames.release)
        return self._frames

    @property
    def read(self) -> Any:
        """A DataFrameReader whose DataFrames capture lineage: `lc.read.csv(path, ...)`,
        `.json` (JSON lines), `.text`, `.parquet`, `.format(f).load(path)`."""
        from .dataframe._reader import LineageReader

        return LineageReader(self._dataframes)

    def sql(self, sqlQuery: str, args: dict[str, Any] | list | None = None, **kwargs: Any) -> Any:
        """`spark.sql` over temp views made from captured DataFrames
        (`df.createOrReplaceTempView(name)`): the result carries each row's lineage. `args`
        (named `:x` / positional `?` parameters) and `kwargs` (`{name}` fields: DataFrames of
        this context, or values) as `spark.sql` takes them."""
        return self._dataframes.sql(sqlQuery, args, **kwargs)

    @property
    def udf(self) -> Any:
        """`lc.udf.register(name, f, returnType)`: a UDF for `lc.sql` and the DataFrame API
        whose failures are recorded as culprits (FAIL events naming the row's sources)."""
        return self._dataframes.udfs

    def table(self, tableName: str) -> Any:
        """`spark.table`: a Parquet table of the catalog, its rows source records (see
        `lc.read.table`)."""
        return self.read.table(tableName)

    def createDataFrame(self, data: Any, schema: Any = None, **kwargs: Any) -> Any:
        """`spark.createDataFrame` whose rows are source records (their values captured)."""
        return self._dataframes.create(data, schema, **kwargs)

    # -- sources -----------------------------------------------------------------------------

    def textFile(
        self, name: str, minPartitions: int | None = None, use_unicode: bool = True
    ) -> CapturedRDD:
        """Lines of text files (a path, directory, glob or comma-separated list; local or a
        shared filesystem). Each line is named by its position; its byte offset is kept, so
        traces re-read the raw line by seeking."""
        if not use_unicode:
            raise BadInput("textFile(use_unicode=False) is not supported by the capture agent")
        files = list_input_files(name)
        n = minPartitions if minPartitions is not None else self.sc.defaultMinPartitions
        splits = compute_splits(files, n)
        node = self.planner.node_name("textFile")
        cp = self.planner.capture_point(
            node, "textFile", "RECEIVE", [], "source", len(splits), path=name, files=files
        )
        start = TextSource(cp, tuple(splits))
        return self._source(PlanNode("source", node, len(splits), start=start))

    def parallelize(self, c: Iterable, numSlices: int | None = None) -> CapturedRDD:
        """A collection from the driver; records named (partition, index), values captured."""
        rdd = self.sc.parallelize(c, numSlices)
        n = rdd.getNumPartitions()
        node = self.planner.node_name("parallelize")
        cp = self.planner.capture_point(node, "parallelize", "RECEIVE", [], "source", n)
        return self._source(PlanNode("source", node, n, start=ParallelSource(cp, rdd)))

    def rows_rdd(
        self,
        op: str,
        rdd: Any,
        parents: Iterable[int],
        around: Callable[[], Any],
        fields: list[str] | None,
    ) -> CapturedRDD:
        """An RDD of rows whose lineage is known: `rdd` (a PySpark RDD of a DataFrame's Rows)
        yields rows whose last field holds their ids, records of capture points `parents`
        (a captured DataFrame's `rdd`). Each row, as a Row of `fields` (None: its first
        value), is a record named by position whose parents are its ids; `around` as
        `FrameSource`."""
        n = rdd.getNumPartitions()
        node = self.planner.node_name(op)
        cp = self.planner.capture_point(node, op, "JOIN", sorted(parents), "shuffle", n)
        start = FrameSource(cp, rdd, around, fields)
        return self._source(PlanNode("source", node, n, start=start))

    def _source(self, node: PlanNode) -> CapturedRDD:
        return CapturedRDD(self, node, self._compiler)

    # -- debugging ---------------------------------------------------------------------------

    def culprits(self, run: str | None = None, with_data: bool = True) -> list[Culprit]:
        """Input records whose processing raised in this run (or `run`), with their raw data.

        With `on_error="skip"` the job went on without them; with "fail" the job failed (or a
        retry succeeded). Pending journals are merged first."""
        self.repo.rollover()
        return self.repo.culprits(run or self.run_id, with_data)

    def replay(
        self,
        what: LineageRDD | CapturedRDD | Any,
        exclude: LineageRDD | None = None,
        local: bool | None = None,
    ) -> list:
        """Replay, capture off, and return what the action returns (a list of records).

        - `lc.replay(traced)`: selective replay. `traced` is a LineageRDD traced back from an
          action's output (e.g. `out.lineage().filter(f).go_back_all()`); the pipeline is
          re-run on exactly those records, each capture point keeping only records on the
          traced paths, so the traced outputs are reproduced exactly. A small replay runs
          in the driver, without a Spark job (`local=None`: when the traced input is small;
          `local=False`: always on Spark; `local=True`: in the driver or fail).
        - `lc.replay(rdd, exclude=traced)`: exclusive replay (Newt's ex-replay). `rdd`'s
          pipeline is re-run on all its input minus `traced`'s records, removed at their
          capture point (a source or any intermediate point).
        - DataFrames and `lc.sql`: `lc.replay(df, exclude=traced)` re-runs `df`'s query over
          its sources minus `traced`'s source rows and returns its rows (as `collect()`);
          `lc.replay(traced)` re-runs the query the trace started from on exactly its
          source rows. Both need traces back to the sources (see `agent.dataframe._replay`).
        """
        from . import _replay

        if exclude is not None:
            if not isinstance(what, CapturedRDD):
                if hasattr(what, "lineage") and hasattr(what, "groupBy"):  # a DataFrame
                    from .dataframe._replay import exclusive

                    return exclusive(self._dataframes, what, exclude)
                raise BadInput("replay(rdd, exclude=...): rdd must be a captured RDD or DataFrame")
            if not isinstance(exclude, LineageRDD):
                raise BadInput("replay(..., exclude=...) takes a LineageRDD")
            return _replay.exclusive(self.planner, self._compiler, what, exclude)
        if not isinstance(what, LineageRDD):
            raise BadInput("replay(traced): traced must be a LineageRDD (see rdd.lineage())")
        if self._frames is not None:
            from .dataframe._replay import is_dataframe_output, selective

            if is_dataframe_output(self._frames, what):
                if local:
                    raise BadInput("replay(local=True): DataFrame replays run on Spark")
                return selective(self._frames, what)
        return _replay.selective(self.planner, self._compiler, what, local)

    def __repr__(self) -> str:
        return f"LineageContext(run_id={self.run_id!r}, repo={self.repo.path!r})"


def driver_address(sc: Any, local: bool) -> tuple[str, str | None]:
    """(host executors reach the driver at, address to bind) for the journal receiver: the
    ones Spark itself uses (`spark.driver.host`, `spark.driver.bindAddress`); loopback for
    local masters, whose executors run on this machine."""
    if local:
        return "127.0.0.1", None
    conf = sc.getConf()
    host = conf.get("spark.driver.host", None)
    if not host:
        raise BadInput("spark.driver.host is not set: cannot place the journal receiver")
    return host, conf.get("spark.driver.bindAddress", None)


def _context_and_session(spark: Any) -> tuple[Any, Any]:
    """(SparkContext or None, SparkSession or None) of what a user handed in: a classic
    session has both, a Spark Connect session has no SparkContext, a context has no session."""
    if hasattr(spark, "parallelize") and hasattr(spark, "runJob"):
        return spark, None
    if not hasattr(spark, "createDataFrame") or not hasattr(spark, "read"):
        return None, None
    try:
        sc = spark.sparkContext
    except Exception:  # Spark Connect: no JVM-side context in this process
        sc = None
    if sc is not None and not (hasattr(sc, "parallelize") and hasattr(sc, "runJob")):
        sc = None
    return sc, spark


def _app_and_version(sc: Any, spark: Any) -> tuple[str, str]:
    if sc is not None:
        return sc.appName, sc.version
    try:
        app = str(spark.conf.get("spark.app.name"))
    except Exception:
        app = ""
    return app, str(spark.version)
