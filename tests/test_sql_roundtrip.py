"""`lc.sql` runs the text sqlglot regenerates from its parse: that text must mean what the
user's text means. Every example of Spark's function documentation (`DESCRIBE FUNCTION
EXTENDED`'s "Examples:", ~1,300 over ~590 functions) is parsed and generated as `lc.sql` does
(`_sqldialect`), and also with every node generated (as the rewriter's changed expressions
are: nothing kept as written), and Spark's rows, types and errors for each text must equal
the original's; the few the parser cannot read raise `UnsupportedOperation` in lc.sql.

Run as a script (`python tests/test_sql_roundtrip.py [spark|lineage|plain]`) it prints the
sweep's counts for a dialect: sqlglot's own Spark dialect changes 136 examples' rows, types
or errors (53 functions) and 164 more examples' column names."""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass, field
from typing import Any

import pytest

pytestmark = pytest.mark.spark


@dataclass
class Sweep:
    functions: int = 0
    examples: int = 0
    changed_text: int = 0
    # (function, example, regenerated text, original's outcome, regenerated's outcome)
    differ: list[tuple] = field(default_factory=list)
    names_only: list[tuple] = field(default_factory=list)
    unparsed: list[tuple[str, str]] = field(default_factory=list)


def _function_infos(spark):
    """(name, ExpressionInfo) of each builtin function in Spark's registry."""
    catalog = spark._jsparkSession.sessionState().catalog()
    ident = spark._jvm.org.apache.spark.sql.catalyst.FunctionIdentifier
    for (name,) in spark.sql("SHOW FUNCTIONS").collect():
        yield name, catalog.lookupFunctionInfo(ident.apply(name))


def documented_examples(spark) -> dict[str, list[str]]:
    """Each builtin function's documented example statements (`> SELECT ...;` lines)."""
    return {name: _statements(info.getExamples() or "") for name, info in _function_infos(spark)}


def function_groups(spark) -> dict[str, tuple[str, str]]:
    """Each builtin function's (group, class name) in Spark's registry."""
    return {
        name: (info.getGroup() or "", info.getClassName() or "")
        for name, info in _function_infos(spark)
    }


def _statements(text: str) -> list[str]:
    out: list[str] = []
    lines = text.split("\n")
    k = 0
    while k < len(lines):
        line = lines[k].strip()
        if line.startswith("> "):
            stmt = line[2:]
            while not stmt.rstrip().endswith(";") and k + 1 < len(lines):
                k += 1
                stmt += "\n" + lines[k]
            out.append(stmt.rstrip().rstrip(";"))
        k += 1
    return out


def _outcome(spark, text: str) -> tuple:
    """Spark's answer to a query: its column types, rows and column names, or its error."""
    try:
        df = spark.sql(text)
        rows = df.collect()
        fields = df.schema.fields
        return (
            "rows",
            [f.dataType.simpleString() for f in fields],
            repr([tuple(r) for r in rows]),
            [f.name for f in fields],
        )
    except Exception as e:  # the error class (Spark's, or PySpark's for a result)
        found = re.search(r"\[([A-Z_.]+)\]", str(e))
        return ("error", type(e).__name__, found.group(1) if found else str(e)[:80])


def _tokens(text: str) -> list[tuple]:
    from sqlglot.tokenizer_core import TokenType

    from agent.dataframe._sqldialect import LineageSpark

    # Each token as written (a string literal with its quotes and escapes, which Spark reads
    # by its own rules); keywords in any case, and `x AS y` as `x y`: the same query.
    exact = {TokenType.VAR, TokenType.IDENTIFIER, TokenType.STRING, TokenType.NUMBER}
    out = []
    for t in LineageSpark().tokenize(text):
        written = text[t.start : t.end + 1]
        if t.token_type != TokenType.ALIAS:
            out.append((t.token_type, written if t.token_type in exact else written.upper()))
    return out


