"""TPC-DS coverage of `lc.sql`: how many of the 99 queries run captured and give vanilla
Spark's rows, at a tiny scale factor.

    python bench/tpcds.py [--sf 0.01] [--queries 1,2,3] [--no-trace]

Data and query texts come from DuckDB's tpcds extension (the `duckdb-ext-tpcds` package),
generated under bench/out/ at run time (never committed). The 24 tables are written as
Parquet and read twice on one local[2] SparkSession: with `spark.read` (vanilla) and with
`lc.read` (captured), each registered as a temp view of the same name. For each query the
text DuckDB ships is used when vanilla Spark runs it, else sqlglot's DuckDB -> Spark
transpilation of it. A query counts as covered when `lc.sql` runs it and returns the same
multiset of rows as `spark.sql` (numbers compared to 6 decimals); then, unless --no-trace,
its first output row is traced back to its source rows (a smoke check: how many rows come
back is printed, not judged). Printed: one line per query (equal / differs / refused with
the `UnsupportedOperation` message / error), then the totals.
"""

from __future__ import annotations

import argparse
import decimal
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from typing import Any

sys.path.insert(0, os.path.dirname(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests"))
from _common import local_spark
from _tpch import duckdb_with

from agent import LineageContext, LineageRDD, UnsupportedOperation
from repository import ProvenanceRepository, RepositoryConfig


def generate(sf: float, out: str) -> list[str]:
    """The TPC-DS tables at scale factor `sf` as `<out>/<table>.parquet` (kept between runs)."""
    con = duckdb_with("tpcds")
    done = os.path.join(out, "_done")
    if not os.path.exists(done):
        con.execute(f"CALL dsdgen(sf={sf})")
        os.makedirs(out, exist_ok=True)
        for (t,) in con.execute("SHOW TABLES").fetchall():
            con.execute(f"COPY {t} TO '{out}/{t}.parquet' (FORMAT PARQUET)")
        open(done, "w").close()
    return sorted(f[: -len(".parquet")] for f in os.listdir(out) if f.endswith(".parquet"))


def queries() -> dict[int, str]:
    rows = duckdb_with("tpcds").execute("SELECT query_nr, query FROM tpcds_queries()").fetchall()
    return {int(n): q.strip().rstrip(";") for n, q in rows}


def _norm(v: Any) -> Any:
    if isinstance(v, float | decimal.Decimal):
        return round(float(v), 6)
    return v


def rows_of(rows: list) -> Counter:
    return Counter(tuple(_norm(v) for v in r) for r in rows)


def spark_text(spark: Any, text: str) -> tuple[str | None, str]:
    """The query text vanilla Spark runs (DuckDB's, else transpiled), or None and why."""
    import sqlglot

    try:
        spark.sql(text).schema  # noqa: B018 (analysis only)
        return text, "duckdb text"
    except Exception as e:
        first = _one_line(e)
    try:
        t = sqlglot.transpile(text, read="duckdb", write="spark")[0]
        spark.sql(t).schema  # noqa: B018
        return t, "transpiled"
    except Exception as e:
        return None, f"{first} / transpiled: {_one_line(e)}"


def _one_line(e: BaseException) -> str:
    try:
        text = str(e).strip()
    except Exception:  # a Py4J error whose JVM is gone
        text = ""
    return (text.splitlines() or [type(e).__name__])[0][:160]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sf", type=float, default=0.01)
    ap.add_argument("--queries", default="", help="comma-separated query numbers (all: empty)")
    ap.add_argument("--no-trace", action="store_true")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    out = os.path.join(os.path.dirname(__file__), "out", f"tpcds-sf{args.sf:g}")
    tables = generate(args.sf, out)
    texts = queries()
    wanted = [int(q) for q in args.queries.split(",") if q] or sorted(texts)
    if not args.child:
        return parent(args, wanted)
    run_queries(args, out, tables, texts, wanted)
    return 0


def parent(args: argparse.Namespace, wanted: list[int]) -> int:
    """Runs the queries in a child process (which re-executes itself when a query kills its
    driver JVM); when the child dies anyway, counts the query it was on as crashed and goes
    on with the next in a new child."""
    tally: Counter = Counter()
    remaining = list(wanted)
    while remaining:
        cmd = [sys.executable, __file__, "--child", "--sf", str(args.sf)]
        cmd += ["--queries", ",".join(map(str, remaining))] + (
            ["--no-trace"] if args.no_trace else []
        )
        done: set[int] = set()
        with subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True) as child:
            assert child.stdout is not None
            for line in child.stdout:
                print(line, end="", flush=True)
                if line.startswith("q") and line[1:3].isdigit():
                    done.add(int(line[1:3]))
                    tally[line[4:19].strip()] += 1
        remaining = [q for q in remaining if q not in done]
        if child.returncode != 0 and remaining:
            print(f"q{remaining[0]:02d} crashed        the driver died (exit {child.returncode})")
            tally["crashed"] += 1
            remaining = remaining[1:]
        elif child.returncode != 0 or remaining:
            break
    print(f"TPC-DS sf {args.sf:g}, {len(wanted)} queries:")
    for k, v in tally.most_common():
        print(f"  {k:<32} {v:>3}")
    covered = tally["equal"] + tally["equal-empty"]
    print(f"  covered (captured == vanilla): {covered} / {len(wanted)}")
    return 0


def _go_on_if_dead(
    spark: Any, work: str, args: argparse.Namespace, wanted: list[int], n: int, e: Exception
) -> None:
    """When query n killed the driver JVM (out of memory), report it as crashed and go on
    with the next queries in this process's place (a SparkSession cannot be restarted once
    its JVM is gone)."""
    try:
        spark.sql("SELECT 1").collect()
        return
    except Exception:
        pass
    print(f"q{n:02d} crashed        the driver JVM died: {_one_line(e)}", flush=True)
    shutil.rmtree(work, ignore_errors=True)
    rest = wanted[wanted.index(n) + 1 :]
    if not rest:
        os._exit(0)
    cmd = [sys.executable, __file__, "--child", "--sf", str(args.sf)]
    cmd += ["--queries", ",".join(map(str, rest))]
    cmd += ["--no-trace"] if args.no_trace else []
    os.execv(sys.executable, cmd)


def run_queries(
    args: argparse.Namespace, out: str, tables: list[str], texts: dict[int, str], wanted: list[int]
) -> None:
    spark = local_spark("provrepo-tpcds", memory="2g")
    spark.conf.set("spark.sql.shuffle.partitions", "4")
    work = tempfile.mkdtemp(prefix="provrepo-tpcds-")
    try:
        with ProvenanceRepository.open(f"{work}/repo", RepositoryConfig(sync="none")) as repo:
            lc = LineageContext(spark, repo)
            vanilla_views = {t: spark.read.parquet(f"{out}/{t}.parquet") for t in tables}
            captured_views = {t: lc.read.parquet(f"{out}/{t}.parquet") for t in tables}
            for n in wanted:
                for t, df in vanilla_views.items():
                    df.createOrReplaceTempView(t)
                text, how = spark_text(spark, texts[n])
                started = time.perf_counter()
                if text is None:
                    print(f"q{n:02d} vanilla-error  {how}", flush=True)
                    continue
                try:
                    vanilla = spark.sql(text).collect()
                except Exception as e:
                    _go_on_if_dead(spark, work, args, wanted, n, e)
                    print(f"q{n:02d} vanilla-error  {_one_line(e)}", flush=True)
                    continue
                for t, df in captured_views.items():
                    df.createOrReplaceTempView(t)
                try:
                    q = lc.sql(text)
                    got = q.collect()
                except UnsupportedOperation as e:
                    print(f"q{n:02d} refused        {_one_line(e)}", flush=True)
                    continue
                except Exception as e:
                    _go_on_if_dead(spark, work, args, wanted, n, e)
                    print(f"q{n:02d} captured-error {_one_line(e)}", flush=True)
                    continue
                seconds = time.perf_counter() - started
                if rows_of(got) != rows_of(vanilla):
                    limit = (
                        " (ORDER BY ... LIMIT: ties may differ)" if "limit" in text.lower() else ""
                    )
                    print(f"q{n:02d} differs        {len(got)} vs {len(vanilla)} rows{limit}")
                    continue
                traced = ""
                if got and not args.no_trace:
                    ids = q.lineage().record_ids[:1]
                    back = LineageRDD(repo, lc.run_id, ids).go_back_all().record_ids
                    traced = f", row 1 traces back to {len(back)} source rows"
                kind = "equal         " if got else "equal-empty   "
                print(f"q{n:02d} {kind} {len(got)} rows ({how}, {seconds:.1f} s){traced}")
    finally:
        spark.stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
