"""Spark Connect: the DataFrame agent uses only PySpark's public API, so a captured
pipeline runs against a Spark Connect server (started here from pyspark's own
`sbin/start-connect-server.sh`, bound to loopback) and traces exactly as in classic mode.

The client runs in a child process (`_connect_child.py`): PySpark refuses a remote session
beside the test session's classic one, and its functions build classic or Connect columns
by process."""

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
        yield f"sc://127.0.0.1:{port}"
    finally:
        os.killpg(server.pid, signal.SIGTERM)  # the server and the JVM it started
        try:
            server.wait(60)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)
            server.wait(10)
        out.close()


def test_captured_pipeline_and_trace_under_connect(connect, tmp_path):
    child = os.path.join(os.path.dirname(__file__), "_connect_child.py")
    env = {k: v for k, v in os.environ.items() if not k.startswith("SPARK_CONNECT")}
    done = subprocess.run(
        [sys.executable, child, connect, str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "connect pipeline traced" in done.stdout
