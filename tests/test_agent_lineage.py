"""Lineage is exact: for every supported operation and several multi-stage pipelines, the
backward trace of every output equals the inputs a brute-force recomputation says it depends
on, and the forward trace of every input equals the outputs that depend on it. Results equal
vanilla PySpark's."""

from __future__ import annotations

import operator
from collections import Counter
from collections.abc import Callable
from itertools import islice

import numpy as np
import pytest
from _reference import Ref
from pyspark.resultiterable import ResultIterable

from agent import LineageRDD, UnsupportedOperation
from journals import unpack_record_ids

pytestmark = pytest.mark.spark

WORDS = ["alpha", "beta", "gamma", "ERROR", "delta", "beta", "alpha", "alpha"]


def norm(v):
    """A hashable, order-free form of a record value (grouped values arrive in any order)."""
    if isinstance(v, ResultIterable | list):
        return ("seq", tuple(sorted((norm(x) for x in v), key=repr)))
    if isinstance(v, tuple):
        return tuple(norm(x) for x in v)
    return v


@pytest.fixture(scope="module")
def text_path(tmp_path_factory):
    path = tmp_path_factory.mktemp("data") / "lines.txt"
    with open(path, "w") as f:
        for i in range(60):
            words = " ".join(WORDS[(i * 7 + j * 3) % len(WORDS)] for j in range(1 + i % 5))
            f.write(f"{i}|{words}\n")
    return str(path)


def line_id(line: str) -> int:
    return int(line.split("|", 1)[0])


class Sources:
    """The same input as a captured RDD, a vanilla RDD, and a brute-force reference."""

    def __init__(self, lc, text_path: str) -> None:
        self.lc = lc
        self.sc = lc.sc
        self.text_path = text_path

    def text(self):
        ref = Ref.source(self.sc.textFile(self.text_path, 3).glom().collect(), line_id)
        return self.lc.textFile(self.text_path, 3), self.sc.textFile(self.text_path, 3), ref

    def table(self, rows: list[tuple], n: int = 3):
        ref = Ref.source(self.sc.parallelize(rows, n).glom().collect(), lambda r: r[0])
        return self.lc.parallelize(rows, n), self.sc.parallelize(rows, n), ref


def source_id(datum) -> int:
    return line_id(datum) if isinstance(datum, str) else datum[0]


def check_lineage(lc, captured, vanilla, ref: Ref, action: str = "collect") -> None:
    """Results equal vanilla; every output's backward trace and every input's forward trace
    equal the reference's."""
    got = captured.collect() if action == "collect" else None
    if action == "collect":
        assert Counter(map(norm, got)) == Counter(map(norm, vanilla.collect()))
    lin = captured.lineage()
    repo, run = lc.repo, lc.run_id
    expected = Counter((norm(v), lin_) for v, lin_ in ref.records())
    values = lin.collect()
    traced = Counter()
    for rid, value in zip(lin.record_ids.tolist(), values):
        back = LineageRDD(repo, run, np.array([rid])).go_back_all().collect()
        traced[(norm(value), frozenset(source_id(d) for d in back))] += 1
    assert traced == expected
    # Forward: from each input record to exactly the outputs that depend on it.
    info = repo.lineage.run_info(run)
    sources = [c.number for c in info.capture_points.values() if c.dependency == "source"]
    all_inputs = np.concatenate([repo.lineage.all_records(run, cp) for cp in sources])
    outputs_of: dict[int, Counter] = {}
    for v, lin_ in ref.records():
        for s in lin_:
            outputs_of.setdefault(s, Counter())[norm(v)] += 1
    out_cps = set(lin.capture_points())
    for rid, datum in zip(all_inputs.tolist(), LineageRDD(repo, run, all_inputs).collect()):
        fwd = LineageRDD(repo, run, np.array([rid])).go_next_all()
        ends = fwd.record_ids[np.isin(unpack_record_ids(fwd.record_ids)[0], list(out_cps))]
        got_out = Counter(map(norm, LineageRDD(repo, run, ends).collect()))
        assert got_out == outputs_of.get(source_id(datum), Counter()), f"forward from {datum!r}"


