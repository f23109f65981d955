"""File scans planned as Spark plans them, so a scan row's id (partition, position) can be
mapped back to its file and line (or Parquet row group and row) without a Spark job.

Spark (4.x, `FileSourceScanExec.createReadRDD`) lists the leaf files, cuts each splittable
file into pieces of at most `maxSplitBytes` (`PartitionedFileUtil.splitFiles`), sorts the
pieces by length, longest first (a stable sort: ties keep listing order), and packs them
"next fit" into partitions (`FilePartition.getFilePartitions`), re-packing with a larger split
when `spark.sql.files.maxPartitionNum` is exceeded. This module reproduces those rules; the
tests compare them with Spark's own layout (`spark_partition_id()`, `_metadata`) over many
shapes. The result goes into the capture point's descriptor, where the repository reads it to
re-read source rows by byte offset.

Spark lists the files once, when the DataFrame is read, but plans the partitions from that
listing each time it plans a query, with the session settings of that moment (`ScanConf`):
`partitioned` plans them again from a descriptor's listing, as the agent does before each
action (`_reader.ScanPlans`).
"""

from __future__ import annotations

import contextlib
import glob
import os
import re
import weakref
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote, urlparse

from .._splits import UnsupportedInput

_COMPRESSED = (".gz", ".bz2", ".zst", ".zstd", ".lz4", ".snappy", ".deflate", ".xz", ".br")
_UNITS = {"": 1, "b": 1, "k": 1 << 10, "kb": 1 << 10, "m": 1 << 20, "mb": 1 << 20}
_UNITS |= {"g": 1 << 30, "gb": 1 << 30, "t": 1 << 40, "tb": 1 << 40, "p": 1 << 50, "pb": 1 << 50}
_BYTES = re.compile(r"^\s*(\d+)\s*([a-zA-Z]*)\s*$")

# Positions and partitions must fit a record id (journals: 18 bits partition, 31 position).
MAX_SCAN_PARTITIONS = 1 << 18
MAX_ROWS_PER_PARTITION = 1 << 31


def byte_size(text: str) -> int:
    """A Spark byte string ("134217728b", "128m", "1g") in bytes."""
    m = _BYTES.match(str(text))
    if not m or m[2].lower() not in _UNITS:
        raise ValueError(f"not a byte size: {text!r}")
    return int(m[1]) * _UNITS[m[2].lower()]


MAX_PARTITION_BYTES = "spark.sql.files.maxPartitionBytes"
OPEN_COST = "spark.sql.files.openCostInBytes"
MIN_PARTITION_NUM = "spark.sql.files.minPartitionNum"
LEAF_PARALLELISM = "spark.sql.leafNodeDefaultParallelism"
DEFAULT_PARALLELISM = "the default parallelism"
MAX_PARTITION_NUM = "spark.sql.files.maxPartitionNum"


@dataclass(frozen=True)
class ScanConf:
    """The session settings Spark's file-scan planning reads (`FilePartition.maxSplitBytes`
    and `getFilePartitions`, Spark 4.x), read again by Spark whenever it plans a query.
    `min_partition_from` names where `min_partition_num` came from: minPartitionNum, else
    leafNodeDefaultParallelism, else the default parallelism (the cluster's cores, which
    may change as executors come and go)."""

    max_partition_bytes: int
    open_cost: int
    min_partition_num: int
    max_partition_num: int | None
    min_partition_from: str = MIN_PARTITION_NUM

    def to_dict(self) -> dict[str, Any]:
        return {
            "maxPartitionBytes": self.max_partition_bytes,
            "openCostInBytes": self.open_cost,
            "minPartitionNum": self.min_partition_num,
            "maxPartitionNum": self.max_partition_num,
        }

    def changes(self, now: ScanConf) -> list[str]:
        """The settings that differ in `now`, each as "<setting> <then> -> <now>"."""
        out = []
        for name, a, b in (
            (MAX_PARTITION_BYTES, self.max_partition_bytes, now.max_partition_bytes),
            (OPEN_COST, self.open_cost, now.open_cost),
            (MAX_PARTITION_NUM, self.max_partition_num, now.max_partition_num),
        ):
            if a != b:
                out.append(f"{name} {_shown(a)} -> {_shown(b)}")
        if self.min_partition_num != now.min_partition_num:
            if self.min_partition_from == now.min_partition_from:
                name = now.min_partition_from
            else:
                name = f"{self.min_partition_from} -> {now.min_partition_from}"
            out.append(f"{name} {self.min_partition_num} -> {now.min_partition_num}")
        return out


