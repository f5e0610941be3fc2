"""The job runner: replicas, keys, records, resume, recorded failures, config errors."""

import json
import math

import numpy as np
import pytest
import torch

from attnrepro.config import ConfigError, validate
from attnrepro.jobs.fit import train
from attnrepro.jobs.grid import compose, experiments, grid_points
from attnrepro.jobs.records import CorruptRecord, read_record, record_path
from attnrepro.jobs.training import job_key, run_job

REPLICA_CASES = {
    "population GD, SGD": ["experiment=xor_attention_variants", "train.steps=15", "task.d=24"],
    "erf, independent init": ["experiment=xor_attention_variants", "model=erf", "model.init=independent",
                              "train.steps=15", "task.d=24"],
    "samples, one step, chunked": ["experiment=xor_sample_complexity", "task.d=16", "task.n=300",
                                   "train.chunk=128"],
    # float64: in float32 batched and single-seed matmuls may round differently (1e-7) on some CPUs
    "k-sparse parity, population GD": ["experiment=xor_k_parity", "train=k_gd", "task.d=12", "train.steps=15"],
    "FFNN, Adam": ["experiment=xor_params_vs_ffnn", "task.d=12", "model.k=3", "train.steps=25",
                   "train.dtype=float64"],
}


@pytest.mark.parametrize("case", list(REPLICA_CASES))
def test_replicas_equal_separate_runs(job_config, case):
    """Seeds 0..2 as replicas of one job end at the same parameters as three one-seed jobs."""
    _, together = job_config(*REPLICA_CASES[case], "seed=0", "n_seeds=3")
    joint = [p.detach().clone() for p in train(together, together.trainer)[0].parameters()]
    for r in range(3):
        _, alone = job_config(*REPLICA_CASES[case], f"seed={r}", "n_seeds=1")
        single = list(train(alone, alone.trainer)[0].parameters())
        for a, b in zip(joint, single):
            torch.testing.assert_close(a[r], b[0], rtol=1e-12, atol=1e-12)


STOPPING_CASES = {  # float64, each seed stopping on its own test at its own step
    "L-BFGS to tol_grad": ["experiment=tied_interpolation_peak", "task.d=16", "task.alpha=0.2", "model.lam=0.01",
                           "train.tol_grad=3e-5", "train.steps=100"],
    "L-BFGS in float32, then float64": ["experiment=tied_interpolation_peak", "task.d=16", "task.alpha=0.2",
                                        "model.lam=0.01", "train.tol_grad=3e-5", "train.steps=100",
                                        "train.coarse_dtype=float32", "train.coarse_tol_grad=1e-3"],
    "Adam to tol or tol_grad": ["experiment=tied_error_vs_alpha", "task.d=16", "task.alpha=0.2", "model.lam=0.0",
                                "task.Delta=0.5", "train.dtype=float64", "train.steps=2000", "train.log_every=10"],
    "GD to tol_grad": ["experiment=xor_sample_complexity_trained", "train=xor_gd", "task.d=16", "task.n_per_d=8",
                       "train.dtype=float64", "train.steps=3000", "train.tol_grad=1e-2"],
}


@pytest.mark.parametrize("case", [pytest.param(c, marks=pytest.mark.slow) if c.startswith("Adam") else c
                                  for c in STOPPING_CASES])  # Adam's freezing is SGD's code path: slow only
