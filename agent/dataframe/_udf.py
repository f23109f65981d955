"""`lc.udf.register(name, f, returnType)`: UDFs that know which row they run on.

The registered UDF takes one hidden argument more than the user's function: the ids of the
row's source records (`__prov_cur`, which every captured DataFrame operator adds for the
expressions that need it, and `lc.sql` passes explicitly), so a failure names its culprits.
With capture off the user's function is registered as it is, and Spark's plan is vanilla.

A deterministic Python UDF called from the DataFrame API under on_error="fail" takes no
hidden argument: each call is a call site of its own (`__prov_site<n>_`, in the UDF's name
until `vanilla_names` renames the column), whose input DataFrame the operator that uses it
notes (`source`). When an action fails on an error that names a site, the site's probe runs
over that input once (`blame`): the culprits are exactly the input rows the function raises
on, a deterministic function assumed. Passing the ids cost 0.03-0.30 s of the UDF query's
1.3-1.6 s of CPU (TPC-H SF 0.2's year() over 300 K orders; Parquet, CSV; loaded machine).
"""

from __future__ import annotations

import logging
import re
import warnings
from typing import TYPE_CHECKING, Any

from pyspark.sql import functions as F
from pyspark.sql.pandas.functions import pandas_udf

from .._rdd import UnsupportedOperation
from ._columns import PREFIX, Lineage, fresh, is_hidden, udf_ids
from ._recipe import frames_under
from ._udfrun import (
    PandasProbe,
    PandasUdf,
    PythonProbe,
    PythonUdf,
    UdfSpec,
    row_function,
    site_function,
)

if TYPE_CHECKING:
    from ._session import FrameAgent

log = logging.getLogger("provrepo.agent")

CURRENT = f"{PREFIX}cur"  # a row's ids, added on demand for expressions that call UDFs
# A captured call's hidden arguments as Spark spells them in the names it makes up for
# unaliased expressions: `yr(s, __prov_cur)`, or `yr(s, __prov_cur, __prov_udf3_)` (skip).
# A call site's name rides in the UDF's: `yr__prov_site4_(s)`.
_HIDDEN_ARGS = re.compile(rf", {CURRENT}(?:, {PREFIX}udf\d+_)?|{PREFIX}site\d+_")
_SITE = re.compile(rf"{PREFIX}site\d+_")
_MODULES = ("agent.dataframe._udfrun",)
_PYTHON_UDF = 100
_SCALAR_PANDAS = 200


class LineageUDF:
    """A registered UDF: call it with columns, as a PySpark UDF."""

    def __init__(
        self,
        agent: FrameAgent,
        name: str,
        inner: Any,
        vanilla: bool,
        skip: Any = None,
        forms: RowForms | None = None,
    ) -> None:
        self._agent = agent
        self.name = name
        self._inner = inner
        self._vanilla = vanilla
        self._skip = skip  # under on_error="skip": (the call taking a token, the probe)
        self._forms = forms  # a Python UDF's call and probe spelled out per arity
        # Under "skip", lc.sql calls this probe (registered under this name) in the block's
        # WHERE to drop the rows on which the function raises.
        self.sql_probe = probe_name(name) if skip is not None else None

    @property
    def captured(self) -> bool:
        """Whether calls take the row's ids (capture on)."""
        return not self._vanilla

    def __call__(self, *cols: Any) -> Any:
        cols = tuple(F.col(c) if isinstance(c, str) else c for c in cols)
        with self._agent.capture_python(_MODULES):
            if self._vanilla:
                return self._inner(*cols)
            forms = self._forms
            if self._skip is not None:
                # A token in the call lets the operator that uses it find the call's
                # arguments and drop the rows that fail first (`_drop_failing`).
                inner, probe = self._skip
                if forms is not None:
                    inner, probe = forms.call(len(cols)), forms.probe(len(cols))
                token = fresh("udf") + "_"
                self._agent.udfs.calls[token] = (probe, cols)
                return inner(*cols, F.col(CURRENT), F.lit(token))
            if forms is not None and forms.by_site:
                site = fresh("site") + "_"
                self._agent.udfs.add_site(site, forms.probe(len(cols)), cols)
                return forms.site(len(cols), site)(*cols)
            self._agent.udfs.direct = True
            inner = self._inner if forms is None else forms.call(len(cols))
            return inner(*cols, F.col(CURRENT))

    def __repr__(self) -> str:
        return f"LineageUDF({self.name!r})"


