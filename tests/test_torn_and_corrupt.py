"""Torn tails and flipped bytes in journals: readers keep every intact frame and say what they
dropped; rollover merges exactly the intact records and quarantines the damaged journal."""

from __future__ import annotations

import bisect
import itertools
import os
import re

import pytest
from _events import make_event
from _faults import files_under, tree_hash, write_sample_journal

from journals import JournalReader
from repository import ProvenanceRepository, RepositoryConfig
from repository._blocks import BlockError
from repository.cli import main as cli

FILE_HEADER_SIZE = 8  # b"PRVJ", version, 3 reserved bytes
FRAME_HEADER_SIZE = 16  # magic, payload length, payload crc32, header crc32


@pytest.fixture(scope="module")
def sample(tmp_path_factory):
    path, bounds, records = write_sample_journal(str(tmp_path_factory.mktemp("sample")))
    with open(path, "rb") as f:
        return f.read(), bounds, records


def expected_for_cut(bounds: list[int], records: list[list[int]], cut: int) -> list[int]:
    """Record ids of every frame that ends at or before `cut`, in file order."""
    return [r for i, ids in enumerate(records) if bounds[i + 1] <= cut for r in ids]


def test_torn_tail_at_every_byte_offset(sample):
    data, bounds, records = sample
    assert len(data) < 20_000  # small enough to cut at every single offset
    for cut in range(len(data) + 1):
        reader = JournalReader(f"cut{cut}.journal", data[:cut])
        got = [e.record_id for e in reader.events()]
        assert got == expected_for_cut(bounds, records, cut), cut
        if cut < FILE_HEADER_SIZE:
            assert [p.kind for p in reader.problems] == ["bad-file-header"], cut
            continue
        if cut in bounds or cut == FILE_HEADER_SIZE:
            assert reader.problems == [], cut
            assert reader.valid_length == cut
            continue
        # The torn frame starts at the last boundary before the cut; all of it is dropped.
        start = max(b for b in [FILE_HEADER_SIZE, *bounds] if b < cut)
        assert len(reader.problems) == 1, (cut, reader.problems)
        p = reader.problems[0]
        assert (p.kind, p.offset, p.bytes_skipped) == ("torn-tail", start, cut - start), cut
        assert p.path == f"cut{cut}.journal" and str(p).startswith(f"cut{cut}.journal@{start}:")
        assert reader.valid_length == start


