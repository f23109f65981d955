"""Deferred narrow lineage, re-derived exactly at trace time (capture side: `agent._deferred`).

A deferred combiner capture point's descriptor entry says `"narrow": "deferred"` and carries
`group`, `input` (the source capture point its chain reads) and `chain` (the narrow chain,
pickled: a callable object with `keys(partition, values) -> [[key, ...] per value]`). Each of
its records stores a value `(key, g)` and parents: input records when g == 1, else groups of g
consecutive input records (stored as input position // g).

- Backward: the records of the groups are read (their raw data, as any trace does), the chain
  is re-run on them, and those emitting the record's key are its parents. Every input emitting
  the key lies in one of the record's groups (that is how the groups were made), so the answer
  is exact.
- Forward: the chain is re-run on the input records asked about; their children are the
  records of the same partition whose keys they emit (one combiner record per key and
  partition), found through a key map of the partition kept within the cache budget.

Running the chain unpickles code stored in the repository's run descriptor: trace only
repositories you trust, with the pipeline's modules importable.
"""

from __future__ import annotations

import base64
import pickle
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from journals import record_id_base, unique_ids, unpack_record_ids

from .._errors import RepositoryError
from ._cache import ByteLRU
from ._sets import EMPTY

if TYPE_CHECKING:
    from ._index import BatchLoc, CapturePointInfo, LineageIndex


PAGE = 16_384  # input records whose raw data and emitted keys are held at once


class DeferredError(RepositoryError):
    """Deferred lineage could not be re-derived (its chain cannot be loaded, or re-running it
    no longer reproduces the capture run)."""


class DeferredResolver:
    """Re-derives a run's deferred associations for a `LineageIndex` (which owns it)."""

    def __init__(self, index: LineageIndex, cache_bytes: int) -> None:
        self._ix = index
        self._chains: dict[tuple[str, int], Any] = {}
        self.cache: ByteLRU[dict[Any, int]] = ByteLRU(cache_bytes)

    def clear(self) -> None:
        self._chains.clear()
        self.cache.clear()

    def _chain(self, run: str, cp: CapturePointInfo) -> Callable[[int, list[Any]], list[list[Any]]]:
        key = (run, cp.number)
        chain = self._chains.get(key)
        if chain is None:
            spec = cp.deferred or {}
            try:
                chain = pickle.loads(base64.b64decode(spec["chain"]))
            except Exception as e:  # any failure to rebuild user code: one clear error
                raise DeferredError(
                    f"cannot load the narrow chain of {cp.component_id} (run {run}) to re-derive "
                    f"its deferred lineage: {type(e).__name__}: {e}"
                ) from e
            self._chains[key] = chain
        return chain.keys

    def _emitted(self, run: str, cp: CapturePointInfo, part: int, ids: np.ndarray) -> list[list]:
        """The keys each input record (ids, one partition) emits into the combiner."""
        values = self._ix.record_data(run, ids)
        try:
            return self._chain(run, cp)(part, values)
        except DeferredError:
            raise
        except Exception as e:
            raise DeferredError(
                f"re-running the narrow chain of {cp.component_id} (run {run}, partition "
                f"{part}) raised {type(e).__name__}: {e}; deferred lineage needs deterministic "
                "functions that succeed on the inputs they succeeded on when captured"
            ) from e

    # -- backward --------------------------------------------------------------------------------

    def rows(
        self, run: str, cp: CapturePointInfo, part: int, loc: BatchLoc, positions: np.ndarray
    ) -> list[np.ndarray]:
        """The exact parents (ascending) of the records at `positions` (ascending) of one
        batch of `cp` in partition `part`."""
        in_cp = int((cp.deferred or {})["input"])
        stored = self._ix.stored_rows(loc, positions)  # (value, stored parents) per record
        in_base = record_id_base(in_cp, part)
        n_in = self._ix.count_partition(run, in_cp, part)
        # The input positions to re-run: every group of every coarse record.
        spans = []
        wanted: set = set()
        for value, parents in stored:
            key, g = _key_group(value)
            if g > 1:
                wanted.add(key)
                first = (parents - in_base) * g
                spans.append((first[:, None] + np.arange(g)).ravel())
        lines: dict[Any, list[int]] = {k: [] for k in wanted}
        if spans:
            pos = unique_ids(np.concatenate(spans))
            pos = pos[pos < n_in]
            for a in range(0, len(pos), PAGE):  # a page of inputs' data at a time
                page = pos[a : a + PAGE]
                for p, keys in zip(page.tolist(), self._emitted(run, cp, part, in_base + page)):
                    for k in set(keys) & wanted if len(keys) > 1 else keys:
                        found = lines.get(k)
                        if found is not None:
                            found.append(p)
        out = []
        for value, parents in stored:
            key, g = _key_group(value)
            if g <= 1:
                out.append(np.asarray(parents, dtype=np.int64))
            else:  # positions were visited ascending, each once per key
                out.append(in_base + np.array(lines[key], dtype=np.int64))
        return out

    # -- forward ---------------------------------------------------------------------------------

    def child_edges(
        self, run: str, cp: CapturePointInfo, inputs: np.ndarray, pairs: bool = False
    ) -> tuple[np.ndarray | None, np.ndarray]:
        """The records at deferred capture point `cp` made from `inputs` (ids at its input
        capture point, ascending): (None, children distinct and ascending), or with `pairs`
        (parents, children), one per association."""
        spec = cp.deferred or {}
        in_cp = int(spec["input"])
        kids: list[int] = []
        pars: list[int] = []
        cps, parts, _ = unpack_record_ids(inputs)
        for part in sorted(set(parts[cps == in_cp].tolist())):
            mine = inputs[(parts == part) & (cps == in_cp)]
            keymap = self._keymap(run, cp, int(part))
            if not keymap:
                continue
            for a in range(0, len(mine), PAGE):
                page = mine[a : a + PAGE]
                for rid, ks in zip(page.tolist(), self._emitted(run, cp, int(part), page)):
                    for k in set(ks) if len(ks) > 1 else ks:  # one association per key
                        child = keymap.get(k)
                        if child is not None:
                            kids.append(child)
                            pars.append(rid)
        children = np.array(kids, dtype=np.int64)
        if pairs:
            return np.array(pars, dtype=np.int64), children
        return None, unique_ids(children) if len(children) else EMPTY

    def _keymap(self, run: str, cp: CapturePointInfo, part: int) -> dict[Any, int]:
        """key -> record id of the records at (cp, part)."""
        cache_key = (run, cp.number, part)
        hit = self.cache.get(cache_key)
        if hit is not None:
            return hit
        keymap: dict[Any, int] = {}
        for rid, value in self._ix.partition_values(run, cp.number, part):
            keymap[_key_group(value)[0]] = rid
        size = 64 + sum(sys.getsizeof(k) + 100 for k in keymap)
        return self.cache.put(cache_key, keymap, size)


def _key_group(value: Any) -> tuple[Any, int]:
    if not isinstance(value, tuple) or len(value) != 2:
        raise DeferredError(f"a deferred combiner record's value is {value!r}, not (key, group)")
    return value[0], int(value[1])
