"""Replay of DataFrame and `lc.sql` queries, operator by operator, against brute force.

For each shape: an output row is traced back to its source rows; selective replay of them
must equal the same query run with capture off (vanilla PySpark) over exactly those rows,
and exclusive replay without them must equal it over every other row. One table set of five
source kinds: orders (CSV), items (Parquet), cust (`createDataFrame`), events (JSON lines,
with an array to explode) and notes (text).
"""

from __future__ import annotations

import json

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyspark.sql import Observation, Window
from pyspark.sql import functions as F

from agent import LineageContext, UnsupportedOperation

pytestmark = pytest.mark.spark

ORDERS = [(i, i % 5, "F" if i % 3 else "O", (i * 7) % 23) for i in range(40)]  # okey ckey st amt
ITEMS = [(k, (k * 11) % 60, float(k % 9 + 1)) for k in range(50)]  # ikey okey price
CUST = [(c, f"name{c}", c % 2) for c in range(6)]  # ckey name seg (ckey 5 has no order)
TAGS = ["red", "blue", "green"]
EVENTS = [(e, (e * 3) % 45, "k" + str(e % 3), TAGS[: e % 4]) for e in range(30)]  # eid okey k tags
NOTES = [(n, f"note {n} {(n * 5) % 40} {'x' * (n % 4)}") for n in range(25)]  # key, line

SCHEMAS = {
    "orders": "okey INT, ckey INT, status STRING, amount INT",
    "items": "ikey INT, okey INT, price DOUBLE",
    "cust": "ckey INT, name STRING, seg INT",
    "events": "eid INT, okey INT, kind STRING, tags ARRAY<STRING>",
    "notes": "value STRING",
}


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("replay-ops")
    (d / "orders.csv").write_text(
        "okey,ckey,status,amount\n" + "".join(",".join(map(str, r)) + "\n" for r in ORDERS)
    )
    cols = list(zip(*ITEMS))
    pq.write_table(
        pa.table(
            {
                "ikey": pa.array(cols[0], pa.int32()),
                "okey": pa.array(cols[1], pa.int32()),
                "price": pa.array(cols[2], pa.float64()),
            }
        ),
        d / "items.parquet",
        row_group_size=16,
    )
    (d / "events.json").write_text(
        "".join(
            json.dumps({"eid": e, "okey": o, "kind": k, "tags": t}) + "\n" for e, o, k, t in EVENTS
        )
    )
    (d / "notes.txt").write_text("".join(line + "\n" for _, line in NOTES))
    return d


def captured(lc, files) -> dict:
    """The five sources through `lc`, also as views."""
    t = {
        "orders": lc.read.csv(str(files / "orders.csv"), header=True, schema=SCHEMAS["orders"]),
        "items": lc.read.parquet(str(files / "items.parquet")),
        "cust": lc.createDataFrame(CUST, SCHEMAS["cust"]),
        "events": lc.read.json(str(files / "events.json"), schema=SCHEMAS["events"]),
        "notes": lc.read.text(str(files / "notes.txt")),
    }
    for name, df in t.items():
        df.createOrReplaceTempView(name)
    return t


def vanilla(spark, keep: dict[str, set[int] | None]) -> dict:
    """The same five tables, capture off, holding only the rows whose keys `keep` lists
    (None: every row), also as views (replacing the captured ones' names)."""
    data = {
        "orders": ORDERS,
        "items": ITEMS,
        "cust": CUST,
        "events": [(e, o, k, list(t)) for e, o, k, t in EVENTS],
        "notes": NOTES,
    }
    t = {}
    for name, rows in data.items():
        only = keep.get(name)
        rows = [r for r in rows if only is None or r[0] in only]
        if name == "notes":
            rows = [(line,) for _, line in rows]
        t[name] = spark.createDataFrame(rows, SCHEMAS[name])
        t[name].createOrReplaceTempView(name)
    return t


