"""The theory stage (`attnrepro theory`, jobs.theory): keys, caching, failures, loading."""

import json
import subprocess

import pytest

from attnrepro.jobs import theory as theory_runs
from attnrepro.papers.tied_attention import theory_curves as curves
from attnrepro.theory.interpolation import interpolation_threshold
from attnrepro.theory.spectral_laws import MarchenkoPastur
from sweep_tools import ROOT, cli_cmd, train_env


def _settings(tmp_path, *overrides):
    return theory_runs.theory_settings("smoke", [f"paths.outputs={tmp_path}", *overrides])


def test_points_follow_the_experiment_grid(tmp_path):
    """The interpolation threshold is wanted once per (kappa, Delta > 0) of the grid, whatever d, lambda, alpha."""
    jobs = theory_runs.curve_jobs("tied_error_vs_alpha", _settings(tmp_path))
    interp = [j.config["params"] for c, j in jobs if c is curves.INTERPOLATION]
    assert [(p["task.Delta"], p["model.kappa"]) for p in interp] == [(0.5, 0.5)]
    bayes = [j.config["params"] for c, j in jobs if c is curves.BAYES]
    assert {"task.kappa0": 0.5, "task.T": 2} in bayes and len(bayes) == len({json.dumps(b) for b in bayes})


def test_keys_hash_only_what_a_curve_uses(tmp_path):
    base = {j.config["curve"]: j.key for j in theory_runs.jobs("tied_error_vs_alpha", _settings(tmp_path))}
    more = {j.config["curve"]: j.key
            for j in theory_runs.jobs("tied_error_vs_alpha", _settings(tmp_path, "bayes.points=7"))}
    assert base["interpolation_threshold"] == more["interpolation_threshold"]
    assert base["bayes_mmse"] != more["bayes_mmse"]


def test_all_records_reads_curves_computed_at_other_sizes(tmp_path):
    """A curve computed at parameters the profile does not expect (as `attnrepro theory ...
    "scaling_laws.d.paper=[200]"` makes) is no expected job: load leaves it out and load(all_records=True)
    reads it, its values as recorded; one made under other settings (another key) stays out."""
    curve = theory_runs.curve_named("scaling_law_state_evolution")
    params = {"task.gamma": 1.0, "task.T": 2, "task.Delta": 0.5, "task.beta0": 1.0, "model.kappa": 1.0,
              "model.beta": 1.0, "model.lam": 0.001, "task.d": 24, "task.alpha": [0.1, 0.2]}
    rows = {"task.alpha": [0.1, 0.2], "test_error": [0.3, 0.2]}
    settings = _settings(tmp_path)
    for at, s in ((params, settings), ({**params, "task.d": 30}, _settings(tmp_path, "state_evolution.tol=1e-3"))):
        theory_runs.theory_job("tied_scaling_laws", curve, at, s).execute(lambda: {"metrics": rows},
                                                                          {"curve": curve.name})
    expected, _ = theory_runs.load("tied_scaling_laws", settings)
    assert expected.empty or "task.d" not in expected or not expected["task.d"].isin([24, 30]).any()
    every, status = theory_runs.load("tied_scaling_laws", settings, all_records=True)
    ours = every[every["curve"] == curve.name]
    assert ours["task.d"].tolist() == [24, 24] and ours["test_error"].tolist() == rows["test_error"]
    assert status["complete"] == 1 and status["other"] == 1  # the profile's own curves were not computed here
    assert status["expected"] == len(theory_runs.jobs("tied_scaling_laws", settings))
    # a record of the same curve computed for another experiment is not this one's
    theory_runs.theory_job("tied_spectra", curve, {**params, "task.d": 36}, settings).execute(
        lambda: {"metrics": rows}, {"curve": curve.name})
    every, _ = theory_runs.load("tied_scaling_laws", settings, all_records=True)
    assert 36 not in every["task.d"].tolist()


def test_second_run_computes_nothing(smoke_run, tmp_path):
    """The session's smoke reproduction computed every theory curve (tests/test_e2e.py counts them);
    `attnrepro theory` on a copy of its outputs computes nothing and rewrites no record; the stored
    interpolation threshold is the one of the experiment's parameters (kappa0 = 0.5, T = 2, Delta = 0.5)."""
    outputs = smoke_run.copy(tmp_path / "outputs")
    jobs = theory_runs.jobs("tied_interpolation_peak", _settings(outputs))
    n = len(jobs)
    assert n >= 2 and all(j.path.is_file() for j in jobs)
    paths = sorted((outputs / "theory").glob("*/*/record.json"))
    stamps = [p.stat().st_mtime_ns for p in paths]
    cmd = cli_cmd("theory", "profile=smoke", "experiments=[tied_interpolation_peak]")
    second = subprocess.run(cmd, cwd=ROOT, env=train_env(outputs), capture_output=True, text=True, timeout=300)
    assert second.returncode == 0, second.stderr[-3000:]
    assert f"0 computed, {n} cached, 0 failed" in second.stdout
    assert [p.stat().st_mtime_ns for p in paths] == stamps
    records = [json.loads(j.path.read_text()) for j in jobs]
    assert all(r["status"] == "complete" for r in records)
    (interp,) = [r for r in records if r["curve"] == "interpolation_threshold"]
    alpha = interpolation_threshold(MarchenkoPastur(0.5), 2, 0.5).alpha
    assert 0.15 < alpha < 0.16  # 0.1535 (paper B, Corollary 3.2; conf/experiment/tied_interpolation_peak.yaml)
    assert interp["metrics"]["alpha_interp"][0] == pytest.approx(alpha, rel=1e-9)


def test_unknown_experiment_is_a_clear_error(tmp_path):
    with pytest.raises(ValueError, match="no theory curves for"):
        theory_runs.run(_settings(tmp_path, "experiments=[xor_phase_dm]"), log=lambda *_: None)


def test_failure_is_recorded_and_the_others_go_on(tmp_path, monkeypatch):
    def broken(params, settings):
        raise FloatingPointError("solver diverged")

    broken_curve = curves.TheoryCurve(**{**curves.INTERPOLATION.__dict__, "compute": broken})
    monkeypatch.setattr(theory_runs, "curves_of", lambda e: [broken_curve, curves.BAYES])
    settings = _settings(tmp_path, "experiments=[tied_error_vs_alpha]", "bayes.kappa0=[]", "bayes.T=[]", "workers=1")
    counts = theory_runs.run(settings, log=lambda *_: None)
    assert counts == {"complete": 1, "failed": 1, "skipped": 0}
    rows, status = theory_runs.load("tied_error_vs_alpha", settings)
    assert status["complete"] == 1 and "FloatingPointError: solver diverged" in status["failed"][0]["reason"]
    assert set(rows["curve"]) == {"bayes_mmse"} and (rows["source"] == "theory").all()
    # a corrupt record is listed, never raised; the failed one is computed again on the next run
    (path,) = [j.path for j in theory_runs.jobs("tied_error_vs_alpha", settings) if j.config["curve"] == "bayes_mmse"]
    path.write_text("{not json")
    rows, status = theory_runs.load("tied_error_vs_alpha", settings)
    assert rows.empty and len(status["corrupt"]) == 1
    monkeypatch.setattr(theory_runs, "curves_of", lambda e: [curves.INTERPOLATION, curves.BAYES])
    counts = theory_runs.run(settings, log=lambda *_: None)
    assert counts == {"complete": 2, "failed": 0, "skipped": 0}
