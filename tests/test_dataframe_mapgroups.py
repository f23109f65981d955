"""Grouped maps with lineage (`applyInPandas`, `applyInArrow`, cogrouped or not): vanilla's
rows, each traced back to every row of its group (both groups when cogrouped), against brute
force; a function that raises names its group's rows as culprits."""

from __future__ import annotations

from collections.abc import Iterator

import _dfref as R
import pandas as pd
import pyarrow as pa
import pytest
from _dfcheck import check, make_data, plan_shape, tables
from pyspark.sql import functions as F

from agent import LineageContext, LineageRDD, UnsupportedOperation

pytestmark = pytest.mark.spark


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    return make_data(tmp_path_factory.mktemp("tables"))


def group_rows(t: R.Table, key, fn) -> R.Table:
    """Each group's rows as `fn(key, rows)` gives them (several per group), each made from
    its whole group."""
    groups: dict[tuple, list] = {}
    for r, lin in t:
        groups.setdefault(key(r), []).append((r, lin))
    return [
        (row, frozenset().union(*(lin for _, lin in members)))
        for k, members in groups.items()
        for row in fn(k, [r for r, _ in members])
    ]


# The functions are made inside each test (cloudpickle ships them by value: workers cannot
# import the tests).


def test_apply_in_pandas_rows_of_each_group(lc, spark, data):
    """Two rows per group (one-argument form): each traced to its whole group."""

    def stats(pdf: pd.DataFrame) -> pd.DataFrame:
        q = int(pdf["qty"].iloc[0])
        return pd.DataFrame(
            {"qty": [q, q], "stat": ["n", "max"], "v": [float(len(pdf)), pdf["price"].max()]}
        )

    def build(t):
        return (
            t["items"]
            .where("price > 20")
            .groupBy("qty")
            .applyInPandas(stats, "qty int, stat string, v double")
        )

    def ref(T):
        items = R.where(T["items"], lambda r: r["price"] > 20)
        return group_rows(
            items,
            lambda r: (r["qty"],),
            lambda k, rs: [
                {"qty": k[0], "stat": "n", "v": float(len(rs))},
                {"qty": k[0], "stat": "max", "v": max(r["price"] for r in rs)},
            ],
        )

    check(lc, spark, data, build, ref, ["qty", "stat", "v"])


def test_apply_in_pandas_keyed_over_a_left_join_with_null_keys(lc, spark, data):
    """The key form, unnamed (positional) columns, an expression key whose nulls (orders no
    item matches) make one group, over a left join (a row's ids: an order line and maybe an
    item line)."""

    def count(key, pdf):
        k = key[0]
        return pd.DataFrame([[None if pd.isna(k) else int(k), len(pdf), int(pdf["qty"].sum())]])

    def build(t):
        joined = t["customers"].join(t["orders"], "ckey").join(t["items"], "okey", "left")
        return joined.groupBy((F.col("qty") % 2).alias("q2")).applyInPandas(
            count, "q2 int, n long, q long"
        )

    def ref(T):
        co = R.join(T["customers"], T["orders"], lambda c, o: c["ckey"] == o["ckey"])
        j = R.join(co, T["items"], lambda a, b: a["okey"] == b["okey"], "left")
        return group_rows(
            j,
            lambda r: (None if r.get("qty") is None else r["qty"] % 2,),
            lambda k, rs: [{"q2": k[0], "n": len(rs), "q": sum(r.get("qty") or 0 for r in rs)}],
        )

    check(lc, spark, data, build, ref, ["q2", "n", "q"])


