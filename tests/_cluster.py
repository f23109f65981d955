"""A real Spark standalone cluster on loopback, for the cluster tests and `bench/cluster.py`:
a master and workers started with pyspark's own `bin/spark-class`, each worker with its own
work directory and, when asked, inside its own mount namespace where a tmpfs hides one
directory of the driver's (the one holding the test repository), so its executors cannot see
the repository's containers, as on a cluster without a shared filesystem.

Every process started is stopped by pid, with its descendants (the executors, their Python
workers), also when starting fails half way.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pyspark

SPARK_HOME = os.path.dirname(pyspark.__file__)
SPARK_CLASS = os.path.join(SPARK_HOME, "bin", "spark-class")
MASTER = "org.apache.spark.deploy.master.Master"
WORKER = "org.apache.spark.deploy.worker.Worker"
EXECUTOR = "org.apache.spark.executor.CoarseGrainedExecutorBackend"
# The worker's command starts in the new mount namespace: hide "$0", then become the worker.
_HIDE = 'mount -t tmpfs -o size=64m provrepo-hidden "$0" && exec "$@"'


def unshare_problem() -> str | None:
    """Why a worker cannot get a private mount namespace with a tmpfs here (None: it can)."""
    if shutil.which("unshare") is None:
        return "the unshare command is not installed (util-linux)"
    with tempfile.TemporaryDirectory() as d:
        try:
            done = subprocess.run(
                ["unshare", "-m", "--propagation", "private", "sh", "-c", _HIDE, d, "true"],
                capture_output=True,
                text=True,
                timeout=30,
                check=False,
            )
        except (OSError, subprocess.TimeoutExpired) as e:
            return f"unshare -m could not run: {e}"
    if done.returncode != 0:
        why = (done.stderr or "").strip().splitlines()
        return f"unshare -m with a tmpfs is not permitted here ({why[-1] if why else 'failed'})"
    return None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def children(pid: int) -> list[int]:
    """Every live descendant of `pid` (from /proc), deepest last."""
    parent_of: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        # The command name is in parentheses and may hold spaces: ppid follows the last ")".
        parent_of[int(entry)] = int(stat[stat.rindex(")") + 2 :].split()[1])
    out, frontier = [], [pid]
    while frontier:
        nxt = [p for p, pp in parent_of.items() if pp in frontier]
        out.extend(nxt)
        frontier = nxt
    return out


def cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


class StandaloneCluster:
    """`workers` standalone workers of `cores` cores each on 127.0.0.1, under `base`
    (work directories and logs). With `hidden`, each worker runs in its own mount namespace
    in which `hidden` (a directory that must exist) is an empty tmpfs."""

    def __init__(
        self,
        base: Path,
        hidden: Path | None = None,
        workers: int = 2,
        cores: int = 1,
        memory: str = "1g",
    ) -> None:
        self.base = Path(base)
        self.hidden = hidden
        self.n_workers = workers
        self.cores = cores
        self.memory = memory
        self.port = free_port()
        self.url = f"spark://127.0.0.1:{self.port}"
        self.master: subprocess.Popen | None = None
        self.workers: list[subprocess.Popen] = []
        self._logs: list = []

    def _env(self) -> dict[str, str]:
        env = dict(os.environ)
        env.update(
            SPARK_HOME=SPARK_HOME,
            SPARK_LOCAL_IP="127.0.0.1",
            SPARK_DAEMON_MEMORY="384m",
            PYSPARK_PYTHON=sys.executable,
            SPARK_NO_DAEMONIZE="1",
        )
        return env

    def _spawn(self, name: str, argv: list[str]) -> subprocess.Popen:
        log = open(self.base / f"{name}.log", "wb")  # noqa: SIM115 - closed in stop()
        self._logs.append(log)
        return subprocess.Popen(
            argv,
            env=self._env(),
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            cwd=self.base,
            start_new_session=True,  # a Ctrl-C of the tests reaches it only through stop()
        )

    def start(self, timeout: float = 180.0) -> StandaloneCluster:
        self.base.mkdir(parents=True, exist_ok=True)
        try:
            argv = [SPARK_CLASS, MASTER, "--host", "127.0.0.1", "--port", str(self.port)]
            self.master = self._spawn("master", [*argv, "--webui-port", "0"])
            for i in range(self.n_workers):
                work = self.base / f"worker-{i}"
                work.mkdir(exist_ok=True)
                argv = [SPARK_CLASS, WORKER, "--host", "127.0.0.1", "--port", "0"]
                argv += ["--webui-port", "0", "--cores", str(self.cores)]
                argv += ["--memory", self.memory, "--work-dir", str(work), self.url]
                if self.hidden is not None:
                    hide = ["unshare", "-m", "--propagation", "private", "sh", "-c", _HIDE]
                    argv = [*hide, str(self.hidden), *argv]
                self.workers.append(self._spawn(f"worker-{i}", argv))
            self._wait_registered(timeout)
        except BaseException:
            self.stop()
            raise
        return self

    def _wait_registered(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        log = self.base / "master.log"
        while time.monotonic() < deadline:
            for p in [self.master, *self.workers]:
                if p is not None and p.poll() is not None:
                    raise RuntimeError(f"a cluster process exited ({p.args!r}); see {self.base}")
            text = log.read_text(errors="replace") if log.exists() else ""
            if len(re.findall(r"Registering worker", text)) >= self.n_workers:
                return
            time.sleep(0.3)
        raise TimeoutError(f"workers did not register within {timeout:.0f}s; see {self.base}")

    def executor_pids(self, worker: int) -> list[int]:
        """The executor JVMs worker `worker` runs now."""
        return [p for p in children(self.workers[worker].pid) if EXECUTOR in cmdline(p)]

    def kill_executor(self, worker: int) -> list[int]:
        """kill -9 the executor JVM(s) of one worker; returns their pids."""
        pids = self.executor_pids(worker)
        for p in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(p, signal.SIGKILL)
        return pids

    def stop(self) -> None:
        """Stop every process this cluster started, by pid: workers (with their executors
        and Python workers), then the master."""
        for p in [*self.workers, self.master]:
            if p is None or p.poll() is not None:
                continue
            tree = children(p.pid)
            with contextlib.suppress(ProcessLookupError):
                p.terminate()
            try:
                p.wait(timeout=15)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    p.kill()
                p.wait(timeout=15)
            for pid in tree:  # whatever outlived its parent (executors, Python workers)
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
        for f in self._logs:
            f.close()
        self._logs = []