def _shown(value: int | None) -> str:
    return "unset" if value is None else str(value)


def scan_conf(spark: Any) -> ScanConf:
    """The planning settings of `spark` (a classic or Spark Connect session) now."""

    def get(key: str, optional: bool = False) -> str | None:
        try:  # an optional key (no built-in default) answers None unset, not an error
            value = spark.conf.get(key, None) if optional else spark.conf.get(key)
        except Exception:
            return None
        return None if value in (None, "", "None") else str(value)

    max_bytes = byte_size(get(MAX_PARTITION_BYTES) or "128m")
    open_cost = byte_size(get(OPEN_COST) or "4m")
    min_num, source = get(MIN_PARTITION_NUM, True), MIN_PARTITION_NUM
    if min_num is None:
        min_num, source = get(LEAF_PARALLELISM, True), LEAF_PARALLELISM
    if min_num is None:
        min_num, source = str(default_parallelism(spark)), DEFAULT_PARALLELISM
    max_num = get(MAX_PARTITION_NUM, True)
    return ScanConf(max_bytes, open_cost, int(min_num), int(max_num) if max_num else None, source)


# Spark Connect sessions whose default parallelism only a job could tell (see below).
_ASKED: weakref.WeakKeyDictionary[Any, int] = weakref.WeakKeyDictionary()


def default_parallelism(spark: Any) -> int:
    """`sparkContext.defaultParallelism`, also under Spark Connect (which has no context):
    there, from the conf or a `local[N]` master, else by asking a one-row job (range's
    default slicing is that number), once per session (the agent reads the settings before
    every action)."""
    try:
        return int(spark.sparkContext.defaultParallelism)
    except Exception:  # Spark Connect: no SparkContext
        pass
    conf = spark.conf.get("spark.default.parallelism", None)
    if conf:
        return int(conf)
    master = str(spark.conf.get("spark.master", "") or "")
    m = re.match(r"^local\[(\d+|\*)(?:,\d+)?\]$", master)
    if m:
        return os.cpu_count() or 1 if m[1] == "*" else int(m[1])
    if master == "local":
        return 1
    with contextlib.suppress(TypeError):  # a session that takes no weak reference
        if spark in _ASKED:
            return _ASKED[spark]
    from pyspark.sql import functions as F

    row = spark.range(1 << 20).select(F.max(F.spark_partition_id())).first()
    n = int(row[0]) + 1
    with contextlib.suppress(TypeError):
        _ASKED[spark] = n
    return n


@dataclass(frozen=True)
class ScanFile:
    path: str  # absolute local path
    size: int
    mtime_ns: int


def local_path(path: str) -> str:
    if "://" in path or path.startswith("file:"):
        u = urlparse(path)
        if u.scheme != "file":
            raise UnsupportedInput(
                f"{path!r}: only local or shared-filesystem paths can be captured with row "
                f"positions; {u.scheme}:// is not supported"
            )
        return unquote(u.path)
    return path


def _data_file(name: str) -> bool:
    # HadoopFSUtils.shouldFilterOutPathName / PartitioningAwareFileIndex.isDataPath
    return not (name.startswith(("_", ".")) or name.endswith("._COPYING_"))


def nested(paths: list[str]) -> bool:
    """Whether a directory among `paths` (globs expanded) holds a subdirectory: a partitioned
    (`key=value`) or nested layout, whose files Spark lists in an order of its own."""
    for raw in paths:
        p = os.path.abspath(local_path(raw))
        for m in sorted(glob.glob(p)) if glob.has_magic(p) else [p]:
            if os.path.isdir(m) and any(e.is_dir() for e in os.scandir(m)):
                return True
    return False


