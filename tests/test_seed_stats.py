"""Summaries over seeds (stats.seed_stats, stats.fits.quantiles) against their definitions: pandas' reading of
numbers, numpy's quantile one level at a time, and a group-by-group computation."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from attnrepro.stats.fits import quantiles
from attnrepro.stats.seed_stats import finite, mean_se, summary


def _finite_by_definition(values) -> np.ndarray:
    v = np.asarray(pd.to_numeric(pd.Series(values, dtype=object), errors="coerce"), dtype=float)
    return v[np.isfinite(v)]


def _samples(rng):
    x = rng.standard_normal(int(rng.integers(0, 30))) * 10.0 ** rng.uniform(-5, 5)
    x[rng.random(x.size) < 0.2] = np.nan
    x[rng.random(x.size) < 0.05] = np.inf
    return x


def test_finite_reads_every_input_as_pandas_does():
    rng = np.random.default_rng(0)
    for _ in range(100):
        x = _samples(rng)
        for values in (x, list(x), pd.Series(x), pd.Series(x, dtype=object), pd.Series([str(v) for v in x]),
                       x > 0, np.arange(x.size), pd.Series(x, dtype="Float64"), [1.0, None, "a", 2, True]):
            assert finite(values).tobytes() == _finite_by_definition(values).tobytes()


def test_quantiles_are_numpys_one_level_at_a_time():
    rng = np.random.default_rng(1)
    for _ in range(200):
        v = _samples(rng)
        fin = v[np.isfinite(v)]
        want = [float(np.quantile(fin, q)) if fin.size else math.nan for q in (0.25, 0.5, 0.75)]
        assert np.array_equal(quantiles(v), want, equal_nan=True)


def test_summary_is_each_groups_statistics():
    rng = np.random.default_rng(2)
    for _ in range(50):
        x = _samples(rng)
        df = pd.DataFrame({"a": rng.integers(0, 3, x.size), "b": rng.choice(["p", "q", None], x.size), "v": x})
        out = summary(df, ["a", "b"], "v")
        groups = list(df.groupby(["a", "b"], sort=True, dropna=False))
        assert len(out) == len(groups)
        for row, (key, g) in zip(out.itertuples(index=False), groups):
            fin = _finite_by_definition(g["v"])
            assert (row.a, row.b) == key or (row.a == key[0] and pd.isna(row.b) and pd.isna(key[1]))
            mean, se, n = mean_se(g["v"])
            assert row.n == fin.size == n
            if n:
                assert row.mean == fin.mean() == mean
                assert row.se == (fin.std(ddof=1) / math.sqrt(n) if n > 1 else 0.0) == se
                assert (row.q1, row.median, row.q3) == tuple(float(np.quantile(fin, q)) for q in (0.25, 0.5, 0.75))
            else:
                assert math.isnan(row.mean) and math.isnan(row.median)
