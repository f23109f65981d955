"""Hidden lineage columns: what a captured DataFrame carries beside the user's columns.

A row's lineage is the set of source rows it was made from (which-provenance). It rides in
hidden columns named `__prov_<n>`, of two kinds:

- a *long* column holds one record id (a scan row, or null: an outer join's missing side);
  every source starts one, and row-at-a-time operators (select, filter, joins) just carry
  them, so a join of k sources carries k longs and costs k int64s per row;
- an *array* column holds a set of record ids: what an aggregate collects for a group
  (`collect_list` of each long, `flatten` of each array), concatenated into one array.

The driver unions a row's longs and arrays into its parents when an action returns it.
"""

from __future__ import annotations

import itertools
import re
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from journals import MAX_PARTITION, MAX_POSITION

PREFIX = "__prov_"
_counter = itertools.count(1)

POSITION_BITS = MAX_POSITION.bit_length()
CP_SHIFT = MAX_PARTITION.bit_length() + POSITION_BITS
MONO_PARTITION_SHIFT = 33  # monotonically_increasing_id: partition << 33 | row in partition


def fresh(kind: str = "") -> str:
    """A new hidden column name, unique in this process."""
    return f"{PREFIX}{kind}{next(_counter)}"


def is_hidden(name: str) -> bool:
    return name.startswith(PREFIX)


@dataclass(frozen=True)
class Lineage:
    """The hidden columns of a captured DataFrame and the capture points their ids name."""

    longs: tuple[str, ...] = ()
    arrays: tuple[str, ...] = ()
    cps: frozenset[int] = field(default_factory=frozenset)

    @property
    def names(self) -> tuple[str, ...]:
        return self.longs + self.arrays

    def __bool__(self) -> bool:
        return bool(self.longs or self.arrays)

    def renamed(self, mapping: dict[str, str]) -> Lineage:
        return Lineage(
            tuple(mapping.get(n, n) for n in self.longs),
            tuple(mapping.get(n, n) for n in self.arrays),
            self.cps,
        )

    def merged(self, other: Lineage) -> Lineage:
        """Both sides' columns (a join's or a union's; names must not clash)."""
        longs = self.longs + tuple(n for n in other.longs if n not in self.longs)
        arrays = self.arrays + tuple(n for n in other.arrays if n not in self.arrays)
        return Lineage(longs, arrays, self.cps | other.cps)

    def types(self) -> dict[str, str]:
        return {
            **dict.fromkeys(self.longs, "bigint"),
            **dict.fromkeys(self.arrays, "array<bigint>"),
        }


def sql_name(name: str) -> str:
    """`name` quoted as a SQL identifier."""
    return "`" + name.replace("`", "``") + "`"


def scan_id_sql(cp: int, checked: bool = False) -> str:
    """The record id (cp, scan partition, row in partition) of each row, as SQL text. It
    must be projected directly over the scan: there `monotonically_increasing_id()` is
    (scan partition << 33) + row index, deterministic for a file scan. SQL text, not Column
    calls: each Column call (`alias` included: ~10) is a py4j round trip, and a source's
    projection is built by every action that uses it (see `_reader.scanned`). `checked`:
    the query fails on a row index past what an id holds (a partition with a gzip file,
    whose rows its size does not bound)."""
    m = "monotonically_increasing_id()"
    row = f"({m} & {(1 << MONO_PARTITION_SHIFT) - 1})"
    text = (
        f"{cp << CP_SHIFT} | shiftleft(shiftright({m}, {MONO_PARTITION_SHIFT}), {POSITION_BITS})"
        f" | {row}"
    )
    if not checked:
        return text
    too_many = _string_literal(
        f"a scan partition has more than {1 << POSITION_BITS} rows, more than lineage record "
        "ids can number: split the gzip input into smaller files"
    )
    return f"CASE WHEN {row} < {1 << POSITION_BITS} THEN {text} ELSE raise_error({too_many}) END"


