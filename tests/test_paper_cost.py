"""pipelines/paper_cost.py's estimates against brute force: the schedule's makespan against every assignment
of a few jobs, and the sampling standard error of the extrapolated total against its spread over many
random samples."""

from __future__ import annotations

import importlib.util
import itertools
import random
import statistics
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def paper_cost():
    spec = importlib.util.spec_from_file_location("paper_cost", ROOT / "pipelines" / "paper_cost.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_schedule_is_never_shorter_than_the_best_assignment_nor_longer_than_four_thirds_of_it(paper_cost):
    rng = random.Random(1)
    for _ in range(20):
        times = [rng.uniform(1, 100) for _ in range(7)]
        best = min(max(sum(t for t, w in zip(times, who) if w == c) for c in range(3))
                   for who in itertools.product(range(3), repeat=len(times)))
        wall = paper_cost.lpt_wall(times, 3)
        assert best - 1e-9 <= wall <= (4 / 3 - 1 / 9) * best + 1e-9  # Graham's bound for LPT on 3 machines


def test_the_sampling_standard_error_is_the_spread_of_the_extrapolated_total(paper_cost):
    rng = random.Random(2)
    population = [rng.lognormvariate(4, 1.2) for _ in range(110)]  # job times: a few long ones, as in paper B
    k = 8
    totals, ses = [], []
    for _ in range(20000):
        drawn = rng.sample(population, k)
        totals.append(len(population) * statistics.fmean(drawn))
        ses.append(paper_cost.sampling_se(drawn, len(population)))
    # the squared s.e. is unbiased for the variance of the total over samples (s^2 is, for S^2): without the
    # finite-population factor it would be 8% too large here
    assert statistics.fmean(se**2 for se in ses) == pytest.approx(statistics.variance(totals), rel=0.05)
    assert paper_cost.sampling_se(population, len(population)) == 0.0
