"""Anomaly mining over stored lineage: Newt's `mine` (§4.1) and its detector (§7.3.1).

Newt's hypothesis: changes in *output multiplicity* (children per input) point at faulty
actors. A map that mis-parses its input emits nothing; one that parses a bogus record emits
many outputs. We compute every actor instance's multiplicity and selectivity from the stored
association tables, find outliers in two phases, and rank the instances.

Definitions (refined from Newt's for Titian-style capture points; see `mine`):

- **actor type** (C, P): a non-source capture point C together with one of its parent capture
  points P. Newt's actor type is C; we split it by parent because a join's two sides are
  different tasks with different, unrelated multiplicities (a dimension table's records have
  many children, a fact table's one): pooling them would make every instance of one side look
  like an outlier of the other. For a single-parent C (maps, combiners, reducers, sinks) the
  type is just C.
- **actor instance** (C, P, p): the task that ran the narrow chain from P's records of
  partition p into C. The partition comes from *unpacking the parent record ids*, so it is
  C's own partition for a narrow dependency and the map-side task for a shuffle (a reducer's
  or join's associations are grouped by where their parents were emitted), and the right
  task for a union.
- **inputs** of an instance: every record stored at (P, p), counted from the directory, also
  those with no child in C: a filter or a parse failure producing nothing is evidence.
  **out-degree** of an input: its associations into C. **multiplicity** = associations /
  inputs; **selectivity** = inputs with at least one child / inputs.

Statistics. An actor type has few instances (one per partition: often 2 to 16) and a faulty
task may come with a second one (Newt injected two). Grubbs' test and its multi-outlier
variants (generalized ESD) rest on the mean and sd of the instances: with n <= 4 Grubbs'
statistic cannot even reach its critical value for one outlier among equal values, and a
second outlier inflates the sd and masks the first. So we use medians and MADs (robust while
fewer than half the instances are faulty) and put every statistic in z units:

- **Phase 1** (inputs): each input's out-degree gets Iglewicz and Hoaglin's modified z-score,
  (x - median) / (1.4826 MAD), against all inputs of its actor type (hundreds of values even
  with two instances; a faulty instance's few inputs cannot move a median). Beyond 3.5 an
  input is *outlying*: a few inputs with many spurious children, or none where all others
  have many. Out-degrees are whole numbers, so the scale is at least one child (when MAD = 0,
  i.e. most out-degrees agree; not their mean-absolute-deviation fallback, which a few
  spurious inputs inflate). One reference for all instances, so outlier counts compare.
- **Phase 2** (instance vs. its siblings, the other instances of its type), against the
  type's median (over all its instances: from three on, neither a faulty sibling nor the
  instance judged can move it, where the median of the two others would be their mean):
  - multiplicity: (m - median m) / (sd / sqrt(inputs)), the sampling error of the mean
    out-degree if the instance's inputs behaved like its siblings' non-outlying inputs (the
    plain sd: a join's varied fan-out is real spread; without their outlying inputs: a second
    faulty sibling does not mask this one; at least 0.5 children, a fair coin's sd).
  - selectivity and the count of outlying inputs: Fisher's exact test of the instance's count
    against the siblings' inputs at the median rate (exact hypergeometric tails, turned into
    z: three outlying inputs among a hundred are rare, not 'z = 5' as a normal approximation
    says; the median rate, so a dead sibling does not drag the baseline as a pooled one would).
  - each z is also bounded by the instances' spread (1.4826 MAD over all of them, from three
    on) when that is wider than the sampling error: inputs are not independent (a join's
    records of one key share their out-degree, so partitions differ by whole keys), and a
    difference must beat both chance and the siblings' variation.
  - an actor type with one instance has no siblings: multiplicity and selectivity z are 0,
    and its outlying inputs are tested against about one by chance (Poisson, mean 1).
- **score** = the largest of |z multiplicity|, |z selectivity| and z outlying (more outlying
  inputs than the siblings; fewer is no evidence): >= 3.5 is a suspect. Without a fault it
  stays below 3.5 in nearly every run for light-tailed out-degrees (see tests/test_mine.py);
  genuinely heavy-tailed ones (a hot join key) are flagged, as they are outliers; with two
  instances only their difference can be seen, not which one is off.

Winnowing (§4.1): with bad outputs, only the instances on their backward trace (an edge of
the trace enters C from P's partition p) are returned, still scored against all their
siblings' associations, as Newt's mine tables keep all original associations. With good
outputs too, the ranking compares the two lineages: the out-degrees of the instance's inputs
on the bad trace against those of the same actor type's inputs on the good trace (out-degrees
are whole-table: an input's behaviour is all of its children, not only the one a traced
output came from, or every traced input would have multiplicity one). contrast = (mean bad
out-degree - median good out-degree) / (spread / sqrt(bad inputs)), the spread being the
larger of the good inputs' and the whole type's robust scales (a handful of good inputs say
little about spread); inputs on both traces are no baseline; a type the good trace does not
cross is compared with the instance's siblings. The score is then |contrast|.

Joins are symmetric: an association has a parent on each side, so spurious children of one
side's inputs also show, spread out, on the matched records of the other side. The faulty
side stands out because all its affected inputs are outlying at once; a partner side concen-
trated on few records (one key) can rank as high. Mining cannot tell them apart from
lineage alone, which is why it returns suspects, not culprits.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field

import numpy as np

from journals import MAX_PARTITION, MAX_POSITION, record_id_base, unpack_record_ids

from .._errors import BadInput, NotFound
from ._index import RUN_COMPONENT_TYPE, LineageIndex, RunInfo

THRESHOLD = 3.5  # Iglewicz and Hoaglin's cut-off for modified z-scores
_MAD_TO_SD = 1.4826  # 1 / 0.6745: MAD -> standard deviation for normal data
_SD_FLOOR = 0.5  # children: the sd of a fair coin
_PREFIX_OUTPUTS = ("take",)  # actions that read a prefix: partitions not scanned are no evidence
_PARTS = MAX_PARTITION + 1


@dataclass(frozen=True)
class ActorInstance:
    """One actor instance's behaviour, how it departs from its siblings, and the evidence."""

    capture_point: int  # C
    component_id: str
    component_type: str
    parent_capture_point: int  # P: the records it consumed
    parent_component_id: str
    partition: int  # p: the task that ran the narrow chain from (P, p) into C
    inputs: int
    associations: int
    productive_inputs: int  # inputs with at least one child in C
    multiplicity: float
    selectivity: float
    median_out_degree: float
    max_out_degree: int
    siblings: int  # other instances of the actor type
    typical_multiplicity: float | None  # the median over the type's instances (None: alone)
    typical_selectivity: float | None
    outlying_inputs: int  # phase 1: inputs whose out-degree is an outlier among the siblings'
    z_multiplicity: float  # phase 2, signed (robust z units)
    z_selectivity: float
    z_outlying: float
    score: float  # what the ranking uses; >= threshold: a suspect
    suspect: bool
    outlier_examples: tuple[int, ...]  # record ids of the most outlying inputs
    bad_inputs: int = 0  # inputs on the bad outputs' trace
    bad_multiplicity: float | None = None  # their mean out-degree
    good_inputs: int = 0  # inputs of the actor type on the good outputs' trace
    good_out_degree: float | None = None  # their median out-degree (the baseline)
    contrast: float | None = None  # bad vs. good (robust z units); the score with good outputs
    trace_examples: tuple[int, ...] = ()  # record ids of inputs on the bad trace

    @property
    def key(self) -> tuple[int, int, int]:
        """(C, P, p)."""
        return (self.capture_point, self.parent_capture_point, self.partition)

    def to_dict(self) -> dict:
        d = asdict(self)
        d["outlier_examples"] = list(self.outlier_examples)
        d["trace_examples"] = list(self.trace_examples)
        return d


