"""Captured UDFs: results equal vanilla's, and a row that makes a Python or pandas UDF raise
is recorded as a culprit (its source lines), under on_error="fail" (the job fails) and
"skip" (the row is dropped)."""

from __future__ import annotations

import pandas as pd
import pytest
from pyspark.sql import functions as F

from agent import LineageContext, UnsupportedOperation

pytestmark = pytest.mark.spark


@pytest.fixture
def people(tmp_path):
    path = tmp_path / "people.csv"
    rows = [(i, f"name{i}", "x" if i % 17 == 5 else str(1990 + i % 30)) for i in range(60)]
    with open(path, "w") as f:
        f.write("id,name,born\n")
        for r in rows:
            f.write(",".join(map(str, r)) + "\n")
    return str(path), rows


def make_year():
    # Made inside a test, so cloudpickle ships it by value (workers cannot import tests).
    def year(s: str) -> int:
        return 2024 - int(s)

    return year


def test_python_udf_results_and_lineage(lc, spark, people):
    path, rows = people
    age = lc.udf.register("age", lambda s: 2024 - int(s) if s.isdigit() else -1, "int")
    df = lc.read.csv(path, header=True, schema="id INT, name STRING, born STRING")
    q = df.withColumn("age", age("born")).where(age(F.col("born")) > 20).select("id", "age")
    got = q.collect()
    want = [(i, 2024 - int(b)) for i, _, b in rows if b.isdigit() and 2024 - int(b) > 20]
    assert sorted(tuple(r) for r in got) == sorted(want)
    back = q.lineage().go_back_all().collect()
    assert sorted(back) == sorted(",".join(map(str, r)) for r in rows if r[0] in dict(want))


def test_failing_udf_names_culprits_and_fails(lc, spark, people):
    path, rows = people
    age = lc.udf.register("age", make_year(), "int")
    df = lc.read.csv(path, header=True, schema="id INT, name STRING, born STRING")
    with pytest.raises(Exception, match="invalid literal"):
        df.select("id", age("born").alias("a")).collect()
    culprits = lc.culprits()
    bad = {",".join(map(str, r)) for r in rows if not r[2].isdigit()}
    # The task fails (each attempt) at the first bad row it meets.
    assert culprits and {c.data for c in culprits} <= bad
    assert all(c.exception == "ValueError" for c in culprits)


@pytest.mark.parametrize("kind", ["python", "pandas"])
def test_skip_drops_the_row_and_records_culprits(spark, repo, people, kind):
    path, rows = people
    lc = LineageContext(spark, repo, on_error="skip")
    f = F.pandas_udf(lambda s: 2024 - s.astype(int), "long") if kind == "pandas" else make_year()
    age = lc.udf.register("age", f, "long")
    df = lc.read.csv(path, header=True, schema="id INT, name STRING, born STRING")
    q = df.select("id", age("born").alias("a"))
    got = q.collect()
    # As an RDD function's failing record under "skip": the row is dropped, not nulled.
    want = [(i, 2024 - int(b)) for i, _, b in rows if b.isdigit()]
    assert sorted(tuple(r) for r in got) == sorted(want)
    bad = sorted(",".join(map(str, r)) for r in rows if not r[2].isdigit())
    assert sorted(c.data for c in lc.culprits()) == bad  # each failing row once
    back = q.lineage().go_back_all().collect()
    assert sorted(back) == sorted(",".join(map(str, r)) for r in rows if r[2].isdigit())


def test_skip_drops_failing_rows_from_filters_and_groups(spark, repo, people):
    path, rows = people
    lc = LineageContext(spark, repo, on_error="skip")
    age = lc.udf.register("age", make_year(), "long")
    df = lc.read.csv(path, header=True, schema="id INT, name STRING, born STRING")
    kept = df.where(age("born") > 10)
    assert sorted(r.id for r in kept.collect()) == sorted(
        i for i, _, b in rows if b.isdigit() and 2024 - int(b) > 10
    )
    # Inside an aggregate the failing rows leave their groups (values and lineage alike).
    q = df.groupBy((F.col("id") % 3).alias("g")).agg(F.sum(age("born")).alias("s"))
    got = {r.g: r.s for r in q.collect()}
    good = [(i, b) for i, _, b in rows if b.isdigit()]
    want: dict[int, int] = {}
    for i, b in good:
        want[i % 3] = want.get(i % 3, 0) + 2024 - int(b)
    assert got == want
    line = {r[0]: ",".join(map(str, r)) for r in rows}
    for g in want:
        back = q.lineage().filter(lambda r, g=g: r["g"] == g).go_back_all().collect()
        assert sorted(back) == sorted(line[i] for i, _ in good if i % 3 == g)