def _cut_points(bounds: list[int], size: int) -> list[int]:
    points = {5, FILE_HEADER_SIZE, FILE_HEADER_SIZE + 7, size}
    for a, b in itertools.pairwise(bounds):
        points |= {a + 1, a + FRAME_HEADER_SIZE - 1, a + FRAME_HEADER_SIZE, (a + b) // 2, b - 1}
    return sorted(points)


def test_rollover_of_torn_sealed_journals_assigns_exact_ids(tmp_path, sample):
    data, bounds, records = sample
    config = RepositoryConfig(sync="none", rollover_interval=3600)
    for cut in _cut_points(bounds, len(data)):
        root = str(tmp_path / f"repo{cut}")
        with ProvenanceRepository.open(root, config, start_threads=False) as repo:
            container = repo.containers[0]
            with open(os.path.join(container, "00000001-torn.journal"), "wb") as f:
                f.write(data[:cut])
            want = expected_for_cut(bounds, records, cut)
            assert repo.rollover() == len(want), cut
            got = repo.get_events(1, 1000)
            assert [e.event_id for e in got] == list(range(1, len(want) + 1)), cut
            assert [e.record_id for e in got] == want, cut
            assert repo.max_event_id == len(want)
            assert os.listdir(container) == []
            torn = cut not in bounds and cut != FILE_HEADER_SIZE
            quarantined = files_under(os.path.join(root, "quarantine"))
            # A sealed journal with a torn tail was damaged after sealing: keep it for a human.
            assert quarantined == (["00000001-torn.journal"] if torn else []), cut
            if torn:
                with open(os.path.join(root, "quarantine", "00000001-torn.journal"), "rb") as f:
                    assert f.read() == data[:cut]
        # Reopening finds nothing left to merge and the same ids.
        with ProvenanceRepository.open(root, config, start_threads=False) as repo:
            assert repo.max_event_id == len(want)
            assert [e.record_id for e in repo.get_events(1, 1000)] == want


def _flip(data: bytes, at: int) -> bytes:
    return data[:at] + bytes([data[at] ^ 0x5A]) + data[at + 1 :]


@pytest.mark.parametrize(
    ("frame", "where"),
    [(2, "payload"), (1, "payload"), (2, "header"), (3, "header")],
    ids=["rich-payload", "batch-payload", "rich-header", "batch-header"],
)
def test_flipped_byte_in_a_middle_frame(tmp_path, sample, frame, where):
    data, bounds, records = sample
    start, end = bounds[frame], bounds[frame + 1]
    want = [r for i, ids in enumerate(records) if i != frame for r in ids]
    spots = (
        range(start, start + FRAME_HEADER_SIZE)  # every byte of the header
        if where == "header"
        else [start + FRAME_HEADER_SIZE, (start + end) // 2, end - 1]
    )
    kind = "bad-header" if where == "header" else "bad-checksum"
    for at in spots:
        damaged = _flip(data, at)
        reader = JournalReader("j.journal", damaged)
        assert [e.record_id for e in reader.events()] == want, at
        assert [(p.path, p.kind, p.offset, p.bytes_skipped) for p in reader.problems] == [
            ("j.journal", kind, start, end - start)
        ], at

    # Through the repository: verify complains while it is pending, rollover merges the rest.
    root = str(tmp_path / "repo")
    damaged = _flip(data, spots[len(spots) // 2])
    config = RepositoryConfig(sync="none", rollover_interval=3600)
    with ProvenanceRepository.open(root, config, start_threads=False) as repo:
        jpath = os.path.join(repo.containers[0], "00000001-damaged.journal")
        with open(jpath, "wb") as f:
            f.write(damaged)
        assert cli(["verify", root]) == 1
        assert repo.rollover() == len(want)
        got = repo.get_events(1, 1000)
        assert [e.event_id for e in got] == list(range(1, len(want) + 1))
        assert [e.record_id for e in got] == want
        assert os.listdir(repo.containers[0]) == []
        with open(os.path.join(root, "quarantine", "00000001-damaged.journal"), "rb") as f:
            assert f.read() == damaged
        assert repo.rollover_stats.journal_problems == 1
        assert cli(["verify", root]) == 0  # quarantined: no longer the repository's problem


def test_verify_names_file_and_offset(tmp_path, sample, capsys):
    data, bounds, _ = sample
    root = str(tmp_path / "repo")
    config = RepositoryConfig(sync="none", rollover_interval=3600)
    with ProvenanceRepository.open(root, config, start_threads=False) as repo:
        jpath = os.path.join(repo.containers[0], "00000001-damaged.journal")
        with open(jpath, "wb") as f:
            f.write(_flip(data, bounds[2] + 20))
        capsys.readouterr()
        assert cli(["verify", root]) == 1
        out, err = capsys.readouterr()
        assert f"{jpath}@{bounds[2]}: bad-checksum" in out
        assert "1 problem(s)" in err and err.count("\n") == 1
        repo.rollover()


def test_verify_finds_a_damaged_block_and_toc_and_changes_nothing(tmp_path, capsys):
    root = str(tmp_path / "repo")
    config = RepositoryConfig(sync="none", rollover_interval=3600, block_size="4KiB")
    with ProvenanceRepository.open(root, config, start_threads=False) as repo:
        repo.register_events([make_event(i) for i in range(2000)])
        assert repo.rollover() == 2000
        (log,) = [r.first_id for r in repo.logs()]
    prov = os.path.join(root, "logs", f"{log}.prov")
    toc = os.path.join(root, "logs", f"{log}.toc")
    assert cli(["verify", root]) == 0
    size = os.path.getsize(prov)
    with open(prov, "r+b") as f:  # a byte in the middle of the log: inside some block
        f.seek(size // 2)
        b = f.read(1)
        f.seek(size // 2)
        f.write(bytes([b[0] ^ 0xFF]))
    before = tree_hash(root)
    capsys.readouterr()
    assert cli(["verify", root]) == 1
    out, err = capsys.readouterr()
    assert prov in out and "1 problem(s)" in err
    assert tree_hash(root) == before  # verify only reads
    # The damaged block costs exactly its own events, each lookup a BlockError naming the log
    # and the block; every other event reads as written.
    with ProvenanceRepository.open(root, config, start_threads=False) as repo:
        (reader,) = repo.logs()
        offsets, firsts = reader.toc.block_offsets, [*reader.toc.block_first_ids, 2001]
        k = bisect.bisect_right(offsets, size // 2) - 1
        assert 0 < k < len(offsets) - 1  # a block in the middle, not the first or last
        lost = range(firsts[k], firsts[k + 1])
        assert 0 < len(lost) < 200
        for i in range(1, 2001):
            if i in lost:
                with pytest.raises(BlockError, match=re.escape(f"{prov} block {k} @{offsets[k]}")):
                    repo.get_event(i)
            else:
                ev = repo.get_event(i)
                assert ev is not None and ev.record_id == i - 1
    with open(toc, "r+b") as f:  # and a torn table of contents
        f.truncate(os.path.getsize(toc) - 3)
    capsys.readouterr()
    assert cli(["verify", root]) == 1
    assert toc in capsys.readouterr().out