@pytest.fixture(params=["eager", "deferred"])
def lc(request, spark, tmp_path, monkeypatch):
    """Every test runs under both narrow policies. Deferred with tiny thresholds, so records
    here have coarse groups (more than 2 parents: groups of 3 inputs) re-derived at trace
    time, not only exact ones. Parametrized indirectly with "narrow/transport" (e.g.
    "deferred/socket": journals through the driver's receiver) a test picks both."""
    from agent import LineageContext, _deferred
    from repository import ProvenanceRepository, RepositoryConfig

    narrow, _, transport = request.param.partition("/")
    if narrow == "deferred":
        monkeypatch.setattr(_deferred, "EXACT", 2)
        monkeypatch.setattr(_deferred, "GROUP", 3)
    config = RepositoryConfig(sync="none", rollover_interval=3600)
    with ProvenanceRepository.open(tmp_path / "lineage-repo", config) as r:
        yield LineageContext(spark, r, narrow=narrow, transport=transport or None)


@pytest.fixture
def src(lc, text_path):
    return Sources(lc, text_path)


# -- multi-stage pipelines ----------------------------------------------------------------------


# Through the journal stream too: the lineage a cluster without a shared filesystem gets.
@pytest.mark.parametrize(
    "lc", ["eager/shared", "eager/socket", "deferred/shared", "deferred/socket"], indirect=True
)
def test_word_count(src, lc):
    cap, van, ref = src.text()

    def wc(r, n):
        return (
            r.flatMap(lambda line: line.split("|")[1].split())
            .map(lambda w: (w, 1))
            .reduceByKey(operator.add, n)
        )

    check_lineage(lc, wc(cap, 2), wc(van, 2), wc(ref, 2))
    assert (lc.repo.receiver_stats is not None) == (lc.transport == "socket")


def test_grep(src, lc):
    cap, van, ref = src.text()

    def grep(r):
        return r.filter(lambda line: "ERROR" in line)

    check_lineage(lc, grep(cap), grep(van), grep(ref))


USERS = [(i, f"user{i % 4}", i % 3) for i in range(12)]
VISITS = [(100 + i, i % 14, (i * 37) % 100) for i in range(40)]  # uids 12, 13: no such user


@pytest.mark.parametrize(
    "lc", ["eager/shared", "eager/socket", "deferred/shared", "deferred/socket"], indirect=True
)
def test_join_then_aggregate(src, lc):
    users, users_v, users_r = src.table(USERS)
    visits, visits_v, visits_r = src.table(VISITS, 4)

    def pipeline(u, v):
        spend = v.map(lambda r: (r[1], r[2]))
        names = u.map(lambda r: (r[0], r[1]))
        return spend.join(names).map(lambda kv: (kv[1][1], kv[1][0])).reduceByKey(operator.add, 3)

    check_lineage(
        lc, pipeline(users, visits), pipeline(users_v, visits_v), pipeline(users_r, visits_r)
    )


def test_union_then_distinct(src, lc):
    a, a_v, a_r = src.table([(i, i % 5) for i in range(20)])
    b, b_v, b_r = src.table([(100 + i, i % 7) for i in range(15)], 2)

    def pipeline(x, y):
        return x.map(lambda r: r[1]).union(y.map(lambda r: r[1] + 1)).distinct(3)

    check_lineage(lc, pipeline(a, b), pipeline(a_v, b_v), pipeline(a_r, b_r))


def test_group_by_key_then_flat_map(src, lc):
    cap, van, ref = src.table([(i, i % 6, i * 10) for i in range(36)])

    def pipeline(r):
        return (
            r.map(lambda x: (x[1], x[2]))
            .groupByKey(3)
            .flatMap(lambda kv: [(kv[0], v) for v in kv[1] if v % 20 == 0])
        )

    check_lineage(lc, pipeline(cap), pipeline(van), pipeline(ref))


# -- one operation at a time ----------------------------------------------------------------------

PAIRS = [(i, f"k{i % 5}", i) for i in range(30)]


def _pairs(r):
    return r.map(lambda x: (x[1], x[2]))