def file_scan_id_sql(cp: int, uris: list[str], sizes: list[int]) -> str:
    """The record id (cp, file index, row index in the file) of each row of a scan addressed
    by file (`_scan.by_file`), as SQL text; `uris` and `sizes` are the listed files'
    `_metadata.file_path` and size. Any plan gives a row the same id, so it may be projected
    above a pruned, filtered scan."""
    index = _file_index_sql(uris, sizes) if uris else "CAST(NULL AS INT)"  # no file: no row
    return (
        f"{cp << CP_SHIFT} | shiftleft(CAST({index} AS BIGINT), {POSITION_BITS}) "
        "| _metadata.row_index"
    )


def _file_index_sql(uris: list[str], sizes: list[int]) -> str:
    """A row's file index, from its file's size by a two-level perfect hash (a bucket by
    size mod the number of sizes, then a slot by size mod the bucket's own modulus, chosen
    so that its sizes fall in distinct slots): three array lookups a row, whatever the
    number of files. Spark looks up a map by a linear search: TPC-H SF 1 Q1 over 112 files
    with the ids collected, against vanilla, measured 1.42-1.58x with a map from paths,
    1.23x with this, 1.05-1.21x with row indexes alone (runs of one script); a search tree
    of CASE expressions on sizes with a path check at each leaf measured 3.8x
    (its generated code, likely too large to compile, was not examined). Files of one size
    are told apart by path; a size no listed file has fails the query rather than lose its
    lineage."""
    keys = sorted(set(sizes))
    n = len(keys)
    buckets: list[list[int]] = [[] for _ in range(n)]
    for k in keys:
        buckets[k % n].append(k)
    mods: list[int] = []
    offsets: list[int] = []
    table: list[int] = []
    for bucket in buckets:
        m = max(len(bucket), 1)
        while len({k % m for k in bucket}) < len(bucket):
            m += 1
        mods.append(m)
        offsets.append(len(table))
        slots = [-1] * m  # -1: no file has this slot's size
        for k in bucket:
            slots[k % m] = k
        table.extend(slots)
    files_of: dict[int, list[int]] = {}
    for i, size in enumerate(sizes):
        files_of.setdefault(size, []).append(i)
    # The file index at each slot; -2: several files share its size.
    found = [-1 if k < 0 else files_of[k][0] if len(files_of[k]) == 1 else -2 for k in table]
    missing = f"raise_error({_string_literal('provrepo: a file the scan did not list was read')})"
    shared = " ".join(
        f"WHEN _metadata.file_path = {_string_literal(uris[i])} THEN {i}"
        for fs in files_of.values()
        if len(fs) > 1
        for i in fs
    )
    by_path = f"CASE {shared} ELSE {missing} END" if shared else missing
    file_size = "_metadata.file_size"
    bucket_at = f"CAST(pmod({file_size}, {n}) AS INT) + 1"
    slot = (
        f"element_at({_array(offsets)}, {bucket_at}) + CAST(pmod({file_size}, "
        f"element_at({_array(mods)}, {bucket_at})) AS INT) + 1"
    )
    at = f"element_at({_array(found)}, {slot})"
    return (
        f"CASE WHEN element_at({_array(table)}, {slot}) <> {file_size} THEN {missing} "
        f"WHEN {at} >= 0 THEN {at} ELSE {by_path} END"
    )


def _array(values: list[int]) -> str:
    return f"array({', '.join(map(str, values))})"


def _string_literal(text: str) -> str:
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def collected(F: Any, lin: Lineage, alias: str) -> Any:
    """An aggregate expression named `alias`: every id of the group's rows, as one array.
    One SQL expression: built from Column calls it cost ~16 py4j round trips for one
    source's ids, against 3."""
    parts = [f"collect_list({sql_name(n)})" for n in lin.longs]
    parts += [f"flatten(collect_list({sql_name(n)}))" for n in lin.arrays]
    if not parts:
        text = "CAST(array() AS array<bigint>)"
    else:
        text = parts[0] if len(parts) == 1 else f"concat({', '.join(parts)})"
    return F.expr(f"{text} AS {sql_name(alias)}")


