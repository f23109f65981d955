"""`provrepo demo`: a real PySpark pipeline with lineage capture, then traces.

A Titian-like server log (a few hundred thousand lines, error codes, a few garbled records)
is counted by error code; the report is written as text; then the most frequent code is traced
back to a sample of the log lines behind it, and one log line is traced forward to the report
lines it fed. Runs in local mode in well under a minute.
"""

from __future__ import annotations

import os
import random
import sys
import tempfile
import time

from journals import unpack_record_ids
from repository import ProvenanceRepository

_CODES = ["E101", "E203", "E404", "E500", "E503", "E042", "E777"]
_WEIGHTS = [30, 18, 14, 9, 6, 3, 1]
_SERVICES = ["auth", "orders", "search", "billing", "gateway"]
_LOG4J = """rootLogger.level = error
rootLogger.appenderRef.stderr.ref = console
appender.console.type = Console
appender.console.name = console
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = %d{HH:mm:ss} %p %c{1}: %m%n
"""


def make_log(path: str, lines: int, seed: int = 42) -> int:
    """A server log: INFO/WARN/ERROR lines, errors with a code, and a few garbled records."""
    rng = random.Random(seed)
    bad = 0
    with open(path, "w", encoding="utf-8") as f:
        for i in range(lines):
            t = f"2026-11-21T{(i // 3600) % 24:02d}:{(i // 60) % 60:02d}:{i % 60:02d}"
            svc = rng.choice(_SERVICES)
            host = f"host{rng.randrange(40):02d}"
            r = rng.random()
            if r < 0.0002:
                f.write(f"{t} {host} {svc} ERROR code=??? <<garbled record #{i}>>\n")
                bad += 1
            elif r < 0.25:
                code = rng.choices(_CODES, _WEIGHTS)[0]
                user = f"u{rng.randrange(5000)}"
                f.write(f"{t} {host} {svc} ERROR code={code} user={user} req={i:08d}\n")
            elif r < 0.35:
                f.write(f"{t} {host} {svc} WARN slow request req={i:08d} ms={rng.randrange(900)}\n")
            else:
                f.write(f"{t} {host} {svc} INFO ok req={i:08d}\n")
    return bad


def error_code(line: str) -> tuple[str, int]:
    """(code, 1) of an error line; raises on a garbled one (recorded as a culprit)."""
    code = line.split("code=", 1)[1].split(" ", 1)[0]
    if not (len(code) == 4 and code[0] == "E" and code[1:].isdigit()):
        raise ValueError(f"unparseable error code {code!r}")
    return code, 1


def describe(kv: tuple[str, int]) -> str:
    return f"{kv[0]}\t{kv[1]}"


