"""What a captured UDF runs in Spark's Python workers (executor side: no pyspark driver
modules, no repository).

The wrapped function gets, after the user's arguments, one hidden argument: the record ids
of the row it is called on (its lineage: one id, or an array of them). When the user's
function raises, FAIL events name those records as culprits, as the RDD agent does for its
functions; then `on_error="fail"` re-raises (the task fails as Spark would) and `"skip"`
returns null for that call. Under "skip" the DataFrame API first filters with a probe (the
same function, returning whether it raises on the row: the culprit is recorded there), so
the row is dropped as an RDD function's failing record is, and the call itself never fails.

A deterministic Python UDF called from the DataFrame API under "fail" takes no ids at all
(`site_function`): on success they are not needed, and passing them cost more than the
function (see `_udf.LineageUDF`). When it raises, the error carries the call site's name,
and the driver finds the culprits afterwards with the probe.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from journals import WriterSpec

from .._worker import TaskJournal


@dataclass(frozen=True)
class UdfSpec:
    run_id: str
    journal: WriterSpec
    name: str
    on_error: str  # "fail" | "skip"


def partition_id() -> int:
    """The partition of the task this runs in (0 outside a task)."""
    try:
        from pyspark import TaskContext
    except ImportError:  # pragma: no cover - pyspark is a dependency
        return 0
    tc = TaskContext.get()
    return int(tc.partitionId()) if tc is not None else 0


def record_failure(spec: UdfSpec, ids: Any, error: BaseException, value: Any = None) -> None:
    """FAIL events for each record the failing row was made from (sealed at once: a task
    that goes on failing must not take them with it)."""
    journal = TaskJournal(spec.journal, spec.run_id, partition_id())
    if ids is not None and not hasattr(ids, "__iter__"):  # one id (`udf_ids`)
        ids = [ids]
    rids = [int(i) for i in (ids if ids is not None else []) if i is not None] or [-1]
    shown = None if value is None else repr(value)[:2000]
    for rid in sorted(set(rids)):
        journal.fail_event(f"udf:{spec.name}", rid, error, (None, shown))
    journal.seal()


class PythonUdf:
    """A row-at-a-time Python UDF with the row's ids as its last argument (then `extra`
    trailing arguments it ignores: the DataFrame API's call token under "skip"). `lc.sql`
    calls this generic form (a call's arity is not known when it is registered); DataFrame
    calls use `row_function`'s, spelled out for their arity."""

    def __init__(self, func: Callable, spec: UdfSpec, extra: int = 0) -> None:
        self.func = func
        self.spec = spec
        self.extra = extra

    def failed(self, ids: Any, error: Exception, values: tuple) -> None:
        """Record the row's sources as culprits; re-raise under "fail", else null."""
        record_failure(self.spec, ids, error, values)
        if self.spec.on_error == "fail":
            raise error
        return None

    def __call__(self, *args: Any) -> Any:
        end = len(args) - self.extra - 1
        try:
            return self.func(*args[:end])
        except Exception as e:
            return self.failed(args[end], e, args[:end])


class PythonProbe:
    """Whether a Python UDF raises on a row (recording the row's sources as culprits)."""

    def __init__(self, func: Callable, spec: UdfSpec) -> None:
        self.func = func
        self.spec = spec

    def failed(self, ids: Any, error: Exception, values: tuple) -> bool:
        record_failure(self.spec, ids, error, values)
        return True

    def __call__(self, *args: Any) -> bool:
        try:
            self.func(*args[:-1])
        except Exception as e:
            return self.failed(args[-1], e, args[:-1])
        return False


# A call or probe for a known number of user arguments, spelled out: Spark's worker calls
# the UDF once per row, and a generic wrapper's `*args` slicing and second call level cost
# more than a small function itself (TPC-H's year(): ~0.55 us a row vanilla, ~1.2 us
# through the generic wrapper, ~0.55 us spelled out). The token slot takes the DataFrame
# API's call token under "skip" (absent otherwise).
_ROW_FUNCTION = """
def {name}({params}ids, token=None):
    try:
        {result}func({args})
    except Exception as error:
        return failed(ids, error, ({values}))
    {after}
"""


def row_function(wrapper: PythonUdf | PythonProbe, arity: int) -> Callable:
    """`wrapper`'s function for calls with `arity` user arguments (then the row's ids, then
    at most one ignored token)."""
    params = [f"a{i}" for i in range(arity)]
    probe = isinstance(wrapper, PythonProbe)
    name = f"{'probe' if probe else 'call'}{arity}"
    text = _ROW_FUNCTION.format(
        name=name,
        params="".join(p + ", " for p in params),
        args=", ".join(params),
        values="".join(p + ", " for p in params),
        result="" if probe else "return ",
        after="return False" if probe else "",
    )
    scope: dict[str, Any] = {"func": wrapper.func, "failed": wrapper.failed}
    exec(compile(text, f"<captured udf {name}>", "exec"), scope)
    made = scope[name]
    # Spark names a call's column after the function: the registered name, as vanilla's.
    made.__name__ = wrapper.spec.name
    return made


# A deterministic call under "fail" from the DataFrame API: no ids, no journal. The error
# takes a note naming the call site (it reaches the driver in the task's traceback text),
# so the action that fails can run the site's probe over the same input (`_udf.blame`).
_SITE_FUNCTION = """
def {name}({params}):
    try:
        return func({args})
    except Exception as error:
        error.add_note(site)
        raise
"""


def site_function(func: Callable, name: str, arity: int, site: str) -> Callable:
    """`func` for calls with `arity` arguments from call site `site` (see above)."""
    params = ", ".join(f"a{i}" for i in range(arity))
    text = _SITE_FUNCTION.format(name=f"site{arity}", params=params, args=params)
    scope: dict[str, Any] = {"func": func, "site": site}
    exec(compile(text, f"<captured udf {site}>", "exec"), scope)
    made = scope[f"site{arity}"]
    made.__name__ = name
    return made


def _row_by_row(
    func: Callable, spec: UdfSpec, values: list, ids: Any
) -> tuple[list, BaseException | None]:
    """Each row of a batch that raised, run alone: its output Series, or None when it
    raises (recorded as a culprit); and the first row's error."""
    import pandas as pd

    out: list = []
    first: BaseException | None = None
    for i in range(len(ids)):
        one = [v.iloc[i : i + 1].reset_index(drop=True) for v in values]
        try:
            out.append(pd.Series(func(*one)).reset_index(drop=True))
        except Exception as e:
            first = first or e
            record_failure(spec, ids.iloc[i], e, tuple(v.iloc[0] for v in one))
            out.append(None)
    return out, first


class PandasProbe:
    """Which rows of a batch make a scalar pandas UDF raise (recorded as culprits): the
    batch is re-run row by row when it raises."""

    def __init__(self, func: Callable, spec: UdfSpec) -> None:
        self.func = func
        self.spec = spec

    def __call__(self, *series: Any) -> Any:
        import pandas as pd

        *values, ids = series
        try:
            self.func(*values)
            return pd.Series([False] * len(ids))
        except Exception as error:
            out, first = _row_by_row(self.func, self.spec, values, ids)
            if first is None:  # only the whole batch fails: no row to blame
                record_failure(self.spec, None, error)
                raise
            return pd.Series([o is None for o in out])


class PandasUdf:
    """A scalar pandas UDF (Series -> Series) with the rows' ids as its last Series (then
    `extra` trailing Series it ignores). A batch that raises is re-run row by row to find
    the rows that make it fail."""

    def __init__(self, func: Callable, spec: UdfSpec, extra: int = 0) -> None:
        self.func = func
        self.spec = spec
        self.extra = extra

    def __call__(self, *series: Any) -> Any:
        *values, ids = series[: len(series) - self.extra]
        try:
            return self.func(*values)
        except Exception as error:
            import pandas as pd

            out, first = _row_by_row(self.func, self.spec, values, ids)
            if first is None:  # only the whole batch fails: no row to blame
                record_failure(self.spec, None, error)
                raise
            if self.spec.on_error == "fail":
                raise first from None
            return pd.concat(
                [pd.Series([None]) if o is None else o for o in out], ignore_index=True
            )