def all_ids(F: Any, lin: Lineage) -> Any:
    """One array column of a row's ids (its longs that are not null, its arrays' elements)."""
    empty = F.array().cast("array<bigint>")
    parts = []
    if lin.longs:
        parts.append(F.array_compact(F.array(*[F.col(n) for n in lin.longs])))
    parts += [F.coalesce(F.col(n), empty) for n in lin.arrays]
    if not parts:
        return empty
    return parts[0] if len(parts) == 1 else F.concat(*parts)


def one_ids_column(F: Any, lin: Lineage) -> Any:
    """Each row's ids as one column, for a Python function's input: its long (-1 for null:
    a long with nulls would reach pandas as float64, which cannot hold every id) or an array
    of them."""
    if len(lin.longs) == 1 and not lin.arrays:
        return F.coalesce(F.col(lin.longs[0]), F.lit(-1).cast("bigint"))
    return all_ids(F, lin)


def as_struct(spark: Any, schema: Any) -> Any:
    """`schema` (a StructType or a DDL string) as a StructType, parsed by Spark."""
    from pyspark.sql.types import StructType

    if isinstance(schema, StructType):
        return schema
    if not isinstance(schema, str):
        raise TypeError(f"schema must be a StructType or a DDL string, got {schema!r}")
    return spark.createDataFrame([], schema).schema


def udf_ids(F: Any, lin: Lineage) -> Any:
    """A UDF's hidden argument: the row's one id as a long when it has a single long column
    (a row of one source: no array to build and pickle per call), else `all_ids`."""
    if len(lin.longs) == 1 and not lin.arrays:
        return F.col(lin.longs[0])
    return all_ids(F, lin)


def null_of(F: Any, kind: str) -> Any:
    return F.lit(None).cast(kind)


def joined_arrays(F: Any, df: Any, lin: Lineage) -> Any:
    """`df` with each array column of `lin` as one comma-joined string: an action brings a
    group's ids back as one string instead of one pickled object per id (several times
    cheaper for large groups; `parents_of` parses them back exactly)."""
    if not lin.arrays:
        return df
    return df.withColumns({n: F.array_join(F.col(n), ",") for n in lin.arrays})


def _id_array(value: Any) -> np.ndarray:
    """A hidden array value as int64s: a joined string (`joined_arrays`), a list or None."""
    if value is None:
        return np.empty(0, dtype=np.int64)
    if isinstance(value, str):
        return np.fromstring(value, dtype=np.int64, sep=",")
    return np.fromiter((v for v in value if v is not None), dtype=np.int64)


def parents_of(rows_hidden: list[list[Any]], lin: Lineage) -> tuple[np.ndarray, np.ndarray]:
    """CSR (counts, ids) of each row's parents: its longs and array elements, deduplicated
    and sorted. `rows_hidden[k]` holds row k's hidden values in `lin.names` order (arrays as
    lists or as `joined_arrays` strings)."""
    n = len(rows_hidden)
    nl = len(lin.longs)
    rows_idx: list[np.ndarray] = []
    ids: list[np.ndarray] = []
    if nl and n:
        longs = np.array(
            [[-1 if v is None else v for v in r[:nl]] for r in rows_hidden], dtype=np.int64
        ).reshape(n, nl)
        r, c = np.nonzero(longs >= 0)
        rows_idx.append(r.astype(np.int64))
        ids.append(longs[r, c])
    for j in range(nl, nl + len(lin.arrays)):
        parsed = [_id_array(r[j]) for r in rows_hidden]
        lens = np.fromiter((len(a) for a in parsed), dtype=np.int64, count=n)
        if lens.sum():
            rows_idx.append(np.repeat(np.arange(n, dtype=np.int64), lens))
            ids.append(np.concatenate(parsed))
    return csr(n, rows_idx, ids)


