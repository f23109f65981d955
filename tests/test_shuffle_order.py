"""Post-shuffle records are named by position: the positions, records and parents a shuffle
read produces must not depend on the order in which shuffle blocks arrive (Spark fetches
remote blocks in random order; a second action or a replay reads the shuffle again)."""

from __future__ import annotations

import operator
import random

import numpy as np
import pytest

from agent import _inputs as inputs
from agent._worker import _merge_csr
from journals import record_id_base


def blocks(seed: int, shape: str) -> list[list]:
    """What map tasks ship to one reducer, one block per map task: keys repeat across blocks
    (and within one for joins/sorts), ids are (cp, map partition, position)."""
    rng = random.Random(seed)
    out = []
    for part in range(6):
        base = record_id_base(3 if part % 2 else 2, part)
        recs = []
        if shape == "aggregate":  # one combiner record per key and map task
            for pos, k in enumerate(rng.sample(range(40), 15)):
                recs.append((f"k{k}", (pos + part, base + pos)))
        elif shape == "sides":  # joins: (key, (side, values, their input ids)) per key
            for k in rng.sample(range(12), 6):
                ids = sorted(rng.sample(range(base, base + 30), rng.randint(1, 3)))
                recs.append((f"k{k}", (1 + part % 2, [f"v{i}" for i in ids], ids)))
        else:  # sorts: (key, (value, input id)), duplicate keys
            for pos in range(10):
                recs.append((rng.randint(0, 5), (f"p{part}-{pos}", base + pos)))
        out.append(recs)
    return out


def read(kind: str, arrived: list) -> list[tuple]:
    """(record, its parent ids) per position of one shuffle read."""
    state = inputs.InputState(record_id_base(9, 0))
    it = iter(arrived)
    if kind == "aggregate":
        records = list(inputs.aggregate_input(state, it, lambda: 0, operator.add))
    elif kind == "cogroup":
        records = [
            (k, (list(a), list(b))) for k, (a, b) in inputs.cogroup_input(state, it, lambda: 0)
        ]
    elif kind == "sort":
        records = list(inputs.sort_input(state, it, lambda: 0, True, None))
    else:
        records = list(inputs.join_input(state, it, lambda: 0, kind))
    n, counts, parents = _merge_csr(state.merge)
    assert n == len(records)
    starts = np.concatenate(([0], np.cumsum(counts)))
    return [
        (rec, sorted(parents[starts[i] : starts[i + 1]].tolist())) for i, rec in enumerate(records)
    ]


@pytest.mark.parametrize(
    ("kind", "shape"),
    [
        ("aggregate", "aggregate"),
        ("inner", "sides"),
        ("left", "sides"),
        ("full", "sides"),
        ("cogroup", "sides"),
        ("sort", "sort"),
    ],
)
@pytest.mark.parametrize("seed", range(3))
def test_positions_do_not_depend_on_block_arrival_order(kind, shape, seed):
    bs = blocks(seed, shape)
    in_order = read(kind, [r for b in bs for r in b])
    assert in_order
    rng = random.Random(seed)
    for _ in range(8):
        shuffled = bs[:]
        rng.shuffle(shuffled)
        assert read(kind, [r for b in shuffled for r in b]) == in_order