def test_a_seed_stops_alone_as_among_others(job_config, case):
    """Under every optimiser and with early stopping, seed r of a 4-seed job ends where seed r alone
    ends (to 1e-10), with the same stop reason and step: each seed has its own L-BFGS history and line
    search, and a seed that stopped is frozen while the others train on."""
    from attnrepro.jobs.fit import convergence

    _, together = job_config(*STOPPING_CASES[case], "seed=0", "n_seeds=4")
    problem, module, *_ = train(together, together.trainer)
    joint, stops = [p.detach().clone() for p in problem.parameters()], list(module.stop_step)
    assert len(set(stops)) > 1, f"the seeds should stop at different steps here: {stops}"
    reasons = convergence(problem, module, together.train.tol_grad)["stop"]
    for r in (1, 3):
        _, alone = job_config(*STOPPING_CASES[case], f"seed={r}", "n_seeds=1")
        problem, module, *_ = train(alone, alone.trainer)
        np.testing.assert_equal(module.stop_step[0], stops[r])  # nan: at the step cap in both
        assert convergence(problem, module, alone.train.tol_grad)["stop"][0] == reasons[r]
        for a, b in zip(joint, problem.parameters()):
            torch.testing.assert_close(a[r], b.detach()[0], rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("experiment", experiments())
@pytest.mark.parametrize("profile", ["smoke", "quick", "paper"])
def test_every_experiment_config_composes_and_builds(experiment, profile):
    """The corners of every experiment's grid compose and validate for every profile; for the
    smoke and quick profiles they also build their problem (the paper profile's biggest problems
    cost memory, not information), one that can be narrowed to some of its 2 replicas (lit.compaction)."""
    from attnrepro.config import validate
    from attnrepro.jobs.fit import builder
    from attnrepro.lit.compaction import replica_count
    from attnrepro.seeding import replica_generators

    points = grid_points(experiment, profile)
    assert points, "empty grid"
    for overrides in (points[0], points[-1]):  # the grid's corners
        obj = validate(compose(overrides))
        if profile == "paper":
            continue
        if obj.model.family == "psd_exact_fit":  # a convex problem, not trained: its data
            from attnrepro.papers.tied_attention.exact_fit_problem import draw

            S0, X, t = draw(obj.task, replica_generators(0, 2))
            assert X.shape == (2, obj.task.n(), 2, obj.task.d) and t.shape == (2, obj.task.n(), 2)
            continue
        problem, derived = builder(obj.task.name)(obj.task, obj.model, obj.train, replica_generators(0, 2))
        assert derived["lr"] > 0 and problem.evaluate() and replica_count(problem) == 2


def test_key_ignores_logger_and_paths_but_not_numbers(tmp_path):
    base = ["experiment=xor_phase_dm"]
    k = job_key(compose(base))
    assert job_key(compose([*base, "logger=wandb", f"paths.outputs={tmp_path}", "trainer.accelerator=cpu"])) == k
    assert job_key(compose([*base, "task.d=65"])) != k
    assert job_key(compose([*base, "seed=1"])) != k
    assert job_key(compose([*base, "n_seeds=3"])) != k


def test_record_resume_and_corruption(job_config, capsys):
    cfg, _ = job_config("experiment=xor_phase_dm", "task.d=32", "n_seeds=2")
    assert run_job(cfg)["status"] == "complete"
    path = record_path(cfg.paths.outputs, "xor_phase_dm", job_key(cfg))
    rec = read_record(path)
    assert rec["status"] == "complete" and len(rec["metrics"]["loss"]) == 2
    assert rec["config"]["task"]["d"] == 32 and rec["versions"]["torch"]
    assert run_job(cfg)["status"] == "skipped"  # resume: nothing to do
    path.write_text(path.read_text()[: len(path.read_text()) // 2])  # a truncated record
    with pytest.raises(CorruptRecord):
        read_record(path)
    assert run_job(cfg)["status"] == "complete"  # ... is run again
    assert read_record(path)["metrics"] == rec["metrics"]  # same config, same numbers
    assert not list(path.parent.glob(".record.*"))  # no temp files left


def test_divergence_is_recorded_as_failed(job_config):
    """Linear attention with a huge step blows up: the job is recorded failed with its reason."""
    cfg, _ = job_config("experiment=xor_attention_variants", "model=linear", "train.lr=1e6", "task.d=16")
    assert run_job(cfg)["status"] == "failed"
    rec = json.loads(record_path(cfg.paths.outputs, cfg.experiment, job_key(cfg)).read_text())
    assert rec["status"] == "failed" and "Divergence" in rec["reason"] and "non-finite" in rec["reason"]


@pytest.mark.parametrize("optimizer,saturating", [("sgd", False), ("adam", False), ("sgd", True), ("adam", True)])
def test_a_non_finite_gradient_between_checks_still_fails_the_job(optimizer, saturating):
    """SGD and Adam check the gradient and parameters at logged steps only: a NaN gradient at step 2 of 5 makes
    the next objective non-finite, and training stops there with Divergence. Where the objective saturates
    (tanh(w)^2, finite at w = inf, as erf attention's) an infinite gradient sends SGD's w to inf with a finite
    objective: the parameters' check stops it at the next logged step (Adam's step is -inf/inf = NaN)."""
    from types import SimpleNamespace

    from attnrepro.jobs.fit import fit_replicas
    from attnrepro.lit.replica import Divergence

    class Bowl(torch.nn.Module):
        calls = 0

        def __init__(self):
            super().__init__()
            self.w = torch.nn.Parameter(torch.ones(3, 2, dtype=torch.float64))

        def loss(self, w):
            return (torch.tanh(w) ** 2 if saturating else 0.5 * w * w).sum(-1)

        def accumulate(self, backward):
            w = self.w * 1
            if Bowl.calls == 2:
                w.register_hook(lambda g: torch.full_like(g, -math.inf if saturating else math.nan))
            Bowl.calls += 1
            loss = self.loss(w)
            backward(loss.sum())
            return loss.detach()

        def evaluate(self):
            return {"loss": self.loss(self.w).detach()}

    tc = SimpleNamespace(optimizer=SimpleNamespace(value=optimizer), steps=20, log_every=5, tol_move=0.0)
    late = saturating and optimizer == "sgd"
    expected = ("non-finite parameters at step 5" if late
                else "non-finite training loss at step 3 in replicas \\[0, 1, 2\\]")
    with pytest.raises(Divergence, match=expected):
        fit_replicas(Bowl(), tc, 0.1, 0.0, 0.0, SimpleNamespace(accelerator="cpu", devices=1))
    assert Bowl.calls == (6 if late else 4)


@pytest.mark.parametrize("override,field", [
    ("task.d=1", "task.d"), ("model.m=0", "model.m"), ("train.lr=0", "train.lr"),
    ("train.lr=-1", "train.lr"), ("n_seeds=0", "n_seeds"), ("task.noise=0.5", "task.noise"),
    ("task.n=0", "task.n"),
])
def test_impossible_values_name_the_field(job_config, override, field):
    with pytest.raises(ConfigError, match=field.replace(".", r"\.")):
        job_config("experiment=xor_phase_dm", override)


@pytest.mark.parametrize("override,words", [
    ("model.attention=sofmax", ["sofmax", "attention"]),
    ("task.dd=3", ["dd"]),
    ("task.d=abc", ["abc", "d"]),
])
def test_bad_override_fails_at_composition(override, words):
    with pytest.raises(Exception) as err:
        compose(["experiment=xor_phase_dm", override])
    assert all(w in str(err.value) for w in words)


EARLY_STOP = ["experiment=xor_attention_variants", "task.d=16", "train.steps=3000", "train.log_every=10",
              "train.lr=1.0", "n_seeds=3", "train.fixed_steps=false"]


@pytest.mark.parametrize("criterion, reason", [(["train.tol=1e-9", "train.tol_grad=1e-30"], "objective stalled"),
                                              (["train.tol_grad=1e-6"], "converged")])
def test_early_stop_when_every_seed_has_converged(job_config, criterion, reason):
    """Softmax GD reaches loss ~0 fast: each seed's step of convergence (relative gradient <= tol_grad) or
    of stalling (relative objective change < tol) is recorded and training stops before the step budget,
    once all have; with tol_grad the record says per seed that it converged."""
    cfg, _ = job_config(*EARLY_STOP, *criterion)
    assert run_job(cfg)["status"] == "complete"
    rec = read_record(record_path(cfg.paths.outputs, cfg.experiment, job_key(cfg)))
    steps = rec["fit"]["stop_step"]
    assert len(steps) == 3 and all(0 < s <= rec["timings"]["steps"] for s in steps)
    assert rec["timings"]["steps"] == max(steps) < 3000
    assert rec["fit"]["stop"] == [reason] * 3
    if reason == "converged":
        assert rec["fit"]["converged"] == [True] * 3 and max(rec["fit"]["grad_rel"]) <= 1e-6


def test_without_a_tolerance_every_step_runs(job_config):
    """The softmax GD above, which stops within a few tens of steps once a tolerance is set, runs its
    whole budget without one."""
    full, _ = job_config(*EARLY_STOP, "train.steps=60", "train.fixed_steps=true")
    assert run_job(full)["status"] == "complete"
    assert read_record(record_path(full.paths.outputs, full.experiment, job_key(full)))["timings"]["steps"] == 60


FLAT_START = ["experiment=xor_sample_complexity_trained", "train=xor_gd", "task.d=256", "task.n_per_d=8",
              "n_seeds=2", "train.steps=400"]


def test_a_flat_start_is_not_convergence(job_config):
    """GD from paper A's near-uniform attention: the relative gradient starts below tol_grad (the
    gradient is O(1/d^2)), so without tol_move every seed 'converges' at the first log with its loss
    still at 1/2; with tol_move = 0.01 training goes on, and a seed counts only once its objective moved."""
    cfg, _ = job_config(*FLAT_START, "train.tol_move=0")
    run_job(cfg)
    rec = read_record(record_path(cfg.paths.outputs, cfg.experiment, job_key(cfg)))
    assert rec["timings"]["steps"] == cfg.train.log_every and rec["fit"]["stop"] == ["converged"] * 2
    assert all(abs(v - 0.5) < 0.01 for v in rec["metrics"]["train_loss"])
    cfg, _ = job_config(*FLAT_START)
    run_job(cfg)
    rec = read_record(record_path(cfg.paths.outputs, cfg.experiment, job_key(cfg)))
    start = rec["curves"]["train_loss"][0]
    assert rec["timings"]["steps"] > cfg.train.log_every
    for r, (stop, end) in enumerate(zip(rec["fit"]["stop"], rec["metrics"]["train_loss"], strict=True)):
        done = stop in ("converged", "objective stalled")
        assert done == (abs(end - start[r]) / start[r] > 0.01) or stop == "step cap"


def test_lbfgs_checks_its_gradient_at_every_step(job_config):
    """L-BFGS (each step up to 20 iterations) stops at the first step whose relative gradient meets
    tol_grad, not at the next logged step: with logs every 1000 steps a small tied job still stops
    early, its curves end at that step and every seed's recomputed gradient meets the tolerance."""
    cfg, _ = job_config("experiment=tied_interpolation_peak", "train=lbfgs_fullbatch", "task.d=16", "model.lam=0.01",
                        "task.alpha=0.2", "n_seeds=2", "train.steps=150", "train.log_every=1000", "train.tol_grad=1e-4")
    assert run_job(cfg)["status"] == "complete"
    rec = read_record(record_path(cfg.paths.outputs, cfg.experiment, job_key(cfg)))
    steps = rec["timings"]["steps"]
    assert max(rec["fit"]["stop_step"]) == steps < 150
    assert rec["curves"]["step"] == [0, steps]
    assert rec["fit"]["converged"] == [True, True] and max(rec["fit"]["grad_rel"]) <= 1e-4


def test_a_long_job_says_it_is_running(job_config, monkeypatch, capsys):
    """Every PROGRESS_S seconds a running job prints '<label>: running, <t> s', then stops when the job
    ends; the records' provenance does not follow jobs/heartbeat.py, so the job's record is unchanged."""
    from attnrepro.jobs import heartbeat

    monkeypatch.setattr(heartbeat, "PROGRESS_S", 0.05)
    cfg, _ = job_config("experiment=tied_interpolation_peak", "task.d=16", "model.lam=0.01", "task.alpha=0.2",
                        "n_seeds=2", "train.steps=150", "train.tol_grad=1e-4")
    assert run_job(cfg)["status"] == "complete"
    out = capsys.readouterr().out.splitlines()
    beats = [ln for ln in out if ": running, " in ln]
    assert beats and all(ln.startswith("[tied_interpolation_peak] job") for ln in beats)
    assert out.index(beats[-1]) < next(i for i, ln in enumerate(out) if ": complete in " in ln)
    assert [float(ln.rsplit(", ", 1)[1].split()[0]) for ln in beats] == sorted(
        float(ln.rsplit(", ", 1)[1].split()[0]) for ln in beats)


def test_a_blown_up_seed_is_diverged_not_converged(job_config):
    """GD at 1e6 times its step saturates the softmax: the gradient is exactly 0 with the loss risen above
    its start. Such a seed is 'diverged' (not converged, frozen there); a seed whose loss fell to its
    minimum still converged."""
    cfg, _ = job_config("experiment=xor_sample_complexity_trained", "train=xor_gd", "task.d=16", "task.n_per_d=2",
                        "train.lr=1000", "n_seeds=3", "train.steps=300")
    assert run_job(cfg)["status"] == "complete"
    d = read_record(record_path(cfg.paths.outputs, cfg.experiment, job_key(cfg)))["fit"]
    assert "diverged" in d["stop"]
    for stop, conv, start, end in zip(d["stop"], d["converged"], d["objective_start"], d["objective_end"]):
        assert conv == (stop == "converged")
        assert (stop == "diverged") == (end > start * 1.01), (stop, start, end)
        assert not conv or end < start


@pytest.mark.parametrize("overrides", [["train=adam_fullbatch", "train.tol_grad=0"],
                                       ["train=one_step", "train.tol_grad=1e-3"]])
def test_a_trained_run_has_a_stopping_test_or_says_its_steps_are_the_protocol(overrides):
    """tol_grad > 0, or train.fixed_steps=true (paper A's one step), one or the other: named in the error."""
    with pytest.raises(ConfigError, match=r"train\.tol_grad.*fixed_steps"):
        validate(compose(["experiment=tied_spectra", *overrides]))


def test_the_hydra_internals_the_grid_sweeper_uses():
    """The grid sweeper leans on Hydra 1.3 (pinned in pyproject.toml: hydra-core>=1.3.4,<1.4) in four places:
    it subclasses BasicSweeper (its __init__(max_batch_size, params) and setup() giving config, launcher and
    hydra_context), recognises the BasicLauncher to run jobs in its own process, and composes each job with
    the config loader's load_sweep_config. A Hydra that changes one of them fails here, by name."""
    import inspect

    import hydra
    from hydra._internal.config_loader_impl import ConfigLoaderImpl
    from hydra._internal.core_plugins.basic_launcher import BasicLauncher
    from hydra._internal.core_plugins.basic_sweeper import BasicSweeper

    from hydra_plugins.attnrepro_grid_sweeper.grid_sweeper import GridSweeper

    assert hydra.__version__.startswith("1.3.")
    assert list(inspect.signature(BasicSweeper.__init__).parameters)[1:3] == ["max_batch_size", "params"]
    setup = inspect.getsource(BasicSweeper.setup)
    assert all(f"self.{name} =" in setup for name in ("config", "launcher", "hydra_context"))
    assert list(inspect.signature(ConfigLoaderImpl.load_sweep_config).parameters)[1:] == ["master_config",
                                                                                       "sweep_overrides"]
    assert issubclass(GridSweeper, BasicSweeper) and inspect.isclass(BasicLauncher)


@pytest.mark.parametrize("overrides,message", [
    (["experiment=tied_interpolation_threshold", "train=lbfgs_fullbatch"],
     "model.family=psd_exact_fit is solved, not trained: it needs train=solved"),
    (["experiment=tied_spectra", "train=solved"], "train=solved is for a model its paper solves"),
    (["experiment=tied_interpolation_threshold", "model.max_iter=0"], "model.max_iter: must be >= 1"),
    (["experiment=xor_phase_dm", "train.steps=2"], "train=one_step is paper A's one gradient step"),
])
def test_solved_and_trained_models_take_their_own_train_options(overrides, message):
    """Dispatch by the papers' declared SOLVERS: a solved model takes train=solved (its settings are the
    model's), a trained one a training option; paper A's own train check lives in its config module."""
    with pytest.raises(ConfigError, match=message):
        validate(compose(["profile=smoke", *overrides]))


def test_the_shared_train_schema_holds_no_paper_field():
    """save_attention is paper A's (SparseXorTrainConfig): a paper-B job's train section has no such key, a
    paper-A job's has it."""
    b = compose(["profile=smoke", "experiment=tied_spectra"])
    a = compose(["profile=smoke", "experiment=xor_one_step_attention"])
    assert "save_attention" not in b.train and a.train.save_attention is True


def test_a_trained_module_moves_with_its_state(job_config):
    """Lightning moves the module to the CPU when fit ends (its strategy's teardown), and convergence()
    then reads the module's L_0 beside the problem's tensors: L_0 must be module state that moves with
    it, and no tensor may stay behind as a plain attribute. (L_0 was one: on the first GPU run,
    2026-12-04, it stayed on cuda:0 and every paper-B job failed with 'Expected all tensors to be on
    the same device'.) Checked here by moving the trained module to the meta device. The record names the
    device training ran on, not the CPU it ended on."""
    _, cfg = job_config(*STOPPING_CASES["L-BFGS to tol_grad"], "train.steps=3", "n_seeds=2")
    problem, module, _, _, timings = train(cfg, cfg.trainer)
    assert timings["device"] == "cpu" and module.initial_objective is not None
    module.to("meta")
    assert module.initial_objective.device.type == "meta"
    assert {t.device.type for t in [*module.parameters(), *module.buffers()]} == {"meta"}
    left = [name for name, v in vars(module).items()
            if isinstance(v, torch.Tensor) or (isinstance(v, list) and any(isinstance(x, torch.Tensor) for x in v))]
    assert left == [], f"tensors kept as plain attributes, not moved with the module: {left}"
