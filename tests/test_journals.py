"""Journal model, columns, framing round trips."""

from __future__ import annotations

import numpy as np
import pytest
import zstandard
from _events import lineage_batch, make_event
from hypothesis import given, settings
from hypothesis import strategies as st

from journals import (
    JournalReader,
    JournalWriter,
    LineageBatch,
    Location,
    WriterSpec,
    group_ids,
    isin_sorted,
    pack_record_id,
    record_id_base,
    unique_ids,
    unpack_record_id,
)
from journals._columns import DELTA, SEGMENTED, SHUFFLED, IntColumn, _unpack_params


@settings(deadline=None)  # numpy codecs: slow first calls on a loaded machine
@given(st.lists(st.integers(min_value=-(2**62), max_value=2**62), max_size=200))
def test_int_column_round_trips_in_every_codec(values):
    col = IntColumn.from_array(np.array(values, dtype=np.int64))
    assert col.to_array().tolist() == values
    assert col.compacted().to_array().tolist() == values
    if len(values) > 3:
        assert col.slice(1, 3).to_array().tolist() == values[1:3]


@settings(deadline=None)  # numpy codecs: slow first calls on a loaded machine
@given(
    st.lists(st.lists(st.integers(min_value=-(2**62), max_value=2**62), max_size=12), max_size=40),
    st.booleans(),
)
def test_segmented_parent_column_round_trips(rows, ascending):
    """Parents coded row by row decode back exactly, sorted rows or not, empty rows or not."""
    if ascending:
        rows = [sorted(set(r)) for r in rows]
    flat = [v for r in rows for v in r]
    counts = np.array([len(r) for r in rows], dtype=np.int64)
    col = IntColumn.from_array(np.array(flat, dtype=np.int64))
    packed = col.compacted(counts)
    assert packed.to_array(counts).tolist() == flat
    if packed.codec == SEGMENTED:
        with pytest.raises(ValueError, match="row lengths"):
            packed.to_array()


@settings(deadline=None)  # numpy codecs: slow first calls on a loaded machine
@given(
    st.lists(st.frozensets(st.integers(0, 3000), max_size=60), min_size=1, max_size=60),
    st.integers(-(2**40), 2**40),
)
def test_rice_coded_parent_rows_round_trip(rows, shift):
    """Dense ascending rows (gaps like word occurrences over lines) round-trip when Rice-coded."""
    lists = [sorted(r) for r in rows]
    flat = np.array([v + shift for r in lists for v in r], dtype=np.int64)
    counts = np.array([len(r) for r in lists], dtype=np.int64)
    packed = IntColumn.from_array(flat).compacted(counts)
    assert packed.to_array(counts).tolist() == flat.tolist()


@settings(deadline=None)  # numpy codecs: slow first calls on a loaded machine
@given(
    st.lists(st.frozensets(st.integers(0, 3000), max_size=30), min_size=1, max_size=40),
    st.booleans(),
    st.data(),
)
def test_one_row_or_range_decodes_alone(rows, shuffle_rows, data):
    """`row` and `take` (point lookups) agree with decoding the whole column, in every codec."""
    lists = [sorted(r) for r in rows]
    if shuffle_rows:
        lists = [list(reversed(r)) for r in lists]
    flat = np.array([v for r in lists for v in r], dtype=np.int64)
    counts = np.array([len(r) for r in lists], dtype=np.int64)
    plain = IntColumn.from_array(flat)
    for col in (plain, plain.compacted(), plain.compacted(counts)):
        r = data.draw(st.integers(0, len(lists) - 1))
        assert col.row(counts, r).tolist() == lists[r]
        if col.codec != SEGMENTED:
            a = data.draw(st.integers(0, len(flat)))
            b = data.draw(st.integers(a, len(flat)))
            assert col.take(a, b).tolist() == flat[a:b].tolist()
            if len(flat):
                idx = np.array(data.draw(st.lists(st.integers(0, len(flat) - 1), max_size=9)))
                assert col.at(idx).tolist() == flat[idx.astype(np.int64)].tolist()