class LineageUDFRegistration:
    """`lc.udf`: register Python and scalar pandas UDFs with culprit capture."""

    def __init__(self, agent: FrameAgent) -> None:
        self._agent = agent
        self.registered: dict[str, LineageUDF] = {}
        self.calls: dict[str, tuple[Any, tuple]] = {}  # skip token -> (probe, arguments)
        # call site (no ids) -> (probe, arguments, the inputs of the operators that used it,
        # each with the frame whose operator it was)
        self.sites: dict[str, tuple[Any, tuple, list[tuple[Any, Any, Lineage]]]] = {}
        self.direct = False  # whether any call took the row's ids as its argument
        self._released = False

    def release(self) -> None:
        """Forget the call sites (their inputs are frames that point back to the agent, their
        arguments Columns), once the context is gone: an action that fails then finds no
        culprit by probing. The skip-mode calls stay: operators still drop failing rows."""
        self._released = True
        self.sites.clear()

    def add_site(self, site: str, probe: Any, cols: tuple) -> None:
        """A call site of a UDF, probed for culprits when an action using it fails (not once
        the context is gone: nothing would release it)."""
        if not self._released:
            self.sites[site] = (probe, cols, [])

    def source(self, owner: Any, df: Any, lin: Lineage, cols: tuple) -> Any:
        """The DataFrame an operator of frame `owner` over `df` evaluates `cols` on: `df`
        itself, or with the row's ids as `__prov_cur` when a call takes them, without the
        rows on which a UDF under on_error="skip" raises. Notes `df` (and `owner`) as the
        input of the call sites in `cols`. Costs nothing while no captured UDF has been
        called."""
        if not lin or not (self.calls or self.sites or self.direct):
            return df
        from ._windows import column_text

        texts = [column_text(c) for c in cols if not isinstance(c, int | bool)]
        for site in {m for t in texts for m in _SITE.findall(t)}:
            if site in self.sites:
                self.sites[site][2].append((owner, df, lin))
        if not any(CURRENT in t for t in texts):
            return df
        return self._drop_failing(df.withColumn(CURRENT, udf_ids(F, lin)), texts)

    def blame(self, error: BaseException, frame: Any) -> None:
        """After an action on `frame` failed: when the error names call sites (their
        function raised), run each site's probe over its inputs; the probe records FAIL
        events for every input row the function raises on. A Column used by operators of
        several frames has several inputs: only those of frames `frame` was made from are
        probed (all of them when none is found among its recipes). A probe that fails
        itself is reported, not raised (the action's own error is what the caller gets)."""
        names = set(_SITE.findall(str(error)))
        made_from = {id(f) for f in frames_under(frame)}
        for site in sorted(names & set(self.sites)):
            probe, args, inputs = self.sites[site]
            ours = [(df, lin) for owner, df, lin in inputs if id(owner) in made_from]
            for df, lin in ours or [(df, lin) for _, df, lin in inputs]:
                try:
                    with self._agent.capture_python(_MODULES):
                        ids = df.withColumn(CURRENT, udf_ids(F, lin))
                        ids.where(probe(*args, F.col(CURRENT))).select(CURRENT).count()
                except Exception as e:  # the action's own error is the one to raise
                    log.warning("finding the culprits of %s failed: %s", site, str(e)[:500])

    def _drop_failing(self, df: Any, texts: list[str]) -> Any:
        """`df` without the rows on which a skip-mode UDF called in `texts` raises (its
        probe records them as culprits), so the calls themselves see no failing row."""
        if not self.calls:
            return df
        with self._agent.capture_python(_MODULES):
            for token, (probe, args) in list(self.calls.items()):
                if any(token in t for t in texts):
                    df = df.where(~probe(*args, F.col(CURRENT)))
        return df

    def register(self, name: str, f: Any, returnType: Any = None) -> LineageUDF:
        """Register `f` (a function, or a UDF made by `F.udf` / `F.pandas_udf`) as `name`
        for `lc.sql` and return it for the DataFrame API."""
        agent = self._agent
        eval_type = getattr(f, "evalType", _PYTHON_UDF)
        func = getattr(f, "func", f)
        if returnType is None:
            returnType = getattr(f, "returnType", "string")
        if eval_type not in (_PYTHON_UDF, _SCALAR_PANDAS):
            raise UnsupportedOperation(
                f"UDF {name}: only row-at-a-time Python UDFs and scalar pandas UDFs "
                "(Series -> Series) are supported with lineage"
            )
        plumbing = agent.plumbing
        vanilla = not plumbing.capture
        deterministic = getattr(f, "deterministic", True) is not False
        skip = None
        forms = None
        if vanilla:
            inner = f if hasattr(f, "evalType") else F.udf(func, returnType)
        else:
            spec = UdfSpec(plumbing.run_id, plumbing.writer_spec, name, plumbing.on_error)
            inner = _udf(eval_type, PandasUdf(func, spec), PythonUdf(func, spec), returnType)
            if plumbing.on_error == "skip":
                # DataFrame calls take a token (ignored) and rows pass a probe first; lc.sql
                # calls `inner` after its block's WHERE dropped the rows the probe names.
                call = _udf(
                    eval_type, PandasUdf(func, spec, 1), PythonUdf(func, spec, 1), returnType
                )
                probe = _udf(eval_type, PandasProbe(func, spec), PythonProbe(func, spec), "boolean")
                if not deterministic:
                    call, probe = call.asNondeterministic(), probe.asNondeterministic()
                skip = (call, probe)
            if eval_type == _PYTHON_UDF:
                forms = RowForms(func, spec, returnType, deterministic, plumbing.on_error)
        if not deterministic:
            inner = inner.asNondeterministic()
        with agent.capture_python(_MODULES):
            agent.spark.udf.register(name, inner)
            if skip is not None:
                agent.spark.udf.register(probe_name(name), skip[1])
        udf = LineageUDF(agent, name, inner, vanilla, skip, forms)
        self.registered[name.lower()] = udf
        return udf

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        raise UnsupportedOperation(f"UDFRegistration.{name} with lineage capture")