def arrow_pairs(
    column: Any, longs: tuple[str, ...], arrays: tuple[str, ...], first: int = 0
) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """(row index, id) pairs of the id columns `longs` / `arrays` of Arrow data whose
    `column(name)` gives an Arrow array (a batch's, or a table's combined), rows numbered
    from `first`: read from the Arrow buffers, no per-id Python object or text. Null ids
    and null lists give no pair."""
    import pyarrow as pa
    import pyarrow.compute as pc

    rows: list[np.ndarray] = []
    ids: list[np.ndarray] = []
    for name in longs:
        col = column(name)
        valid = np.asarray(col.is_valid().to_numpy(zero_copy_only=False), dtype=bool)
        values = col.fill_null(0).to_numpy(zero_copy_only=False).astype(np.int64, copy=False)
        rows.append(np.flatnonzero(valid).astype(np.int64) + first)
        ids.append(values[valid])
    for name in arrays:
        col = column(name)
        values = pc.list_flatten(col)  # the elements of the non-null lists, in row order
        owner = pc.list_parent_indices(col)
        keep = values.is_valid()
        values, owner = values.filter(keep), owner.filter(keep)
        ids.append(values.cast(pa.int64()).to_numpy(zero_copy_only=False))
        rows.append(owner.to_numpy(zero_copy_only=False).astype(np.int64) + first)
    return rows, ids


def arrow_parents(table: Any, lin: Lineage) -> tuple[np.ndarray, np.ndarray]:
    """`parents_of` for rows collected as an Arrow table (`toArrow()`) whose columns include
    `lin`'s."""
    if not lin.longs and len(lin.arrays) == 1 and table.num_rows <= _FEW_ROWS:
        got = _few_lists(table.column(lin.arrays[0]).combine_chunks())
        if got is not None:
            return got
    rows, ids = arrow_pairs(lambda name: table.column(name).combine_chunks(), lin.longs, lin.arrays)
    return csr(table.num_rows, rows, ids)


# At most this many rows (an aggregate's few big groups, TPC-H Q1's 4) take `_few_lists`:
# one numpy sort per row; many small rows sort faster as one `csr` key.
_FEW_ROWS = 256