OPS: dict[str, Callable] = {
    "map": lambda r: r.map(lambda x: x[2] * 2),
    "flatMap": lambda r: r.flatMap(lambda x: range(x[2] % 3)),
    "filter": lambda r: r.filter(lambda x: x[2] % 4 == 1),
    "mapValues": lambda r: _pairs(r).mapValues(lambda v: v + 1),
    "flatMapValues": lambda r: _pairs(r).flatMapValues(lambda v: range(v % 3)),
    "keyBy": lambda r: r.keyBy(lambda x: x[2] % 4),
    "values": lambda r: _pairs(r).values(),
    "keys": lambda r: _pairs(r).keys(),
    "union": lambda r: r.filter(lambda x: x[2] % 3 == 0).union(r.map(lambda x: x[2])),
    "mapPartitions-record": lambda r: r.mapPartitions(
        lambda it: (x[2] + 1 for x in it if x[2] % 2), lineage="record"
    ),
    "mapPartitions-partition": lambda r: r.mapPartitions(lambda it: [sum(x[2] for x in it)]),
    "mapPartitionsWithIndex": lambda r: r.mapPartitionsWithIndex(_with_index, lineage="record"),
    "reduceByKey": lambda r: _pairs(r).reduceByKey(operator.add, 2),
    "groupByKey": lambda r: _pairs(r).groupByKey(2),
    "combineByKey": lambda r: _pairs(r).combineByKey(
        lambda v: (v, 1),
        lambda c, v: (c[0] + v, c[1] + 1),
        lambda a, b: (a[0] + b[0], a[1] + b[1]),
        2,
    ),
    "aggregateByKey": lambda r: _pairs(r).aggregateByKey(0, max, max, 2),
    "foldByKey": lambda r: _pairs(r).foldByKey(0, operator.add, 2),
    "distinct": lambda r: r.map(lambda x: x[2] % 7).distinct(2),
    "sortByKey": lambda r: _pairs(r).sortByKey(),
    "sortBy": lambda r: r.sortBy(lambda x: -x[2]),
}


# A lambda, so cloudpickle ships it by value (workers cannot import test modules).
_with_index = lambda i, it: ((i, x[2]) for x in it if (x[2] + i) % 3)  # noqa: E731


@pytest.mark.parametrize("op", list(OPS))
def test_single_operation(src, lc, op):
    cap, van, ref = src.table(PAIRS)
    f = OPS[op]
    if op == "mapPartitionsWithIndex":
        van_out = van.mapPartitionsWithIndex(_with_index)
        check_lineage(lc, f(cap), van_out, ref.mapPartitionsWithIndex(_with_index, "record"))
        return
    if op in ("mapPartitions-record", "mapPartitions-partition"):
        lineage = "record" if op.endswith("record") else "partition"
        body = (
            (lambda it: (x[2] + 1 for x in it if x[2] % 2))
            if lineage == "record"
            else (lambda it: [sum(x[2] for x in it)])
        )
        check_lineage(lc, f(cap), van.mapPartitions(body), ref.mapPartitions(body, lineage))
        return
    if op in ("sortByKey", "sortBy"):
        ref_out = ref.map(lambda x: (x[1], x[2])) if op == "sortByKey" else ref
        check_lineage(lc, f(cap), f(van), ref_out)
        assert f(cap).collect() == f(van).collect()  # and the order is vanilla's
        return
    check_lineage(lc, f(cap), f(van), f(ref))


JOINS = ["join", "leftOuterJoin", "rightOuterJoin", "fullOuterJoin", "cogroup"]


@pytest.mark.parametrize("how", JOINS)
def test_joins(src, lc, how):
    a, a_v, a_r = src.table([(i, f"k{i % 4}", i) for i in range(12)])
    b, b_v, b_r = src.table([(100 + i, f"k{i % 6}", -i) for i in range(10)], 2)

    def pairs(r):
        return r.map(lambda x: (x[1], x[2]))

    cap = getattr(pairs(a), how)(pairs(b))
    van = getattr(pairs(a_v), how)(pairs(b_v))
    mode = {"join": "inner", "leftOuterJoin": "left", "rightOuterJoin": "right"}.get(how, "full")
    ref = pairs(a_r).cogroup(pairs(b_r)) if how == "cogroup" else pairs(a_r).join(pairs(b_r), mode)
    check_lineage(lc, cap, van, ref)


# -- actions ---------------------------------------------------------------------------------------


# Read two records of their partition and stop, as vanilla allows; the second streams
# (lambdas: shipped by value).
_first_two = lambda it: list(islice(it, 2))  # noqa: E731
_first_two_streamed = lambda it: (x for x in islice(it, 2))  # noqa: E731