def list_files(paths: list[str], fmt: str) -> list[ScanFile]:
    """The leaf files Spark reads for `paths`, in Spark's order: paths as given, globs
    sorted, a directory's entries in directory order (Hadoop's local listStatus is the
    directory's own order, as os.listdir's). Nested or partitioned directories, and compressed
    files but gzip ones, are refused: their rows could not be re-read by position."""
    out: list[ScanFile] = []
    for raw in paths:
        p = os.path.abspath(local_path(raw))
        matches = sorted(glob.glob(p)) if glob.has_magic(p) else [p]
        if not matches:
            raise FileNotFoundError(f"{fmt}: path does not exist: {raw}")
        for m in matches:
            if os.path.isdir(m):
                for name in os.listdir(m):
                    full = os.path.join(m, name)
                    if os.path.isdir(full):
                        raise UnsupportedInput(
                            f"{fmt}({raw!r}): directory {m} holds a subdirectory ({name}); "
                            "partitioned or nested directories are supported with lineage "
                            "for Parquet only"
                        )
                    if _data_file(name):
                        out.append(_stat(full))
            elif os.path.isfile(m):
                out.append(_stat(m))
            else:
                raise FileNotFoundError(f"{fmt}: path does not exist: {m}")
    for f in out:
        if fmt != "parquet" and f.path.endswith(_COMPRESSED) and not gzipped(f.path):
            raise UnsupportedInput(
                f"{fmt}: compressed input {f.path} cannot be re-read by line (of the "
                "compressed line formats, gzip is supported with lineage); decompress it first"
            )
    return out


def gzipped(path: str) -> bool:
    """Whether Spark reads `path` through Hadoop's gzip codec (chosen by the name's ".gz"),
    which cannot split it: it is one piece, and its lines are those of its decompressed
    bytes."""
    return path.endswith(".gz")


def _stat(path: str) -> ScanFile:
    st = os.stat(path)
    return ScanFile(path, st.st_size, st.st_mtime_ns)


def max_split_bytes(files: list[ScanFile], conf: ScanConf) -> int:
    """FilePartition.maxSplitBytes."""
    total = sum(f.size + conf.open_cost for f in files)
    per_core = total // max(conf.min_partition_num, 1)
    return min(conf.max_partition_bytes, max(conf.open_cost, per_core))


Piece = tuple[int, int, int]  # (file index, start, length)


