"""`lc.sql`'s SQL dialect: sqlglot's Spark dialect made to give back the query it parsed.

`lc.sql` parses a query, adds lineage columns to it and has Spark run the text sqlglot
generates, so whatever sqlglot changes in the round trip changes the query. sqlglot's Spark
dialect translates: it parses Spark's functions into its own typed nodes (to transpile them)
and generates those as it sees fit, and some come back with another meaning
(`percentile_cont(p) WITHIN GROUP (ORDER BY v DESC)` as `PERCENTILE_APPROX(v, p)`,
`to_char(d, '999.99')` as `CAST(d AS STRING)`, `parse_json(s)` as `s`, `log10(x)` as
`LOG(10, x)`, `instr(s, t, 1, 2)` as `LOCATE(t, s, 1)`, `max_by(x, y, 2)` as `MAX_BY(x, y)`,
`time '09:00'` as a TIMESTAMP, ...: `tests/test_sql_roundtrip.py` runs every example of
Spark's function documentation both ways).

Here the parser keeps every function call as a plain call (`exp.Anonymous`, generated as
written: name, case and arguments), so nothing is translated; it recognizes only what the
rewriter reads:

- aggregate functions (Spark's, `AGGREGATES`): `Aggregate`, still a plain call, but an
  `exp.AggFunc` (what makes a block an aggregate);
- syntax that is not a plain call: CAST / TRY_CAST, EXTRACT, POSITION, SUBSTRING / SUBSTR
  with FROM / FOR, TRIM with BOTH / LEADING / TRAILING / FROM, OVERLAY, CASE, join hints,
  WITHIN GROUP, FILTER, OVER, IGNORE / RESPECT NULLS, lambdas, subqueries;

and its generator writes the few forms sqlglot's Spark generator gets wrong (`TABLESAMPLE
... REPEATABLE (n)`, ...). Window and generator functions are told by name
(`function_name`, `RANKING`, `OFFSET_WINDOWS`).

Every parse and generation of `lc.sql`'s text goes through `parse_one` / `to_sql` here.
"""

from __future__ import annotations

from typing import Any, ClassVar

from sqlglot import exp
from sqlglot.dialects.spark import Spark
from sqlglot.generators.spark import SparkGenerator
from sqlglot.parsers.spark import SparkParser
from sqlglot.tokenizer_core import TokenType

# Spark's aggregate functions (4.x: the "agg_funcs" group of its function registry, and
# schema_of_variant_agg; tests/test_sql_roundtrip.py checks the list against the running
# Spark's).
AGGREGATES = frozenset(
    {
        "any",
        "any_value",
        "approx_count_distinct",
        "approx_percentile",
        "approx_top_k",
        "approx_top_k_accumulate",
        "approx_top_k_combine",
        "array_agg",
        "avg",
        "bit_and",
        "bit_or",
        "bit_xor",
        "bitmap_and_agg",
        "bitmap_construct_agg",
        "bitmap_or_agg",
        "bool_and",
        "bool_or",
        "collect_list",
        "collect_set",
        "collect_union",
        "corr",
        "count",
        "count_if",
        "count_min_sketch",
        "covar_pop",
        "covar_samp",
        "every",
        "first",
        "first_value",
        "grouping",
        "grouping_id",
        "histogram_numeric",
        "hll_sketch_agg",
        "hll_union_agg",
        "kll_merge_agg_bigint",
        "kll_merge_agg_double",
        "kll_merge_agg_float",
        "kll_sketch_agg_bigint",
        "kll_sketch_agg_double",
        "kll_sketch_agg_float",
        "kurtosis",
        "last",
        "last_value",
        "listagg",
        "max",
        "max_by",
        "mean",
        "measure",
        "median",
        "min",
        "min_by",
        "mode",
        "percentile",
        "percentile_approx",
        "percentile_cont",
        "percentile_disc",
        "regr_avgx",
        "regr_avgy",
        "regr_count",
        "regr_intercept",
        "regr_r2",
        "regr_slope",
        "regr_sxx",
        "regr_sxy",
        "regr_syy",
        "schema_of_variant_agg",
        "skewness",
        "some",
        "std",
        "stddev",
        "stddev_pop",
        "stddev_samp",
        "string_agg",
        "sum",
        "theta_intersection_agg",
        "theta_sketch_agg",
        "theta_union_agg",
        "try_avg",
        "try_sum",
        "tuple_intersection_agg_double",
        "tuple_intersection_agg_integer",
        "tuple_sketch_agg_double",
        "tuple_sketch_agg_integer",
        "tuple_union_agg_double",
        "tuple_union_agg_integer",
        "var_pop",
        "var_samp",
        "variance",
    }
)

# Window functions whose value depends on the row's position alone (no other row's values).
RANKING = frozenset({"row_number", "rank", "dense_rank", "percent_rank", "ntile", "cume_dist"})
# Window functions that take the value of the row at an offset.
OFFSET_WINDOWS = frozenset({"lag", "lead"})

# sqlglot's function parsers for syntax that is not a plain call (the others, which only
# translate, are left out).
_SYNTAX = {
    "CAST",
    "TRY_CAST",
    "EXTRACT",
    "POSITION",
    "SUBSTRING",
    "SUBSTR",
    "TRIM",
    "OVERLAY",
    # join hints: /*+ BROADCAST(t) */ ...
    "BROADCAST",
    "BROADCASTJOIN",
    "MAPJOIN",
    "MERGE",
    "SHUFFLEMERGE",
    "MERGEJOIN",
    "SHUFFLE_HASH",
    "SHUFFLE_REPLICATE_NL",
}


