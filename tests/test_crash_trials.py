"""A few randomized kill -9 trials of each kind, and a short soak (`bench/crash.py` runs 200+
kills and a 5-minute soak; see `_crash_trials` for what is checked after each kill)."""

from __future__ import annotations

import random

import pytest
from _crash_trials import ageoff_trials, index_trials, soak, spark_trials, writer_trials


def seeded() -> tuple[random.Random, int]:
    seed = random.randrange(1 << 30)
    return random.Random(seed), seed


@pytest.mark.parametrize(
    ("trials", "kind"),
    [(writer_trials, "writer"), (index_trials, "index"), (ageoff_trials, "ageoff")],
    ids=["writer", "index", "ageoff"],
)
def test_kill_an_owner_at_random_moments(tmp_path, trials, kind):
    rng, seed = seeded()
    tally = trials(tmp_path, 3, rng)
    assert tally.kind == kind and tally.kills == 3, (seed, tally)
    assert tally.sealed > 0, (seed, tally)
    assert tally.ok, (seed, tally)


@pytest.mark.spark
def test_kill_a_spark_python_worker_mid_task(spark, tmp_path):
    rng, seed = seeded()
    tally = spark_trials(spark, tmp_path, 2, rng)
    assert tally.kills == 2 and tally.sealed > 0, (seed, tally)
    assert tally.ok, (seed, tally)


def test_a_short_soak(tmp_path):
    rep = soak(tmp_path, seconds=5, writers=4, max_bytes=200_000)
    assert rep.aged_off > 0, rep  # the cap was reached: age-off ran under the readers
    assert rep.sealed > 0 and rep.exported > 0 and rep.searches > 0, rep
    assert rep.ok, rep
