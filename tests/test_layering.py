"""The import rules of DESIGN.md, checked in fresh interpreters: layers import downward only,
and what Spark's Python workers load to run a captured task stays light."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

HEAVY = ("repository", "indexer", "tantivy", "watchdog", "tqdm", "pyspark")


def loaded_after(statement: str) -> set[str]:
    code = f"import sys; {statement}; import json; print(json.dumps(sorted(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return {m.split(".")[0] for m in json.loads(out.stdout)}


def test_executor_side_agent_code_is_light():
    # What unpickling a captured task's function imports in a Python worker.
    loaded = loaded_after("import agent._worker, agent._sinks, agent._inputs, agent._spec")
    assert not loaded & set(HEAVY), loaded & set(HEAVY)


@pytest.mark.parametrize(
    ("package", "forbidden"),
    [
        ("journals", {"repository", "indexer", "agent", "pyspark"}),
        ("indexer", {"repository", "agent", "pyspark"}),
        ("repository", {"agent", "pyspark"}),
    ],
)
def test_imports_flow_one_way(package, forbidden):
    loaded = loaded_after(f"import {package}")
    assert not loaded & forbidden, loaded & forbidden