class Aggregate(exp.AnonymousAggFunc):
    """A call of one of Spark's aggregate functions, kept as written."""


def function_name(node: Any) -> str:
    """The lower-case name of a function call node ("" for other nodes)."""
    if isinstance(node, exp.Anonymous | exp.AnonymousAggFunc):
        return node.name.lower()
    if isinstance(node, exp.Func):
        return node.sql_name().lower()
    return ""


# Meta key of a node's text as written and the plain generation of the node then.
_WRITTEN = "lc_written"
# Meta key of a CAST that was written as a typed literal.
_TYPED_LITERAL = "lc_typed_literal"

# Parse methods whose node is given the text it was parsed from: whole expressions, their
# operands, literals and parenthesized expressions, function calls (with OVER etc.).
_SPANNED = ("_parse_assignment", "_parse_unary", "_parse_primary", "_parse_function_call")


def _spanning(name: str) -> Any:
    base = getattr(SparkParser, name)

    def method(self: Any, *args: Any, **kwargs: Any) -> Any:
        start = self._index
        node = base(self, *args, **kwargs)
        if (
            isinstance(node, exp.Expr)
            and self._index > start
            and not any(isinstance(n, exp.Query) for n in node.walk())
        ):
            first, last = self._tokens[start], self._tokens[self._index - 1]
            node.meta[_WRITTEN] = (self.sql[first.start : last.end + 1], _plain(node))
        return node

    method.__name__ = name
    return method


class LineageSpark(Spark):
    """Spark SQL as written: see the module's docstring."""

    NORMALIZE_FUNCTIONS = False

    class Parser(SparkParser):
        FUNCTIONS: ClassVar[dict] = {}
        FUNCTION_PARSERS: ClassVar[dict] = {
            k: v for k, v in SparkParser.FUNCTION_PARSERS.items() if k in _SYNTAX
        }
        NO_PAREN_FUNCTIONS: ClassVar[dict] = {}

        def _parse_type(
            self, parse_interval: bool = True, fallback_to_identifier: bool = False
        ) -> Any:
            # A typed literal (`DATE '2020-01-01'`, `TIME '09:00'`, `TIMESTAMP_NTZ '...'`) is
            # not the CAST sqlglot makes of it (a TIME cast is refused where the literal is
            # not, a nanosecond TIMESTAMP_NTZ literal is cut to microseconds): marked, to be
            # written as a literal again.
            start = self._index
            node = super()._parse_type(parse_interval, fallback_to_identifier)
            if (
                isinstance(node, exp.Cast)
                and isinstance(node.this, exp.Literal)
                and node.this.is_string
                and self._tokens[start].token_type in self.TYPE_TOKENS
            ):
                node.meta[_TYPED_LITERAL] = True
            return node

        def _parse_value(self, values: bool = True) -> Any:
            # `VALUES 1, 2 AS t(c)`: a row without parentheses is one expression, without an
            # alias (sqlglot took `2 AS t` for an aliased value).
            if self._curr is not None and self._curr.token_type == TokenType.L_PAREN:
                return super()._parse_value(values)
            value = self._parse_assignment()
            return exp.Tuple(expressions=[value]) if value is not None else None

        def _parse_window(self, this: Any, alias: bool = False) -> Any:
            if isinstance(this, exp.Anonymous) and this.name.lower() in AGGREGATES:
                agg = Aggregate(this=this.this, expressions=this.expressions)
                if this.comments:
                    agg.add_comments(this.comments)
                this = agg
            return super()._parse_window(this, alias)

    class Generator(SparkGenerator):
        TABLESAMPLE_SEED_KEYWORD = "REPEATABLE"
        TYPE_MAPPING = {**SparkGenerator.TYPE_MAPPING, exp.DType.TIME: "TIME"}

        def cast_sql(self, expression: Any, safe_prefix: str | None = None) -> str:
            if expression.meta_get(_TYPED_LITERAL) and isinstance(expression.this, exp.Literal):
                return f"{self.sql(expression, 'to')} {self.sql(expression, 'this')}"
            return super().cast_sql(expression, safe_prefix)

        def sql(self, expression: Any, key: str | None = None, comment: bool = True) -> str:
            # A node the rewriter left as parsed: the text it was parsed from.
            if key is None and isinstance(expression, exp.Expr):
                written = expression.meta_get(_WRITTEN)
                if written is not None and written[1] == _plain(expression):
                    return written[0]
            return super().sql(expression, key, comment)

        TRANSFORMS = {
            **SparkGenerator.TRANSFORMS,
            Aggregate: lambda self, e: self.func(
                self.sql(e, "this"), *e.expressions, normalize=False
            ),
        }


for _name in _SPANNED:
    setattr(LineageSpark.Parser, _name, _spanning(_name))


class PlainSpark(LineageSpark):
    """LineageSpark generating every node (not the text it was parsed from)."""

    class Generator(LineageSpark.Generator):
        def sql(self, expression: Any, key: str | None = None, comment: bool = True) -> str:
            return SparkGenerator.sql(self, expression, key, comment)


def _plain(node: Any) -> str:
    return node.sql(dialect=PlainSpark)


DIALECT = LineageSpark


def parse(text: str) -> list[Any]:
    """The statements of `text`."""
    import sqlglot

    return sqlglot.parse(text, read=LineageSpark)


def parse_one(text: str) -> Any:
    """The one statement of `text` (a query the rewriter wrote)."""
    import sqlglot

    return sqlglot.parse_one(text, read=LineageSpark)


def to_sql(node: Any) -> str:
    """`node` as Spark SQL text."""
    return node.sql(dialect=LineageSpark)
