"""`lc.sql` runs what the user wrote: the functions and clauses sqlglot used to rewrite into
something else (WITHIN GROUP percentiles, to_char, parse_json, log10 / log2, TABLESAMPLE
... REPEATABLE), a `*` inside an expression (which saw the views' hidden lineage columns),
and `spark.sql`'s `args=` / `**kwargs`. Rows equal vanilla Spark SQL's; every row's backward
trace and every line's forward trace equal the brute-force reference's (`_dfcheck`)."""

from __future__ import annotations

import json
import math
from collections import Counter
from contextlib import contextmanager

import _dfref as R
import pytest
from _dfcheck import Data, check, make_data, tables

from agent import UnsupportedOperation

pytestmark = pytest.mark.spark


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> Data:
    return make_data(tmp_path_factory.mktemp("tables"))


def sql(lc, text: str, args=None, frames: tuple[str, ...] = ()):
    """A `check` builder: the tables as views (or, for `frames`, as `{name}` DataFrame
    arguments), `text` through lc.sql (captured) or spark.sql (vanilla)."""

    def build(t):
        first = next(iter(t.values()))
        captured = hasattr(first, "lineage_columns")
        suffix = "" if captured else "_v"
        q, a = text, dict(args) if isinstance(args, dict) else args
        for name, df in t.items():
            if name not in frames:
                df.createOrReplaceTempView(name + suffix)
                q = q.replace("{" + name + "}", name + suffix)
                if isinstance(a, dict):  # (a view's name as a string argument)
                    a = {k: name + suffix if v == "{" + name + "}" else v for k, v in a.items()}
        kwargs = {n: t[n] for n in frames}
        if captured:
            return lc.sql(q, a, **kwargs)
        return first.sparkSession.sql(q, a, **kwargs)

    return build


@contextmanager
def as_checked(spark):
    """The scan settings `check` runs its queries under (more actions over its sources must
    plan their scans as it did)."""
    spark.conf.set("spark.sql.files.maxPartitionBytes", "700")
    try:
        yield
    finally:
        spark.conf.unset("spark.sql.files.maxPartitionBytes")


def run(lc, spark, data, text, ref, cols, ordered=False, args=None, frames=()):
    return check(lc, spark, data, sql(lc, text, args, frames), ref, cols, ordered)


def vanilla(spark, data, text, key: str) -> dict:
    """Vanilla Spark SQL's rows of `text` by `key`: the values a reference takes from Spark
    (`check` compares the captured rows with vanilla's; the reference gives the lineage)."""
    for name, df in tables(spark.read, data).items():
        df.createOrReplaceTempView(name + "_v")
        text = text.replace("{" + name + "}", name + "_v")
    return {r[key]: r.asDict() for r in spark.sql(text).collect()}


def _by(t, key):
    groups: dict = {}
    for r, lin in t:
        groups.setdefault(key(r), []).append((r, lin))
    return groups


def _percentile_cont(values: list[float], p: float) -> float:
    v = sorted(values)
    pos = p * (len(v) - 1)
    lo, hi = math.floor(pos), math.ceil(pos)
    return v[lo] + (v[hi] - v[lo]) * (pos - lo)


def _rows_by(data: Data, table: str, key: str) -> dict:
    from _dfcheck import SCHEMAS

    cols = [c.split()[0] for c in SCHEMAS[table].split(", ")]
    out: dict = {}
    for row in data.rows[table]:
        r = dict(zip(cols, row))
        if r[key] is not None:
            out.setdefault(r[key], []).append(r)
    return out


# -- functions sqlglot translated ------------------------------------------------------------


@pytest.mark.parametrize("desc", [False, True])
def test_within_group_percentiles_as_aggregates(lc, spark, data, desc):
    # Were PERCENTILE_APPROX(price, 0.3), DESC dropped: other values.
    order = "DESC" if desc else ""
    text = f"""SELECT okey, percentile_cont(0.3) WITHIN GROUP (ORDER BY price {order}) AS c,
                      percentile_disc(0.3) WITHIN GROUP (ORDER BY price {order}) AS d
               FROM {{items}} WHERE okey IS NOT NULL GROUP BY okey"""
    got = vanilla(spark, data, text, "okey")
    prices = {k: [r["price"] for r in rs] for k, rs in _rows_by(data, "items", "okey").items()}
    for k, v in got.items():  # (vanilla's values are the percentiles)
        assert v["c"] == pytest.approx(_percentile_cont(prices[k], 0.7 if desc else 0.3))

    def ref(T):
        items = R.where(T["items"], lambda r: r["okey"] is not None)
        return [
            (got[k], frozenset().union(*(lin for _, lin in rows)))
            for k, rows in _by(items, lambda r: r["okey"]).items()
        ]

    run(lc, spark, data, text, ref, ["okey", "c", "d"])


