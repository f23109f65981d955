"""Stored line marks (`repository/lineage/_linemarks.py`): a rare row of a CSV / JSON lines /
text scan read from the mark before it is exactly the line a scan from the partition's start
finds (brute force: the files split in Python), across headers, blank, comment and CRLF
lines, several files and pieces per partition; marks that are missing, torn, corrupt, made
from another plan or not fitting the file are not used (the lines are scanned, the same rows
come back), an owner makes them again, a read-only open never writes, and a source file that
changed is refused as without marks. A first trace stores marks of the prefix it scanned
(equal to the whole partition's first marks), a trace beyond it extends them from their last
mark, and damaged or ill-fitting partial marks fall back the same way."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
from _lines import EOLS, join_lines, line_at, split_starts

from repository.lineage import _scans
from repository.lineage._linemarks import LineMarks, LineMarkStore, verify_line_marks
from repository.lineage._scans import ScanRows, SourceChanged

KEY = ("run-1", 3)


def _corpus(tmp_path, eol: str, seed: int = 1) -> tuple[dict, list[list[str]]]:
    """Two CSV files cut into pieces over three partitions (one partition holding pieces
    of both files), with a header, blank, whitespace, comment and indented data lines;
    returns the scan plan and each partition's data lines, found by splitting in Python."""
    rng = np.random.default_rng(seed)
    files, texts = [], []
    for fi in range(2):
        body = ["k,v"]
        for i in range(700):
            r = rng.random()
            if r < 0.05:
                body += [""] * int(rng.integers(1, 30))
            elif r < 0.08:
                body += [" \t", "#note"]
            body.append(f"  {fi}-{i},i" if i % 9 == 0 else f"{fi}-{i}," + "w" * (i % 23))
        raw = join_lines(body, eol, seed + fi)
        path = tmp_path / f"f{fi}.csv"
        path.write_bytes(raw)
        st = os.stat(path)
        files.append([str(path), st.st_size, st.st_mtime_ns])
        texts.append(raw)
    a, b = len(texts[0]), len(texts[1])
    partitions = [
        [[0, 0, a // 3]],
        [[0, a // 3, a - a // 3], [1, 0, b // 2]],
        [[1, b // 2, b - b // 2]],
    ]
    want = []
    for pieces in partitions:
        lines = []
        for fi, start, length in pieces:
            raw = texts[fi]
            for pos in split_starts(raw, start, length):
                line = line_at(raw, pos)
                if pos == 0:
                    pass  # the header
                elif line.strip(" \t\r\n\x0b\x0c") and not line.startswith("#"):
                    lines.append(line)
        want.append(lines)
    scan = {
        "format": "csv",
        "files": files,
        "partitions": partitions,
        "options": {"header": True, "comment": "#"},
    }
    return scan, want


def _check(rows: ScanRows, scan: dict, want: list[list[str]], rng) -> None:
    for part, lines in enumerate(want):
        n = len(lines)
        for positions in (
            [0],
            [n - 1],
            rng.integers(0, n, 40).tolist(),
            [5, n, n + 7, -1, 5, n - 2],
        ):
            got = rows.data(KEY, scan, part, np.array(positions, dtype=np.int64))
            assert got == [lines[p] if 0 <= p < n else None for p in positions], (part, positions)
        assert rows.count(KEY, scan, part) == n


def _no_scans(monkeypatch) -> None:
    """Partition line tables forbidden: rows must come from the marks."""

    def refuse(*_a, **_k):
        raise AssertionError("the partition's lines were scanned, not read from a mark")

    monkeypatch.setattr(_scans, "_partition_lines", refuse)


@pytest.mark.parametrize("eol", EOLS)
def test_rows_from_marks_equal_the_files_lines(tmp_path, monkeypatch, eol):
    monkeypatch.setattr(_scans, "EVERY", 7)
    scan, want = _corpus(tmp_path, eol)
    store = LineMarkStore(str(tmp_path / "marks"), writable=True)
    rng = np.random.default_rng(2)
    _check(ScanRows(store), scan, want, rng)  # the owner makes the marks as it traces
    assert len(os.listdir(tmp_path / "marks")) == 3
    marks = store.load(*KEY, 1, scan)
    assert marks is not None and marks.total == len(want[1])
    assert len(marks.rows) > len(want[1]) // 7  # a mark every 7 rows, and at each piece
    with monkeypatch.context() as m:
        _no_scans(m)  # read-only, from the stored marks only
        _check(ScanRows(LineMarkStore(str(tmp_path / "marks"), writable=False)), scan, want, rng)
    # An owner's count() before any row is asked for leaves the making to the rows' read.
    owner = ScanRows(LineMarkStore(str(tmp_path / "later"), writable=True))
    assert owner.data(KEY, scan, 2, np.array([], dtype=np.int64)) == []  # nothing to make
    assert owner.count(KEY, scan, 2) == len(want[2])
    assert not os.path.exists(tmp_path / "later")
    assert owner.data(KEY, scan, 2, np.array([4])) == [want[2][4]]
    assert LineMarkStore(str(tmp_path / "later"), writable=False).load(*KEY, 2, scan) is not None


def test_json_lines_and_text_from_marks(tmp_path, monkeypatch):
    monkeypatch.setattr(_scans, "EVERY", 5)
    path = tmp_path / "a.json"
    lines = [f'{{"k": {i}}}' if i % 6 else f'  {{"k": {i}}}' for i in range(200)]
    body = []
    for i, line in enumerate(lines):
        body.append(line)
        if i % 11 == 0:
            body.append(" \t")  # whitespace: no JSON row, but a text row
    path.write_text("\n".join(body) + "\n")
    st = os.stat(path)
    for fmt, want in (("json", lines), ("text", body)):
        scan = {
            "format": fmt,
            "files": [[str(path), st.st_size, st.st_mtime_ns]],
            "partitions": [[[0, 0, st.st_size // 2]], [[0, st.st_size // 2, st.st_size]]],
        }
        store = LineMarkStore(str(tmp_path / fmt), writable=True)
        ScanRows(store).has_line_marks(KEY, scan, 0)
        ScanRows(store).has_line_marks(KEY, scan, 1)
        rows = ScanRows(LineMarkStore(str(tmp_path / fmt), writable=False))
        with monkeypatch.context() as m:
            _no_scans(m)
            n0 = rows.count(KEY, scan, 0)
            got = rows.data(KEY, scan, 0, np.arange(n0)) + rows.data(
                KEY, scan, 1, np.arange(rows.count(KEY, scan, 1))
            )
        assert got == want, fmt


def test_read_only_open_writes_no_marks(tmp_path, monkeypatch):
    monkeypatch.setattr(_scans, "EVERY", 7)
    scan, want = _corpus(tmp_path, "\n")
    rows = ScanRows(LineMarkStore(str(tmp_path / "marks"), writable=False))
    _check(rows, scan, want, np.random.default_rng(4))
    assert not os.path.exists(tmp_path / "marks")
    with pytest.raises(PermissionError):
        LineMarkStore(str(tmp_path / "marks"), writable=False).save(
            *KEY, 0, scan, LineMarks(np.zeros(1, np.int64), np.zeros(1, np.int64), np.zeros(1), 1)
        )


def _damage(path: str, how: str) -> None:
    raw = bytearray(Path(path).read_bytes())
    if how == "torn":
        raw = raw[: len(raw) // 2]
    elif how == "flipped":
        raw[-5] ^= 0x40  # an offset's byte: the checksum no longer holds
    elif how == "empty":
        raw = bytearray()
    with open(path, "wb") as f:
        f.write(raw)


@pytest.mark.parametrize("how", ["torn", "flipped", "empty", "missing"])
def test_damaged_marks_are_not_used_and_an_owner_remakes_them(tmp_path, monkeypatch, how):
    monkeypatch.setattr(_scans, "EVERY", 7)
    scan, want = _corpus(tmp_path, "\n")
    d = str(tmp_path / "marks")
    for part in range(3):
        assert ScanRows(LineMarkStore(d, writable=True)).has_line_marks(KEY, scan, part)
    for name in os.listdir(d):
        if how == "missing":
            os.remove(os.path.join(d, name))
        else:
            _damage(os.path.join(d, name), how)
    reader = LineMarkStore(d, writable=False)
    assert all(reader.load(*KEY, p, scan) is None for p in range(3))
    rng = np.random.default_rng(5)
    _check(ScanRows(reader), scan, want, rng)  # scanned: the same rows
    _check(ScanRows(LineMarkStore(d, writable=True)), scan, want, rng)  # remade
    assert all(reader.load(*KEY, p, scan) is not None for p in range(3))


def test_verify_reports_each_damaged_marks_file_and_changes_nothing(tmp_path, monkeypatch):
    """`verify_line_marks` (behind `provrepo verify`) accepts whole marks and names every
    file that is torn, flipped, empty, named for another plan or inconsistent in itself;
    a crash's `.tmp` leftover is not a problem; no file changes."""
    monkeypatch.setattr(_scans, "EVERY", 7)
    scan, _ = _corpus(tmp_path, "\n")
    d = str(tmp_path / "marks")
    store = LineMarkStore(d, writable=True)
    for part in range(3):
        assert ScanRows(store).has_line_marks(KEY, scan, part)
    assert verify_line_marks(d) == ([], 3)
    assert verify_line_marks(str(tmp_path / "none")) == ([], 0)
    Path(d, "leftover.marks.tmp").write_bytes(b"half")
    assert verify_line_marks(d) == ([], 3)
    paths = [store.path(*KEY, p, scan) for p in range(3)]
    for how in ("torn", "flipped", "empty"):
        _damage(paths[0], how)
        problems, n = verify_line_marks(d)
        assert n == 3 and problems == [
            f"{paths[0]}: line marks damaged (not whole, or named for another plan)"
        ], how
        assert ScanRows(store).has_line_marks(KEY, scan, 0)  # remade
    # Whole, but under another plan's name.
    other = store.path("run-2", KEY[1], 0, scan)
    os.replace(paths[0], other)
    problems, n = verify_line_marks(d)
    assert problems == [f"{other}: line marks damaged (not whole, or named for another plan)"]
    os.replace(other, paths[0])
    # Whole and named right, but its rows do not ascend (a checksum made over bad marks).
    good = store.load(*KEY, 1, scan)
    assert good is not None and len(good.rows) > 2
    store.save(
        *KEY, 1, scan, LineMarks(good.rows[::-1].copy(), good.pieces, good.offsets, good.total)
    )
    before = {n: Path(d, n).read_bytes() for n in os.listdir(d)}
    problems, n = verify_line_marks(d)
    assert problems == [f"{paths[1]}: line marks inconsistent (rows, pieces or offsets)"]
    assert {n: Path(d, n).read_bytes() for n in os.listdir(d)} == before


def test_marks_of_another_plan_are_not_used(tmp_path, monkeypatch):
    """Marks are found by the digest of the plan they were made from: another partition's,
    another run's or other options' marks under this plan's name are ignored."""
    monkeypatch.setattr(_scans, "EVERY", 7)
    scan, want = _corpus(tmp_path, "\n")
    d = str(tmp_path / "marks")
    store = LineMarkStore(d, writable=True)
    assert ScanRows(store).has_line_marks(KEY, scan, 0)
    src = store.path(*KEY, 0, scan)
    for run, cp, part, options in (
        (KEY[0], KEY[1], 1, scan["options"]),
        ("run-2", KEY[1], 0, scan["options"]),
        (KEY[0], KEY[1], 0, {"header": True}),
    ):
        other = dict(scan, options=options)
        dst = store.path(run, cp, part, other)
        os.replace(src, dst)
        assert store.load(run, cp, part, other) is None
        os.replace(dst, src)
    assert store.load(*KEY, 0, scan) is not None
    _check(ScanRows(LineMarkStore(d, writable=False)), scan, want, np.random.default_rng(6))


def test_marks_that_do_not_fit_the_file_fall_back_to_the_scan(tmp_path, monkeypatch):
    """Well-formed marks whose offsets are not line starts, or that promise more lines than
    the piece has, are caught at use: the rows are scanned, never misread."""
    monkeypatch.setattr(_scans, "EVERY", 7)
    scan, want = _corpus(tmp_path, "\n")
    d = str(tmp_path / "marks")
    store = LineMarkStore(d, writable=True)
    assert ScanRows(store).has_line_marks(KEY, scan, 0)
    good = store.load(*KEY, 0, scan)
    assert good is not None
    shifted = LineMarks(good.rows, good.pieces, good.offsets + 3, good.total)
    longer = LineMarks(good.rows, good.pieces, good.offsets, good.total + 50)
    for bad in (shifted, longer):
        store.save(*KEY, 0, scan, bad)
        rows = ScanRows(LineMarkStore(d, writable=False))
        n = len(want[0])
        positions = [n - 1, 3, *range(0, n, 5), n, n + 10]
        got = rows.data(KEY, scan, 0, np.array(positions))
        assert got == [want[0][p] if p < n else None for p in positions]


def test_changed_source_file_is_refused_with_marks(tmp_path, monkeypatch):
    monkeypatch.setattr(_scans, "EVERY", 7)
    scan, _ = _corpus(tmp_path, "\n")
    d = str(tmp_path / "marks")
    for part in range(3):
        assert ScanRows(LineMarkStore(d, writable=True)).has_line_marks(KEY, scan, part)
    path = scan["files"][0][0]
    raw = Path(path).read_bytes()
    with open(path, "wb") as f:  # the same size, other bytes: its mtime moves
        f.write(raw.replace(b"0-1,", b"0-9,", 1))
    st = os.stat(path)
    os.utime(path, ns=(st.st_atime_ns, scan["files"][0][2] + 1_000_000))
    for writable in (False, True):
        rows = ScanRows(LineMarkStore(d, writable=writable))
        with pytest.raises(SourceChanged, match="changed"):
            rows.data(KEY, scan, 0, np.array([3]))
        with pytest.raises(SourceChanged, match="changed"):
            rows.count(KEY, scan, 1)


def test_marks_of_runs_gone_are_deleted_by_the_owner_only(tmp_path, monkeypatch):
    monkeypatch.setattr(_scans, "EVERY", 7)
    scan, _ = _corpus(tmp_path, "\n")
    d = str(tmp_path / "marks")
    owner = LineMarkStore(d, writable=True)
    for key in (KEY, ("run-2", 3), ("run-3", 1)):
        assert ScanRows(owner).has_line_marks(key, scan, 0)
    # A write cut short by a crash (its temporary file) goes with its run's marks.
    tmp = owner.path("run-2", 3, 1, scan) + ".tmp"
    Path(tmp).write_bytes(b"PRVLMK01 torn")
    assert LineMarkStore(d, writable=False).forget_runs_but({KEY[0]}) == 0
    assert len(os.listdir(d)) == 4
    assert ScanRows(owner).forget_marks_but({KEY[0], "run-3"}) == 2
    assert not os.path.exists(tmp)
    assert owner.load("run-2", 3, 0, scan) is None
    assert owner.load(*KEY, 0, scan) is not None and owner.load("run-3", 1, 0, scan) is not None


def test_a_traced_csv_run_keeps_marks_until_its_lineage_ages_off(lc, tmp_path):
    """Through the repository: an owner's trace of a CSV row makes its partition's marks
    (rows equal the file's lines), `mark_scan_lines` makes every partition's, a read-only
    open reads the same rows from them, and once the run's logs have aged off the marks go
    too."""
    import time

    from repository import ProvenanceRepository

    path = tmp_path / "in.csv"
    lines = [f"{i},{'v' * (i % 7)}" for i in range(3000)]
    path.write_text("k,v\n" + "\n".join(lines) + "\n")
    df = lc.read.csv(str(path), header=True, schema="k INT, v STRING")
    rows = df.dataframe.collect()
    df.take(1)  # an action: the run's descriptor now holds the scan's plan
    lc.repo.rollover()
    h = df.lineage_columns.longs[0]
    ids = np.array([r[h] for r in rows[::250]], dtype=np.int64)
    want = [f"{r.k},{r.v or ''}" for r in rows[::250]]
    assert lc.repo.lineage.record_data(lc.run_id, ids) == want
    marks = os.path.join(lc.repo.path, "scans")
    made = set(os.listdir(marks))
    assert made
    # All the run's partitions at once: those the trace made stay, the others are added.
    parts = lc.repo.lineage.mark_scan_lines(lc.run_id)
    assert parts >= len(made) and made <= set(os.listdir(marks))
    assert len(os.listdir(marks)) == parts
    with ProvenanceRepository.open(lc.repo.path, read_only=True) as ro:
        assert ro.lineage.record_data(lc.run_id, ids) == want
    time.sleep(1.1)
    assert lc.repo.age_off(max_age=1).deleted_logs
    assert lc.run_id not in lc.repo.lineage.runs()
    assert os.listdir(marks) == []


def test_cli_mark_lines_makes_the_marks_read_only_traces_use(spark, tmp_path, capsys, monkeypatch):
    """`provrepo mark-lines` (an owner's command) makes every partition's marks of a run
    captured and closed; a read-only open then reads its rows from them, never scanning."""
    import json

    from agent import LineageContext
    from repository import ProvenanceRepository, RepositoryConfig
    from repository.cli import main as cli

    path = tmp_path / "in.csv"
    lines = [f"{i},{'w' * (i % 11)}" for i in range(2000)]
    path.write_text("k,v\n" + "\n".join(lines) + "\n")
    repo_path = str(tmp_path / "repo")
    with ProvenanceRepository.open(repo_path, RepositoryConfig(sync="none")) as repo:
        lc = LineageContext(spark, repo)
        df = lc.read.csv(str(path), header=True, schema="k INT, v STRING")
        rows = df.dataframe.collect()
        df.take(1)
        run = lc.run_id
    h = df.lineage_columns.longs[0]
    capsys.readouterr()
    assert cli(["mark-lines", repo_path, "--run", run, "--json"]) == 0
    (made,) = [json.loads(x) for x in capsys.readouterr().out.splitlines()]
    assert made["partitions"][run] >= 1
    assert len(os.listdir(os.path.join(repo_path, "scans"))) == made["partitions"][run]
    assert cli(["mark-lines", repo_path, "--run", "no-such-run"]) != 0
    ids = np.array([r[h] for r in rows[::97]], dtype=np.int64)
    with ProvenanceRepository.open(repo_path, read_only=True) as ro:
        _no_scans(monkeypatch)
        assert ro.lineage.record_data(run, ids) == [f"{r.k},{r.v or ''}" for r in rows[::97]]
    # `verify` checks the marks files too; a damaged one is reported, not changed.
    capsys.readouterr()
    assert cli(["verify", repo_path]) == 0
    assert f"{made['partitions'][run]} line marks files" in capsys.readouterr().out
    name = sorted(os.listdir(os.path.join(repo_path, "scans")))[0]
    damaged = os.path.join(repo_path, "scans", name)
    _damage(damaged, "flipped")
    before = Path(damaged).read_bytes()
    assert cli(["verify", repo_path]) == 1
    assert f"{damaged}: line marks damaged" in capsys.readouterr().out
    assert Path(damaged).read_bytes() == before


def _whole_marks(tmp_path, scan: dict, part: int) -> LineMarks:
    store = LineMarkStore(str(tmp_path / "whole"), writable=True)
    assert ScanRows(store).has_line_marks(KEY, scan, part)
    marks = store.load(*KEY, part, scan)
    assert marks is not None and marks.complete
    return marks


@pytest.mark.parametrize("eol", EOLS)
def test_a_first_trace_stores_marks_of_the_prefix_it_scanned(tmp_path, monkeypatch, eol):
    """An owner's first trace of a partition scans only up to its last row and stores the
    marks of that prefix (not the whole partition's): rows within it are read from them
    exactly as the files split in Python give them, never scanning from the start."""
    monkeypatch.setattr(_scans, "EVERY", 7)
    monkeypatch.setattr(_scans, "_STEP", 256)  # a piece is scanned in steps: a prefix stops
    scan, want = _corpus(tmp_path, eol)
    d = str(tmp_path / "marks")
    part, n = 1, len(want[1])
    p = n // 5
    # Asked for no row of it (a position before the first): no marks saying it has none.
    assert ScanRows(LineMarkStore(d, writable=True)).data(KEY, scan, part, np.array([-1])) == [None]
    assert ScanRows(LineMarkStore(d, writable=False)).data(KEY, scan, part, np.array([3])) == [
        want[part][3]
    ]
    assert ScanRows(LineMarkStore(d, writable=True)).data(KEY, scan, part, np.array([p])) == [
        want[part][p]
    ]
    marks = LineMarkStore(d, writable=False).load(*KEY, part, scan)
    assert marks is not None and not marks.complete
    assert p < marks.total < n // 2
    whole = _whole_marks(tmp_path, scan, part)
    k = len(marks.rows)
    # The prefix's marks are the whole partition's first ones, on the same grid.
    assert marks.rows.tolist() == whole.rows[:k].tolist()
    assert marks.pieces.tolist() == whole.pieces[:k].tolist()
    assert marks.offsets.tolist() == whole.offsets[:k].tolist()
    assert whole.rows[k] >= marks.total  # no mark of a row the prefix does not hold
    with monkeypatch.context() as m:
        _no_scans(m)
        rows = ScanRows(LineMarkStore(d, writable=False))
        inside = [0, 1, 6, 7, 8, p, marks.total - 1, *range(0, marks.total, 3)]
        got = rows.data(KEY, scan, part, np.array(inside))
        assert got == [want[part][q] for q in inside]


@pytest.mark.parametrize("eol", EOLS)
def test_a_trace_beyond_the_prefix_extends_the_marks(tmp_path, monkeypatch, caplog, eol):
    """A trace past the stored prefix scans on from its last mark (not from the partition's
    start) and stores the longer marks, equal to the whole partition's first ones; a
    read-only open extends them in memory only; count() completes them."""
    monkeypatch.setattr(_scans, "EVERY", 7)
    monkeypatch.setattr(_scans, "_STEP", 256)
    scan, want = _corpus(tmp_path, eol)
    d = str(tmp_path / "marks")
    part, n = 1, len(want[1])
    whole = _whole_marks(tmp_path, scan, part)
    owner = LineMarkStore(d, writable=True)
    assert ScanRows(owner).data(KEY, scan, part, np.array([10])) == [want[part][10]]
    short = owner.load(*KEY, part, scan)
    assert short is not None and not short.complete
    # Read-only, beyond the prefix: the right rows, the file untouched.
    before = Path(owner.path(*KEY, part, scan)).read_bytes()
    far = [n - 3, 2, n // 2]
    reader = ScanRows(LineMarkStore(d, writable=False))
    with caplog.at_level("WARNING", logger="provrepo.lineage"):
        assert reader.data(KEY, scan, part, np.array(far)) == [want[part][q] for q in far]
    assert not caplog.records  # nor tried to store them
    assert Path(owner.path(*KEY, part, scan)).read_bytes() == before
    # An owner, beyond the prefix: scanned on from the last mark only.
    begins = []
    kept = _scans._kept_lines

    def spy(scan_, piece, max_lines, begin, step=None):
        begins.append((tuple(piece), begin))
        return kept(scan_, piece, max_lines, begin, step)

    monkeypatch.setattr(_scans, "_kept_lines", spy)
    q = (2 * n) // 3
    assert ScanRows(owner).data(KEY, scan, part, np.array([q, 3])) == [want[part][q], want[part][3]]
    last = len(short.rows) - 1
    piece = scan["partitions"][part][int(short.pieces[last])]
    assert begins[0] == (tuple(piece), int(short.offsets[last]))
    longer = owner.load(*KEY, part, scan)
    assert longer is not None and not longer.complete and q < longer.total < n
    k = len(longer.rows)
    assert k > len(short.rows)
    assert longer.rows.tolist() == whole.rows[:k].tolist()
    assert longer.pieces.tolist() == whole.pieces[:k].tolist()
    assert longer.offsets.tolist() == whole.offsets[:k].tolist()
    # Past the end: the marks are completed, the rows after it are None.
    assert ScanRows(owner).data(KEY, scan, part, np.array([n + 4, n - 1])) == [None, want[part][-1]]
    done = owner.load(*KEY, part, scan)
    assert done is not None and done.complete and done.total == n
    assert done.offsets.tolist() == whole.offsets.tolist()
    assert done.rows.tolist() == whole.rows.tolist()
    # count() of a prefix completes it too.
    ScanRows(owner).data(KEY, scan, 2, np.array([5]))
    assert not owner.load(*KEY, 2, scan).complete
    assert ScanRows(owner).count(KEY, scan, 2) == len(want[2])
    assert owner.load(*KEY, 2, scan).complete
    # A read-only open extends a prefix (partition 0's) in memory, never scanning from the start.
    ScanRows(owner).data(KEY, scan, 0, np.array([2]))
    assert not owner.load(*KEY, 0, scan).complete
    with monkeypatch.context() as m:
        _no_scans(m)
        _check(ScanRows(LineMarkStore(d, writable=False)), scan, want, np.random.default_rng(8))
    assert not owner.load(*KEY, 0, scan).complete


@pytest.mark.parametrize("how", ["torn", "flipped", "empty", "longer", "shifted", "dropped"])
def test_damaged_partial_marks_fall_back_to_the_scan(tmp_path, monkeypatch, how):
    """Partial marks that are torn or corrupt (checksum), promise more rows than the file
    has after their last mark, or whose last mark is not a line start or not a kept line's
    start are not used: the same rows come back scanned, and an owner makes them again."""
    monkeypatch.setattr(_scans, "EVERY", 7)
    monkeypatch.setattr(_scans, "_STEP", 256)
    scan, want = _corpus(tmp_path, "\n")
    d = str(tmp_path / "marks")
    part, n = 1, len(want[1])
    owner = LineMarkStore(d, writable=True)
    assert ScanRows(owner).data(KEY, scan, part, np.array([20])) == [want[part][20]]
    good = owner.load(*KEY, part, scan)
    assert good is not None and not good.complete
    if how in ("torn", "flipped", "empty"):
        _damage(owner.path(*KEY, part, scan), how)
        assert owner.load(*KEY, part, scan) is None
    else:
        rows, pieces, offsets, total = good.rows, good.pieces, good.offsets, good.total
        if how == "longer":  # more rows than there are, all after the last mark
            bad = LineMarks(rows, pieces, offsets, n + 40, False)
        elif how == "shifted":  # the last mark moved off its line start
            bad = LineMarks(
                rows, pieces, offsets + (np.arange(len(rows)) == len(rows) - 1), total, False
            )
        else:  # the last mark moved to a comment line's start, later in its piece
            fi, start, length = scan["partitions"][part][int(pieces[-1])]
            raw = Path(scan["files"][fi][0]).read_bytes()
            at = raw.index(b"\n#note", int(offsets[-1]) + 300) + 1
            assert at <= start + length
            moved = offsets.copy()
            moved[-1] = at
            bad = LineMarks(rows, pieces, moved, total, False)
        owner.save(*KEY, part, scan, bad)
    last = int(good.rows[-1])  # the row at the last mark: read from there when extending
    positions = [n - 1, 3, last, last + 1, good.total - 1, good.total, *range(0, n, 9), n, n + 3]
    expect = [want[part][q] if q < n else None for q in positions]
    assert (
        ScanRows(LineMarkStore(d, writable=False)).data(KEY, scan, part, np.array(positions))
        == expect
    )
    if how in ("torn", "flipped", "empty"):
        assert ScanRows(owner).data(KEY, scan, part, np.array(positions)) == expect
        remade = owner.load(*KEY, part, scan)
        assert remade is not None and remade.complete and remade.total == n
