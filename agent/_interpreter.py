"""Which Python interpreter Spark's workers run the capture code under.

PySpark starts its Python workers with `sc.pythonExec` (PYSPARK_PYTHON, or "python3" on the
PATH, read when the SparkContext was made), and each Python RDD or UDF takes that value when
its Java function is built. A driver started from a virtualenv without PYSPARK_PYTHON set
thus gets workers that run another interpreter, which usually cannot import provrepo.

- Local masters (`local`, `local[*]`, `local-cluster[...]`): the workers run on this machine,
  so when their interpreter cannot import the capture modules, the Python functions the agent
  builds run `sys.executable` instead (said once at INFO). Only the agent's functions: the
  user's own RDDs and UDFs keep the interpreter they chose.
- Any other master: the workers are asked to import the capture modules, and a worker that
  cannot fails the capture before any job runs, in one line naming the interpreter.

Front-ends call `check_capture_python(sc, modules)` when they are set up (to fail early) and
build every Python function that runs capture code inside `with capture_python(sc, modules):`
(an RDD's `_jrdd`, a UDF's `_judf`, `mapInArrow`, ...).
"""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import sys
import threading
import weakref
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

log = logging.getLogger("provrepo.agent")

# What a Spark Python worker imports to run the RDD agent's tasks (it imports the rest).
CAPTURE_MODULES: tuple[str, ...] = ("agent._worker",)

_lock = threading.Lock()
# SparkContext -> {(master, pythonExec, modules): interpreter to use, or None: pythonExec}
_decided: weakref.WeakKeyDictionary[Any, dict[tuple, str | None]] = weakref.WeakKeyDictionary()
# SparkContext -> [depth of nested capture_python blocks, pythonExec to restore]
_active: weakref.WeakKeyDictionary[Any, list] = weakref.WeakKeyDictionary()

_PROBE = (
    "import importlib, sys\n"
    "v = '%d.%d' % sys.version_info[:2]\n"
    "if v != sys.argv[1]:\n"
    "    raise SystemExit(f'Python {v}, the driver runs Python {sys.argv[1]}')\n"
    "for m in sys.argv[2:]:\n"
    "    importlib.import_module(m)\n"
)


def check_capture_python(sc: Any, modules: Sequence[str] = CAPTURE_MODULES) -> str | None:
    """The interpreter capture code must run under on `sc`: None when Spark's workers
    (`sc.pythonExec`) can import `modules`, else `sys.executable` (local masters only).
    Decided once per SparkContext; raises `BadInput` when a cluster's workers cannot import
    them."""
    exe = getattr(sc, "pythonExec", None)
    if exe is None:  # not a classic SparkContext (e.g. Spark Connect): the server decides
        return None
    master = str(sc.master)
    key = (master, exe, tuple(modules))
    with _lock:
        known = _decided.setdefault(sc, {})
        if key in known:
            return known[key]
    chosen = _decide(sc, exe, key[2], local=master.startswith("local"))
    with _lock:
        known[key] = chosen
    return chosen


@contextmanager
def capture_python(sc: Any, modules: Sequence[str] = CAPTURE_MODULES) -> Iterator[None]:
    """Python functions built inside the block (their Java function, that is) run the
    interpreter `check_capture_python` chose. Re-entrant; other threads building Python
    functions meanwhile also get it (PySpark reads one attribute of the SparkContext)."""
    chosen = check_capture_python(sc, modules)
    if chosen is None:
        yield
        return
    with _lock:
        state = _active.get(sc)
        if state is None:
            state = _active[sc] = [0, sc.pythonExec]
            sc.pythonExec = chosen
        state[0] += 1
    try:
        yield
    finally:
        with _lock:
            state[0] -= 1
            if state[0] == 0:
                sc.pythonExec = state[1]
                del _active[sc]


def _decide(sc: Any, exe: str, modules: tuple[str, ...], local: bool) -> str | None:
    if local:
        if same_interpreter(exe):
            return None
        problem = _local_problem(exe, modules)
        if problem is None:
            return None
        log.info(
            "Spark's Python workers would run %s, which cannot import provrepo (%s); "
            "provrepo's capture code runs the driver's interpreter %s instead",
            exe,
            problem,
            sys.executable,
        )
        return sys.executable
    problem = _cluster_problem(sc, exe, modules)
    if problem is not None:
        # Imported here: Python workers import `agent._rdd` (and so this module) for some
        # tasks, and must not load the repository.
        from repository import BadInput

        raise BadInput(
            f"Spark's Python workers run {exe} ({problem}): install provrepo where they run, "
            "or set PYSPARK_PYTHON (spark.pyspark.python) to an interpreter that has it "
            "before creating the SparkSession"
        )
    return None


def same_interpreter(exe: str) -> bool:
    """`exe` is this very interpreter: same binary, invoked from the same directory (a
    virtualenv's bin/python resolves to its base interpreter, but finds its own
    site-packages through the directory it was started from)."""
    found = shutil.which(exe)
    if found is None:
        return False
    a, b = os.path.abspath(found), os.path.abspath(sys.executable)
    return a == b or (
        os.path.dirname(a) == os.path.dirname(b) and os.path.realpath(a) == os.path.realpath(b)
    )


def _local_problem(exe: str, modules: tuple[str, ...]) -> str | None:
    """Why `exe`, started here as Spark would start a worker, cannot run capture code."""
    version = "{}.{}".format(*sys.version_info[:2])
    try:
        done = subprocess.run(
            [exe, "-c", _PROBE, version, *modules],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
    except OSError as e:
        return f"cannot start it: {e.strerror or e}"
    except subprocess.TimeoutExpired:
        return "importing the capture modules took over 120 s"
    if done.returncode == 0:
        return None
    lines = [x for x in (done.stderr or "").splitlines() if x.strip()]
    return lines[-1].strip() if lines else f"exit status {done.returncode}"


def _cluster_problem(sc: Any, exe: str, modules: tuple[str, ...]) -> str | None:
    """Ask the workers (one task per default parallelism slot) to import `modules`."""
    n = max(1, int(sc.defaultParallelism))
    try:
        rows = sc.parallelize(range(n), n).mapPartitions(_probe_task(modules)).collect()
    except Exception as e:  # the workers could not run the interpreter at all
        text = str(e).strip().splitlines()
        return f"could not run a probe task: {text[0] if text else type(e).__name__}"
    for host, executable, problems in rows:
        if problems:
            return f"{executable} on {host} cannot import {problems[0]}"
    return None


def _probe_task(modules: tuple[str, ...]) -> Callable[[Iterator[int]], Iterator[tuple]]:
    def probe(_: Iterator[int]) -> Iterator[tuple]:
        # A nested function: cloudpickle ships it by value, so a worker without provrepo can
        # run it and say what it lacks, instead of failing to unpickle it.
        import importlib
        import socket
        import sys

        problems = []
        for m in modules:
            try:
                importlib.import_module(m)
            except Exception as e:  # any failure to import means capture cannot run there
                problems.append(f"{m} ({type(e).__name__}: {e})")
        yield socket.gethostname(), sys.executable, problems

    return probe