def test_within_group_percentile_as_a_window(lc, spark, data):
    # Was PERCENTILE_APPROX(...) OVER: MISSING_GROUP_BY. A frame's rows are its lineage.
    text = """SELECT okey, qty, price, percentile_cont(0.5) WITHIN GROUP (ORDER BY price DESC)
                  OVER (PARTITION BY qty) AS m FROM {items}"""

    def ref(T):
        out = []
        for rows in _by(T["items"], lambda r: r["qty"]).values():
            m = _percentile_cont([r["price"] for r, _ in rows], 0.5)
            frame = frozenset().union(*(lin for _, lin in rows))
            out += [({**r, "m": m}, frame) for r, _ in rows]
        return out

    run(lc, spark, data, text, ref, ["okey", "qty", "price", "m"])


def test_to_char_log10_log2(lc, spark, data):
    # Were CAST(x AS STRING) and LOG(10, x) / LOG(2, x): other strings, and floats that
    # differ in the last bit (compared exactly here, not rounded).
    text = """SELECT okey, qty, price, to_char(price, '9999.99') AS c,
                  to_char(to_date('2024-03-05'), 'yyyy') AS y, log10(price * 10) AS l10,
                  log2(qty + price) AS l2 FROM {items}"""

    def ref(T):
        return R.select(
            T["items"],
            lambda r: {
                **r,
                "c": f"{r['price']:7.2f}",
                "y": "2024",
                "l10": math.log10(r["price"] * 10),
                "l2": math.log2(r["qty"] + r["price"]),
            },
        )

    q = run(lc, spark, data, text, ref, ["okey", "qty", "price", "c", "y", "l10", "l2"])
    tables(spark.read, data)["items"].createOrReplaceTempView("items_v")
    exact = spark.sql(text.replace("{items}", "items_v")).collect()
    with as_checked(spark):
        got = q.collect()
    assert Counter(map(tuple, got)) == Counter(map(tuple, exact))


def test_parse_json_and_variant_get(lc, spark, data):
    # parse_json was dropped: a string where a variant is (variant_get failed).
    text = """SELECT okey, qty, variant_get(parse_json(concat('{"q":', qty, '}')), '$.q', 'int')
                  AS q, typeof(parse_json('[1]')) AS t FROM {items}"""

    def ref(T):
        return R.select(
            T["items"],
            lambda r: {"okey": r["okey"], "qty": r["qty"], "q": r["qty"], "t": "variant"},
        )

    run(lc, spark, data, text, ref, ["okey", "qty", "q", "t"])


def test_tablesample_repeatable(lc, spark, data):
    # Was written `SEED (3)`: a ParseException.
    text = "SELECT okey, ckey FROM {orders} TABLESAMPLE (50 PERCENT) REPEATABLE (3)"
    with as_checked(spark):  # (vanilla's sample, as check reads the file: its rows)
        vanilla = sql(lc, text)(tables(spark.read, data)).collect()
        assert sorted(vanilla) == sorted(sql(lc, text)(tables(spark.read, data)).collect())
    assert 0 < len(vanilla) < len(data.rows["orders"])
    kept = {(r.okey, r.ckey) for r in vanilla}

    def ref(T):
        o = R.where(T["orders"], lambda r: (r["okey"], r["ckey"]) in kept)
        return R.select(o, lambda r: {"okey": r["okey"], "ckey": r["ckey"]})

    run(lc, spark, data, text, ref, ["okey", "ckey"])


# -- a star inside an expression -------------------------------------------------------------


def _json(r: dict, cols: list[str]) -> str:
    return json.dumps({c: r[c] for c in cols if r[c] is not None}, separators=(",", ":"))


