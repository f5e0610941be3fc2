"""Paper B's experiments and figures: cross-validation, the error decomposition, the figure specs.

(Every experiment's configs compose for every profile: tests/test_runner.py covers conf/experiment/.)
"""

import math

import numpy as np
import pandas as pd
import pytest
import torch

from attnrepro.jobs import theory as theory_runs
from attnrepro.jobs.grid import compose, experiments, grid_points
from attnrepro.jobs.keys import job_key, semantic_config
from attnrepro.jobs.records import SCHEMA, record_path, write_record
from attnrepro.papers.tied_attention import figures as figures_tied
from attnrepro.papers.tied_attention.decomposition import TERMS, decompose
from attnrepro.papers.tied_attention.task import haar_orthogonal
from attnrepro.report.aggregate import aggregate
from attnrepro.report.figure_spec import specs
from attnrepro.report.html import build_report
from attnrepro.stats import cross_validation

FIGURES = ["tied_error_vs_alpha", "tied_factorized_vs_direct", "tied_spectra", "tied_scaling_laws",
           "tied_error_decomposition", "tied_bayes_gap"]
EXPERIMENTS = ["tied_error_vs_alpha", "tied_factorized_vs_direct", "tied_spectra", "tied_scaling_laws",
               "tied_interpolation_peak"]


# ---------------------------------------------------------------- cross-validation

def _sweep(val, test, lams=(0.0, 0.01, 0.1, 1.0), seeds=(0, 1, 2)):
    """A per-seed table at one alpha: val(lam, seed), test(lam, seed)."""
    return pd.DataFrame([{"task.alpha": 0.2, "model.param": "factorized", "model.lam": lam, "seed": s,
                          "val_error": val(lam, s), "test_error": test(lam, s)} for lam in lams for s in seeds])


def test_cross_validation_uses_validation_never_test():
    # validation prefers lambda = 0.01, the test error prefers lambda = 1: the selection follows validation
    df = _sweep(lambda lam, s: abs(math.log10(lam + 1e-9) + 2), lambda lam, s: abs(lam - 1.0))
    for per in ("seed", "mean"):
        chosen = cross_validation.select(df, ["task.alpha", "model.param"], per=per)
        assert (chosen["model.lam"] == 0.01).all() and len(chosen) == 3 and (chosen["cv"] == per).all()
    # without a validation error nothing is selected, whatever the test error says
    assert cross_validation.select(df.assign(val_error=np.nan), ["task.alpha"]).empty


def test_cross_validation_per_seed_and_on_the_mean_differ():
    # seed 2 alone prefers lambda = 1 (a very low value there); the seed mean prefers lambda = 0.1
    val = {(0.1, 0): 1.0, (0.1, 1): 1.0, (0.1, 2): 1.0, (1.0, 2): 0.5}
    df = _sweep(lambda lam, s: val.get((lam, s), 2.0), lambda lam, s: 0.0)
    per_seed = cross_validation.select(df, ["task.alpha"], per="seed").set_index("seed")["model.lam"]
    assert per_seed.to_dict() == {0: 0.1, 1: 0.1, 2: 1.0}
    on_mean = cross_validation.select(df, ["task.alpha"], per="mean")
    assert (on_mean["model.lam"] == 0.1).all() and sorted(on_mean["seed"]) == [0, 1, 2]
    # ties go to the larger lambda; rows without a validation error are ignored
    tie = _sweep(lambda lam, s: 1.0, lambda lam, s: 0.0)
    tie.loc[tie["model.lam"] == 1.0, "val_error"] = np.nan
    assert (cross_validation.select(tie, ["task.alpha"])["model.lam"] == 0.1).all()
    with pytest.raises(ValueError, match="per"):
        cross_validation.select(df, ["task.alpha"], per="test")


# ---------------------------------------------------------------- error decomposition

def _target(d=12, values=(3.0, 2.0, 1.0, 0.4), seed=0):
    """S0 = O diag(values, 0, ..) O^T: (S0, U (d, r) its range, lambda (r,))."""
    basis = haar_orthogonal(torch.Generator().manual_seed(seed), d)
    lam = torch.tensor(values, dtype=torch.float64)
    U = basis[:, : len(values)]
    return (U * lam) @ U.T, U, lam