@pytest.mark.parametrize("lineage", ["partition", "record"])
def test_map_partitions_that_stops_early(src, lc, lineage):
    # Only the records f read are lineage: both of them under "partition", each output's
    # own under "record" (islice streams). A map before it keeps its StopIteration guard.
    for cap, van, _ref in (src.text(), src.table(PAIRS)):
        f = _first_two if lineage == "partition" else _first_two_streamed
        out = cap.map(lambda x: x).mapPartitions(f, lineage=lineage)
        got = out.collect()
        assert got == van.mapPartitions(_first_two).collect()
        lin = out.lineage()
        assert len(got) == 2 * out.getNumPartitions()
        for i, rid in enumerate(lin.record_ids.tolist()):
            back = LineageRDD(lc.repo, lc.run_id, np.array([rid])).go_back_all().collect()
            pair = got[i - i % 2 : i - i % 2 + 2] if lineage == "partition" else got[i : i + 1]
            assert sorted(map(source_id, back)) == sorted(map(source_id, pair))

    def stop(x):
        raise StopIteration

    cap, _van, _ref = src.table(PAIRS)
    with pytest.raises(Exception, match="StopIteration"):
        cap.map(stop).mapPartitions(_first_two).collect()


def test_to_local_iterator_records_what_it_hands_on(src, lc):
    cap, van, _ref = src.text()
    words = cap.flatMap(lambda line: line.split("|")[1].split())
    got = list(words.toLocalIterator())
    assert got == van.flatMap(lambda line: line.split("|")[1].split()).collect()
    lin = words.lineage()
    assert lin.collect() == got
    texts = {line_id(x): x for x in van.collect()}
    for rid, word in list(zip(lin.record_ids.tolist(), got))[:12]:
        (line,) = LineageRDD(lc.repo, lc.run_id, np.array([rid])).go_back_all().collect()
        assert word in texts[line_id(line)].split("|")[1].split()


def _third(r):
    return r.map(lambda x: x[2])


# (the RDD reduced, the reduction)
REDUCTIONS: dict[str, tuple[Callable, Callable]] = {
    "reduce": (_third, lambda r: r.reduce(operator.add)),
    "fold": (_third, lambda r: r.fold(0, operator.add)),
    "aggregate": (
        lambda r: r,
        lambda r: r.aggregate(
            (0, 0), lambda a, x: (a[0] + x[2], a[1] + 1), lambda a, b: (a[0] + b[0], a[1] + b[1])
        ),
    ),
    "sum": (_third, lambda r: r.sum()),
    "max": (lambda r: r, lambda r: r.max(key=lambda x: x[2] % 7)),
    "min": (_third, lambda r: r.min()),
    "mean": (_third, lambda r: r.mean()),
    "stats": (_third, lambda r: str(r.stats())),
}


@pytest.mark.parametrize("op", list(REDUCTIONS))
def test_reductions_record_one_partial_per_partition(src, lc, op):
    # Vanilla's value; lineage() gives each partition's partial, made from its records.
    cap, van, _ref = src.table(PAIRS)
    prepare, reduction = REDUCTIONS[op]
    reduced = prepare(cap)
    assert reduction(reduced) == reduction(prepare(van))
    lin = reduced.lineage()
    parts = [p for p in van.glom().collect() if p]
    assert len(lin.record_ids) == len(parts)
    for rid, part in zip(lin.record_ids.tolist(), parts):
        back = LineageRDD(lc.repo, lc.run_id, np.array([rid])).go_back_all().collect()
        assert sorted(back) == sorted(part)


def test_count_by_value_and_key_group_by_sample(src, lc):
    cap, van, _ref = src.table(PAIRS)
    keyed = cap.map(lambda x: (x[1], x[2]))
    assert keyed.countByKey() == van.map(lambda x: (x[1], x[2])).countByKey()
    lin = keyed.lineage()
    for k, _count in lin.collect():
        back = lin.filter(lambda kv, k=k: kv[0] == k).go_back_all().collect()
        assert sorted(back) == sorted(x for x in PAIRS if x[1] == k)
    by = cap.groupBy(lambda x: x[2] % 3)
    got = sorted((k, sorted(v)) for k, v in by.collect())
    assert got == sorted((k, sorted(v)) for k, v in van.groupBy(lambda x: x[2] % 3).collect())
    glin = by.lineage()
    for rid, (k, _v) in zip(glin.record_ids.tolist(), glin.collect()):
        back = LineageRDD(lc.repo, lc.run_id, np.array([rid])).go_back_all().collect()
        assert sorted(back) == sorted(x for x in PAIRS if x[2] % 3 == k)
    for replace in (False, True):
        sampled = cap.sample(replace, 0.5, seed=3)
        kept = sampled.collect()
        assert kept == van.sample(replace, 0.5, seed=3).collect()
        slin = sampled.lineage()
        for rid, x in zip(slin.record_ids.tolist(), kept):
            back = LineageRDD(lc.repo, lc.run_id, np.array([rid])).go_back_all().collect()
            assert back == [x]