def test_capture_off_udf_is_vanilla(spark, repo, people):
    path, _ = people
    lc = LineageContext(spark, repo, capture=False)
    age = lc.udf.register("age2", lambda s: 1, "int")
    df = lc.read.csv(path, header=True, schema="id INT, name STRING, born STRING")
    assert df.select(age("born").alias("a")).collect()[0].a == 1


def test_skip_in_sql_drops_the_row(spark, repo, people):
    # In lc.sql as in the DataFrame API: a failing call drops its row from the output, from
    # the filter (even where a null would pass it) or from its group. The WHERE's other
    # predicates run first: a row they remove never calls the function (no culprit).
    path, rows = people
    lc = LineageContext(spark, repo, on_error="skip")
    lc.udf.register("age", make_year(), "long")
    df = lc.read.csv(path, header=True, schema="id INT, name STRING, born STRING")
    df.createOrReplaceTempView("people")
    line = {r[0]: ",".join(map(str, r)) for r in rows}
    good = {i: 2024 - int(b) for i, _, b in rows if b.isdigit()}

    q = lc.sql("SELECT id, age(born) AS a FROM people WHERE id < 50")
    assert sorted(tuple(r) for r in q.collect()) == sorted(
        (i, a) for i, a in good.items() if i < 50
    )
    bad = sorted(line[i] for i, _, b in rows if not b.isdigit() and i < 50)
    assert sorted(c.data for c in lc.culprits()) == bad
    assert sorted(q.lineage().go_back_all().collect()) == sorted(line[i] for i in good if i < 50)

    q = lc.sql("SELECT id FROM people WHERE age(born) IS NULL OR id = 0")
    assert [r.id for r in q.collect()] == [0]

    q = lc.sql("SELECT id % 3 AS g, count(*) AS n, sum(age(born)) AS s FROM people GROUP BY id % 3")
    got = {r.g: (r.n, r.s) for r in q.collect()}
    assert got == {
        g: (sum(1 for i in good if i % 3 == g), sum(a for i, a in good.items() if i % 3 == g))
        for g in range(3)
    }
    for g in range(3):
        back = q.lineage().filter(lambda r, g=g: r["g"] == g).go_back_all().collect()
        assert sorted(back) == sorted(line[i] for i in good if i % 3 == g)
    assert {c.data for c in lc.culprits()} == {line[i] for i, _, b in rows if not b.isdigit()}

    with pytest.raises(UnsupportedOperation, match="over aggregates"):
        lc.sql("SELECT id % 3 AS g, age(CAST(max(born) AS STRING)) FROM people GROUP BY id % 3")


def test_udfs_of_every_arity_give_vanilla_results(lc, spark, people):
    # DataFrame calls use a function spelled out for their number of arguments (0, 1, 2, 3,
    # 5 here): each must pass every argument, in order.
    path, rows = people

    def f0():
        return 7

    def f2(i, n):
        return f"{i}-{n}"

    def f3(i, n, b):
        return f"{b}:{n}:{i}"

    def f5(a, b, c, d, e):
        return a * 10000 + b * 1000 + c * 100 + d * 10 + e

    def f1(b):
        return b[::-1]

    schema = "id INT, name STRING, born STRING"
    funcs = {"f0": (f0, "int"), "f1": (f1, "string"), "f2": (f2, "string")}
    funcs |= {"f3": (f3, "string"), "f5": (f5, "long")}
    captured = {k: lc.udf.register(k, f, t) for k, (f, t) in funcs.items()}
    vanilla = {k: F.udf(f, t) for k, (f, t) in funcs.items()}

    def build(u, df):
        c = [F.col("id") % k for k in range(2, 7)]
        return df.select(
            "id", u["f0"](), u["f1"]("born"), u["f2"]("id", "name"), u["f3"]("id", "name", "born")
        ).withColumn("five", u["f5"](*c))

    q = build(captured, lc.read.csv(path, header=True, schema=schema))
    want = build(vanilla, spark.read.csv(path, header=True, schema=schema))
    assert sorted(map(tuple, q.collect())) == sorted(map(tuple, want.collect()))
    assert sorted(map(tuple, want.collect()))[3] == (
        3,
        7,
        str(1990 + 3)[::-1],
        "3-name3",
        f"{1990 + 3}:name3:3",
        10000 + 0 + 300 + 30 + 3,
    )
    line = {r[0]: ",".join(map(str, r)) for r in rows}
    for i in (0, 5, 42):
        back = q.lineage().filter(lambda r, i=i: r["id"] == i).go_back_all().collect()
        assert back == [line[i]]