@dataclass(frozen=True)
class MineReport:
    """`instances` are the instances considered (on the bad trace when bad outputs were
    given), best suspect first; `suspects` are those scoring at least `threshold`."""

    run_id: str
    mode: str  # "all" | "bad" | "bad+good"
    threshold: float
    instances: tuple[ActorInstance, ...]
    actor_types: int  # analysed
    run_instances: int  # actor instances in the whole run
    bad_outputs: tuple[int, ...] = ()
    good_outputs: tuple[int, ...] = ()
    notes: tuple[str, ...] = field(default=())

    @property
    def suspects(self) -> list[ActorInstance]:
        return [i for i in self.instances if i.suspect]

    def rank_of(self, capture_point: int, partition: int, parent: int | None = None) -> int | None:
        """1-based rank of an instance among `instances` (None: not considered)."""
        for r, i in enumerate(self.instances, 1):
            if (i.capture_point, i.partition) == (capture_point, partition) and (
                parent is None or i.parent_capture_point == parent
            ):
                return r
        return None

    def to_dict(self) -> dict:
        return {
            "run_id": self.run_id,
            "mode": self.mode,
            "threshold": self.threshold,
            "actor_types": self.actor_types,
            "run_instances": self.run_instances,
            "considered": len(self.instances),
            "suspects": len(self.suspects),
            "bad_outputs": list(self.bad_outputs),
            "good_outputs": list(self.good_outputs),
            "notes": list(self.notes),
        }


