"""The Spark Connect client of `test_dataframe_connect.py`, in its own process:
`python _connect_child.py sc://HOST:PORT WORKDIR`; exits non-zero if a check fails."""

from __future__ import annotations

import os
import sys


def main(url: str, work: str) -> None:
    from pyspark.sql import Observation, SparkSession, Window
    from pyspark.sql import functions as F

    from agent import LineageContext, LineageRDD, UnsupportedOperation
    from repository import ProvenanceRepository, RepositoryConfig

    spark = SparkSession.builder.remote(url).getOrCreate()
    assert "connect" in type(spark).__module__
    orders = [(i, i % 5, "F" if i % 3 else "O") for i in range(40)]
    items = [(i % 45, float(i)) for i in range(90)]
    o_csv, i_csv = os.path.join(work, "o.csv"), os.path.join(work, "i.csv")
    with open(o_csv, "w") as f:
        f.write("okey,ckey,status\n" + "".join(f"{a},{b},{c}\n" for a, b, c in orders))
    with open(i_csv, "w") as f:
        f.write("okey,price\n" + "".join(f"{a},{b}\n" for a, b in items))
    config = RepositoryConfig(sync="none", rollover_interval=3600)
    with ProvenanceRepository.open(os.path.join(work, "repo"), config) as repo:
        lc = LineageContext(spark, repo)
        assert lc.sc is None

        def query(reader):
            o = reader.csv(o_csv, header=True, schema="okey INT, ckey INT, status STRING")
            it = reader.csv(i_csv, header=True, schema="okey INT, price DOUBLE")
            q = o.where(F.col("status") == "F").join(it, "okey").groupBy("ckey")
            return o, q.agg(F.sum("price").alias("spent")).orderBy("ckey")

        o, q = query(lc.read)
        want = query(spark.read)[1].collect()

        def expected(row):
            okeys = {a for a, b, c in orders if c == "F" and b == row.ckey}
            expect = {f"{a},{b},{c}" for a, b, c in orders if a in okeys}
            expect &= {f"{a},{b},{c}" for a, b, c in orders if any(x == a for x, _ in items)}
            return expect | {f"{a},{b}" for a, b in items if a in okeys}

        # collect, then toLocalIterator (which runs under Spark Connect as vanilla's).
        for action in (q.collect, lambda: list(q.toLocalIterator())):
            assert action() == want
            for row in want:
                back = q.lineage().filter(lambda r, k=row.ckey: r["ckey"] == k).go_back_all()
                assert set(back.collect()) == expected(row), row

        # toJSON is a DataFrame under Spark Connect, as vanilla's; the RDD agent is not there.
        js = o.where(F.col("okey") < 3).toJSON()
        assert (
            js.collect()
            == spark.read.csv(o_csv, header=True, schema="okey INT, ckey INT, status STRING")
            .where(F.col("okey") < 3)
            .toJSON()
            .collect()
        )
        assert len(js.lineage().go_back_all().collect()) == 3
        for refused in (lambda: o.rdd, lambda: o.foreach(print)):
            try:
                refused()
            except UnsupportedOperation as e:
                assert "Spark Connect" in str(e), e
            else:
                raise AssertionError("df.rdd / foreach ran under Spark Connect")

        # A window (Spark Connect spells it differently): each running sum's frame.
        w = Window.partitionBy("ckey").orderBy("okey")
        r = o.select("okey", "ckey", F.sum("okey").over(w).alias("running"))
        lines = {a: f"{a},{b},{c}" for a, b, c in orders}
        for row in r.collect():
            back = r.lineage().filter(lambda x, k=row.okey: x["okey"] == k).go_back_all()
            frame = {lines[a] for a, b, _ in orders if b == row.ckey and a <= row.okey}
            assert set(back.collect()) == frame, row
        # localCheckpoint and observe (Connect's own DataFrame and Observation): the rows
        # keep their ids, the metrics are vanilla's.
        obs = Observation("m")
        kept = o.where(F.col("status") == "F").localCheckpoint().observe(obs, F.count("*"))
        ok = kept.select("okey")
        got = sorted(x.okey for x in ok.collect())
        assert got == sorted(a for a, _, s in orders if s == "F")
        assert list(obs.get.values()) == [len(got)]
        for k in got[:3]:
            back = ok.lineage().filter(lambda x, k=k: x["okey"] == k).go_back_all()
            assert back.collect() == [lines[k]]
        # A write: its rows pass the mapInArrow tap in the server's Python workers.
        out = os.path.join(work, "out")
        r.write.parquet(out)
        assert spark.read.parquet(out).count() == len(orders)
        written = r.lineage()
        assert len(written) == len(orders)
        assert sorted(written.go_back_all().collect()) == sorted(lines.values())

        # Replay: q without customer 1's orders (traced by another query), and q on the rows
        # traced from customer 2's output row only; an lc.sql query without them too.
        one = o.where(F.col("ckey") == 1)
        one.collect()
        assert lc.replay(q, exclude=one.lineage().go_back_all()) == [
            row for row in want if row.ckey != 1
        ]
        traced = q.lineage().filter(lambda x: x["ckey"] == 2).go_back_all()
        assert lc.replay(traced) == [row for row in want if row.ckey == 2]
        o.createOrReplaceTempView("o")
        s = lc.sql("SELECT ckey, count(*) AS n FROM o GROUP BY ckey")
        s.collect()
        got = sorted(tuple(x) for x in lc.replay(s, exclude=one.lineage().go_back_all()))
        assert got == [(k, 8) for k in (0, 2, 3, 4)], got

        # A lazy top-k (`take` of a sorted aggregate of createDataFrame rows, the default
        # policy): the survivors travel as Arrow data both ways; each row's own group.
        from agent.dataframe import _lazyagg

        built = []
        real = _lazyagg.limited
        _lazyagg.limited = lambda *a: built.append(a[-1]) or real(*a)

        def top(df):
            agg = df.groupBy("okey").agg(F.sum("price").alias("s"), F.count("*").alias("n"))
            return agg.orderBy(F.col("s").desc(), "okey")

        t = top(lc.createDataFrame(items, "okey INT, price DOUBLE"))
        got = t.take(4)
        assert got == top(spark.createDataFrame(items, "okey INT, price DOUBLE")).take(4)
        assert built == [4], built
        _lazyagg.limited = real
        ids = t.lineage().record_ids
        for i, row in enumerate(got):
            back = LineageRDD(repo, lc.run_id, ids[i : i + 1]).go_back_all().collect()
            assert {(x["okey"], x["price"]) for x in back} == {
                (a, b) for a, b in items if a == row.okey
            }, row

        # A grouped map (Connect's own GroupedData.applyInPandas): each row its group's.
        def biggest(pdf):
            return pdf.nlargest(1, "okey")[["ckey", "okey"]]

        g = o.groupBy("ckey").applyInPandas(biggest, "ckey int, okey int")
        for row in g.collect():
            assert row.okey == max(a for a, b, _ in orders if b == row.ckey), row
            back = g.lineage().filter(lambda x, c=row.ckey: x["ckey"] == c).go_back_all()
            assert set(back.collect()) == {lines[a] for a, b, _ in orders if b == row.ckey}

        # A map over partitions (Connect's own mapInPandas): one row per partition, made
        # from every row the function read (which it lists), its group journaled by the
        # server's Python worker.
        def seen(batches):
            import pandas as pd

            keys = [int(k) for pdf in batches for k in pdf["okey"]]
            if keys:
                yield pd.DataFrame({"seen": [",".join(map(str, sorted(keys)))]})

        m = o.repartition(3, "ckey").mapInPandas(seen, "seen string")
        parts = m.collect()
        assert sorted(int(k) for p in parts for k in p.seen.split(",")) == list(range(40))
        for p in parts:
            back = m.lineage().filter(lambda x, s=p.seen: x["seen"] == s).go_back_all()
            assert set(back.collect()) == {lines[int(k)] for k in p.seen.split(",")}, p

        # A UDF that raises: the failed action names the rows it raises on as culprits
        # (a deterministic call takes no ids: the site's name must come back in the
        # server's error text for the client to find them).
        def odd(k):
            if k % 7 == 3:
                raise ValueError(f"bad key {k}")
            return k

        bad = lc.udf.register("odd", odd, "int")
        failing = o.where(F.col("okey") < 30).select("okey", bad("okey").alias("k"))
        try:
            failing.collect()
        except Exception as e:
            assert "bad key" in str(e), e
        else:
            raise AssertionError("the failing UDF did not fail the action")
        culprits = sorted(c.data for c in lc.culprits())
        assert culprits == sorted(lines[a] for a in range(30) if a % 7 == 3), culprits
    spark.stop()
    print("connect pipeline traced")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