def test_cache_keeps_records_and_their_lineage(src, lc):
    # The second action reads the cached records (the map runs once per record), and its
    # outputs trace back as the first's; unpersist() computes them again.
    cap, van, _ref = src.text()
    calls = lc.sc.accumulator(0)

    def words(line):
        calls.add(1)
        return line.split("|")[1].split()

    cached = cap.flatMap(words)
    assert cached.cache() is cached and cached.is_cached
    first = cached.map(lambda w: (w, 1)).reduceByKey(operator.add).collect()
    n = calls.value
    assert n == len(van.collect())
    counts = cached.map(lambda w: (w, 1)).reduceByKey(operator.add)
    assert sorted(counts.collect()) == sorted(first)
    assert calls.value == n  # read from the cache
    expected = van.flatMap(lambda line: line.split("|")[1].split()).collect()
    for w, c in counts.collect():
        back = counts.lineage().filter(lambda kv, w=w: kv[0] == w).go_back_all().collect()
        assert sum(line.split("|")[1].split().count(w) for line in back) == c
        assert all(w in line.split("|")[1].split() for line in back)
    assert expected.count("alpha") == dict(first)["alpha"]
    cached.unpersist()
    assert not cached.is_cached
    assert sorted(cached.collect()) == sorted(expected)
    assert calls.value == 2 * n


