"""`verify`: check every frame, block and table of contents; report problems, change nothing."""

from __future__ import annotations

import os
from dataclasses import dataclass

from journals import JournalReader, listdir

from ._blocks import BLOCK_HEADER, BlockError, decode_block
from ._eventlog import read_log_header
from ._layout import LOG_SUFFIX, TOC_SUFFIX, Layout
from ._rollover import sealed_journals
from ._toc import TocError, read_toc


@dataclass(frozen=True)
class VerifyReport:
    """What `verify` checked, and every problem found (each names its file and offset)."""

    problems: list[str]
    logs: int
    blocks: int
    events: int
    journals: int  # sealed journals not merged yet
    frames: int  # in those journals
    forward_files: int = 0  # forward lineage indexes checked (repository.lineage)
    line_marks: int = 0  # line marks files checked (repository.lineage)

    @property
    def ok(self) -> bool:
        return not self.problems


def verify(layout: Layout, containers: list[str]) -> VerifyReport:
    """Check every event log, block, toc and sealed journal; change nothing."""
    problems: list[str] = []
    counts = {"logs": 0, "blocks": 0, "events": 0, "journals": 0, "frames": 0}
    names = sorted(listdir(layout.logs))
    stems = sorted(
        {n.rsplit(".", 1)[0] for n in names if n.endswith((LOG_SUFFIX, TOC_SUFFIX))},
        key=lambda s: int(s) if s.isdigit() else -1,
    )
    prev_next = None
    for stem in stems:
        prov = os.path.join(layout.logs, stem + LOG_SUFFIX)
        toc_path = os.path.join(layout.logs, stem + TOC_SUFFIX)
        if not os.path.exists(prov):
            problems.append(f"{toc_path}: table of contents without its event log")
            continue
        if not os.path.exists(toc_path):
            problems.append(f"{prov}: event log without its table of contents")
            continue
        counts["logs"] += 1
        try:
            toc = read_toc(toc_path)
        except TocError as e:
            problems.append(str(e))
            continue
        if not stem.isdigit() or int(stem) != toc.first_id:
            problems.append(f"{toc_path}: first id {toc.first_id} does not match the file name")
        if prev_next is not None and toc.first_id < prev_next:
            problems.append(
                f"{prov}: ids overlap the previous log (starts {toc.first_id} < {prev_next})"
            )
        prev_next = toc.next_id
        problems.extend(_verify_log(prov, toc, counts))
    for path in sealed_journals(containers):
        counts["journals"] += 1
        try:
            reader = JournalReader(path)
            counts["frames"] += sum(1 for _ in reader)
        except OSError as e:
            problems.append(f"{path}: cannot read: {e.strerror}")
            continue
        problems.extend(str(p) for p in reader.problems)
    return VerifyReport(problems, **counts)


def _verify_log(prov: str, toc, counts: dict) -> list[str]:
    problems = []
    try:
        size = os.path.getsize(prov)
        with open(prov, "rb") as f:
            header, first_block = read_log_header(f)
            if header.first_id != toc.first_id:
                problems.append(
                    f"{prov}: header says first id {header.first_id}, toc {toc.first_id}"
                )
            if size != toc.prov_size:
                problems.append(f"{prov}: {size} bytes on disk, toc says {toc.prov_size}")
            expect_offset, expect_id = first_block, toc.first_id
            for i, offset in enumerate(toc.block_offsets):
                if offset != expect_offset:
                    problems.append(
                        f"{prov}: toc block {i} at {offset}, previous block ends at {expect_offset}"
                    )
                head = os.pread(f.fileno(), BLOCK_HEADER.size, offset)
                if len(head) < BLOCK_HEADER.size:
                    problems.append(f"{prov}@{offset}: block {i} header truncated")
                    break
                length, _ = BLOCK_HEADER.unpack(head)
                framed = os.pread(f.fileno(), BLOCK_HEADER.size + length, offset)
                expect_offset = offset + BLOCK_HEADER.size + length
                counts["blocks"] += 1
                try:
                    entries = decode_block(framed, f"{prov}@{offset} (block {i})")
                except BlockError as e:
                    problems.append(str(e))
                    expect_id = (
                        toc.block_first_ids[i + 1]
                        if i + 1 < len(toc.block_first_ids)
                        else toc.next_id
                    )
                    continue
                if not entries or entries[0].first_id != toc.block_first_ids[i]:
                    problems.append(
                        f"{prov}@{offset}: block {i} does not start at id {toc.block_first_ids[i]}"
                    )
                for entry in entries:
                    if entry.first_id != expect_id:
                        problems.append(
                            f"{prov}@{offset}: entry at id {entry.first_id}, expected {expect_id}"
                        )
                    expect_id = entry.first_id + entry.count
                    counts["events"] += entry.count
            if expect_id != toc.next_id:
                problems.append(f"{prov}: blocks end at id {expect_id}, toc says {toc.next_id}")
            if expect_offset != size:
                problems.append(f"{prov}: blocks end at byte {expect_offset} of {size}")
    except OSError as e:
        problems.append(f"{prov}: cannot read: {e.strerror}")
    except Exception as e:  # a damaged header: report, keep checking other files
        problems.append(f"{prov}: {e}")
    return problems
