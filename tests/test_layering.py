"""The import rules, checked in fresh interpreters and in the source: layers import downward
only (`agent -> repository -> indexer -> journals`), inside `repository` the consumers (the
lineage analyses, the CLI, later the UI) sit above the storage core, and what Spark's Python
workers load to run a captured task stays light."""

from __future__ import annotations

import ast
import json
import pathlib
import subprocess
import sys

import pytest

HEAVY = ("repository", "indexer", "tantivy", "watchdog", "tqdm", "pyspark", "pyarrow")
ROOT = pathlib.Path(__file__).resolve().parent.parent
REPO = ROOT / "repository"
# Above the storage core, each in its own folder: nothing in the core imports them.
CONSUMERS = ("lineage", "cli", "ui")
# Consumers that must use only the public facade (`from repository import ...`).
FACADE_ONLY = ("cli", "ui")


def loaded_after(statement: str) -> set[str]:
    code = f"import sys; {statement}; import json; print(json.dumps(sorted(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return set(json.loads(out.stdout))


def roots(modules: set[str]) -> set[str]:
    return {m.split(".")[0] for m in modules}


def test_executor_side_agent_code_is_light():
    # What unpickling a captured task's function imports in a Python worker.
    loaded = loaded_after("import agent._worker, agent._sinks, agent._inputs, agent._spec")
    assert not roots(loaded) & set(HEAVY), roots(loaded) & set(HEAVY)


def test_executor_side_trace_code_is_light():
    # A trace run as Spark jobs: the task module, and the read-only lineage it opens (the
    # event logs and forward indexes of the repository, not its search index or threads).
    loaded = loaded_after("import agent._trace_tasks; from repository.lineage import open_index")
    heavy = set(HEAVY) - {"repository"}
    assert not roots(loaded) & heavy, roots(loaded) & heavy
    assert "repository._repository" not in loaded and "repository.lineage._culprits" not in loaded


def test_executor_side_dataframe_code_is_light():
    # What a captured UDF or the write tap unpickles in a Python worker.
    loaded = loaded_after("import agent.dataframe._udfrun, agent.dataframe._tap")
    assert not roots(loaded) & set(HEAVY), roots(loaded) & set(HEAVY)


@pytest.mark.parametrize(
    ("package", "forbidden"),
    [
        ("journals", {"repository", "indexer", "agent", "pyspark"}),
        ("indexer", {"repository", "agent", "pyspark"}),
        ("repository", {"agent", "pyspark"}),
    ],
)
def test_imports_flow_one_way(package, forbidden):
    loaded = roots(loaded_after(f"import {package}"))
    assert not loaded & forbidden, loaded & forbidden


def test_the_library_does_not_load_its_command_line():
    loaded = loaded_after("import repository")
    assert not {m for m in loaded if m.startswith(("repository.cli", "repository.ui"))}


def _module_name(path: pathlib.Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _imports(path: pathlib.Path) -> list[tuple[str, list[str]]]:
    """(module imported, names taken from it) for every import in a file, relative ones
    resolved; `from . import x` of a submodule counts as importing that submodule."""
    name = _module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out.extend((a.name, []) for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            names = [a.name for a in node.names]
            folder = ROOT.joinpath(*base.split("."))
            subs = [n for n in names if (folder / f"{n}.py").exists() or (folder / n).is_dir()]
            out.extend((f"{base}.{n}", []) for n in subs)
            rest = [n for n in names if n not in subs]
            if rest or not subs:
                out.append((base, rest))
    return out


def _layer(module: str) -> str:
    """core, facade (the package and `_repository`), or one of CONSUMERS."""
    parts = module.split(".")
    if len(parts) > 1 and parts[1] in CONSUMERS:
        return parts[1]
    if module in ("repository", "repository._repository"):
        return "facade"
    return "core"


def _repository_files() -> list[pathlib.Path]:
    return sorted(p for p in REPO.rglob("*.py") if ".venv" not in p.parts)


def test_the_storage_core_imports_no_consumer_and_not_the_facade():
    bad = []
    for path in _repository_files():
        me = _layer(_module_name(path))
        for target, _ in _imports(path):
            if not target.startswith("repository"):
                continue
            them = _layer(target)
            if me == "core" and them != "core":
                bad.append(f"{_module_name(path)} imports {target}")
            if me == "facade" and them in FACADE_ONLY:
                bad.append(f"{_module_name(path)} imports {target}")
            if me == "lineage" and them not in ("core", "lineage"):
                bad.append(f"{_module_name(path)} imports {target}")
    assert not bad, bad


def test_the_cli_uses_only_the_public_facade():
    import repository

    public = set(repository.__all__)
    bad = []
    for path in _repository_files():
        me = _layer(_module_name(path))
        if me not in FACADE_ONLY:
            continue
        for target, names in _imports(path):
            if not target.startswith("repository") or _layer(target) == me:
                continue
            if target != "repository" or not set(names) <= public:
                bad.append(f"{_module_name(path)} imports {target} {names}")
    assert not bad, bad


def test_the_import_resolution_finds_real_imports():
    # The checks above only mean something if relative imports resolve to real modules.
    found = dict(_imports(REPO / "cli" / "_main.py"))
    assert found.get("repository") and "repository.cli._output" in found
    assert _layer("repository._store") == "core"
    assert _layer("repository.lineage._index") == "lineage"
    assert "repository.lineage" in dict(_imports(REPO / "_repository.py"))