def mine(
    index: LineageIndex,
    run: str,
    bad_outputs: Iterable[int] | None = None,
    good_outputs: Iterable[int] | None = None,
    *,
    threshold: float = THRESHOLD,
    examples: int = 5,
) -> MineReport:
    """Rank the actor instances of `run` by how anomalous their output multiplicity and
    selectivity are (see the module docstring for the definitions and statistics).

    - no outputs: every actor instance of the run, ranked.
    - `bad_outputs` (record ids of the run): only the instances on their backward trace.
    - `good_outputs` too: those instances ranked by how their inputs on the bad trace depart
      from the same actor types' inputs on the good trace.

    Raises `NotFound` for an unknown run or a record id the run does not store, `BadInput`
    for good outputs without bad ones, a record given as both, or a bad threshold."""
    if not (isinstance(threshold, int | float) and math.isfinite(threshold) and threshold > 0):
        raise BadInput(f"threshold must be a positive number, got {threshold!r}")
    info = index.run_info(run)  # NotFound naming the runs there are
    bad = _check_ids(index, run, bad_outputs, "bad output")
    good = _check_ids(index, run, good_outputs, "good output")
    if good is not None and bad is None:
        raise BadInput("good outputs are a baseline for bad ones: give bad outputs too")
    if bad is not None and good is not None:
        both = np.intersect1d(bad, good)
        if len(both):
            raise BadInput(f"record {_fmt(int(both[0]))} is given as both a bad and a good output")

    types = _actor_types(index, run, info)
    run_instances = sum(len(parts) for parts in types.values())
    bad_edges = _walk(index, run, bad) if bad is not None else None
    good_edges = _walk(index, run, good) if good is not None else None
    if bad_edges is not None:  # only the types the bad trace went through
        on_trace = {(c, p) for c, p, _ in bad_edges}
        types = {t: parts for t, parts in types.items() if t in on_trace}

    out: list[ActorInstance] = []
    by_child: dict[int, list[int]] = {}
    for c, p in types:
        by_child.setdefault(c, []).append(p)
    for c in sorted(by_child):
        counts = _in_degree_counts(index, run, c)
        for p in sorted(by_child[c]):
            insts = [_Inst.build(index, run, c, p, part, counts) for part in types[(c, p)]]
            insts = [i for i in insts if i.n]
            out.extend(
                _score_type(
                    info, insts, threshold, examples, bad_edges, good_edges, bad is not None
                )
            )
    if bad_edges is not None:
        out = [i for i in out if i.key in bad_edges]
    if good_edges is not None:
        out.sort(key=lambda i: (-i.score, -(abs(i.z_multiplicity)), i.key))
    else:
        # Ties (two instances judged against each other differ by the same z): the one with
        # outlying inputs first.
        out.sort(key=lambda i: (-round(i.score, 6), -i.z_outlying, i.key))
    mode = "all" if bad is None else ("bad" if good is None else "bad+good")
    notes = []
    if any(len(parts) == 1 for parts in types.values()):
        notes.append(
            "actor types with one instance have no siblings: only phase 1 (their own inputs)"
        )
    return MineReport(
        run_id=run,
        mode=mode,
        threshold=float(threshold),
        instances=tuple(out),
        actor_types=len(types),
        run_instances=run_instances,
        bad_outputs=tuple(bad.tolist()) if bad is not None else (),
        good_outputs=tuple(good.tolist()) if good is not None else (),
        notes=tuple(notes),
    )


