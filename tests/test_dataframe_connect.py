"""Spark Connect: the DataFrame agent uses only PySpark's public API, so a captured
pipeline runs against a Spark Connect server (started here from pyspark's own
`sbin/start-connect-server.sh`, bound to loopback) and traces exactly as in classic mode."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time

import pytest

pytestmark = pytest.mark.spark

pytest.importorskip("grpc", reason="the pyspark[connect] client packages are not installed")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def connect(tmp_path_factory):
    import pyspark

    if shutil.which("java") is None:
        pytest.skip("Spark Connect server needs Java 17+ on the PATH")
    home = os.path.dirname(pyspark.__file__)
    script = os.path.join(home, "sbin", "start-connect-server.sh")
    logs = tmp_path_factory.mktemp("connect-logs")
    port = _free_port()
    env = dict(
        os.environ,
        SPARK_HOME=home,
        SPARK_LOG_DIR=str(logs),
        SPARK_PID_DIR=str(logs),
        PYSPARK_PYTHON=sys.executable,
    )
    cmd = ["bash", script, "--wait", "--master", "local[2]"]
    for conf in (
        f"spark.connect.grpc.binding.port={port}",
        "spark.connect.grpc.binding.address=127.0.0.1",
        "spark.ui.enabled=false",
        "spark.sql.shuffle.partitions=4",
        "spark.driver.memory=1g",
    ):
        cmd += ["--conf", conf]
    out = open(logs / "server.out", "w")  # noqa: SIM115 - the server outlives this block
    server = subprocess.Popen(
        cmd, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
    )
    try:
        deadline = time.monotonic() + 180
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), 0.5).close()
                break
            except OSError:
                if server.poll() is not None or time.monotonic() > deadline:
                    tail = (logs / "server.out").read_text()[-2000:]
                    pytest.skip(f"the Spark Connect server did not start: {tail}")
                time.sleep(0.5)
        from pyspark.sql import SparkSession

        session = SparkSession.builder.remote(f"sc://127.0.0.1:{port}").getOrCreate()
        yield session
        session.stop()
    finally:
        os.killpg(server.pid, signal.SIGTERM)  # the server and the JVM it started
        try:
            server.wait(60)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)
            server.wait(10)
        out.close()


def test_captured_pipeline_and_trace_under_connect(connect, repo, tmp_path):
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    from agent import LineageContext

    assert "connect" in type(connect).__module__
    orders = [(i, i % 5, "F" if i % 3 else "O") for i in range(40)]
    items = [(i % 45, float(i)) for i in range(90)]
    (tmp_path / "o.csv").write_text(
        "okey,ckey,status\n" + "".join(f"{a},{b},{c}\n" for a, b, c in orders)
    )
    (tmp_path / "i.csv").write_text("okey,price\n" + "".join(f"{a},{b}\n" for a, b in items))
    lc = LineageContext(connect, repo)
    assert lc.sc is None

    def query(reader):
        o = reader.csv(
            str(tmp_path / "o.csv"), header=True, schema="okey INT, ckey INT, status STRING"
        )
        it = reader.csv(str(tmp_path / "i.csv"), header=True, schema="okey INT, price DOUBLE")
        q = o.where(F.col("status") == "F").join(it, "okey").groupBy("ckey")
        return o, q.agg(F.sum("price").alias("spent")).orderBy("ckey")

    o, q = query(lc.read)
    want = query(connect.read)[1].collect()
    assert q.collect() == want
    for row in want:
        back = q.lineage().filter(lambda r, k=row.ckey: r["ckey"] == k).go_back_all().collect()
        okeys = {a for a, b, c in orders if c == "F" and b == row.ckey}
        expect = {
            f"{a},{b},{c}" for a, b, c in orders if a in okeys and any(x == a for x, _ in items)
        }
        expect |= {f"{a},{b}" for a, b in items if a in okeys}
        assert set(back) == expect

    # A window (Spark Connect spells it differently): each running sum's frame.
    w = Window.partitionBy("ckey").orderBy("okey")
    r = o.select("okey", "ckey", F.sum("okey").over(w).alias("running"))
    lines = {a: f"{a},{b},{c}" for a, b, c in orders}
    for row in r.collect():
        back = r.lineage().filter(lambda x, k=row.okey: x["okey"] == k).go_back_all().collect()
        frame = {lines[a] for a, b, _ in orders if b == row.ckey and a <= row.okey}
        assert set(back) == frame
    # A write: its rows pass the mapInArrow tap in the server's Python workers.
    out = tmp_path / "out"
    r.write.parquet(str(out))
    assert connect.read.parquet(str(out)).count() == len(orders)
    written = r.lineage()
    assert len(written) == len(orders)
    assert sorted(written.go_back_all().collect()) == sorted(lines.values())