# (the RDD built, the source record each of its records comes from)
REDEALT: dict[str, tuple[Callable, Callable]] = {
    "coalesce": (lambda r: r.coalesce(2), lambda out: out),
    "repartition": (lambda r: r.repartition(3), lambda out: out),
    "maps around a repartition": (
        lambda r: r.map(lambda x: x[2]).repartition(5).map(lambda v: v * 10),
        lambda out: PAIRS[out // 10],
    ),
    "zipWithIndex after a filter": (
        lambda r: r.filter(lambda x: x[2] % 3).zipWithIndex(),
        lambda out: out[0],
    ),
    "zipWithIndex after a repartition": (
        lambda r: r.repartition(3).zipWithIndex(),
        lambda out: out[0],
    ),
}


@pytest.mark.parametrize("case", list(REDEALT))
def test_coalesce_repartition_zip_with_index(src, lc, case):
    # Vanilla's records in vanilla's partitions (zipWithIndex: vanilla's indexes), each
    # traced to its own source record.
    build, source_of = REDEALT[case]
    cap, van, _ref = src.table(PAIRS, 4)
    out = build(cap)
    parts = [Counter(map(norm, p)) for p in build(van).glom().collect()]
    got = out.collect()
    assert out.getNumPartitions() == len(parts)
    lin = out.lineage()
    _, where, _ = unpack_record_ids(lin.record_ids)
    for p, part in enumerate(parts):
        assert Counter(norm(v) for v, w in zip(got, where.tolist()) if w == p) == part
    for rid, value in zip(lin.record_ids.tolist(), got):
        back = LineageRDD(lc.repo, lc.run_id, np.array([rid])).go_back_all().collect()
        assert back == [source_of(value)]


def test_take_and_first_trace_to_their_inputs(src, lc):
    cap, van, _ref = src.text()
    words = cap.flatMap(lambda line: line.split("|")[1].split())
    assert words.take(5) == van.flatMap(lambda line: line.split("|")[1].split()).take(5)
    lin = words.lineage()
    assert lin.count() == 5
    back = {line_id(x) for x in lin.go_back_all().collect()}
    assert back == {0, 1, 2}  # lines 0, 1, 2 hold 1, 2 and 3 words
    assert words.first() == "alpha"
    assert [line_id(x) for x in words.lineage().go_back_all().collect()] == [0]


def test_take_over_many_partitions_records_only_what_it_returns(src, lc):
    """A take round that scans several partitions gets more records than it keeps: only the
    kept ones are outputs in the lineage, and inputs scanned but not returned lead nowhere."""
    rows = [(i, f"k{i}", i) for i in range(40)]
    cap, van, _ref = src.table(rows, 8)  # 5 rows a partition
    late = cap.filter(lambda x: x[0] >= 5)  # partition 0 gives nothing, so round two scans
    got = late.take(6)  # partitions 1-4, 5 records each: 20 given, 6 kept
    assert got == van.filter(lambda x: x[0] >= 5).take(6)
    lin = late.lineage()
    assert lin.count() == 6
    assert sorted(lin.collect()) == sorted(got)
    assert sorted(r[0] for r in lin.go_back_all().collect()) == [r[0] for r in got]
    run, repo = lc.run_id, lc.repo
    (source,) = [
        c.number
        for c in repo.lineage.run_info(run).capture_points.values()
        if c.dependency == "source"
    ]
    inputs = LineageRDD(repo, run, repo.lineage.all_records(run, source))
    by_row = dict(zip((r[0] for r in inputs.collect()), inputs.record_ids.tolist()))
    kept_fwd = LineageRDD(repo, run, np.array([by_row[got[0][0]]])).go_next_all()
    assert kept_fwd.collect() == [got[0]]
    scanned_only = LineageRDD(repo, run, np.array([by_row[20]])).go_next_all()
    assert not set(scanned_only.capture_points()) & set(lin.capture_points())


def test_count_records_its_outputs(src, lc):
    cap, van, ref = src.text()
    errors = cap.filter(lambda line: "ERROR" in line)
    assert errors.count() == van.filter(lambda line: "ERROR" in line).count()
    back = errors.lineage().go_back_all().collect()
    assert sorted(map(line_id, back)) == sorted(
        line_id(v) for v, _ in ref.filter(lambda line: "ERROR" in line).records()
    )


def test_save_as_text_file_locates_every_output(src, lc, tmp_path):
    cap, _van, _ref = src.text()
    out = tmp_path / "out"
    upper = cap.filter(lambda line: "beta" in line).map(str.upper)
    upper.saveAsTextFile(str(out))
    written = sorted(p.read_text() for p in out.glob("part-*"))
    lin = upper.lineage()
    # Each output record is re-read from the part file by its offset.
    assert sorted(lin.collect()) == sorted(line for text in written for line in text.splitlines())
    for rid, line in zip(lin.record_ids.tolist(), lin.collect()):
        (src_line,) = LineageRDD(lc.repo, lc.run_id, np.array([rid])).go_back_all().collect()
        assert src_line.upper() == line


def test_uncovered_operation_fails_loud(src):
    cap, _, _ = src.text()
    with pytest.raises(UnsupportedOperation, match=r"RDD\.top\(\)"):
        cap.top(3)
    with pytest.raises(UnsupportedOperation, match="cartesian"):
        cap.cartesian(cap)


def test_lineage_before_any_action_is_a_clear_error(src):
    cap, _, _ = src.text()
    with pytest.raises(ValueError, match="run an action"):
        cap.map(len).lineage()


def test_gzip_text_files(lc, tmp_path):
    """`textFile` over gzip and plain files (some without a last newline): vanilla's records,
    each traced back to its own line, and each line, named by its offset (in the decompressed
    bytes for gzip), forward to its record."""
    import gzip

    d = tmp_path / "in"
    d.mkdir()
    contents = {}
    for i, (name, last_newline) in enumerate(
        [("a.txt.gz", True), ("b.txt", False), ("c.txt.gz", False), ("d.txt.gz", True)]
    ):
        lines = [f"{i * 100 + j}|{'w' * (j % 7)}" for j in range(25 + i)]
        text = ("\n".join(lines) + ("\n" if last_newline else "")).encode()
        if name.endswith(".gz"):
            with gzip.open(d / name, "wb") as g:
                g.write(text)
        else:
            (d / name).write_bytes(text)
        contents[name] = lines

    def keep(line):
        return int(line.split("|")[0]) % 3 != 1

    cap = lc.textFile(str(d), 3).filter(keep)
    out = cap.collect()
    assert out == lc.sc.textFile(str(d), 3).filter(keep).collect()
    lin = cap.lineage()
    for k, line in enumerate(out):
        back = LineageRDD(lc.repo, lc.run_id, lin.record_ids[k : k + 1]).go_back_all().collect()
        assert back == [line]
    for name, lines in contents.items():
        offset = 0
        for line in lines:
            rids = lc.repo.lineage.records_at(lc.run_id, str(d / name), offset)
            assert len(rids) == 1, (name, line)
            fwd = LineageRDD(lc.repo, lc.run_id, np.array(rids)).go_next_all().collect()
            assert fwd == ([line] if keep(line) else []), (name, line)
            offset += len(line) + 1