def keys_of(records: list) -> dict[str, set[int]]:
    """Traced raw source records by table: CSV / JSON / text lines, Parquet and
    createDataFrame Rows, each named by its first field."""
    out: dict[str, set[int]] = {n: set() for n in SCHEMAS}
    for rec in records:
        if isinstance(rec, str) and rec.startswith("{"):
            out["events"].add(json.loads(rec)["eid"])
        elif isinstance(rec, str) and rec.startswith("note "):
            out["notes"].add(int(rec.split()[1]))
        elif isinstance(rec, str):
            out["orders"].add(int(rec.split(",")[0]))
        else:
            out["items" if "ikey" in rec.__fields__ else "cust"].add(rec[0])
    return out


def rows(result) -> list:
    return sorted((tuple(r) for r in result), key=repr)


def _udf_skip(t, f):
    return t["orders"].select("okey", f("amount").alias("r"))


def w():
    return Window.partitionBy("ckey").orderBy("okey")


def _cogrouped_map(t):
    def total(key, left, right):  # local: cloudpickle ships it by value
        amount = int(left["amount"].sum())
        return pd.DataFrame({"okey": [int(key[0])], "amt": [amount], "n": [len(right)]})

    orders = t["orders"].groupBy("okey")
    return orders.cogroup(t["items"].groupBy("okey")).applyInPandas(
        total, "okey int, amt long, n long"
    )


def note_key():
    return F.split(F.col("value"), " ").getItem(2).cast("int")


# (id, query over the tables (DataFrame API) or lc.sql text; "pandas" / "skip": a UDF call).
# Each shape's picked row holds the Cui-Widom property: the query on its traced sources gives
# it back (see the README for the operators where that can fail).
SHAPES = [
    (
        "rollup (csv x createDataFrame)",
        lambda t: (
            t["orders"]
            .join(t["cust"], "ckey")
            .rollup("seg", "status")
            .agg(F.sum("amount").alias("s"), F.count("*").alias("n"))
        ),
    ),
    (
        "cube",
        lambda t: t["orders"].cube("status", "ckey").agg(F.max("amount").alias("m")),
    ),
    (
        "localCheckpoint, observe",
        lambda t: (
            t["orders"]
            .where("amount > 3")
            .localCheckpoint()
            .observe(Observation(), F.count("*").alias("n"))
            .join(t["items"], "okey")
            .groupBy("ckey")
            .agg(F.sum("price").alias("s"))
        ),
    ),
    (
        "groupingSets",
        lambda t: (
            t["orders"]
            .groupingSets([["ckey"], ["status"]], "ckey", "status")
            .agg(F.count("*").alias("n"))
        ),
    ),
    (
        "pivot",
        lambda t: t["orders"].groupBy("ckey").pivot("status", ["F", "X"]).agg(F.sum("amount")),
    ),
    (
        "unpivot",
        lambda t: t["orders"].unpivot("okey", ["ckey", "amount"], "var", "val"),
    ),
    (
        "intersect",
        lambda t: t["orders"].select("okey").intersect(t["items"].select("okey")),
    ),
    (
        "intersectAll",
        lambda t: (
            t["orders"]
            .select((F.col("okey") % 7).alias("k"))
            .intersectAll(t["items"].select((F.col("okey") % 7).alias("k")))
        ),
    ),
    (
        "subtract",
        lambda t: t["orders"].select("okey").subtract(t["items"].select("okey")),
    ),
    (
        "exceptAll",
        lambda t: (
            t["orders"]
            .select((F.col("okey") % 10).alias("k"))
            .exceptAll(t["items"].select((F.col("okey") % 9).alias("k")))
        ),
    ),
    (
        "dropDuplicates",
        lambda t: t["orders"].dropDuplicates(["ckey", "status"]).select("ckey", "status"),
    ),
    (
        "lag/lead",
        lambda t: t["orders"].select(
            "okey",
            F.lag("amount").over(w()).alias("prev"),
            F.lead("amount").over(w()).alias("next"),
        ),
    ),
    (
        "framed window aggregates",
        lambda t: t["orders"].select(
            "okey",
            F.sum("amount").over(w().rowsBetween(-2, 0)).alias("s3"),
            F.max("amount").over(w().rangeBetween(-10, 10)).alias("m"),
        ),
    ),
    (
        "explode (json)",
        lambda t: t["events"].select("eid", F.explode("tags").alias("tag")).where("tag <> 'red'"),
    ),
    (
        "left join (csv x parquet)",
        lambda t: t["orders"].join(t["items"].where(F.col("price") > 6), "okey", "left"),
    ),
    (
        "full join",
        lambda t: t["cust"].join(t["orders"].where(F.col("amount") > 15), "ckey", "full"),
    ),
    (
        "semi join",
        lambda t: t["orders"].join(t["items"].where(F.col("price") > 5), "okey", "left_semi"),
    ),
    (
        "anti join",
        lambda t: t["orders"].join(t["items"], "okey", "left_anti"),
    ),
    (
        "text source join + agg",
        lambda t: (
            t["notes"]
            .select(note_key().alias("okey"), F.length("value").alias("len"))
            .join(t["orders"], "okey")
            .groupBy("ckey")
            .agg(F.sum("len").alias("l"))
        ),
    ),
    (
        "sql: EXISTS + HAVING with a scalar subquery",
        "SELECT ckey, count(*) AS n FROM orders o WHERE EXISTS (SELECT 1 FROM items i "
        "WHERE i.okey = o.okey AND price > 4) GROUP BY ckey "
        "HAVING sum(amount) > (SELECT avg(amount) FROM orders)",
    ),
    (
        "sql: CTEs, joins over json / createDataFrame, NOT IN",
        "WITH e AS (SELECT okey, count(*) AS ne FROM events GROUP BY okey), "
        "c AS (SELECT * FROM cust WHERE seg = 1) "
        "SELECT o.okey, ne, c.name FROM orders o JOIN e ON o.okey = e.okey "
        "JOIN c ON c.ckey = o.ckey WHERE o.okey NOT IN (SELECT okey FROM items WHERE price > 8)",
    ),
    (
        "sql: text source, IN subquery, HAVING",
        "SELECT CAST(split(value, ' ')[2] AS INT) AS k, count(*) AS n FROM notes "
        "WHERE CAST(split(value, ' ')[2] AS INT) IN (SELECT okey FROM orders WHERE status = 'F') "
        "GROUP BY 1 HAVING count(*) >= 1",
    ),
    ("cogroup().applyInPandas (csv x parquet)", _cogrouped_map),
    ("pandas UDF", "pandas"),
    ("on_error=skip UDF", "skip"),
]


