"""A brute-force reference for lineage: the same user functions evaluated in plain Python on
records that carry the set of input records they derive from (why-provenance).

Source partitions follow Spark's (read with vanilla PySpark's glom), so partition-level
semantics (mapPartitions over a source) are reproduced exactly; after a shuffle the reference
partitions by its own hash, so tests do not depend on partitions after a shuffle.
"""

from __future__ import annotations

import zlib
from collections import defaultdict
from collections.abc import Callable
from itertools import chain

Rec = tuple  # (value, frozenset of input ids)


class Ref:
    def __init__(self, parts: list[list[Rec]]) -> None:
        self.parts = parts

    @classmethod
    def source(cls, parts: list[list], ident: Callable) -> Ref:
        return cls([[(v, frozenset([ident(v)])) for v in p] for p in parts])

    def records(self) -> list[Rec]:
        return list(chain.from_iterable(self.parts))

    # narrow
    def map(self, f):
        return Ref([[(f(v), lin) for v, lin in p] for p in self.parts])

    def flatMap(self, f):
        return Ref([[(x, lin) for v, lin in p for x in f(v)] for p in self.parts])

    def filter(self, f):
        return Ref([[(v, lin) for v, lin in p if f(v)] for p in self.parts])

    def mapValues(self, f):
        return self.map(lambda kv: (kv[0], f(kv[1])))

    def flatMapValues(self, f):
        return self.flatMap(lambda kv: [(kv[0], x) for x in f(kv[1])])

    def keyBy(self, f):
        return self.map(lambda x: (f(x), x))

    def values(self):
        return self.map(lambda kv: kv[1])

    def keys(self):
        return self.map(lambda kv: kv[0])

    def mapPartitionsWithIndex(self, f, lineage="partition"):
        return self.mapPartitions(f, lineage, with_index=True)

    def mapPartitions(self, f, lineage="partition", with_index=False):
        out = []
        for i, p in enumerate(self.parts):
            f_i = (lambda it, f=f, i=i: f(i, it)) if with_index else f
            if lineage == "partition":
                lin = frozenset().union(*(lin for _, lin in p))
                out.append([(x, lin) for x in f_i(iter([v for v, _ in p]))])
            else:  # a streaming function: each output from the input last pulled
                cur = [frozenset()]

                def feed(p=p, cur=cur):
                    for v, lin in p:
                        cur[0] = lin
                        yield v

                out.append([(x, cur[0]) for x in f_i(feed())])
        return Ref(out)

    # shuffles
    def _shuffle(self, n, groups: dict) -> list[list[Rec]]:
        parts: list[list[Rec]] = [[] for _ in range(n)]
        for k, rec in groups.items():
            parts[zlib.crc32(repr(k).encode()) % n].append(rec)
        return parts

    def combineByKey(self, create, merge_value, merge_combiners, n):
        acc: dict = {}
        for (k, v), lin in self.records():
            if k in acc:
                c, l2 = acc[k]
                acc[k] = (merge_value(c, v), l2 | lin)
            else:
                acc[k] = (create(v), lin)
        return Ref(self._shuffle(n, {k: ((k, c), lin) for k, (c, lin) in acc.items()}))

    def reduceByKey(self, f, n):
        return self.combineByKey(lambda v: v, f, f, n)

    def groupByKey(self, n):
        return self.combineByKey(lambda v: [v], lambda c, v: [*c, v], None, n)

    def aggregateByKey(self, zero, seq, comb, n):
        return self.combineByKey(lambda v: seq(zero, v), seq, comb, n)

    def foldByKey(self, zero, f, n):
        return self.combineByKey(lambda v: f(zero, v), f, f, n)

    def distinct(self, n):
        acc: dict = defaultdict(frozenset)
        for v, lin in self.records():
            acc[v] = acc[v] | lin
        return Ref(self._shuffle(n, {v: (v, lin) for v, lin in acc.items()}))

    def join(self, other: Ref, how: str = "inner"):
        left, right = defaultdict(list), defaultdict(list)
        for (k, v), lin in self.records():
            left[k].append((v, lin))
        for (k, w), lin in other.records():
            right[k].append((w, lin))
        out = []
        for k in set(left) | set(right):
            vs, ws = left.get(k, []), right.get(k, [])
            if not ws and how in ("left", "full"):
                ws = [(None, frozenset())]
            if not vs and how in ("right", "full"):
                vs = [(None, frozenset())]
            out.extend(((k, (v, w)), lv | lw) for v, lv in vs for w, lw in ws)
        return Ref([out])

    def cogroup(self, other: Ref):
        left, right = defaultdict(list), defaultdict(list)
        lins: dict = defaultdict(frozenset)
        for (k, v), lin in self.records():
            left[k].append(v)
            lins[k] |= lin
        for (k, w), lin in other.records():
            right[k].append(w)
            lins[k] |= lin
        keys = set(left) | set(right)
        return Ref([[((k, (left.get(k, []), right.get(k, []))), lins[k]) for k in keys]])

    def union(self, other: Ref):
        return Ref(self.parts + other.parts)

    def sortByKey(self):
        return Ref([sorted(self.records(), key=lambda r: r[0][0])])
