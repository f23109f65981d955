"""Synthetic lineage runs for tests without Spark: random record graphs shaped like Spark's
(a source, a narrow combiner, a shuffle, a narrow output, a join across partitions), stored
as ordinary lineage batches, and brute-force answers computed from the same graph."""

from __future__ import annotations

import json
from collections import defaultdict
from itertools import pairwise

import numpy as np

from journals import EventType, LineageBatch, Location, record_id_base
from repository import RUN_COMPONENT_TYPE

RUN = "graph-run"
SOURCE, COMBINE, REDUCE, OUTPUT, JOIN = 1, 2, 3, 4, 5
CPS = {
    SOURCE: ("textFile#0", "textFile", "RECEIVE", [], "source"),
    COMBINE: ("reduceByKey#1.combine", "combiner", "JOIN", [SOURCE], "narrow"),
    REDUCE: ("reduceByKey#1", "reducer", "JOIN", [COMBINE], "shuffle"),
    OUTPUT: ("collect#2", "collect", "SEND", [REDUCE], "narrow"),
    JOIN: ("join#3", "join", "JOIN", [SOURCE, OUTPUT], "shuffle"),
}


class Graph:
    """Records per (cp, partition) and each record's parents, plus how to store them."""

    def __init__(self, seed: int, parts: int = 3, lines: int = 120, hot: int = 0) -> None:
        rng = np.random.default_rng(seed)
        self.parents: dict[int, list[int]] = {}
        self.records: dict[tuple[int, int], list[int]] = defaultdict(list)
        self.parts = parts
        for p in range(parts):
            base = record_id_base(SOURCE, p)
            self.records[(SOURCE, p)] = [base + i for i in range(lines)]
        # Combiner: per partition some keys; a key's parents: a random subset of its lines
        # (a few "hot" keys with most lines, so some rows are long).
        keys_of: dict[int, list[tuple[int, int]]] = {}
        for p in range(parts):
            lines_p = self.records[(SOURCE, p)]
            n_keys = int(rng.integers(5, 15))
            cb = record_id_base(COMBINE, p)
            keys_of[p] = []
            for k in range(n_keys):
                share = 0.9 if k < hot else float(rng.uniform(0.02, 0.3))
                chosen = [x for x in lines_p if rng.random() < share] or [lines_p[k]]
                rid = cb + k
                self.parents[rid] = chosen
                self.records[(COMBINE, p)].append(rid)
                keys_of[p].append((k, rid))
        # Reducer: key k of every partition goes to reduce partition k % 2.
        reduce_parts = 2
        by_key: dict[int, list[int]] = defaultdict(list)
        for p in range(parts):
            for k, rid in keys_of[p]:
                by_key[k].append(rid)
        for k in sorted(by_key):
            rp = k % reduce_parts
            rid = record_id_base(REDUCE, rp) + len(self.records[(REDUCE, rp)])
            self.parents[rid] = sorted(by_key[k])
            self.records[(REDUCE, rp)].append(rid)
        for rp in range(reduce_parts):  # output: one per reducer record, same partition
            for rid in self.records[(REDUCE, rp)]:
                out = record_id_base(OUTPUT, rp) + len(self.records[(OUTPUT, rp)])
                self.parents[out] = [rid]
                self.records[(OUTPUT, rp)].append(out)
        # Join: records whose parents are a line (any partition) and an output record.
        outs = [r for rp in range(reduce_parts) for r in self.records[(OUTPUT, rp)]]
        all_lines = [r for p in range(parts) for r in self.records[(SOURCE, p)]]
        for jp in range(2):
            for _ in range(int(rng.integers(10, 30))):
                line = int(rng.choice(all_lines))
                rid = record_id_base(JOIN, jp) + len(self.records[(JOIN, jp)])
                self.parents[rid] = [line, int(rng.choice(outs))]
                self.records[(JOIN, jp)].append(rid)

    def all_ids(self) -> list[int]:
        return sorted(r for recs in self.records.values() for r in recs)

    def children_of(self, ids, alive: set[int] | None = None) -> set[int]:
        want = set(ids)
        return {
            c
            for c, ps in self.parents.items()
            if (alive is None or c in alive) and want.intersection(ps)
        }

    def edges_from(self, ids, alive: set[int] | None = None) -> list[tuple[int, int]]:
        """(parent, child) for every stored association from one of `ids`, sorted."""
        want = set(ids)
        return sorted(
            (p, c)
            for c, ps in self.parents.items()
            if alive is None or c in alive
            for p in ps
            if p in want
        )

    def forward_trace(self, rid: int, alive: set[int] | None = None) -> set[int]:
        """As `LineageIndex.trace(forward=True)`, record by record: every output (SEND)
        record reached, and every record reached at a capture point feeding none other than a
        source; a record elsewhere that reaches nothing (a line no key took) is not."""
        from journals import unpack_record_id

        feeds = {p for _c, _t, _e, parents, _d in CPS.values() for p in parents}
        frontier, ends = {rid}, set()
        while frontier:
            nxt = set()
            for r in frontier:
                cp = unpack_record_id(r)[0]
                if CPS[cp][2] == "SEND" or (cp not in feeds and CPS[cp][2] != "RECEIVE"):
                    ends.add(r)
                nxt |= self.children_of({r}, alive)
            frontier = nxt
        return ends

    def batches(self, split: bool = False, time_ns: int = 2_000) -> list[LineageBatch]:
        """One batch per (cp, partition), or two (halves) when `split`; the run descriptor."""
        out = []
        for (cp, part), recs in sorted(self.records.items()):
            cuts = [0, len(recs) // 2, len(recs)] if split and len(recs) > 1 else [0, len(recs)]
            for a, b in pairwise(cuts):
                out.append(self.batch(cp, part, recs[a:b], time_ns))
        out.append(self.descriptor(time_ns))
        return out

    def batch(self, cp: int, part: int, recs: list[int], time_ns: int = 2_000) -> LineageBatch:
        comp, ctype, etype, _parents, _dep = CPS[cp]
        kw: dict = {}
        if cp == SOURCE:
            kw["offsets"] = np.arange(len(recs) + 1) * 10
            kw["location"] = Location("file:///in.txt")
        else:
            kw["parent_counts"] = np.array([len(self.parents[r]) for r in recs])
            kw["parent_ids"] = np.array([p for r in recs for p in self.parents[r]], np.int64)
        return LineageBatch.build(
            event_time_ns=time_ns,
            event_type=EventType(etype),
            run_id=RUN,
            component_id=comp,
            component_type=ctype,
            partition=part,
            attempt=0,
            record_ids=range(recs[0], recs[-1] + 1),
            **kw,
        )

    def descriptor(self, time_ns: int = 2_000) -> LineageBatch:
        desc = {
            "run_id": RUN,
            "capture_points": [
                {
                    "cp": n,
                    "component_id": c[0],
                    "component_type": c[1],
                    "event_type": c[2],
                    "parents": c[3],
                    "dependency": c[4],
                    "partitions": self.parts,
                }
                for n, c in CPS.items()
            ],
        }
        rid = record_id_base(0, 1)
        return LineageBatch.build(
            event_time_ns=time_ns,
            event_type=EventType.CREATE,
            run_id=RUN,
            component_id="run",
            component_type=RUN_COMPONENT_TYPE,
            partition=1,
            attempt=0,
            record_ids=range(rid, rid + 1),
            details=json.dumps(desc),
        )