def _few_lists(col: Any) -> tuple[np.ndarray, np.ndarray] | None:
    """`csr` of one list<int64> Arrow column with few rows and no null ids: each row's ids
    sorted in place (timsort over the sorted runs an aggregate's partial lists bring) and
    deduplicated, with no (row, id) pair arrays and no int64 key to build and split (TPC-H
    Q1's 6 M ids: several passes fewer). None when an id is null (the general path drops
    them)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    values = pc.list_flatten(col)  # the elements of the non-null lists, in row order
    if values.null_count:
        return None
    v = np.array(values.cast(pa.int64()).to_numpy(zero_copy_only=False), dtype=np.int64)
    lens = pc.list_value_length(col).fill_null(0).to_numpy(zero_copy_only=False)
    ends = np.cumsum(lens, dtype=np.int64)
    counts = np.zeros(len(col), dtype=np.int64)
    kept = []
    start = 0
    for k, end in enumerate(ends.tolist()):
        seg = v[start:end]
        seg.sort(kind="stable")
        if len(seg) > 1:
            seg = seg[np.concatenate(([True], seg[1:] != seg[:-1]))]
        counts[k] = len(seg)
        kept.append(seg)
        start = end
    return counts, np.concatenate(kept) if kept else np.array([], dtype=np.int64)


def csr(n: int, rows_idx: list[np.ndarray], ids: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """Per-row sorted distinct ids as CSR, from (row, id) pairs."""
    if not ids:
        return np.zeros(n, dtype=np.int64), np.array([], dtype=np.int64)
    r = np.concatenate(rows_idx)
    v = np.concatenate(ids)
    low = int(v.min()) if len(v) else 0
    span = int(v.max()) - low + 1 if len(v) else 1
    if n * span < 2**63:
        # One int64 key (row, id - low), stable-sorted in place (timsort runs over the
        # sorted runs an aggregate's partial lists bring) and deduplicated on itself:
        # several times faster than a two-key lexsort on a big group (TPC-H Q1: 1.2 M ids).
        key = r.astype(np.int64, copy=False) * span + (v.astype(np.int64, copy=False) - low)
        key.sort(kind="stable")
        if len(key) > 1:
            key = key[np.concatenate(([True], key[1:] != key[:-1]))]
        r, v = key // span, key % span + low
    else:
        order = np.lexsort((v, r))
        r, v = r[order], v[order]
        keep = np.ones(len(v), dtype=bool)
        keep[1:] = (r[1:] != r[:-1]) | (v[1:] != v[:-1])
        r, v = r[keep], v[keep]
    counts = np.bincount(r, minlength=n).astype(np.int64)
    return counts, v


# -- stars inside expressions -----------------------------------------------------------------
# Spark expands a star inside an expression (`struct(*)`, `hash(*)`, `count(DISTINCT *)`,
# `t.*` as a call's argument) over every column of the operator's input, hidden ones too: no
# Spark mechanism keeps an output column from a star (metadata columns and the hidden keys of
# a USING join are not in the output). The operators find such stars in a column's text and
# spell them out as the visible columns (`_frame`).


@dataclass(frozen=True)
class Star:
    """A star in a column's text: `text[start:end]`; `target` the qualifier or struct it
    expands (`t` of `t.*`), None for every column; `kind` "star", "count" (`count(*)`, which
    Spark counts rows with, expanding nothing, unless it is a distinct count: PySpark prints
    `count_distinct("*")` the same) or "opaque" (a star bound to a DataFrame, `df["*"]`, or
    inside a node printed in Java's form, e.g. a Python UDF's argument: not rewritable)."""

    start: int
    end: int
    target: str | None
    kind: str


def code_mask(text: str) -> list[bool]:
    """For each character of `text` (a column's text or Spark SQL), whether it is code: not
    inside a quoted string or identifier, nor a comment."""
    n = len(text)
    mask = [True] * n
    i = 0
    while i < n:
        ch = text[i]
        if ch in "'\"`":
            j = i + 1
            while j < n:
                if text[j] == "\\" and ch != "`":
                    j += 2
                    continue
                if text[j] == ch:
                    if ch == "`" and text.startswith("``", j):
                        j += 2
                        continue
                    break
                j += 1
            end = min(j + 1, n)
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            end = n if j < 0 else j + 2
        elif text.startswith("--", i):
            j = text.find("\n", i)
            end = n if j < 0 else j
        else:
            i += 1
            continue
        mask[i:end] = [False] * (end - i)
        i = end
    return mask


_NODE = re.compile(r"(?i)\b(un)?resolvedstar\(")
_TARGET = re.compile(r"((?:`(?:[^`]|``)*`|[A-Za-z_0-9]+)(?:\.(?:`(?:[^`]|``)*`|[A-Za-z_0-9]+))*)$")


def _next_code(text: str, i: int) -> str:
    while i < len(text) and text[i].isspace():
        i += 1
    return text[i] if i < len(text) else ""


def _prev_code(text: str, i: int) -> int:
    """Index of the last non-space character before `i` (-1: none)."""
    i -= 1
    while i >= 0 and text[i].isspace():
        i -= 1
    return i


def _counted(text: str, start: int, end: int) -> bool:
    """Whether `text[start:end]` is the sole argument of a `count(...)` call."""
    p = _prev_code(text, start)
    return (
        p >= 0
        and text[p] == "("
        and re.search(r"(?i)(?<![\w.])count\s*$", text[:p]) is not None
        and _next_code(text, end) == ")"
    )


def stars_in(text: str) -> list[Star]:
    """The stars in a column's text or a SQL expression, outside quotes and comments: a `*`
    in an argument's place (after `(`, `,`, `DISTINCT`, `BY`, a qualifier's `.`; before `)`,
    `,` or the end; not multiplication, nor PySpark's prefix `*(a, b)`), PySpark's
    `t.*.*` spelling of `F.col("t.*")`, and Spark Connect's `unresolvedstar(...)`."""
    mask = code_mask(text)
    out: list[Star] = []
    for m in _NODE.finditer(text):
        if not mask[m.start()]:
            continue
        open_ = m.end() - 1
        close = text.find(")", open_)
        close = len(text) if close < 0 else close + 1
        inner = text[open_ + 1 : close - 1].strip()
        if m.group(0) == "unresolvedstar(" and (inner == "" or inner.endswith(".*")):
            target = inner[:-2] or None if inner else None
            kind = "count" if target is None and _counted(text, m.start(), close) else "star"
            out.append(Star(m.start(), close, target, kind))
        else:
            out.append(Star(m.start(), close, None, "opaque"))
    taken = [(s.start, s.end) for s in out]
    i = 0
    while i < len(text):
        if text[i] != "*" or not mask[i] or any(a <= i < b for a, b in taken):
            i += 1
            continue
        end = i + 1
        if text.startswith(".*", end):  # PySpark prints F.col("t.*") as `t.*.*`
            end += 2
        if _next_code(text, end) not in (")", ",", ""):
            i = end
            continue
        p = _prev_code(text, i)
        start, target = i, None
        if p >= 0 and text[p] == ".":
            qualifier = _TARGET.search(text[:p])
            if qualifier is None:
                i = end
                continue
            start, target = qualifier.start(), qualifier.group(1)
        elif not (
            p < 0
            or text[p] in "(,"
            or re.search(r"(?i)(?<![\w.])(distinct|all|by)$", text[: p + 1]) is not None
        ):
            i = end
            continue
        kind = "count" if target is None and _counted(text, start, end) else "star"
        out.append(Star(start, end, target, kind))
        i = end
    return sorted(out, key=lambda s: s.start)


def expand_stars(text: str, stars: list[Star], expansion: Any) -> str:
    """`text` with each star of `stars` replaced by `expansion(star)` (SQL text, or None to
    keep the star)."""
    out = []
    last = 0
    for s in stars:
        spelled = expansion(s)
        if spelled is None:
            continue
        out += [text[last : s.start], spelled]
        last = s.end
    return "".join(out) + text[last:]


# PySpark prints a Column's operators as prefix calls (`%(hash(*), 10)`, `and(a, b)`,
# `!(=(a, 1))`); SQL spells them infix.
_PREFIX = re.compile(r"(?<![\w)\]`'\"])(<=>|<=|>=|!=|=|<|>|\+|-|\*|/|%|&|\||\^|!|and|or|in)\(")


def infix(text: str) -> str:
    """`text` with PySpark's prefix operator calls spelled as SQL (a best effort: the caller
    checks what Spark makes of the result)."""
    from ._windows import _balanced, _split_top

    for _ in range(10_000):
        mask = code_mask(text)
        found = [m for m in _PREFIX.finditer(text) if mask[m.start()]]
        if not found:
            return text
        m = found[-1]
        open_ = m.end() - 1
        close = _balanced(text, open_)
        args = _split_top(text[open_ + 1 : close - 1])
        op = m.group(1)
        if op == "!" and len(args) == 1:
            new = f"(NOT {args[0]})"
        elif op == "in" and args:
            new = f"({args[0]} IN ({', '.join(args[1:])}))"
        elif len(args) == 2 and op != "!":
            new = f"({args[0]} {op.upper()} {args[1]})"
        else:
            return text
        text = text[: m.start()] + new + text[close:]
    return text
