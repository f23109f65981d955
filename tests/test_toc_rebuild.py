"""Recovery rebuilds the table of contents of a committed log whose toc is missing, torn or
damaged, from the log's own blocks: the same toc as the one written at rollover, and every
event, lookup and lineage directory as before."""

from __future__ import annotations

import logging
import os

import pytest
from _events import make_event
from _faults import lineage_batch

from repository import ProvenanceRepository, RepositoryConfig
from repository._toc import read_toc
from repository.cli import main as cli

CONFIG = RepositoryConfig(sync="none", rollover_interval=3600, block_size="4KiB")


def two_logs(root: str) -> list[int]:
    with ProvenanceRepository.open(root, CONFIG, start_threads=False) as repo:
        for k in range(2):
            repo.register_events([make_event(i) for i in range(k * 1000, k * 1000 + 700)])
            repo.register_events(lineage_batch(range(50_000 + k * 5000, 53_000 + k * 5000)))
            repo.register_events([make_event(i) for i in range(k * 1000 + 700, k * 1000 + 900)])
            assert repo.rollover() == 3900
        return [r.first_id for r in repo.logs()]


def damage(path: str, how: str) -> None:
    if how == "missing":
        os.unlink(path)
    elif how == "torn":
        with open(path, "r+b") as f:
            f.truncate(os.path.getsize(path) // 2)
    elif how == "flipped":
        with open(path, "r+b") as f:
            f.seek(os.path.getsize(path) - 10)
            b = f.read(1)
            f.seek(-1, os.SEEK_CUR)
            f.write(bytes([b[0] ^ 0x40]))


def same_toc(rebuilt, original, events) -> bool:
    """Equal, but for block time bounds: rollover writes an events frame's bounds for every
    block it spans, the rebuild each block's own, tighter ones; both must hold the events."""
    skip = ("block_min_time_ns", "block_max_time_ns")
    for name in rebuilt.__struct_fields__:
        if name not in skip:
            assert getattr(rebuilt, name) == getattr(original, name), name
    firsts = [*rebuilt.block_first_ids, rebuilt.next_id]
    for k in range(len(rebuilt.block_offsets)):
        times = [e.event_time_ns for e in events[firsts[k] - 1 : firsts[k + 1] - 1]]
        assert original.block_min_time_ns[k] <= rebuilt.block_min_time_ns[k] == min(times)
        assert original.block_max_time_ns[k] >= rebuilt.block_max_time_ns[k] == max(times)
    return True


@pytest.mark.parametrize("how", ["missing", "torn", "flipped"])
def test_a_lost_toc_is_rebuilt_at_open(tmp_path, how, caplog):
    root = str(tmp_path / "repo")
    firsts = two_logs(root)
    toc_path = os.path.join(root, "logs", f"{firsts[1]}.toc")
    original = read_toc(toc_path)
    with ProvenanceRepository.open(root, read_only=True) as ro:
        events = ro.get_events(1, 100_000)
        lineage = {r: ro.lineage.run_info(r).records for r in ro.lineage.runs()}
    assert len(events) == 7800
    damage(toc_path, how)
    assert cli(["verify", root]) == 1

    with caplog.at_level(logging.WARNING, logger="provrepo.repository"):
        repo = ProvenanceRepository.open(root, CONFIG, start_threads=False)
    with repo:
        assert repo.recovery.tocs_rebuilt == [f"{firsts[1]}.prov"]
        assert any("rebuilt it from its blocks" in r.getMessage() for r in caplog.records)
        rebuilt = read_toc(toc_path)
        assert same_toc(rebuilt, original, events)
        assert repo.get_events(1, 100_000) == events
        assert [repo.get_event(i) for i in range(3895, 3910)] == events[3894:3909]
        assert {r: repo.lineage.run_info(r).records for r in repo.lineage.runs()} == lineage
        assert repo.max_event_id == 7800
    assert cli(["verify", root]) == 0


def test_a_log_whose_toc_cannot_be_rebuilt_does_not_stop_the_others(tmp_path, caplog):
    root = str(tmp_path / "repo")
    firsts = two_logs(root)
    prov = os.path.join(root, "logs", f"{firsts[0]}.prov")
    os.unlink(os.path.join(root, "logs", f"{firsts[0]}.toc"))
    with open(prov, "r+b") as f:  # and a block of the log itself damaged
        f.seek(os.path.getsize(prov) // 2)
        b = f.read(1)
        f.seek(-1, os.SEEK_CUR)
        f.write(bytes([b[0] ^ 0xFF]))
    with caplog.at_level(logging.ERROR, logger="provrepo.repository"):
        repo = ProvenanceRepository.open(root, CONFIG, start_threads=False)
    with repo:
        assert repo.recovery.tocs_rebuilt == []
        assert any("cannot be rebuilt" in r.getMessage() for r in caplog.records)
        assert [e.event_id for e in repo.get_events(firsts[1], 100_000)] == list(
            range(firsts[1], 7801)
        )
    assert cli(["verify", root]) == 1
