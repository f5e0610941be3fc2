"""Analysis half: fits against closed forms, tables from records, aggregation with bad records, report."""

import json
import math
import shutil
import threading
import zlib

import numpy as np
import pandas as pd
import pytest

from attnrepro.jobs.grid import compose_many, expected_jobs, grid_points
from attnrepro.jobs.provenance import provenance
from attnrepro.jobs.records import SCHEMA, record_path, write_record
from attnrepro.jobs.training import job_key, roots, semantic_config
from attnrepro.report import sweep_status, tables
from attnrepro.report.aggregate import aggregate, read_status, table_path
from attnrepro.report.claims import judge
from attnrepro.report.figure_spec import specs
from attnrepro.report.html import build_report
from attnrepro.stats import fits, summaries

PAPER_A = ["xor_one_step_attention", "xor_phase_dm", "xor_attention_variants", "xor_sample_complexity",
           "xor_params_vs_ffnn", "xor_k_parity"]


# ---------------------------------------------------------------- fits vs closed forms

def test_power_law_recovers_exponent_and_prefactor():
    x = np.geomspace(8, 4096, 7)
    fit = fits.power_law_fit(x, 3.0 * x**1.7)
    assert fit.slope == pytest.approx(1.7, abs=1e-12) and fit.prefactor == pytest.approx(3.0, rel=1e-10)
    assert fits.power_law_fit(np.r_[x, np.nan, -1], np.r_[3.0 * x**1.7, 5, 5]).n_points == 7
    assert math.isnan(fits.power_law_fit([4.0], [2.0]).slope)


def test_polylog_fit_recovers_exponent():
    d = 2.0 ** np.arange(5, 15)
    fit = fits.polylog_fit(d, 0.5 * np.log2(d) ** 2)
    assert fit.slope == pytest.approx(2.0, abs=1e-12) and fit.prefactor == pytest.approx(0.5, rel=1e-10)
    assert fit(np.log2(1024.0)) == pytest.approx(50.0)


def test_crossing_exact_when_rate_is_linear_in_log_x():
    x = 2.0 ** np.arange(1, 9)  # rate = log2(x) / 8 reaches 0.55 at x = 2^4.4
    rate = np.log2(x) / 8
    assert fits.threshold_crossing(x[::-1], rate[::-1], 0.55) == pytest.approx(2**4.4)
    assert fits.threshold_crossing(x, rate, 0.55, interpolate=False) == 32.0
    assert fits.threshold_crossing(x, rate, 0.1) == 2.0  # reached at the first grid point
    assert math.isnan(fits.threshold_crossing(x, rate, 1.5))
    assert fits.threshold_crossing([1.0, 3.0], [0.0, 1.0], 0.5, log_x=False) == pytest.approx(2.0)


def test_crossing_of_logistic_success_curve():
    """rate(x) = 1 / (1 + (x0 / x)^k) reaches level l at x0 (l / (1 - l))^(1/k)."""
    x0, k = 300.0, 3.0
    x = np.geomspace(10, 1e4, 400)
    rate = 1 / (1 + (x0 / x) ** k)
    for level in (0.5, 0.9):
        assert fits.threshold_crossing(x, rate, level) == pytest.approx(x0 * (level / (1 - level)) ** (1 / k),
                                                                         rel=1e-3)


def test_binomial_se_and_quantiles():
    assert fits.binomial_se(3, 12) == pytest.approx(math.sqrt(0.25 * 0.75 / 12))
    np.testing.assert_allclose(fits.binomial_se([0, 5], [10, 10]), [0.0, math.sqrt(0.025)])
    assert math.isnan(fits.binomial_se(0, 0))
    assert fits.quantiles([1, 2, 3, 4, 5]) == (2.0, 3.0, 4.0)
    assert all(math.isnan(q) for q in fits.quantiles([np.nan]))