def test_star_inside_expressions_over_one_view(lc, spark, data):
    # `*` expanded over the view's hidden lineage columns too: other values.
    text = """SELECT ckey, to_json(struct(*)) AS j, hash(*) AS h, xxhash64(*) AS x,
                  to_json(struct(c.*)) AS k FROM {customers} c"""
    cols = ["ckey", "name", "nation"]
    hashes = {}

    def ref(T):
        return R.select(
            T["customers"],
            lambda r: {
                "ckey": r["ckey"],
                "j": _json(r, cols),
                "h": hashes[("h", r["ckey"])],
                "x": hashes[("x", r["ckey"])],
                "k": _json(r, cols),
            },
        )

    tables(spark.read, data)["customers"].createOrReplaceTempView("cv")
    for r in spark.sql("SELECT ckey, hash(*) AS h, xxhash64(*) AS x FROM cv").collect():
        hashes[("h", r.ckey)], hashes[("x", r.ckey)] = r.h, r.x
    run(lc, spark, data, text, ref, ["ckey", "j", "h", "x", "k"])


def test_star_inside_aggregates_and_a_join(lc, spark, data):
    # struct(*) over a join: both items' visible columns, customers' then orders'.
    text = """SELECT c.nation, count(*) AS n, size(collect_set(struct(o.*))) AS d,
                  sort_array(collect_list(struct(o.okey, to_json(struct(*))))) AS l
              FROM {customers} c JOIN {orders} o ON c.ckey = o.ckey
              WHERE hash(*) IS NOT NULL GROUP BY c.nation"""
    got = vanilla(spark, data, text, "nation")
    for row in got.values():  # (vanilla's struct(*): customers' columns, then orders')
        fields = list(json.loads(row["l"][0][1]))
        assert fields[:3] == ["ckey", "name", "nation"] and "okey" in fields

    def ref(T):
        j = R.join(T["customers"], T["orders"], lambda a, b: a["ckey"] == b["ckey"])
        return [
            (got[nation], frozenset().union(*(lin for _, lin in rows)))
            for nation, rows in _by(j, lambda r: r["nation"]).items()
        ]

    run(lc, spark, data, text, ref, ["nation", "n", "d", "l"])


def test_star_inside_an_in_subquery_left_as_written(lc, spark, data):
    # The IN predicate stays as written, its subquery over a view with hidden columns too.
    text = """SELECT ckey, name FROM {customers}
              WHERE hash(ckey, name, nation) IN (SELECT hash(*) FROM {customers} WHERE ckey < 5)"""

    def ref(T):
        c = T["customers"]
        small = R.where(c, lambda r: r["ckey"] < 5)
        j = R.join(c, small, lambda a, b: a["ckey"] == b["ckey"], "semi")
        return R.select(j, lambda r: {"ckey": r["ckey"], "name": r["name"]})

    run(lc, spark, data, text, ref, ["ckey", "name"])


def test_natural_join_of_views_of_one_frame(lc, spark, data):
    # Two views of one frame share its hidden lineage column's name: NATURAL JOIN joined on
    # it too (each row with itself only). Now the USING join on their common visible columns.
    def build(t):
        orders = t["orders"]
        orders.select("ckey", "status").where("status = 'F'").createOrReplaceTempView("nf")
        orders.select("ckey", "status", "okey").createOrReplaceTempView("na")
        text = "SELECT ckey, status, okey FROM nf NATURAL JOIN na"
        if hasattr(orders, "lineage_columns"):
            return lc.sql(text)
        return orders.sparkSession.sql(text)

    def ref(T):
        f = R.where(T["orders"], lambda r: r["status"] == "F")
        j = R.join(
            f,
            T["orders"],
            lambda a, b: (a["ckey"], a["status"]) == (b["ckey"], b["status"]),
            "inner",
            lambda a, b: {"ckey": a["ckey"], "status": a["status"], "okey": b["okey"]},
        )
        assert len(j) > len(f)  # rows of equal values pair with one another
        return j

    check(lc, spark, data, build, ref, ["ckey", "status", "okey"])


@pytest.mark.parametrize(
    ("text", "what"),
    [
        (
            "SELECT hash(*) FROM orders JOIN customers USING (ckey)",
            "USING / NATURAL",
        ),
        (
            "SELECT hash(*) FROM (SELECT o.ckey, c.ckey FROM orders o JOIN customers c "
            "ON o.ckey = c.ckey) d",
            "names repeat",
        ),
    ],
)
def test_star_inside_expressions_refused(lc, spark, data, text, what):
    for name, df in tables(lc.read, data).items():
        df.createOrReplaceTempView(name)
    assert spark.sql(text).columns  # (Spark runs it)
    with pytest.raises(UnsupportedOperation, match=what):
        lc.sql(text)