@settings(deadline=None)  # numpy codecs: slow first calls on a loaded machine
@given(st.lists(st.integers(min_value=-(2**62), max_value=2**62), min_size=1, max_size=200))
def test_values_at_indexes_in_every_codec(values):
    """`at` (a lookup's few entries) agrees with decoding the whole column, in every codec."""
    idx = np.array(sorted({0, len(values) - 1, len(values) // 3}), dtype=np.int64)
    for arr in (np.array(values, dtype=np.int64), np.sort(values)):  # SHUFFLED, DELTA
        _values_at(arr, idx)


def _values_at(arr: np.ndarray, idx: np.ndarray) -> None:
    plain = IntColumn.from_array(arr)
    for col in (plain, plain.compacted(), IntColumn.stored(arr)):
        assert col.at(idx).tolist() == arr[idx].tolist()
        assert col.at(idx[::-1]).tolist() == arr[idx[::-1]].tolist()
        with pytest.raises(IndexError):
            col.at(np.array([len(arr)]))
        with pytest.raises(IndexError):
            col.at(np.array([-1]))


def test_rice_row_lookup_when_the_first_gap_is_long():
    """A row whose first gap needs many unary zeros (its first one is bytes into the stream)."""
    rng = np.random.default_rng(11)
    rows = [[0, *range(100_000, 100_049)]]
    rows += [sorted(rng.choice(100_050, 40, replace=False).tolist()) for _ in range(300)]
    counts = np.array([len(r) for r in rows])
    col = IntColumn.from_array(np.concatenate(rows)).compacted(counts)
    assert col.codec == SEGMENTED and _unpack_params(col.width)[3] > 0
    assert [col.row(counts, r).tolist() for r in (0, 1, 299)] == [rows[0], rows[1], rows[299]]


def test_word_count_parents_get_the_segmented_codec():
    """Combiner-like rows (ascending line ordinals, rows in first-appearance order) take the
    SEGMENTED codec and cost less than whole-column deltas."""
    rng = np.random.default_rng(7)
    rows = [np.unique(rng.integers(i, 5000, rng.integers(1, 50))) for i in range(0, 4000, 4)]
    counts = np.array([len(r) for r in rows])
    parents = np.concatenate(rows)
    batch = lineage_batch(range(len(rows)), parent_counts=counts, parent_ids=parents)
    stored = batch.compacted()
    assert stored.parent_ids.codec == SEGMENTED
    assert _unpack_params(stored.parent_ids.width)[3] > 0  # gaps Rice-coded
    assert stored.parent_array().tolist() == parents.tolist()
    assert stored.events() == batch.events()
    evs = batch.events(7)
    assert [stored.event(i, 7 + i) for i in (0, 5, 999)] == [evs[0], evs[5], evs[999]]
    assert [len(p) for p in stored.split([0, 333, 1000])] == [333, 667]
    zstd = zstandard.ZstdCompressor(level=3).compress
    assert len(zstd(stored.parent_ids.data)) < len(zstd(batch.parent_ids.compacted().data))


def test_unordered_columns_are_stored_shuffled_not_delta():
    counts = np.random.default_rng(3).zipf(1.5, 5000).clip(1, 60000)
    col = IntColumn.from_array(counts).compacted()
    assert col.codec == SHUFFLED and col.to_array().tolist() == counts.tolist()
    assert IntColumn.from_array(np.cumsum(counts)).compacted().codec == DELTA


def test_progression_names_the_step_of_a_range_column_only():
    assert IntColumn.from_range(range(5, 50, 3)).progression() == 3
    assert IntColumn.stored(np.arange(10, 20)).progression() == 1
    assert IntColumn.stored(np.array([1, 2, 4, 8, 9])).progression() is None


def test_range_column_costs_no_data():
    col = IntColumn.from_range(range(1000, 5000, 2))
    assert col.data == b"" and col.to_array()[-1] == 4998


@given(
    st.integers(0, 2**14 - 1),
    st.integers(0, 2**18 - 1),
    st.integers(0, 2**31 - 1),
)
def test_record_ids_pack_and_unpack(cp, part, pos):
    rid = pack_record_id(cp, part, pos)
    assert rid >= 0
    assert unpack_record_id(rid) == (cp, part, pos)


def test_record_id_out_of_range_fails_loud():
    with pytest.raises(ValueError, match="partition"):
        pack_record_id(0, 2**18, 0)


def _batch(n=5, first=0):
    return lineage_batch(
        range(first, first + n),
        parent_counts=np.arange(n) % 3,
        parent_ids=np.arange(int((np.arange(n) % 3).sum())) * 7,
        run="r",
        component="reduceByKey#3",
        component_type="reducer",
        partition=2,
        attempt=1,
        time_ns=123,
        offsets=np.arange(n + 1) * 10,
        values=[f"v{i}".encode() for i in range(n)],
        attributes={"k": "v"},
        location=Location("file:///x", 0, 100),
    )


def test_batch_records_become_per_record_events():
    b = _batch()
    evs = b.events(first_event_id=100)
    assert [e.event_id for e in evs] == [100, 101, 102, 103, 104]
    assert [e.parent_ids for e in evs] == [[], [0], [7, 14], [], [21]]
    assert evs[2].location == Location("file:///x", 20, 10)
    assert evs[3].attributes == {"k": "v"} and evs[3].attributes is not evs[4].attributes
    assert b.value(3) == b"v3"
    assert b.event(4, 104) == evs[4]


def test_batch_split_equals_whole():
    b = _batch(50)
    parts = b.split([0, 7, 7, 31, 50])
    assert [len(p) for p in parts] == [7, 0, 24, 19]
    merged = [e for p in parts for e in p.compacted().events()]
    assert merged == b.events()
    # Rollover cuts straight to the storage form: the same columns as compacting each slice.
    assert b.split([0, 7, 7, 31, 50], stored=True) == [p.compacted() for p in parts]


def test_batch_shape_errors_are_clear():
    with pytest.raises(ValueError, match="parent_counts sum"):
        LineageBatch.build(
            event_time_ns=1,
            event_type="JOIN",
            run_id="r",
            component_id="c",
            component_type="t",
            partition=0,
            attempt=0,
            record_ids=range(2),
            parent_counts=np.array([1, 1]),
            parent_ids=np.array([1]),
        )


def test_writer_reader_round_trip(tmp_path):
    spec = WriterSpec([str(tmp_path)], sync="none")
    events = [make_event(i) for i in range(100)]
    with JournalWriter.open(spec) as w:
        w.append(events[:60])
        w.append(_batch())
        w.append(events[60:])
    path = w.sealed_path
    assert path.endswith(".journal")
    reader = JournalReader(path)
    frames = reader.scan()
    assert [f.records for f in frames] == [60, 5, 40]
    got = [e for f in frames for e in f.events()]
    assert got[:60] == events[:60] and got[65:] == events[60:]
    assert reader.problems == []


def test_flush_makes_frames_readable_before_the_seal(tmp_path):
    w = JournalWriter.open(WriterSpec([str(tmp_path)], sync="none"))
    w.append([make_event(i) for i in range(3)])
    w.flush()
    assert [f.records for f in JournalReader(w.path).scan()] == [3]
    w.abort()


def test_writer_aborts_on_exception(tmp_path):
    spec = WriterSpec([str(tmp_path)], sync="none")
    with pytest.raises(RuntimeError), JournalWriter.open(spec) as w:
        w.append([make_event(1)])
        raise RuntimeError("task failed")
    assert list(tmp_path.iterdir()) == []


def test_sealed_writer_takes_no_more_appends(tmp_path):
    w = JournalWriter.open(WriterSpec([str(tmp_path)], sync="none"))
    w.seal()
    with pytest.raises(OSError, match="sealed"):
        w.append([make_event(1)])


def test_int_column_with_a_step_wider_than_int64():
    # Found by hypothesis: two values 2**63 apart are no RANGE (its step would overflow).
    values = [0, -(2**62), 2**62, 0]
    col = IntColumn.from_array(np.array(values, dtype=np.int64))
    assert col.slice(1, 3).to_array().tolist() == values[1:3]
    assert IntColumn.from_array(np.array(values[1:3])).to_array().tolist() == values[1:3]
    assert col.compacted().to_array().tolist() == values


@pytest.mark.parametrize("n", [0, 1, 2, 7, 1000])
def test_id_set_helpers_match_numpy(n):
    rng = np.random.default_rng(n)
    ids = rng.integers(0, 1 << 62, n) if n < 1000 else rng.integers(0, 50, n) << 49
    u = unique_ids(ids)
    assert np.array_equal(u, np.unique(ids)) and u.dtype == np.int64
    values, inverse, counts = group_ids(ids)
    want = np.unique(ids, return_inverse=True, return_counts=True)
    assert np.array_equal(values, want[0]) and np.array_equal(counts, want[2])
    assert np.array_equal(inverse, want[1].reshape(-1)) and np.array_equal(values[inverse], ids)
    probe = np.concatenate([ids[: n // 2], rng.integers(0, 1 << 62, 20)])
    for subset in (u, u[::3], u[:0]):
        assert np.array_equal(isin_sorted(probe, subset), np.isin(probe, subset))


@pytest.mark.parametrize("seed", range(4))
def test_unique_ids_of_record_ids_in_chunks(seed):
    """A trace level's union: dense positions over a few partitions (the bitmap path), chunks
    that are ascending and disjoint (concatenated as they are), chunks that overlap or repeat
    a value (neither shortcut may apply). Each equals np.unique of everything."""
    rng = np.random.default_rng(seed)
    parts = rng.choice(3000, 5, replace=False)
    dense = [
        record_id_base(2 + i % 2, int(p)) + rng.integers(0, 6000, 5000) for i, p in enumerate(parts)
    ]
    disjoint = [np.unique(c) for c in dense]
    rng.shuffle(disjoint)  # out of order: still disjoint once ordered
    touching = [disjoint[0], disjoint[0][-1:] + np.arange(3)]  # share one value
    repeats = [np.sort(dense[0])]  # ascending, not strictly
    sparse = [rng.integers(0, 1 << 62, 3000), rng.integers(0, 1 << 62, 10)]
    for chunks in (dense, disjoint, touching, repeats, sparse, [dense[0]], []):
        want = np.unique(np.concatenate(chunks)) if chunks else np.zeros(0, dtype=np.int64)
        got = unique_ids(chunks)
        assert np.array_equal(got, want) and got.dtype == np.int64
    assert np.array_equal(unique_ids(np.concatenate(dense)), np.unique(np.concatenate(dense)))