def test_bootstrap_is_deterministic_and_keeps_group_sizes():
    df = pd.DataFrame({"key": ["a"] * 5 + ["b"] * 3, "v": [1.0] * 5 + [3.0] * 3})
    sizes = fits.bootstrap(df, ["key"], lambda t: (t["key"] == "a").sum(), n_boot=20)
    assert (sizes == 5).all()
    mean = lambda t: t["v"].mean()  # noqa: E731
    assert fits.bootstrap_ci(df, ["key"], mean, n_boot=50) == pytest.approx((1.75, 1.75, 1.75))
    noisy = pd.DataFrame({"key": ["a"] * 40, "v": np.random.default_rng(0).normal(size=40)})
    a, b = fits.bootstrap(noisy, ["key"], mean, 30, seed=1), fits.bootstrap(noisy, ["key"], mean, 30, seed=1)
    np.testing.assert_array_equal(a, b)
    lo, hi = fits.percentile_ci(a)
    assert lo < noisy["v"].mean() < hi
    assert fits.percentile_ci([np.nan, np.nan, 1.0]) == (pytest.approx(np.nan, nan_ok=True),) * 2


def test_bootstrap_does_not_depend_on_the_rows_order():
    """Records are read in the order of their keys; the same seeds in another order give the same CI."""
    rng = np.random.default_rng(3)
    df = pd.DataFrame({"key": np.repeat(["a", "b", "c"], 6), "seed": np.tile(np.arange(6), 3),
                       "v": rng.normal(size=18)})
    mean = lambda t: t.groupby("key")["v"].mean().to_numpy()  # noqa: E731
    shuffled = df.iloc[rng.permutation(len(df))]
    np.testing.assert_array_equal(fits.bootstrap(df, ["key"], mean, 40), fits.bootstrap(shuffled, ["key"], mean, 40))
    no_seed = df.drop(columns="seed")  # without seeds the order is the table's: another order, other draws
    assert not np.array_equal(fits.bootstrap(no_seed, ["key"], mean, 40),
                              fits.bootstrap(no_seed.iloc[::-1], ["key"], mean, 40))


def _logistic_seeds(ds, xs, x0, k=4.0, n=200):
    """Per-seed table whose success rate at (d, x) is exactly round(n rate) / n, rate logistic in log x."""
    rows = []
    for d in ds:
        for x in xs:
            rate = 1 / (1 + (x0(d) / x) ** k)
            wins = int(round(n * rate))
            rows += [{"key": f"{d}-{x}", "d": d, "x": x, "success": r < wins} for r in range(n)]
    return pd.DataFrame(rows)


def test_crossings_recover_known_scaling_with_ci():
    df = _logistic_seeds([16, 64, 256, 1024], np.geomspace(1, 1e4, 60), lambda d: 2.0 * d**0.5)
    c = summaries.crossings(df, "d", "x", 0.5, n_boot=60)
    np.testing.assert_allclose(c.point, 2.0 * c.groups**0.5, rtol=0.02)
    fit, lo, hi = c.fit()
    assert fit.slope == pytest.approx(0.5, abs=0.01) and lo <= 0.5 <= hi and hi - lo < 0.1
    assert not c.censored.any()
    rates = summaries.rate_table(df, ["d", "x"])
    assert set(rates.columns) >= {"n", "successes", "rate", "se"} and (rates["n"] == 200).all()


def test_claim_without_data_does_not_hold():
    c = judge("fig", "x < 1", float("nan"), lambda v: v < 1)
    assert not c.holds and "not enough data" in c.detail
    assert judge("fig", "x < 1", 0.5, lambda v: v < 1).holds
    assert not judge("fig", "hi <= 1", 0.5, lambda v: v <= 1, tested=2.0).holds


# ---------------------------------------------------------------- fake records of the smoke grids

def _jobs(experiment: str) -> list[tuple[list[str], str, dict]]:
    """(overrides, key, semantic config) of every smoke job, composing each config once."""
    points = grid_points(experiment, "smoke")
    return [(ov, job_key(cfg), semantic_config(cfg)) for ov, cfg in zip(points, compose_many(points))]