# -- structure ---------------------------------------------------------------------------------


def _actor_types(index: LineageIndex, run: str, info: RunInfo) -> dict[tuple[int, int], list]:
    """(C, P) -> the partitions of P that are C's instances."""
    out: dict[tuple[int, int], list[int]] = {}
    for c in info.capture_points.values():
        if c.dependency == "source" or c.component_type == RUN_COMPONENT_TYPE or c.number == 0:
            continue
        parents = set(c.parents)
        if info.descriptor is None or not parents:  # no descriptor: what the batches say
            parents |= _observed_parents(index, run, c.number)
        for p in sorted(parents):
            parts = index.partitions(run, p)
            if c.component_type in _PREFIX_OUTPUTS:  # take: only the partitions it read
                counts = _in_degree_counts(index, run, c.number)
                seen = set(_partitions_of(counts[0], p))
                parts = [x for x in parts if x in seen]
            if parts:
                out[(c.number, p)] = parts
    return out


def _observed_parents(index: LineageIndex, run: str, cp: int) -> set[int]:
    ids, _ = _in_degree_counts(index, run, cp)
    return set(np.unique(unpack_record_ids(ids)[0]).tolist()) - {cp}


def _partitions_of(ids: np.ndarray, cp: int) -> list[int]:
    cps, parts, _ = unpack_record_ids(ids)
    return np.unique(parts[cps == cp]).tolist()


def _in_degree_counts(index: LineageIndex, run: str, cp: int) -> tuple[np.ndarray, np.ndarray]:
    """Every record that is a parent of a record at `cp`, ascending, and how many associations
    it has into `cp` (a record listed twice by one child counts twice)."""
    flats = []
    for part in index.partitions(run, cp):
        for loc in index.locs(run, cp, part):
            flats.append(index.batch_parents(loc)[1])
    if not flats:
        return np.array([], dtype=np.int64), np.array([], dtype=np.int64)
    return np.unique(np.concatenate(flats), return_counts=True)


class _Inst:
    """Out-degrees of the inputs of one actor instance (C, P, p)."""

    __slots__ = ("base", "c", "deg", "n", "p", "part", "stored")
    base: int  # record id of position 0 at (P, p)
    c: int
    p: int
    part: int
    stored: np.ndarray  # positions of the inputs stored at (P, p), ascending
    n: int
    deg: np.ndarray  # out-degree into C of each stored input

    @classmethod
    def build(
        cls,
        index: LineageIndex,
        run: str,
        c: int,
        p: int,
        part: int,
        counts: tuple[np.ndarray, np.ndarray],
    ) -> _Inst:
        self = cls()
        self.c, self.p, self.part = c, p, part
        self.base = record_id_base(p, part)
        locs = index.locs(run, p, part)
        self.stored = (
            np.concatenate([x.pos_start + np.arange(x.count, dtype=np.int64) for x in locs])
            if locs
            else np.array([], dtype=np.int64)
        )
        self.stored.sort()
        self.n = len(self.stored)
        ids, cnt = counts
        lo = np.searchsorted(ids, self.base)
        hi = np.searchsorted(ids, self.base + MAX_POSITION + 1)
        self.deg = np.zeros(self.n, dtype=np.int64)
        if hi > lo and self.n:
            # Parents the directory does not hold (aged off) are no inputs of this instance.
            pos = ids[lo:hi] - self.base
            at = np.minimum(np.searchsorted(self.stored, pos), self.n - 1)
            ok = self.stored[at] == pos
            self.deg[at[ok]] = cnt[lo:hi][ok]
        return self

    def degrees_of(self, record_ids: np.ndarray) -> np.ndarray:
        """Out-degree of each given input (0 for a record this instance does not store)."""
        out = np.zeros(len(record_ids), dtype=np.int64)
        if not self.n:
            return out
        pos = np.asarray(record_ids, dtype=np.int64) - self.base
        at = np.minimum(np.searchsorted(self.stored, pos), self.n - 1)
        ok = self.stored[at] == pos
        out[ok] = self.deg[at[ok]]
        return out