def _sym(d, seed, scale=1.0):
    g = torch.randn(d, d, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
    return scale * (g + g.T) / 2


def test_decomposition_terms_add_up_to_the_estimation_error():
    S0, U, lam = _target()
    d = S0.shape[0]
    for seed, scale in ((1, 0.05), (2, 0.3), (3, 1.0)):
        S = S0 + _sym(d, seed, scale)
        terms = decompose(S, U, lam)
        total = sum(terms[k] for k in TERMS)
        assert torch.allclose(total, ((S - S0) ** 2).sum() / d, rtol=1e-12)
    batch = torch.stack([S0 + _sym(d, 4, 0.2), S0 + _sym(d, 5, 0.2)])  # leading replica axis
    terms = decompose(batch, U.expand(2, -1, -1), lam.expand(2, -1))
    assert terms["e_over"].shape == (2,)
    assert torch.allclose(sum(terms[k] for k in TERMS), ((batch - S0) ** 2).sum((-1, -2)) / d, rtol=1e-12)


def test_decomposition_special_cases():
    S0, U, lam = _target()
    d = S0.shape[0]
    exact = decompose(S0, U, lam)
    assert exact["n_recovered"] == 4 and all(abs(float(exact[k])) < 1e-24 for k in TERMS)
    zero = decompose(torch.zeros_like(S0), U, lam)  # nothing learned: all of it is under-fitting
    assert zero["n_recovered"] == 0 and torch.isclose(zero["e_under"], (lam**2).sum() / d)
    assert float(zero["e_over"] + zero["e_approx"] + zero["e_coupling"]) == 0
    P = torch.eye(d, dtype=torch.float64) - U @ U.T  # noise inside S0's null space only: over-fitting
    noise = P @ _sym(d, 7) @ P
    over = decompose(S0 + noise, U, lam)
    assert torch.isclose(over["e_over"], (noise**2).sum() / d) and over["n_recovered"] == 4
    assert float(over["e_under"] + over["e_approx"] + over["e_coupling"]) < 1e-24
    # only the two strong directions learned: they are recovered, the two weak ones are not
    half = (U[:, :2] * lam[:2]) @ U[:, :2].T
    part = decompose(half, U, lam)
    assert part["n_recovered"] == 2 and torch.isclose(part["e_under"], (lam[2:] ** 2).sum() / d)


# ---------------------------------------------------------------- figures from fake smoke records

def _fake_record(experiment, overrides, key, cfg):
    """A complete record shaped like the runner's, with smooth made-up metrics (errors falling with
    alpha, factorized below direct, the four terms adding up) and spectra for the arrays."""
    n, task, model = cfg["n_seeds"], cfg["task"], cfg["model"]
    d, alpha, lam = task["d"], task["alpha"], model["lam"]
    rng = np.random.default_rng(abs(hash(key)) % 2**32)
    noise = 1 + 0.05 * rng.standard_normal(n)
    direct = 1.5 if model["param"] == "direct" else 1.0
    est = direct * 2.0 * np.exp(-12 * alpha) * (1 + 10 * lam) * noise
    terms = {"e_approx": 0.1 * est, "e_under": 0.6 * est, "e_over": 0.2 * est / (1 + 100 * lam),
             "e_coupling": 0.1 * est}
    terms["e_coupling"] = est - terms["e_approx"] - terms["e_under"] - terms["e_over"]
    r = min(d, max(1, round(task["kappa0"] * d))) if task["target"] == "wishart" else d
    target = np.sqrt(d) * np.arange(1, d + 1) ** -task["gamma"]
    recovered = max(1, round(alpha * 10))
    learned = np.where(np.arange(d) < recovered, 0.9 * target, 0.0)
    learned[recovered: d // 2] = rng.uniform(0.01, 0.5, max(0, d // 2 - recovered))
    rec = {"schema": SCHEMA, "key": key, "experiment": experiment, "status": "complete", "config": cfg,
           "overrides": overrides, "curves": {},
           "derived": {"eta": 0.1, "n": round(alpha * d * d), "p": round(model["kappa"] * d), "p0": r},
           "metrics": {"train_loss": list(1e-3 * est), "objective": list(est), "val_error": list(0.3 * est + 0.1),
                       "test_error": list(0.3 * est), "estimation_error": list(est),
                       "rank_collapse": [float(np.mean(learned == 0))] * n, "n_recovered": [recovered] * n,
                       **{k: list(v) for k, v in terms.items()}}}
    col_err = np.where(np.arange(r) < recovered, 0.1, 2.0)
    rec["arrays"] = {"eigenvalues": [sorted(learned, reverse=True)] * n, "target_eigenvalues": [list(target)] * n,
                     "overlap_quadratic": [list(1 - col_err / 2)] * n, "column_error": [list(col_err)] * n}
    return rec


@pytest.fixture(scope="module")
def fake_tied_outputs(tmp_path_factory):
    out = tmp_path_factory.mktemp("tied")
    for exp in EXPERIMENTS:
        for ov in grid_points(exp, "smoke"):
            cfg = compose(ov)
            key = job_key(cfg)
            write_record(record_path(out, exp, key), _fake_record(exp, ov, key, semantic_config(cfg)))
    theory_runs.run(theory_runs.theory_settings("smoke", [f"paths.outputs={out}"]), log=lambda *_: None)
    aggregate(out, "smoke", FIGURES, log=lambda *_: None)
    return out


def test_tied_experiments_and_figures_are_registered():
    assert set(EXPERIMENTS) <= set(experiments())
    assert set(FIGURES) <= {s.name for s in specs()}


def test_tied_figures_render_with_claims(fake_tied_outputs):
    report = build_report(fake_tied_outputs, FIGURES)
    assert not report.errors, report.errors
    for name in FIGURES:
        assert (fake_tied_outputs / "figures" / f"{name}.png").exists()
        claims = report.claims[report.claims["figure"] == name]
        assert len(claims) >= 2, name
        assert claims["measured"].notna().any(), name
    decomposition = report.claims[report.claims["figure"] == "tied_error_decomposition"]
    assert decomposition.iloc[0]["holds"], decomposition.iloc[0].to_dict()  # the fake terms add up
    table = pd.read_parquet(fake_tied_outputs / "results" / "tied_factorized_vs_direct.parquet")
    assert set(table["model.param"]) == {"factorized", "direct"} and table["selected"].any()
    assert (table["source"] == "simulation").all()
    # theory: alpha_interp on tied_error_vs_alpha, the MMSE curves on tied_bayes_gap, the fitted law on tied_spectra
    for name, column in (("tied_error_vs_alpha", "alpha_interp"), ("tied_bayes_gap", "mmse"),
                         ("tied_spectra", "ks"), ("tied_error_vs_alpha", "converged")):
        table = pd.read_parquet(fake_tied_outputs / "results" / f"{name}.parquet")
        assert table.loc[table["source"] == "theory", column].notna().any(), name
    spectra = pd.read_parquet(fake_tied_outputs / "results" / "tied_spectra.parquet")
    assert {"fit", "erm_state_evolution"} <= set(spectra["curve"].dropna())
    claims = report.claims[report.claims["figure"] == "tied_error_vs_alpha"]["claim"]
    assert claims.str.contains("state evolution against simulation").any()


def test_theory_rows_are_drawn_as_lines(fake_tied_outputs):
    """A table with rows of source 'theory' plots them as lines and keeps them out of the claims."""
    table = pd.read_parquet(fake_tied_outputs / "results" / "tied_error_vs_alpha.parquet")
    sim_claims = figures_tied.error_vs_alpha_claims(table)
    theory = table.drop_duplicates(["task.Delta", "model.lam", "task.alpha"]).assign(
        source="theory", curve=None, key=None, replica=None, seed=None, test_error=1.0, estimation_error=1.0)
    both = pd.concat([table, theory], ignore_index=True)
    fig = figures_tied.error_vs_alpha_plot(both)
    labels = [line.get_label() for ax in fig.axes for line in ax.get_lines()]
    assert any(label.endswith("(theory)") for label in labels)
    got = figures_tied.error_vs_alpha_claims(both)
    assert [c.claim for c in got] == [c.claim for c in sim_claims]
    assert [c.measured for c in got] == pytest.approx([c.measured for c in sim_claims], nan_ok=True)


def test_empty_tables_give_claims_that_do_not_hold():
    for spec in specs(FIGURES):
        table = spec.table({})
        claims = spec.claims(table)
        assert claims and not any(c.holds for c in claims), spec.name