def _fake_record(experiment: str, overrides: list[str], key: str, cfg: dict) -> dict:
    """A complete record of the shape the runner writes, with made-up but plausible numbers."""
    n, task, model, train = cfg["n_seeds"], cfg["task"], cfg["model"], cfg["train"]
    d = task["d"]
    rng = np.random.default_rng(zlib.crc32(key.encode()))  # stable across processes (hash() is salted)
    p = [int(v) for v in rng.integers(0, d // 2, n)]
    q = [int(v) + d // 2 for v in rng.integers(0, d // 2, n)]
    rec = {"schema": SCHEMA, "key": key, "experiment": experiment, "status": "complete",
           "config": cfg, "overrides": overrides, "curves": {}, "arrays": {},
           "provenance": provenance(roots(task["name"], model["family"]))}  # made by this code: not stale
    if model["family"] == "ffnn":
        err = [0.0 if model["k"] >= 2 else 0.3] * n
        rec["fit"] = {"lr": 0.01}
        rec["derived"] = {"n_params": model["k"] * (d + 2) + 1, "p": p, "q": q}
        rec["metrics"] = {"test_mse": err, "test_error": err, "train_loss": err}
        return rec
    m = math.ceil(model["m_c"] * math.log2(d) ** 2) if model["m"] is None else model["m"]
    if model["family"] == "k_head_attention":
        loss = [0.0 if r > 0 else 0.5 for r in range(n)]
        rec["fit"] = {"lr": 1.0}
        rec["derived"] = {"m": m, "n_params": task["k"] * m,
                          "S": [list(range(r, r + task["k"])) for r in range(n)]}
        rec["metrics"] = {"loss": loss, "parity_correlation": [1 - v for v in loss],
                          "split": [float(v == 0) for v in loss]}
        return rec
    good = model["attention"] == "softmax" and (task["n"] or 10**9) >= 8 * d
    loss = [0.0 if (good and r > 0) else 0.5 for r in range(n)]
    rec["fit"] = {"lr": 1.0}
    rec["derived"] = {"m": m, "n_params": 2 * m, "p": p, "q": q}
    rec["metrics"] = {"loss": loss, "xor_correlation": [1 - v for v in loss], "mass_pq": [1.0] * n,
                      "mass_pq_tilde": [1.0] * n}
    steps = list(range(0, train["steps"] + 1, train["log_every"]))
    rec["curves"] = {"step": steps, **{k: [[0.5] * n for _ in steps[:-1]] + [v]
                                        for k, v in rec["metrics"].items()}}
    if train["save_attention"]:
        init = np.full((n, d), 1.0 / d)
        after, after_tilde = np.zeros((n, d)), np.zeros((n, d))  # gamma on p, gamma~ on q: split
        after[np.arange(n), p] = after_tilde[np.arange(n), q] = 1.0
        rec["arrays"] = {"gamma_init": init.tolist(), "gamma_tilde_init": init.tolist(),
                         "gamma": after.tolist(), "gamma_tilde": after_tilde.tolist()}
        rec["metrics"].update({"share_p": [1.0] * n, "share_q": [0.0] * n, "share_tilde_p": [0.0] * n,
                               "share_tilde_q": [1.0] * n})
    return rec


@pytest.fixture(scope="module")
def fake_outputs(tmp_path_factory, smoke_grid_cache):
    """Smoke grids of all paper-A experiments as fake records, except in xor_phase_dm: one job
    failed, one corrupt file, one missing; plus a record of another grid that must be ignored."""
    out = tmp_path_factory.mktemp("outputs")
    shutil.copytree(smoke_grid_cache, out / "cache" / "grid")
    bad = {}
    for exp in PAPER_A:
        for i, (ov, key, cfg) in enumerate(_jobs(exp)):
            path = record_path(out, exp, key)
            rec = _fake_record(exp, ov, key, cfg)
            if exp == "xor_phase_dm" and i == 0:
                rec = {k: v for k, v in rec.items() if k not in ("metrics", "curves", "derived")}
                rec.update(status="failed", reason="RuntimeError: loss is nan")
                bad["failed"] = key
            elif exp == "xor_phase_dm" and i == 1:
                path.parent.mkdir(parents=True)
                path.write_text('{"schema": 1, "key": "trunc')
                bad["corrupt"] = key
                continue
            elif exp == "xor_phase_dm" and i == 2:
                bad["missing"] = key
                continue
            write_record(path, rec)
            if exp == "xor_phase_dm":  # the same job with another seed: not in the grid
                other = _fake_record(exp, ov, "0" * 16, {**cfg, "seed": 7})
    write_record(record_path(out, "xor_phase_dm", "0" * 16), other)
    status = aggregate(out, "smoke", log=lambda *_: None)
    return out, bad, status


def test_tables_one_row_per_key_and_replica(fake_outputs):
    out, _, _ = fake_outputs
    data = sweep_status.load_experiment(out, "xor_attention_variants", "smoke")
    final, curves = data.final, data.curves
    n_seeds = final["n_seeds"].iloc[0]
    assert len(final) == 6 * n_seeds and not final.duplicated(["key", "replica"]).any()
    assert {"task.d", "model.attention", "model.init", "train.steps", "m", "lr", "n_params", "p", "q",
            "loss", "xor_correlation", "seed", "replica"} <= set(final.columns)
    assert (final["seed"] == final["base_seed"] + final["replica"]).all()
    steps = curves.groupby("key")["step"].nunique()
    assert len(curves) == (steps * n_seeds).sum()
    assert {"step", "loss", "model.attention"} <= set(curves.columns)
    arrays = sweep_status.load_experiment(out, "xor_one_step_attention", "smoke").arrays
    d = arrays["task.d"].iloc[0]
    per_seed = arrays[["key", "replica"]].drop_duplicates()
    assert len(arrays) == d * len(per_seed) and arrays["key"].nunique() == 2 and "gamma_tilde_init" in arrays


def test_a_training_record_of_the_older_layout_reads_as_stale(tmp_path, smoke_grid_cache):
    """A record written before the layout moved the stop reasons to `fit` and model.name to model.family
    (layout 1) is stale, with the reason, not corrupt and not complete; the same record in layout 2 is
    complete."""
    from attnrepro.jobs.job import Status
    from attnrepro.jobs.training import record_state

    ov, key, cfg = _jobs("xor_phase_dm")[0]
    rec = _fake_record("xor_phase_dm", ov, key, cfg)
    path = record_path(tmp_path, "xor_phase_dm", key)
    assert record_state(path, rec).status is Status.complete
    old_model = {("name" if k == "family" else k): v for k, v in rec["config"]["model"].items()}
    old = {**rec, "schema": 1, "config": {**rec["config"], "model": old_model}}
    state = record_state(path, old)
    assert state.status is Status.stale and "record layout 1" in state.reason


def test_malformed_complete_record_is_listed_not_raised():
    rec = {"schema": 1, "key": "k", "experiment": "e", "status": "complete",
           "config": {"task": {"d": 4}, "seed": 0, "n_seeds": 2}, "metrics": {"loss": [0.1, 0.2, 0.3]}}
    good = {**rec, "key": "g", "metrics": {"loss": [0.1, 0.2]}}
    final, _, _, bad = tables.frames([rec, good])
    assert len(final) == 2 and bad[0]["key"] == "k" and "3 values for 2 replicas" in bad[0]["error"]


def test_all_records_lists_mixed_protocols_and_counts_a_seed_once(tmp_path, smoke_grid_cache):
    """Read with all_records, a point trained two ways is listed, and a seed two records hold (the
    grid's job, and the same point run again from seed 1) is counted once."""
    shutil.copytree(smoke_grid_cache, tmp_path / "cache" / "grid")
    ov, key, cfg = _jobs("xor_phase_dm")[0]
    n, steps = cfg["n_seeds"], cfg["train"]["steps"]
    longer = {**cfg, "train": {**cfg["train"], "steps": 2 * steps}}
    records = [_fake_record("xor_phase_dm", ov, key, cfg),
               _fake_record("xor_phase_dm", [*ov, "seed=1"], "b" * 16, {**cfg, "seed": 1}),
               _fake_record("xor_phase_dm", [*ov, f"train.steps={2 * steps}"], "c" * 16, longer)]
    for rec in records:
        write_record(record_path(tmp_path, "xor_phase_dm", rec["key"]), rec)
    data = sweep_status.load_experiment(tmp_path, "xor_phase_dm", "smoke", all_records=True)
    seeds = data.final.groupby("train.steps")["seed"].apply(sorted).to_dict()
    assert seeds == {steps: list(range(n + 1)), 2 * steps: list(range(n))}
    later, first_seed = ("b" * 16, 1) if key < "b" * 16 else (key, 0)  # the later record's copies go
    assert data.status["repeated_seeds"] == [[later, s - first_seed] for s in range(1, n)]
    [mixed] = data.status["mixed"]
    assert sorted(mixed["keys"]) == sorted([key, "b" * 16, "c" * 16])
    assert mixed["train"] == {"train.steps": sorted([str(steps), str(2 * steps)])}
    assert "WARNING: 1 points pool" in sweep_status.status_line(data.status)
    in_grid = sweep_status.load_experiment(tmp_path, "xor_phase_dm", "smoke")
    assert in_grid.status["other"] == 2 and not in_grid.status["mixed"] and len(in_grid.final) == n


def test_aggregate_lists_failed_corrupt_missing_and_still_builds_table(fake_outputs):
    out, bad, status = fake_outputs
    st = read_status(out)["experiments"]["xor_phase_dm"]
    assert st == status["experiments"]["xor_phase_dm"]
    assert st["expected"] == 4 and st["complete"] == 1 and st["other"] == 1
    assert [j["key"] for j in st["failed"]] == [bad["failed"]] and "loss is nan" in st["failed"][0]["reason"]
    assert [j["key"] for j in st["corrupt"]] == [bad["corrupt"]]
    assert [j["key"] for j in st["missing"]] == [bad["missing"]] and st["missing"][0]["overrides"]
    assert st["grid"] and st["example_config"]["config"]["task"]["d"]
    table = pd.read_parquet(table_path(out, "xor_phase_dm"))
    assert len(table) == 3 and set(table["key"]) == {expected_jobs("xor_phase_dm", "smoke")[3][1]}
    assert all(not f["error"] for f in status["figures"].values())
    for name in PAPER_A:
        assert table_path(out, name).exists()


def test_report_has_every_registered_figure(fake_outputs):
    out, _, _ = fake_outputs
    report = build_report(out)
    html = report.html_path.read_text()
    assert not report.errors, report.errors
    for spec in specs():
        assert f"id='{spec.name}'" in html and (out / "figures" / f"{spec.name}.png").exists()
        assert (out / "figures" / f"{spec.name}.pdf").exists()
        assert (report.claims["figure"] == spec.name).any(), f"{spec.name} has no claims"
    claims = pd.read_csv(report.csv_path)
    assert len(claims) == len(report.claims) and "claims hold" in html and "data:image/png;base64," in html
    one_step = claims[claims["figure"] == "xor_one_step_attention"]
    assert one_step["holds"].all(), one_step.to_dict("records")  # fake data: mass 1 on {p, q}, ratio 1 before
    assert "loss is nan" in html  # the failed job's reason is shown


def test_report_in_two_processes_is_the_report_in_one(fake_outputs):
    out, _, _ = fake_outputs
    assert threading.active_count() == 1  # else build_report draws in this process: the forked path is under test
    for cache in (out / "results").glob("*.render.json"):
        cache.unlink()  # every figure drawn again, not reused
    two = build_report(out, workers=2)
    assert not two.reused and not two.errors, two.errors
    pngs = {p.name: p.stat().st_mtime_ns for p in (out / "figures").glob("*.png")}
    for cache in (out / "results").glob("*.render.json"):
        cache.unlink()
    one = build_report(out, workers=1)
    pd.testing.assert_frame_equal(two.claims, one.claims)
    assert len(pngs) == len(specs()) and all((out / "figures" / n).stat().st_mtime_ns > t for n, t in pngs.items())


def test_report_renders_empty_tables(tmp_path):
    (tmp_path / "results").mkdir()
    (tmp_path / "results" / "status.json").write_text(json.dumps({"profile": "smoke"}))
    report = build_report(tmp_path, ["xor_phase_dm"])
    (error,) = report.errors  # names the missing table and the stage that makes it
    assert error.startswith(f"xor_phase_dm: no table at {table_path(tmp_path, 'xor_phase_dm')}: ")
    assert "aggregate" in error
    assert len(report.claims) and not report.claims["holds"].any()