def test_cogroup_apply_in_pandas(lc, spark, data):
    """A cogrouped map: each row made from both groups of its key (one of them may be empty;
    items' null keys make a group of their own)."""

    def pair(key, left, right):
        k = key[0]
        return pd.DataFrame(
            {"okey": [None if pd.isna(k) else int(k)], "no": [len(left)], "ni": [len(right)]}
        )

    def build(t):
        orders = t["orders"].where("status = 'F'").groupBy("okey")
        return orders.cogroup(t["items"].groupBy("okey")).applyInPandas(
            pair, "okey int, no long, ni long"
        )

    def ref(T):
        orders = R.where(T["orders"], lambda r: r["status"] == "F")
        keys = {r["okey"] for r, _ in orders} | {r["okey"] for r, _ in T["items"]}
        out = []
        for k in keys:
            lo = [(r, lin) for r, lin in orders if r["okey"] == k]
            li = [(r, lin) for r, lin in T["items"] if r["okey"] == k]
            lin = frozenset().union(*(x for _, x in lo + li))
            out.append(({"okey": k, "no": len(lo), "ni": len(li)}, lin))
        return out

    check(lc, spark, data, build, ref, ["okey", "no", "ni"])


@pytest.mark.parametrize("form", ["grouped", "cogrouped"])
def test_apply_in_arrow(lc, spark, data, form):
    """applyInArrow (Arrow tables in and out), grouped and cogrouped."""

    def first_price(table: pa.Table) -> pa.Table:
        return pa.table(
            {"qty": table.column("qty").slice(0, 1), "n": pa.array([table.num_rows], pa.int64())}
        )

    def sizes(key, left: pa.Table, right: pa.Table) -> pa.Table:
        return pa.table(
            {
                "ckey": pa.array([key[0].as_py()], pa.int32()),
                "n": pa.array([left.num_rows + right.num_rows], pa.int64()),
            }
        )

    def build(t):
        if form == "grouped":
            return t["items"].groupBy("qty").applyInArrow(first_price, "qty int, n long")
        return (
            t["orders"]
            .groupBy("ckey")
            .cogroup(t["customers"].groupBy("ckey"))
            .applyInArrow(sizes, "ckey int, n long")
        )

    def ref(T):
        if form == "grouped":
            return group_rows(
                T["items"], lambda r: (r["qty"],), lambda k, rs: [{"qty": k[0], "n": len(rs)}]
            )
        both = T["orders"] + T["customers"]
        return group_rows(
            both, lambda r: (r["ckey"],), lambda k, rs: [{"ckey": k[0], "n": len(rs)}]
        )

    check(lc, spark, data, build, ref, ["qty", "n"] if form == "grouped" else ["ckey", "n"])


def _bad_qty():
    def per_qty(pdf):
        q = int(pdf["qty"].iloc[0])
        if q == 3:
            raise ValueError(f"no quantity {q}")
        return pd.DataFrame({"qty": [q], "n": [len(pdf)]})

    return per_qty


def _lines(data, name, pred):
    return {line for r, line in zip(data.rows[name], data.lines[name]) if pred(r)}