def build(lc, t, query, spark_udfs: bool = False):
    """The shape's query over tables `t`: captured through `lc`, or vanilla (`lc` None,
    `spark_udfs`: the UDFs as plain Spark UDFs)."""

    # Local functions: cloudpickle sends them by value (workers cannot import the tests).
    def inv(a: int) -> float:
        return 1.0 / (a % 5)

    def pandas_scaled(a: pd.Series) -> pd.Series:
        return a * 1.5 + 1

    if isinstance(query, str) and query == "pandas":
        f = (
            F.pandas_udf(pandas_scaled, "double")
            if spark_udfs
            else lc.udf.register("scaled", F.pandas_udf(pandas_scaled, "double"))
        )
        return t["orders"].select("okey", f("amount").alias("y"))
    if isinstance(query, str) and query == "skip":
        if spark_udfs:  # the rows whose call raises are dropped
            t = dict(t, orders=t["orders"].where(F.col("amount") % 5 != 0))
            return _udf_skip(t, F.udf(inv, "double"))
        return _udf_skip(t, lc.udf.register("inv", inv, "double"))
    if isinstance(query, str):
        return (lc or t["orders"].sparkSession).sql(query)
    return query(t)


@pytest.mark.parametrize("shape", SHAPES, ids=[s[0] for s in SHAPES])
def test_replay_equals_brute_force(spark, repo, files, shape):
    _, query = shape
    lc = LineageContext(spark, repo, on_error="skip" if query == "skip" else "fail")
    t = captured(lc, files)
    q = build(lc, t, query)
    out = q.collect()
    pick = sorted(out, key=repr)[len(out) // 2]
    traced = q.lineage().filter(lambda r: tuple(r) == tuple(pick)).go_back_all()
    sources = keys_of(traced.collect())
    assert any(sources.values())
    selective = rows(lc.replay(traced))
    exclusive = rows(lc.replay(q, exclude=traced))
    # Brute force: the query with capture off over only / all but the traced rows.
    only = {name: keys for name, keys in sources.items()}
    assert selective == rows(build(None, vanilla(spark, only), query, True).collect())
    rest = {
        name: {r[0] for r in data} - sources[name]
        for name, data in (
            ("orders", ORDERS),
            ("items", ITEMS),
            ("cust", CUST),
            ("events", EVENTS),
            ("notes", NOTES),
        )
    }
    assert exclusive == rows(build(None, vanilla(spark, rest), query, True).collect())
    assert tuple(pick) in set(selective)
    assert exclusive != rows(out)  # removing the row's sources changed the answer


def test_exclusion_at_one_source_and_refusals(spark, repo, files):
    """A DataFrame run's capture points are its sources and its actions' outputs (no
    intermediate ones): a trace's ancestors at one source replay as that source's rows; the
    output's records are refused, naming the capture point."""
    lc = LineageContext(spark, repo)
    t = captured(lc, files)
    q = t["orders"].join(t["cust"], "ckey").groupBy("seg").agg(F.sum("amount").alias("s"))
    q.collect()
    lin = q.lineage().filter(lambda r: r["seg"] == 1)
    names = {cp.component_id for cp in repo.lineage.run_info(lc.run_id).capture_points.values()}
    csv = next(n for n in names if n.startswith("csv"))
    at_csv = lin.ancestors().at(csv)
    dropped = keys_of(at_csv.collect())
    assert dropped["orders"] and not dropped["cust"]
    got = rows(lc.replay(q, exclude=at_csv))
    rest = {"orders": {r[0] for r in ORDERS} - dropped["orders"]}
    v = vanilla(spark, rest)
    want = v["orders"].join(v["cust"], "ckey").groupBy("seg").agg(F.sum("amount").alias("s"))
    assert got == rows(want.collect()) and got != rows(q.collect())
    for output in (lin, lin.go_back().go_next()):
        with pytest.raises(UnsupportedOperation, match=r"at collect#\d+ \(capture point \d+\)"):
            lc.replay(q, exclude=output)
    with pytest.raises(UnsupportedOperation, match="from their source rows only"):
        lc.replay(q, exclude=lin)


def test_replay_refuses_unseeded_randomness(spark, repo, files):
    """PySpark draws a seed per `sample()` call, and Spark one per analysis for a random
    function written without a seed in expression text or SQL: rebuilt, such a query would
    keep other rows (or make other values), so replay refuses it, naming it; with seeds
    (F.rand() carries one) it replays."""
    lc = LineageContext(spark, repo)
    orders = captured(lc, files)["orders"]
    some = orders.where(F.col("okey") < 5)
    some.collect()
    drop = some.lineage().go_back_all()
    refused = {
        r"sample\(\) without a seed": [
            orders.sample(0.5),
            orders.sample(False, 0.5),
            orders.sample(fraction=0.5),
        ],
        r"sampleBy\(\) without a seed": [orders.sampleBy("status", {"F": 0.5, "O": 1.0})],
        r"where\(\) with rand\(\)": [
            orders.where("rand() < 0.5"),
            orders.where(F.expr("rand() < 0.5")),
        ],
        r"selectExpr\(\) with uuid\(\)": [orders.selectExpr("okey", "uuid() AS u")],
        r"lc.sql query with TABLESAMPLE": [
            lc.sql("SELECT okey FROM orders TABLESAMPLE (50 PERCENT)")
        ],
        r"lc.sql query with rand\(\)": [lc.sql("SELECT okey, rand() AS r FROM orders")],
    }
    for match, queries in refused.items():
        for q in queries:
            q.collect()
            with pytest.raises(UnsupportedOperation, match=match):
                lc.replay(q, exclude=drop)
    kept = {r[0] for r in ORDERS if r[0] >= 5}
    for q in (
        orders.sample(0.5, 11),
        orders.sampleBy("status", {"F": 0.5, "O": 1.0}, 5),
        orders.where(F.rand(3) < 0.5),
        lc.sql("SELECT okey FROM orders WHERE rand(4) < 0.5"),
    ):
        q.collect()
        got = rows(lc.replay(q, exclude=drop))
        assert got and {r[0] for r in got} <= kept