class RowForms:
    """A captured Python UDF as called from the DataFrame API, where each call's number of
    arguments is known: one UDF per arity whose function is spelled out for it
    (`row_function`), made once and reused."""

    def __init__(
        self, func: Any, spec: UdfSpec, returnType: Any, deterministic: bool, on_error: str
    ) -> None:
        self._func = func
        self._spec = spec
        self._type = returnType
        self._deterministic = deterministic
        self._made: dict[tuple[bool, int], Any] = {}
        # Calls without ids (`site`): deterministic functions under "fail" only, so that a
        # probe run after the failure meets the same errors.
        self.by_site = deterministic and on_error == "fail"

    def _form(self, probe: bool, arity: int) -> Any:
        key = (probe, arity)
        if key not in self._made:
            if probe:
                wrapper: Any = PythonProbe(self._func, self._spec)
            else:
                wrapper = PythonUdf(self._func, self._spec)
            made = F.udf(row_function(wrapper, arity), "boolean" if probe else self._type)
            self._made[key] = made if self._deterministic else made.asNondeterministic()
        return self._made[key]

    def call(self, arity: int) -> Any:
        return self._form(False, arity)

    def probe(self, arity: int) -> Any:
        return self._form(True, arity)

    def site(self, arity: int, site: str) -> Any:
        """A call from call site `site`, without ids: one UDF per site (its name carries the
        site's, for `source` to find in a column's text)."""
        name = f"{self._spec.name}{site}"
        return F.udf(site_function(self._func, name, arity, site), self._type)


def probe_name(name: str) -> str:
    """The SQL name of a skip-mode UDF's probe (true where the function raises)."""
    return f"{PREFIX}probe_{name}"


def _udf(eval_type: int, pandas_wrapper: Any, python_wrapper: Any, returnType: Any) -> Any:
    # The wrappers are callables without type hints: the eval type is given, and PySpark's
    # notes about inferring it from hints do not apply.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        if eval_type == _SCALAR_PANDAS:
            make: Any = pandas_udf  # its stubs do not list the eval type given here
            return make(_function(pandas_wrapper), returnType, _SCALAR_PANDAS)
        return F.udf(python_wrapper, returnType)


def _function(wrapper: Any) -> Any:
    """pandas_udf wants a plain function, not a callable object."""

    def run(*series: Any) -> Any:
        return wrapper(*series)

    return run


def uses_current(cols: Any) -> bool:
    """Whether any of these columns calls a captured UDF (with the row's ids or from a
    call site)."""
    from ._windows import column_text

    texts = [column_text(c) for c in cols if not isinstance(c, int | bool)]
    return any(CURRENT in t or _SITE.search(t) for t in texts)


def vanilla_names(df: Any, cols: Any) -> Any:
    """`df` with the columns Spark named after a captured UDF call of `cols` renamed as
    vanilla PySpark names them (`yr(s, __prov_cur)` -> `yr(s)`): a Row's fields and
    `columns` must not show the hidden argument. Costs an analysis only when a UDF is
    called."""
    return vanilla_named(df, cols)[0]


def vanilla_named(
    df: Any, cols: Any, columns: list[str] | None = None
) -> tuple[Any, list[str] | None]:
    """`vanilla_names`, and the columns of the DataFrame it returns when known (`columns`:
    those of `df`, when the caller knows them; else asked of Spark only when a UDF is
    called)."""
    if not uses_current(cols):
        return df, columns
    names = list(df.columns) if columns is None else columns
    renames = {c: _HIDDEN_ARGS.sub("", c) for c in names if not is_hidden(c)}
    renames = {old: new for old, new in renames.items() if old != new}
    if not renames:
        return df, names
    # Spark matches the names to rename by its resolver (case-insensitive by default):
    # the result's names are asked of it when needed.
    return df.withColumnsRenamed(renames), None