def plan_partitions(
    files: list[ScanFile], conf: ScanConf, splittable: bool = True
) -> list[list[Piece]]:
    """The scan's partitions, each a list of (file index, start, length) pieces in read
    order, as Spark plans a non-bucketed file scan."""
    split = max_split_bytes(files, conf)
    pieces: list[Piece] = []
    for i, f in enumerate(files):
        if splittable and not gzipped(f.path):
            pieces.extend((i, off, min(split, f.size - off)) for off in range(0, f.size, split))
        elif f.size > 0:
            pieces.append((i, 0, f.size))
    pieces.sort(key=lambda p: -p[2])  # stable: ties keep listing order
    parts = _pack(pieces, split, conf.open_cost)
    if conf.max_partition_num is not None and len(parts) > conf.max_partition_num:
        total = sum(p[2] + conf.open_cost for p in pieces)
        desired = -(-total // conf.max_partition_num)  # BigDecimal division, rounded up
        parts = _pack(pieces, desired, conf.open_cost)
    if len(parts) > MAX_SCAN_PARTITIONS:
        raise UnsupportedInput(
            f"a scan of {len(parts)} partitions does not fit lineage record ids "
            f"(at most {MAX_SCAN_PARTITIONS}); raise spark.sql.files.maxPartitionBytes"
        )
    return parts


def _pack(pieces: list[Piece], max_bytes: int, open_cost: int) -> list[list[Piece]]:
    """FilePartition.getFilePartitions: next fit, in the given order."""
    parts: list[list[Piece]] = []
    current: list[Piece] = []
    size = 0
    for p in pieces:
        if size + p[2] > max_bytes:
            if current:
                parts.append(current)
            current, size = [], 0
        size += p[2] + open_cost
        current.append(p)
    if current:
        parts.append(current)
    return parts


# -- what a reader's options mean for rows -------------------------------------------------

_REFUSED = {
    "multiline": "multiLine rows span lines: their positions cannot be re-read by line",
    "linesep": "a custom line separator",
    "wholetext": "wholetext reads a file as one row",
    "recursivefilelookup": "recursive file lookup",
    "pathglobfilter": "path glob filters",
    "modifiedbefore": "modification-time filters",
    "modifiedafter": "modification-time filters",
    "allowcomments": "JSON comments (a comment-only line is no row)",
}


def check_options(fmt: str, options: dict[str, Any]) -> dict[str, Any]:
    """The line rules a reader's options imply; refuses what cannot be traced by line."""
    opts = {k.lower(): v for k, v in options.items() if v is not None}
    for key, why in _REFUSED.items():
        value = opts.get(key)
        if value is None or str(value).lower() in ("false", ""):
            continue
        raise UnsupportedInput(f"{fmt} option {key}={value}: {why}; not supported with lineage")
    mode = str(opts.get("mode", "PERMISSIVE")).upper()
    if mode == "DROPMALFORMED":
        raise UnsupportedInput(
            f"{fmt} mode=DROPMALFORMED drops rows, so positions cannot be re-read; use "
            "PERMISSIVE or FAILFAST with lineage"
        )
    enc = str(opts.get("encoding", opts.get("charset", "utf-8"))).lower().replace("_", "-")
    if enc not in ("utf-8", "utf8", "us-ascii", "ascii"):
        raise UnsupportedInput(f"{fmt} encoding {enc}: only UTF-8 input can be re-read by line")
    if opts.get("compression") not in (None, "none", "uncompressed") and fmt != "parquet":
        raise UnsupportedInput(f"{fmt}: compressed input cannot be re-read by byte offset")
    rules: dict[str, Any] = {}
    if fmt == "csv":
        rules["header"] = str(opts.get("header", "false")).lower() == "true"
        comment = opts.get("comment")
        if comment not in (None, "", "\u0000"):
            if len(str(comment)) != 1 or ord(str(comment)) > 127:
                raise UnsupportedInput(f"csv comment {comment!r}: only one ASCII character")
            rules["comment"] = str(comment)
    return rules


def parquet_row_groups(files: list[ScanFile]) -> list[list[list[int]]]:
    """Per file, each row group's [midpoint, rows], as parquet-mr assigns row groups to
    splits: the first column chunk's start (its dictionary page when that comes first) plus
    half the group's compressed size."""
    import pyarrow.parquet as pq

    out: list[list[list[int]]] = []
    for f in files:
        if f.size == 0:  # Spark plans no piece for an empty file
            out.append([])
            continue
        md = pq.ParquetFile(f.path).metadata
        groups = []
        for i in range(md.num_row_groups):
            rg = md.row_group(i)
            first = rg.column(0)
            start = first.data_page_offset
            dictionary = first.dictionary_page_offset
            if dictionary is not None and first.has_dictionary_page and start > dictionary:
                start = dictionary
            size = sum(rg.column(c).total_compressed_size for c in range(rg.num_columns))
            groups.append([int(start + size // 2), int(rg.num_rows)])
        out.append(groups)
    return out


def plan_scan(
    spark: Any,
    fmt: str,
    paths: list[str],
    options: dict[str, Any],
    conf: ScanConf | None = None,
    listed: list[str] | None = None,
) -> dict:
    """The descriptor of a scan: everything needed to re-read a row from its (partition,
    position), and to notice that the files changed since. The files are listed now (as
    Spark lists them when a DataFrame is read), the partitions planned under `conf` (the
    session's settings now if None).

    Parquet under partitioned (`key=value`) or nested directories is *addressed by file*
    (`"addressing": "file"`): a row's id is (its file's index, its `_metadata.row_index`),
    which no plan changes, so Spark keeps pruning partitions and pushing filters into the
    scan. Spark lists such files in an order this module cannot reproduce (a hash map's), so
    they are Spark's own listing: `listed` (`DataFrame.inputFiles()`: the caller found the
    directories nested), or read now."""
    rules = check_options(fmt, options)
    file_addressed = listed is not None or (fmt == "parquet" and nested(paths))
    if file_addressed:
        if listed is None:
            listed = spark.read.options(**options).parquet(*paths).inputFiles()
        named = sorted((local_path(u), metadata_path(u)) for u in listed)
        files = [_stat(p) for p, _ in named]
    else:
        files = list_files(paths, fmt)
    scan: dict[str, Any] = {
        "format": fmt,
        "files": [[f.path, f.size, f.mtime_ns] for f in files],
        "options": rules,
    }
    if file_addressed:
        scan["addressing"] = "file"
        scan["uris"] = [u for _, u in named]  # each file's `_metadata.file_path`
    if fmt == "parquet":
        scan["row_groups"] = parquet_row_groups(files)
    gz = [i for i, f in enumerate(files) if gzipped(f.path)]
    if gz:  # read whole, each one piece; rows are re-read from their decompressed bytes
        scan["gzip"] = gz
    scan.update(partitioned(scan, scan_conf(spark) if conf is None else conf))
    return scan


def by_file(scan: dict) -> bool:
    """Whether a scan's rows are addressed by (file, row index), not by Spark's plan."""
    return scan.get("addressing") == "file"


def metadata_path(uri: str) -> str:
    """A file's `_metadata.file_path` from its `inputFiles()` name: the same URI, Hadoop's
    (`file:/a%20b/k=v/f`), but for the empty authority inputFiles writes (`file:///...`)."""
    return "file:/" + uri[len("file:///") :] if uri.startswith("file:///") else uri


def partitioned(scan: dict, conf: ScanConf) -> dict[str, Any]:
    """A scan descriptor's "partitions" and "conf" as Spark plans them under `conf`, from
    the files as the descriptor lists them (their sizes when they were listed: Spark plans
    from the listing made when the DataFrame was read, not from the files as they are). A
    scan addressed by file has one "partition" per file, under any settings."""
    files = [ScanFile(str(p), int(size), int(mtime)) for p, size, mtime in scan["files"]]
    if by_file(scan):
        if len(files) > MAX_SCAN_PARTITIONS:
            raise UnsupportedInput(
                f"a scan of {len(files)} files does not fit lineage record ids (at most "
                f"{MAX_SCAN_PARTITIONS} files under partitioned directories)"
            )
        for groups in scan["row_groups"]:
            _fits(sum(n for _, n in groups))
        whole = [[[fi, 0, f.size]] for fi, f in enumerate(files)]
        return {"partitions": whole, "conf": conf.to_dict()}
    parts = plan_partitions(files, conf)
    groups = scan.get("row_groups")
    if groups is not None:  # Parquet
        for part in parts:
            rows = sum(n for fi, s, ln in part for mid, n in groups[fi] if s <= mid < s + ln)
            _fits(rows)
    else:
        # A row needs at least its line terminator, but the last. A gzip file's rows are not
        # bounded by its size: its scan's ids check their positions (`scan_id_sql`).
        gz = set(scan.get("gzip", ()))
        for part in parts:
            _fits(sum(ln for fi, _, ln in part if fi not in gz) + len(part))
    return {"partitions": [[list(p) for p in part] for part in parts], "conf": conf.to_dict()}


def _fits(rows: int) -> None:
    if rows >= MAX_ROWS_PER_PARTITION:
        raise UnsupportedInput(
            f"a scan partition may hold {rows} rows, more than lineage record ids can number "
            f"({MAX_ROWS_PER_PARTITION}); lower spark.sql.files.maxPartitionBytes"
        )