# -- statistics --------------------------------------------------------------------------------


def _wmedian(values: np.ndarray, counts: np.ndarray) -> float:
    """Median of a sample given as ascending distinct values and their counts."""
    cum = np.cumsum(counts)
    n = int(cum[-1])
    lo = values[np.searchsorted(cum, (n - 1) // 2, side="right")]
    hi = values[np.searchsorted(cum, n // 2, side="right")]
    return (float(lo) + float(hi)) / 2


def _robust(values: np.ndarray, counts: np.ndarray | None = None, floor: float = 0.0):
    """(median, robust scale) of a sample (ascending distinct values with counts, or a plain
    array): 1.4826 MAD, at least `floor`. No mean-absolute-deviation fallback when MAD is 0:
    it is not robust (a few spurious inputs, or one dead sibling, inflate it and mask the
    others); MAD = 0 means most values agree, and the floor (or the sampling error) decides."""
    if counts is None:
        values = np.sort(np.asarray(values, dtype=np.float64))
        counts = np.ones(len(values), dtype=np.int64)
    if not len(values) or counts.sum() == 0:
        return 0.0, floor
    med = _wmedian(values, counts)
    dev = np.abs(values.astype(np.float64) - med)
    order = np.argsort(dev, kind="stable")
    mad = _wmedian(dev[order], counts[order])
    return med, max(_MAD_TO_SD * mad, floor)


def _z(x: float, center: float, scale: float) -> float:
    if scale <= 0:
        return 0.0
    return (x - center) / scale


def _z_min(z_sampling: float, x: float, center: float, spread: float) -> float:
    """The sampling z-score, or the z-score against the siblings' spread if that is smaller:
    a difference counts only if it beats both chance and the siblings' own variation."""
    if spread > 0 and abs(x - center) / spread < abs(z_sampling):
        return (x - center) / spread
    return z_sampling


def _z_of_log_tail(logp: float) -> float:
    """The z whose upper normal tail has probability exp(logp) (0 for p >= 0.5)."""
    if logp >= math.log(0.5):
        return 0.0

    def log_q(z: float) -> float:
        if z < 30:
            return math.log(0.5 * math.erfc(z / math.sqrt(2)))
        return -z * z / 2 - math.log(z) - 0.5 * math.log(2 * math.pi)  # asymptotic

    lo, hi = 0.0, math.sqrt(-2 * logp) + 2
    for _ in range(80):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if log_q(mid) > logp else (lo, mid)
    return (lo + hi) / 2


def _log_sum_terms(first_log: float, ratio) -> float:
    """log of sum_{t>=0} term_t where term_0 = exp(first_log), term_{t+1} = term_t ratio(t);
    stops when terms no longer matter (the caller starts in a decreasing tail)."""
    total, term, t = 1.0, 1.0, 0
    while True:
        r = ratio(t)
        if r <= 0:
            break
        term *= r
        total += term
        t += 1
        if term < 1e-17 * total:
            break
    return first_log + math.log(total)


def _fisher_z(x_i: float, n_i: float, x_o: float, n_o: float) -> float:
    """Signed z-score of Fisher's exact test: does the instance have more (+) or fewer (-)
    of something (productive or outlying inputs) than its siblings' rate predicts? Exact
    hypergeometric tails, because the counts are small (a few outlying inputs) where a
    normal approximation would call three events among a hundred inputs 'z = 5'."""
    x_i, n_i, x_o, n_o = int(x_i), int(n_i), int(x_o), int(n_o)
    big_n, big_k = n_i + n_o, x_i + x_o
    if n_o == 0 or big_k in (0, big_n):
        return 0.0
    expected = n_i * big_k / big_n
    lg = math.lgamma

    def log_pmf(k: int) -> float:
        return (
            lg(big_k + 1) - lg(k + 1) - lg(big_k - k + 1)
            + lg(big_n - big_k + 1) - lg(n_i - k + 1) - lg(big_n - big_k - n_i + k + 1)
            - lg(big_n + 1) + lg(n_i + 1) + lg(big_n - n_i + 1)
        )  # fmt: skip

    k0 = x_i
    if x_i > expected:
        hi = min(n_i, big_k)

        def up(t: int) -> float:
            k = k0 + t
            if k >= hi:
                return 0.0
            return (big_k - k) * (n_i - k) / ((k + 1) * (big_n - big_k - n_i + k + 1))

        return _z_of_log_tail(_log_sum_terms(log_pmf(k0), up))
    lo = max(0, n_i - (big_n - big_k))

    def down(t: int) -> float:
        k = k0 - t
        if k <= lo:
            return 0.0
        return k * (big_n - big_k - n_i + k) / ((big_k - k + 1) * (n_i - k + 1))

    return -_z_of_log_tail(_log_sum_terms(log_pmf(k0), down))


def _poisson_z(x: int, lam: float) -> float:
    """z-score of P(X >= x) for X ~ Poisson(lam): a count with no siblings to compare with."""
    if x <= lam:
        return 0.0
    first = x * math.log(lam) - lam - math.lgamma(x + 1)
    return _z_of_log_tail(_log_sum_terms(first, lambda t: lam / (x + t + 1)))


def _score_type(info, insts, threshold, examples, bad_edges, good_edges, restricted):
    """Phase 1 and 2 over the instances of one actor type; ActorInstances (unsorted)."""
    if not insts:
        return []
    k = len(insts)
    # Out-degree histograms: all instances, and each one's own, so a sibling reference
    # (all minus one) costs O(distinct out-degrees), not a re-scan of the siblings' inputs.
    hists = [np.unique(i.deg, return_counts=True) for i in insts]
    values = np.unique(np.concatenate([h[0] for h in hists]))
    total = np.zeros(len(values), dtype=np.int64)
    for v, cnt in hists:
        total[np.searchsorted(values, v)] += cnt

    def sibling_hist(j: int) -> tuple[np.ndarray, np.ndarray]:
        if k == 1:
            return hists[0]
        rest = total.copy()
        rest[np.searchsorted(values, hists[j][0])] -= hists[j][1]
        keep = rest > 0
        return values[keep], rest[keep]

    n = np.array([i.n for i in insts], dtype=np.float64)
    assoc = np.array([int(i.deg.sum()) for i in insts], dtype=np.float64)
    prod = np.array([int(np.count_nonzero(i.deg)) for i in insts], dtype=np.float64)
    mult, sel = assoc / n, prod / n

    # Phase 1: each input against all inputs of the type. One reference for all instances,
    # so that their counts of outlying inputs compare (a per-instance reference would move
    # the cut-off of a discrete out-degree by whole children); the median and MAD ignore a
    # faulty instance's few outlying inputs.
    med1, scale1 = _robust(values, total, floor=1.0)
    zin = [(i.deg - med1) / scale1 for i in insts]
    outl = np.array([np.count_nonzero(np.abs(z) > threshold) for z in zin], dtype=np.float64)
    # The sampling error of an instance's multiplicity: the sd of its siblings' inputs that
    # are not outlying (the plain sd, so honest spread such as a join's varied fan-out counts,
    # without the outlying inputs, so a second faulty sibling cannot mask this one), at least
    # 0.5 children (a fair coin's: siblings that all agree do not make one child infinitely
    # significant).
    sums = np.zeros((k, 3))
    for j, (inst, z) in enumerate(zip(insts, zin)):
        d = inst.deg[np.abs(z) <= threshold].astype(np.float64)
        sums[j] = (len(d), d.sum(), d @ d)
    refs = []
    for j in range(k):
        cnt, s1, s2 = sums.sum(axis=0) - (sums[j] if k > 1 else 0)
        sd = math.sqrt(max(s2 - s1 * s1 / cnt, 0.0) / (cnt - 1)) if cnt > 1 else 0.0
        refs.append(max(sd, _SD_FLOOR))

    cp_info = info.capture_points
    c, p = insts[0].c, insts[0].p
    cinfo, pinfo = cp_info.get(c), cp_info.get(p)
    # Good-trace baseline of this actor type (excluding inputs also on the bad trace).
    good_ref = None
    if good_edges is not None:
        bad_ids = [bad_edges[(c, p, i.part)] for i in insts if (c, p, i.part) in bad_edges]
        bad_all = np.concatenate(bad_ids) if bad_ids else np.array([], dtype=np.int64)
        gdegs = [
            i.degrees_of(np.setdiff1d(good_edges[(c, p, i.part)], bad_all))
            for i in insts
            if (c, p, i.part) in good_edges
        ]
        gdeg = np.concatenate(gdegs) if gdegs else np.array([], dtype=np.int64)
        if len(gdeg):
            gv, gc = np.unique(gdeg, return_counts=True)
            gmed, gscale = _robust(gv, gc, floor=1.0)
            # The good trace gives the centre (how inputs that made good outputs behave); a
            # few good inputs say little about spread, so the type's own spread bounds it.
            good_ref = (len(gdeg), gmed, max(gscale, scale1))

    # What is typical of the type: the median over all its instances (with three or more,
    # one faulty instance cannot move it, nor can the instance judged; a median of the two
    # other siblings, one of them faulty, would be their mean). How much instances differ
    # beyond sampling error: 1.4826 MAD over all instances, from three on (the MAD of two
    # values is their distance), as inputs are not independent (a join's records of one key
    # share their out-degree, so a partition's multiplicity moves by whole keys).
    orate = outl / n
    centre = [float(np.median(x)) for x in (mult, sel, orate)]
    spread = [_robust(x)[1] if k >= 3 else 0.0 for x in (mult, sel, orate)]
    out = []
    for j, inst in enumerate(insts):
        key = (c, p, inst.part)
        if restricted and key not in bad_edges:
            continue  # scored only as a sibling
        others = np.arange(k) != j
        sd = refs[j]
        nj = n[j]
        m_med: float | None
        s_med: float | None
        if k > 1:
            n_o = n[others].sum()
            m_med, s_med, o_med = centre
            z_m = _z_min(_z(mult[j], m_med, sd / math.sqrt(nj)), mult[j], m_med, spread[0])
            # Siblings' counts at the median rate: one dead or faulty sibling must not drag
            # the baseline (their pooled rate would).
            z_s = _fisher_z(prod[j], nj, round(s_med * n_o), n_o)
            z_s = _z_min(z_s, sel[j], s_med, spread[1])
            z_o = _fisher_z(outl[j], nj, round(o_med * n_o), n_o)
            z_o = _z_min(z_o, orate[j], o_med, spread[2])
        else:
            m_med = s_med = None  # no siblings: no typical multiplicity or selectivity
            z_m = z_s = 0.0
            z_o = _poisson_z(int(outl[j]), 1.0)  # no siblings: about one outlier by chance
        score = max(abs(z_m), abs(z_s), max(z_o, 0.0))

        z = zin[j]
        flagged = np.flatnonzero(np.abs(z) > threshold)
        top = flagged[np.argsort(-np.abs(z[flagged]), kind="stable")][:examples]
        extra: dict = {}
        if bad_edges is not None and key in bad_edges:
            tids = bad_edges[key]
            tdeg = inst.degrees_of(tids)
            extra["bad_inputs"] = len(tids)
            extra["bad_multiplicity"] = float(tdeg.mean()) if len(tdeg) else 0.0
            order = np.argsort(-tdeg, kind="stable")[:examples]
            extra["trace_examples"] = tuple(int(x) for x in tids[order])
            if good_edges is not None:
                if good_ref is not None:
                    g_n, g_med, g_scale = good_ref
                    extra["good_inputs"] = g_n
                    extra["good_out_degree"] = g_med
                else:  # no good lineage through this type: the siblings are the baseline
                    g_med, g_scale = _robust(*sibling_hist(j), floor=1.0)
                    extra["good_out_degree"] = g_med
                contrast = _z(float(tdeg.mean()), g_med, g_scale / math.sqrt(len(tdeg)))
                extra["contrast"] = contrast
                score = abs(contrast)
        out.append(
            ActorInstance(
                capture_point=c,
                component_id=cinfo.component_id if cinfo else f"cp{c}",
                component_type=cinfo.component_type if cinfo else "?",
                parent_capture_point=p,
                parent_component_id=pinfo.component_id if pinfo else f"cp{p}",
                partition=inst.part,
                inputs=inst.n,
                associations=int(assoc[j]),
                productive_inputs=int(prod[j]),
                multiplicity=float(mult[j]),
                selectivity=float(sel[j]),
                median_out_degree=float(np.median(inst.deg)),
                max_out_degree=int(inst.deg.max()),
                siblings=k - 1,
                typical_multiplicity=m_med,
                typical_selectivity=s_med,
                outlying_inputs=int(outl[j]),
                z_multiplicity=float(z_m),
                z_selectivity=float(z_s),
                z_outlying=float(z_o),
                score=float(score),
                suspect=bool(score >= threshold),
                outlier_examples=tuple(int(inst.base + inst.stored[x]) for x in top),
                **extra,
            )
        )
    return out


# -- traces ------------------------------------------------------------------------------------


def _walk(index: LineageIndex, run: str, ids: np.ndarray) -> dict[tuple[int, int, int], np.ndarray]:
    """Every edge of the backward trace of `ids`, grouped by the instance it crosses:
    (C, P, p) -> the records of (P, p) that the trace reached from C."""
    edges: dict[tuple[int, int, int], list[np.ndarray]] = {}
    frontier = np.unique(ids)
    seen = frontier
    hops = 0
    while len(frontier):
        cps = unpack_record_ids(frontier)[0]
        nxt = []
        for c in np.unique(cps).tolist():
            par = index.parents(run, frontier[cps == c])
            if not len(par):
                continue
            pc, pp, _ = unpack_record_ids(par)
            key = pc * _PARTS + pp
            for kk in np.unique(key).tolist():
                edges.setdefault((c, kk // _PARTS, kk % _PARTS), []).append(par[key == kk])
            nxt.append(par)
        if not nxt:
            break
        frontier = np.setdiff1d(np.unique(np.concatenate(nxt)), seen, assume_unique=True)
        seen = np.union1d(seen, frontier)
        hops += 1
        if hops > 100_000:  # lineage is a DAG: only a damaged repository could loop
            raise RuntimeError("lineage trace does not terminate (cycle in stored lineage?)")
    return {k: np.unique(np.concatenate(v)) for k, v in edges.items()}


def _check_ids(index: LineageIndex, run: str, ids, what: str) -> np.ndarray | None:
    if ids is None:
        return None
    try:
        arr = np.unique(np.asarray(list(ids), dtype=np.int64))
    except (TypeError, ValueError, OverflowError):
        raise BadInput(f"{what}s must be record ids (integers), got {ids!r}") from None
    if not len(arr):
        raise BadInput(f"no {what}s given (pass None to mine the whole run)")
    if arr[0] < 0:
        raise BadInput(f"{what} {int(arr[0])} is not a record id (negative)")
    missing = np.flatnonzero(index.event_ids(run, arr) == 0)
    if len(missing):
        rid = int(arr[missing[0]])
        raise NotFound(f"{what} {_fmt(rid)} is not a record of run {run}")
    return arr


def _fmt(rid: int) -> str:
    cp, part, pos = (int(x[0]) for x in unpack_record_ids(np.array([rid])))
    return f"{rid} ({cp}:{part}:{pos})"