@pytest.mark.parametrize("on_error", ["fail", "skip"])
def test_culprits_of_a_udf_of_several_arguments(spark, repo, people, on_error):
    # The spelled-out call and probe of three arguments record the row's source line as the
    # culprit and fail the job ("fail") or drop the row ("skip").
    path, rows = people
    lc = LineageContext(spark, repo, on_error=on_error)

    def mix(i, name, born):
        return i + len(name) + int(born)

    f = lc.udf.register("mix", mix, "long")
    df = lc.read.csv(path, header=True, schema="id INT, name STRING, born STRING")
    q = df.select("id", f("id", "name", "born").alias("m"))
    bad = sorted(",".join(map(str, r)) for r in rows if not r[2].isdigit())
    if on_error == "fail":
        with pytest.raises(Exception, match="invalid literal"):
            q.collect()
        got = {c.data for c in lc.culprits()}
        assert got and got <= set(bad)
        assert all(c.exception == "ValueError" for c in lc.culprits())
        return
    good = [(i, i + len(n) + int(b)) for i, n, b in rows if b.isdigit()]
    assert sorted(map(tuple, q.collect())) == sorted(good)
    assert sorted(c.data for c in lc.culprits()) == bad
    back = q.lineage().go_back_all().collect()
    assert sorted(back) == sorted(",".join(map(str, r)) for r in rows if r[2].isdigit())


def test_unaliased_udf_columns_are_named_as_vanilla_names_them(spark, repo, people):
    # The hidden ids argument must not show in Spark's made-up names (Row fields, columns).
    path, _ = people
    schema = "id INT, name STRING, born STRING"
    vanilla_age = spark.udf.register("age", make_year(), "int")
    plain = spark.read.csv(path, header=True, schema=schema).where(F.col("born") != "x")
    for on_error in ("fail", "skip"):
        lc = LineageContext(spark, repo, on_error=on_error)
        age = lc.udf.register("age", make_year(), "int")
        df = lc.read.csv(path, header=True, schema=schema).where(F.col("born") != "x")
        queries = [
            lambda d, a: d.select("id", a("born")),
            lambda d, a: d.select(F.upper(a("born").cast("string"))),
            lambda d, a: d.groupBy(a("born")).count(),
            lambda d, a: d.groupBy("name").agg(F.max(a("born"))),
        ]
        for query in queries:
            got, want = query(df, age), query(plain, vanilla_age)
            assert got.columns == want.columns
            assert sorted(got.collect()) == sorted(want.collect())
        # The renamed column still carries its rows' lineage.
        q = df.select("id", age("born"))
        assert len(q.collect()) == q.lineage().go_back_all().count() == 56


def _plan(frame) -> str:
    return frame.dataframe._jdf.queryExecution().analyzed().toString()


def test_fail_culprits_are_exactly_the_failing_input_rows(lc, people):
    # Under "fail" a deterministic call from the DataFrame API takes no ids; when the action
    # fails, a probe over the call's input records each input row the function raises on,
    # once: not the rows an earlier operator removed, nor those of a call site that did not
    # fail (here one built over the other rows, never run).
    path, rows = people
    line = {r[0]: ",".join(map(str, r)) for r in rows}
    age = lc.udf.register("age", make_year(), "int")
    size = lc.udf.register("size", len, "int")
    df = lc.read.csv(path, header=True, schema="id INT, name STRING, born STRING")
    df.where(F.col("id") >= 30).select(age("born"))  # a call site whose action never runs
    q = (
        df.withColumn("n", size("born"))
        .where(F.col("id") < 30)
        .select("id", "n", age("born").alias("a"))
    )
    assert "__prov_cur" not in _plan(q)
    with pytest.raises(Exception, match="invalid literal"):
        q.collect()
    bad = sorted(line[i] for i, _, b in rows if i < 30 and not b.isdigit())
    assert len(bad) == 2
    assert sorted(c.data for c in lc.culprits()) == bad
    assert all(c.exception == "ValueError" for c in lc.culprits())


def test_fail_culprits_of_a_call_in_a_filter_and_a_group(spark, repo, people):
    path, rows = people
    line = {r[0]: ",".join(map(str, r)) for r in rows}
    bad = sorted(line[i] for i, _, b in rows if not b.isdigit())
    schema = "id INT, name STRING, born STRING"
    for make in (
        lambda d, a: d.where(a("born") > 0),
        lambda d, a: d.groupBy((F.col("id") % 3).alias("g")).agg(F.sum(a("born"))),
    ):
        lc = LineageContext(spark, repo)
        age = lc.udf.register("age", make_year(), "int")
        q = make(lc.read.csv(path, header=True, schema=schema), age)
        with pytest.raises(Exception, match="invalid literal"):
            q.collect()
        assert sorted(c.data for c in lc.culprits()) == bad