def test_iterator_forms(lc, spark, data):
    """A function over an iterator of the group's batches (chosen by its type hints; several
    batches a group here): each row it returns is made from every row it read, in pandas,
    keyed, and Arrow."""
    spark.conf.set("spark.sql.execution.arrow.maxRecordsPerBatch", "4")

    def rows_back(it: Iterator[pd.DataFrame]) -> Iterator[pd.DataFrame]:
        for pdf in it:
            yield pdf[["okey", "qty"]]

    def counted(key: tuple, it: Iterator[pd.DataFrame]) -> Iterator[pd.DataFrame]:
        n = sum(len(pdf) for pdf in it)
        yield pd.DataFrame({"qty": [int(key[0])], "n": [n]})

    def arrow_back(it: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in it:
            yield batch.select(["okey", "qty"])

    def every_row(T):
        return group_rows(T["items"], lambda r: (r["qty"],), lambda k, rs: rs)

    def sizes(T):
        return group_rows(
            T["items"], lambda r: (r["qty"],), lambda k, rs: [{"qty": k[0], "n": len(rs)}]
        )

    try:
        for func, arrow, schema, ref, cols in [
            (rows_back, False, "okey int, qty int", every_row, ["okey", "qty"]),
            (counted, False, "qty int, n long", sizes, ["qty", "n"]),
            (arrow_back, True, "okey int, qty int", every_row, ["okey", "qty"]),
        ]:

            def build(t, func=func, arrow=arrow, schema=schema):
                grouped = t["items"].groupBy("qty")
                if arrow:
                    return grouped.applyInArrow(func, schema)
                return grouped.applyInPandas(func, schema)

            check(LineageContext(spark, lc.repo), spark, data, build, ref, cols)
    finally:
        spark.conf.unset("spark.sql.execution.arrow.maxRecordsPerBatch")


def test_a_failing_group_names_its_rows_and_fails(lc, data):
    items = tables(lc.read, data)["items"]
    with pytest.raises(Exception, match="no quantity 3"):
        items.groupBy("qty").applyInPandas(_bad_qty(), "qty int, n long").collect()
    # Every row of the failing group, no other (each attempt names the same rows).
    assert {c.data for c in lc.culprits()} == _lines(data, "items", lambda r: r[2] == 3)
    assert {c.exception for c in lc.culprits()} == {"ValueError"}


def test_skip_drops_a_failing_group(spark, repo, data):
    lc = LineageContext(spark, repo, on_error="skip")
    items = tables(lc.read, data)["items"]
    q = items.groupBy("qty").applyInPandas(_bad_qty(), "qty int, n long")
    got = {r.qty: r.n for r in q.collect()}
    sizes: dict[int, int] = {}
    for r in data.rows["items"]:
        sizes[r[2]] = sizes.get(r[2], 0) + 1
    assert got == {k: n for k, n in sizes.items() if k != 3}
    assert sorted(c.data for c in lc.culprits()) == sorted(
        _lines(data, "items", lambda r: r[2] == 3)
    )
    back = q.lineage().filter(lambda r: r["qty"] == 2).go_back_all().collect()
    assert set(back) == _lines(data, "items", lambda r: r[2] == 2)


def test_refusals(lc, data):
    items = tables(lc.read, data)["items"]

    with pytest.raises(UnsupportedOperation, match="applyInPandas after rollup"):
        items.rollup("qty").applyInPandas(lambda pdf: pdf, "okey int, price double, qty int")
    with pytest.raises(TypeError, match="takes 3 positional arguments"):
        items.groupBy("qty").applyInPandas(lambda a, b, c: a, "qty int")


def test_capture_off_is_vanilla(spark, repo, data):
    lc = LineageContext(spark, repo, capture=False)

    def top(pdf):
        return pdf.nlargest(1, "price")

    frames = [tables(r.read, data)["items"] for r in (lc, spark)]
    schema = "okey int, price double, qty int"
    q, vq = (f.groupBy("qty").applyInPandas(top, schema) for f in frames)

    assert plan_shape(q.dataframe) == plan_shape(vq)
    assert sorted(q.collect()) == sorted(vq.collect())


def test_a_take_finds_its_group(lc, data):
    """A take stops reading early: the rows it took still trace back to their whole group
    (the groups' records are journaled before any row is handed on); every row of a group
    names one record, stored once."""

    def rows_back(pdf):
        # Big rows: the worker is still writing when the take has its rows.
        return pdf[["qty"]].assign(pad="x" * (1 << 20))

    items = tables(lc.read, data)["items"]
    q = items.groupBy("qty").applyInPandas(rows_back, "qty int, pad string")
    taken = q.take(2)
    lin = q.lineage()
    assert len(lin.record_ids) == 2
    for i, row in enumerate(taken):
        back = LineageRDD(lc.repo, lc.run_id, lin.record_ids[i : i + 1]).go_back_all()
        assert set(back.collect()) == _lines(data, "items", lambda r, q=row.qty: r[2] == q)
    # Each taken row has one parent, its group's record (not the group's rows).
    parents = lc.repo.lineage.parent_lists(lc.run_id, lin.record_ids)
    assert [len(p) for p in parents.values()] == [1, 1]