# -- spark.sql's arguments -------------------------------------------------------------------


@pytest.mark.parametrize("args", [{"q": 3, "s": "F"}, [3, "F"]], ids=["named", "positional"])
def test_parameter_markers(lc, spark, data, args):
    named = isinstance(args, dict)
    q, s = (":q", ":s") if named else ("?", "?")
    # A marker in a subquery and the block too: the subquery is analyzed alone.
    text = f"""SELECT okey, status FROM {{orders}}
               WHERE okey IN (SELECT okey FROM {{items}} WHERE qty >= {q}) AND status = {s}"""

    def ref(T):
        o = R.where(T["orders"], lambda r: r["status"] == "F")
        i = R.where(T["items"], lambda r: r["qty"] >= 3)
        j = R.join(o, i, lambda a, b: a["okey"] == b["okey"], "semi")
        return R.select(j, lambda r: {"okey": r["okey"], "status": r["status"]})

    query = run(lc, spark, data, text, ref, ["okey", "status"], args=args)
    # Replay runs the recorded text with the same arguments.
    traced = query.lineage().go_back_all()
    with as_checked(spark):
        assert Counter(lc.replay(traced)) == Counter(query.collect())


def test_dataframe_arguments(lc, spark, data):
    text = """SELECT o.okey, c.name FROM {orders} o JOIN {customers} c ON o.ckey = c.ckey
              WHERE o.status = {status}"""

    def ref(T):
        o = R.where(T["orders"], lambda r: r["status"] == "O")
        j = R.join(o, T["customers"], lambda a, b: a["ckey"] == b["ckey"])
        return R.select(j, lambda r: {"okey": r["okey"], "name": r["name"]})

    def build(t):
        status = "O"
        first = t["orders"]
        if hasattr(first, "lineage_columns"):
            return lc.sql(text, orders=t["orders"], customers=t["customers"], status=status)
        return first.sparkSession.sql(
            text, orders=t["orders"], customers=t["customers"], status=status
        )

    query = check(lc, spark, data, build, ref, ["okey", "name"])
    traced = query.lineage().go_back_all()
    with as_checked(spark):
        assert Counter(lc.replay(traced)) == Counter(query.collect())


def test_dataframe_arguments_must_have_lineage(lc, spark, data):
    plain = tables(spark.read, data)["orders"]
    with pytest.raises(UnsupportedOperation, match="not made through this LineageContext"):
        lc.sql("SELECT okey FROM {t}", t=plain)


@pytest.mark.parametrize(
    ("table", "args"), [("IDENTIFIER('{orders}')", None), ("IDENTIFIER(:t)", {"t": "{orders}"})]
)
def test_identifier(lc, spark, data, table, args):
    text = f"SELECT okey, ckey FROM {table} WHERE ckey = 3"

    def ref(T):
        o = R.where(T["orders"], lambda r: r["ckey"] == 3)
        return R.select(o, lambda r: {"okey": r["okey"], "ckey": r["ckey"]})

    run(lc, spark, data, text, ref, ["okey", "ckey"], args=args)


def test_table_functions_are_not_views(lc):
    # The message named an empty view.
    with pytest.raises(UnsupportedOperation, match=r"FROM range\(3\) is not a view"):
        lc.sql("SELECT id FROM range(3)")


def test_capture_off_takes_the_same_arguments(spark, tmp_path, data):
    from agent import LineageContext
    from repository import ProvenanceRepository, RepositoryConfig

    config = RepositoryConfig(sync="none", rollover_interval=3600)
    with ProvenanceRepository.open(tmp_path / "repo", config) as repo:
        off = LineageContext(spark, repo, capture=False)
        orders = tables(off.read, data)["orders"]
        got = off.sql("SELECT okey FROM {o} WHERE ckey = ?", [3], o=orders).collect()
    want = spark.sql(
        "SELECT okey FROM {o} WHERE ckey = ?", [3], o=tables(spark.read, data)["orders"]
    ).collect()
    assert sorted(got) == sorted(want)