def test_nondeterministic_udf_still_takes_the_row_ids(lc, people):
    # A probe after the failure could not meet the same errors: the call takes the ids.
    path, rows = people
    f = F.udf(make_year(), "int", useArrow=False).asNondeterministic()
    age = lc.udf.register("age", f)
    df = lc.read.csv(path, header=True, schema="id INT, name STRING, born STRING")
    q = df.select("id", age("born").alias("a"))
    assert "__prov_cur" in _plan(q)
    with pytest.raises(Exception, match="invalid literal"):
        q.collect()
    bad = {",".join(map(str, r)) for r in rows if not r[2].isdigit()}
    assert lc.culprits() and {c.data for c in lc.culprits()} <= bad


def test_fail_culprits_of_a_column_used_by_two_frames_are_the_failing_frames(lc, people):
    # One UDF Column, used by operators of two frames over different rows: the action that
    # fails blames the input rows of its own frame only.
    path, rows = people
    line = {r[0]: ",".join(map(str, r)) for r in rows}
    age = lc.udf.register("age", make_year(), "int")
    a = age("born").alias("a")
    df = lc.read.csv(path, header=True, schema="id INT, name STRING, born STRING")
    df.where(F.col("id") >= 30).select("id", a)  # its failing rows are not this action's
    q = df.where(F.col("id") < 30).select("id", a)
    with pytest.raises(Exception, match="invalid literal"):
        q.collect()
    bad = sorted(line[i] for i, _, b in rows if i < 30 and not b.isdigit())
    assert len(bad) == 2 and any(not b.isdigit() for i, _, b in rows if i >= 30)
    assert sorted(c.data for c in lc.culprits()) == bad


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    from _dfcheck import make_data

    return make_data(tmp_path_factory.mktemp("tables"))


def _mean_udaf():
    # Made inside a test, so cloudpickle ships it by value (workers cannot import tests);
    # its type hints name the module's `pd` (annotations are strings here).
    @F.pandas_udf("double")
    def mean_of(p: pd.Series) -> float:
        return float(p.mean())

    return mean_of


def _mean(rs, col="price"):
    return sum(r[col] for r in rs) / len(rs)


@pytest.mark.parametrize("form", ["groupBy", "expression-key", "global", "rollup"])
def test_grouped_aggregate_pandas_udf_lineage(lc, spark, data, form):
    """A grouped-aggregate pandas UDF in `agg` (Spark allows it beside no other aggregate:
    it is computed apart and joined null-safely on the group keys and grouping set to the
    ids' aggregate): vanilla's rows, each traced to its group's rows."""
    import _dfref as R
    from _dfcheck import check

    mean_of = _mean_udaf()
    aggs = [mean_of("price").alias("m"), (mean_of(F.col("qty")) * 2).alias("q2")]

    def build(t):
        items = t["items"].where("price > 20")
        if form == "groupBy":
            return items.groupBy("qty").agg(*aggs)
        if form == "expression-key":  # null keys: one group
            return items.groupBy((F.col("okey") % 4).alias("o4")).agg(*aggs)
        if form == "global":
            return items.agg(*aggs)
        return items.rollup("qty").agg(*aggs)

    def values(rs):
        return {"m": _mean(rs), "q2": 2 * _mean(rs, "qty")}

    def ref(T):
        items = R.where(T["items"], lambda r: r["price"] > 20)
        if form == "groupBy":
            return R.group(items, lambda r: (r["qty"],), lambda k, rs: {"qty": k[0], **values(rs)})
        if form == "expression-key":
            o4 = R.select(
                items, lambda r: {**r, "o4": None if r["okey"] is None else r["okey"] % 4}
            )
            return R.group(o4, lambda r: (r["o4"],), lambda k, rs: {"o4": k[0], **values(rs)})
        if form == "global":
            return R.group(items, lambda r: (), lambda k, rs: values(rs))
        return R.group_sets(items, ["qty"], [("qty",), ()], values)

    cols = {"groupBy": ["qty"], "expression-key": ["o4"], "global": [], "rollup": ["qty"]}
    check(lc, spark, data, build, ref, [*cols[form], "m", "q2"])


def test_grouped_aggregate_pandas_udf_over_an_unstable_input_raises(lc, spark, data):
    """The pandas aggregate and the ids' run apart, over the input twice: over a limit
    (which rows, Spark's choice each time) it raises rather than risk other rows' ids;
    over no rows it gives none, as vanilla."""
    from _dfcheck import tables

    mean_of = _mean_udaf()
    items = tables(lc.read, data)["items"]
    with pytest.raises(UnsupportedOperation, match="pandas UDF"):
        items.limit(10).groupBy("qty").agg(mean_of("price"))
    assert items.where("qty > 99").agg(mean_of("price")).collect() == []