def spark_session(app: str, conf_dir: str):
    """A quiet local SparkSession whose Python workers run this interpreter."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    log4j = os.path.join(conf_dir, "log4j2.properties")
    with open(log4j, "w") as f:
        f.write(_LOG4J)
    from pyspark.sql import SparkSession

    return (
        SparkSession.builder.master("local[2]")
        .appName(app)
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.driver.extraJavaOptions", f"-Dlog4j2.configurationFile=file:{log4j}")
        .getOrCreate()
    )


def run_demo(repo_path: str, lines: int = 300_000) -> int:
    from operator import add

    from ._context import LineageContext

    t0 = time.perf_counter()
    os.makedirs(repo_path, exist_ok=True)
    repo_path = os.path.abspath(repo_path)
    data_dir = os.path.join(repo_path, "demo-data")
    os.makedirs(data_dir, exist_ok=True)
    log_path = os.path.join(data_dir, "server.log")
    bad = make_log(log_path, lines)
    print(
        f"generated {lines:,} log lines ({os.path.getsize(log_path) / 1e6:.1f} MB, "
        f"{bad} garbled) in {log_path}"
    )
    with tempfile.TemporaryDirectory() as conf_dir:
        spark = spark_session("provrepo-demo", conf_dir)
        try:
            with ProvenanceRepository.open(repo_path) as repo:
                lc = LineageContext(spark, repo, on_error="skip")
                t1 = time.perf_counter()
                log = lc.textFile(log_path)
                errors = log.filter(lambda line: " ERROR " in line)
                counts = errors.map(error_code).reduceByKey(add)
                report = counts.map(describe)
                out = os.path.join(data_dir, f"report-{lc.run_id}")
                report.saveAsTextFile(out)
                by_code = sorted(counts.collect(), key=lambda kv: -kv[1])
                t2 = time.perf_counter()
                print(
                    f"\ncounted errors by code with lineage capture in {t2 - t1:.1f}s "
                    f"(run {lc.run_id}); report in {out}/"
                )
                for code, n in by_code:
                    print(f"  {code}  {n:>7,}")
                _traces(lc, counts, report, by_code)
                _sql_part(lc, log_path)
                stats = repo.stats()
                print(
                    f"\nrepository {repo_path}: {stats.events:,} events in "
                    f"{stats.logs} logs, {stats.log_bytes / 1e6:.1f} MB "
                    f"({stats.log_bytes / os.path.getsize(log_path):.0%} of the input)"
                )
        finally:
            spark.stop()
    print(f"demo took {time.perf_counter() - t0:.1f}s. Try:")
    print(f"  provrepo runs {repo_path}")
    print(f"  provrepo trace {repo_path} <record id> --data       (ids as printed above)")
    print(f"  provrepo search {repo_path} --type FAIL")
    print(f"  provrepo trace {repo_path} {log_path}@<byte offset> --forward --data")
    print("Explore it in the browser (search, events, lineage graphs, the run's capture points):")
    print(f"  provrepo ui {repo_path}")
    return 0


def _traces(lc, counts, report, by_code) -> None:
    top_code, top_n = by_code[0]
    t = time.perf_counter()
    lin = counts.lineage()
    top = lin.filter(lambda kv: kv[0] == top_code)
    lines = top.go_back_all()
    t_back = time.perf_counter() - t
    print(
        f"\nbackward: {top_code} ({top_n:,}) <- {lines.count():,} log lines, "
        f"traced in {t_back * 1e3:.0f} ms; a sample, re-read by byte offset:"
    )
    for line in lines.take(3):
        print(f"    {line}")
    t = time.perf_counter()
    one = lines.record_ids[len(lines) // 2 : len(lines) // 2 + 1]
    from ._trace import LineageRDD

    src = LineageRDD(lc.repo, lc.run_id, one)
    fwd = src.go_next_all()
    t_fwd = time.perf_counter() - t
    (line,) = src.collect()
    cp, part, pos = (int(x[0]) for x in unpack_record_ids(one))
    print(
        f"\nforward: log line {cp}:{part}:{pos} (record {int(one[0])}) -> "
        f"{fwd.count()} output records, traced in {t_fwd * 1e3:.0f} ms:"
    )
    print(f"    {line}")
    cps = lc.repo.lineage.run_info(lc.run_id).capture_points
    for cp_number, value in zip(unpack_record_ids(fwd.record_ids)[0].tolist(), fwd.collect()):
        c = cps.get(cp_number)
        print(f"    -> {c.component_id if c else '?'}: {value!r}")
    culprits = lc.culprits()
    if culprits:
        c = culprits[0]
        print(f"\n{len(culprits)} garbled record(s) skipped and recorded as culprits, e.g.:")
        print(f"    record {c.record_id}: {c.exception}: {c.message}")
        print(f"    {c.data}")


def _sql_part(lc, log_path: str) -> None:
    """The same log through the DataFrame API and SQL: E503 errors per service."""
    from journals import unpack_record_ids as unpack

    from ._trace import LineageRDD

    t = time.perf_counter()
    lc.read.text(log_path).createOrReplaceTempView("server_log")
    q = lc.sql(
        "SELECT service, count(*) AS e503 FROM ("
        "  SELECT split(value, ' ')[2] AS service, value FROM server_log) "
        "WHERE value LIKE '% ERROR code=E503 %' GROUP BY service ORDER BY e503 DESC"
    )
    rows = q.collect()
    took = time.perf_counter() - t
    print(f"\nDataFrames and SQL (lc.sql, {took:.1f}s): E503 errors per service")
    for r in rows:
        print(f"  {r.service:<8} {r.e503:>6,}")
    t = time.perf_counter()
    top = q.lineage().filter(lambda row: row["service"] == rows[0].service).go_back_all()
    print(
        f"backward: {rows[0].service} <- {len(top):,} log lines (traced in "
        f"{(time.perf_counter() - t) * 1e3:.0f} ms), e.g.:"
    )
    for line in top.take(2):
        print(f"    {line}")
    one = top.record_ids[:1]
    fwd = LineageRDD(lc.repo, lc.run_id, one).go_next_all()
    q_cp = q.last_output.number if q.last_output is not None else -1
    mine = fwd.record_ids[unpack(fwd.record_ids)[0] == q_cp]
    values = LineageRDD(lc.repo, lc.run_id, mine).collect()
    print(f"forward: the first of those lines (record {int(one[0])}) -> {values}")
    t = time.perf_counter()
    without = lc.replay(q, exclude=top)
    print(
        f"exclusive replay without those lines ({time.perf_counter() - t:.1f}s): "
        + (", ".join(f"{r.service} {r.e503:,}" for r in without) or "no rows")
    )