def sweep(spark, dialect, examples: dict[str, list[str]], seen: dict | None = None) -> Sweep:
    """Every documented example round-tripped through `dialect` (parse, generate), and the
    ones whose tokens changed run both ways (`seen`: outcomes of texts already run, under
    their settings)."""
    import sqlglot

    out = Sweep()
    seen = {} if seen is None else seen
    out.functions = len(examples)
    for name, statements in sorted(examples.items()):
        settings = []
        for text in statements:
            out.examples += 1
            if text.strip().upper().startswith("SET "):
                # (A setting some examples run under, e.g. escapedStringLiterals.)
                spark.sql(text)
                settings.append(text.split()[1].split("=")[0])
                continue
            try:
                trees = [t for t in sqlglot.parse(text, read=dialect) if t is not None]
                (tree,) = trees
                again = tree.sql(dialect=dialect)
            except Exception:
                out.unparsed.append((name, text))
                continue
            if _tokens(again) == _tokens(text):
                continue
            out.changed_text += 1
            key = (tuple(settings), text)
            if key not in seen:
                seen[key] = _outcome(spark, text)
            before, after = seen[key], _outcome(spark, again)
            if before == after:
                continue
            if before[:3] == after[:3]:
                out.names_only.append((name, text, again, before, after))
                continue
            unstable = before[:3] != _outcome(spark, text)[:3]  # (time, random)
            if unstable and before[0] == after[0] == "rows" and before[1] == after[1]:
                continue
            out.differ.append((name, text, again, before, after))
        for key in settings:
            spark.sql(f"RESET {key}")
    return out


# Examples sqlglot's tokenizer or parser cannot read (lc.sql refuses them, naming its parse
# error): `>>>` and a hex literal with a space (`X '1010'`).
UNPARSED = {
    "bitmap_and_agg",
    "bitmap_count",
    "bitmap_or_agg",
    ">>>",
    "shiftrightunsigned",
}
# With every node generated, string literals are written with backslash escapes, which
# mean another string under spark.sql.parser.escapedStringLiterals=true (the examples of
# these functions set it); as lc.sql generates the text, an unchanged literal is written
# as it was.
PLAIN_ESCAPED = {"like", "ilike", "regexp", "regexp_like", "rlike"}


@pytest.fixture(scope="module")
def examples(spark) -> dict[str, list[str]]:
    return documented_examples(spark)


@pytest.fixture
def one_partition(spark):
    """The examples' few rows in one shuffle partition (a job each: the sweep's time)."""
    spark.conf.set("spark.sql.shuffle.partitions", "1")
    yield
    spark.conf.set("spark.sql.shuffle.partitions", "4")


def test_documented_examples_keep_their_meaning(spark, examples, one_partition):
    from agent.dataframe._sqldialect import LineageSpark, PlainSpark

    seen: dict = {}
    got = sweep(spark, LineageSpark, examples, seen)
    assert got.examples > 1000 and got.functions > 500
    assert not got.differ and not got.names_only, _report(got)
    assert {n for n, _ in got.unparsed} == UNPARSED, got.unparsed
    # Every node generated: the same rows, types and errors (column names may differ: a
    # changed expression is renamed to vanilla's by lc.sql, and written as it was inside).
    plain = sweep(spark, PlainSpark, examples, seen)
    assert {d[0] for d in plain.differ} <= PLAIN_ESCAPED, _report(plain)


def test_unparsed_examples_are_refused(lc, spark):
    from agent import UnsupportedOperation

    for text in ["SELECT 4 >>> 1", "SELECT bitmap_count(X '1010')"]:
        assert spark.sql(text).collect()
        with pytest.raises(UnsupportedOperation, match="cannot parse"):
            lc.sql(text)


def test_aggregates_are_sparks(spark):
    """The dialect's aggregate functions (what makes a block collect its groups' lineage)
    are the running Spark's."""
    from agent.dataframe._sqldialect import AGGREGATES

    groups = function_groups(spark)
    sparks = {
        name for name, (group, cls) in groups.items() if group == "agg_funcs" or cls.endswith("Agg")
    }
    assert sparks == AGGREGATES


def _report(s: Sweep) -> str:
    lines = [
        f"functions {s.functions}, examples {s.examples}, text changed {s.changed_text}, "
        f"rows/types/errors changed {len(s.differ)} "
        f"({len({d[0] for d in s.differ})} functions), names only {len(s.names_only)}, "
        f"unparsed {len(s.unparsed)}"
    ]
    for name, text, again, before, after in s.differ:
        lines += [f"{name}: {text}", f"   -> {again}", f"   {before[:3]}", f"   {after[:3]}"]
    return "\n".join(lines)


def _main(argv: list[str]) -> None:  # pragma: no cover (a report, not a test)
    import os

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    from agent.dataframe._sqldialect import LineageSpark, PlainSpark

    dialects: dict[str, Any] = {"spark": "spark", "lineage": LineageSpark, "plain": PlainSpark}
    spark = (
        SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false").getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    examples = documented_examples(spark)
    for name in argv or ["spark", "lineage", "plain"]:
        print(f"== {name}\n{_report(sweep(spark, dialects[name], examples))}")


if __name__ == "__main__":  # pragma: no cover
    _main(sys.argv[1:])
