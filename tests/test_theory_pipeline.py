"""The theory stage (pipelines/theory.py, runs.theory_runs): keys, caching, failures, loading."""

import json
import subprocess
import sys

import pytest

from attnrepro.jobs import theory as theory_runs
from attnrepro.papers.tied_attention import theory_curves as curves
from sweep_tools import ROOT, train_env


def _settings(tmp_path, *overrides):
    return theory_runs.theory_settings("smoke", [f"paths.outputs={tmp_path}", *overrides])


def test_points_follow_the_experiment_grid(tmp_path):
    """The interpolation threshold is wanted once per (kappa, Delta > 0) of the grid, whatever d, lambda, alpha."""
    jobs = theory_runs.jobs("tied_error_vs_alpha", _settings(tmp_path))
    interp = [j for j in jobs if j.curve is curves.INTERPOLATION]
    assert [(j.params["task.Delta"], j.params["model.kappa"]) for j in interp] == [(0.5, 0.5)]
    bayes = [j.params for j in jobs if j.curve is curves.BAYES]
    assert {"task.kappa0": 0.5, "task.T": 2} in bayes and len(bayes) == len({json.dumps(b) for b in bayes})


def test_keys_hash_only_what_a_curve_uses(tmp_path):
    base = {j.curve.name: j.key for j in theory_runs.jobs("tied_error_vs_alpha", _settings(tmp_path))}
    more = {j.curve.name: j.key for j in theory_runs.jobs("tied_error_vs_alpha", _settings(tmp_path, "bayes.points=7"))}
    assert base["interpolation_threshold"] == more["interpolation_threshold"]
    assert base["bayes_mmse"] != more["bayes_mmse"]


def test_second_run_computes_nothing(tmp_path):
    cmd = [sys.executable, "pipelines/theory.py", "profile=smoke", "experiments=[tied_interpolation_peak]"]
    first = subprocess.run(cmd, cwd=ROOT, env=train_env(tmp_path), capture_output=True, text=True, timeout=300)
    assert first.returncode == 0, first.stderr
    n = len(theory_runs.jobs("tied_interpolation_peak", _settings(tmp_path)))
    assert n >= 2 and f"{n} computed, 0 cached, 0 failed" in first.stdout
    paths = sorted((tmp_path / "theory" / "tied_interpolation_peak").glob("*/record.json"))
    stamps = [p.stat().st_mtime_ns for p in paths]
    second = subprocess.run(cmd, cwd=ROOT, env=train_env(tmp_path), capture_output=True, text=True, timeout=300)
    assert f"0 computed, {n} cached, 0 failed" in second.stdout
    assert [p.stat().st_mtime_ns for p in paths] == stamps
    records = [json.loads(p.read_text()) for p in paths]
    assert all(r["status"] == "complete" for r in records)
    (interp,) = [r for r in records if r["curve"] == "interpolation_threshold"]
    assert interp["metrics"]["alpha_interp"][0] > 0


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
    rows, status = theory_runs.load(tmp_path, "tied_error_vs_alpha", settings)
    assert status["complete"] == 1 and "FloatingPointError: solver diverged" in status["failed"][0]["reason"]
    assert set(rows["curve"]) == {"bayes_mmse"} and (rows["source"] == "theory").all()
    # a corrupt record is listed, never raised; the failed one is computed again on the next run
    (path,) = [j.path(tmp_path) for j in theory_runs.jobs("tied_error_vs_alpha", settings)
               if j.curve.name == "bayes_mmse"]
    path.write_text("{not json")
    rows, status = theory_runs.load(tmp_path, "tied_error_vs_alpha", settings)
    assert rows.empty and len(status["corrupt"]) == 1
    monkeypatch.setattr(theory_runs, "curves_of", lambda e: [curves.INTERPOLATION, curves.BAYES])
    counts = theory_runs.run(settings, log=lambda *_: None)
    assert counts == {"complete": 2, "failed": 0, "skipped": 0}
