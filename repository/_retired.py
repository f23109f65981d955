"""Attempt winners of aged-off logs, kept in `state/retired-winners.json`.

At open, the winners of each (run, capture point, partition) are read back from the tocs
(`AttemptRegistry.load`); a log deleted by age-off takes its tocs' batches with it, and a late
attempt of one of its keys sealed after a reopen would then win a second time, beside the
lineage of the surviving logs that was built on the first winner's record positions. So
age-off writes the winners of the logs it is about to delete here first (durably), compactly:
run -> capture point -> attempt -> partition ranges.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Iterable

from journals import makedirs_durable, write_atomic

from ._layout import Layout
from ._toc import Toc

log = logging.getLogger("provrepo.repository")

Key = tuple[str, str, int]  # (run, capture point (component id), partition)


def retired_path(layout: Layout) -> str:
    return os.path.join(layout.state, "retired-winners.json")


def load_retired(layout: Layout) -> dict[Key, int]:
    """The winners recorded for aged-off logs: key -> attempt."""
    path = retired_path(layout)
    try:
        with open(path, encoding="utf-8") as f:
            runs = json.load(f)["runs"]
        out: dict[Key, int] = {}
        for run, cps in runs.items():
            for cp, attempts in cps.items():
                for attempt, ranges in attempts.items():
                    for lo, hi in ranges:
                        for p in range(lo, hi):
                            out[(run, cp, p)] = int(attempt)
        return out
    except FileNotFoundError:
        return {}
    except (ValueError, KeyError, TypeError, AttributeError) as e:
        # Only late attempts of aged-off keys depend on it: say so loudly, do not refuse to open.
        log.error("%s is damaged (%s): late attempts of aged-off lineage may be merged", path, e)
        return {}


def retire(layout: Layout, tocs: Iterable[Toc], sync: bool = True) -> None:
    """Add the winners of these logs' lineage batches to the file, durably (before the logs
    are deleted). A key already recorded keeps its attempt: the first merged wins."""
    known = load_retired(layout)
    added = False
    for toc in tocs:
        for b in toc.batches:
            key = (b.run_id, b.component_id, b.partition)
            if key not in known:
                known[key] = b.attempt
                added = True
    if not added:
        return
    grouped: dict[str, dict[str, dict[str, list[int]]]] = {}
    for (run, cp, part), attempt in known.items():
        grouped.setdefault(run, {}).setdefault(cp, {}).setdefault(str(attempt), []).append(part)
    runs = {
        run: {cp: {a: _ranges(parts) for a, parts in atts.items()} for cp, atts in cps.items()}
        for run, cps in grouped.items()
    }
    makedirs_durable(layout.state)
    write_atomic(retired_path(layout), json.dumps({"version": 1, "runs": runs}).encode(), sync)


def _ranges(parts: list[int]) -> list[list[int]]:
    """Sorted partitions as [lo, hi) ranges: a capture point's partitions are mostly 0..n-1."""
    out: list[list[int]] = []
    for p in sorted(parts):
        if out and out[-1][1] == p:
            out[-1][1] = p + 1
        else:
            out.append([p, p + 1])
    return out
