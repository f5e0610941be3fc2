"""Training only the replicas still moving (lit.compaction): narrowed problems and optimiser states."""

import copy

import pytest
import torch

from attnrepro.jobs.fit import train
from attnrepro.lit.compaction import narrow_optimizer, take
from attnrepro.lit.replica import ReplicaModule
from attnrepro.papers.sparse_xor.problem import build as build_xor
from attnrepro.papers.tied_attention.problem import TiedAttentionProblem
from attnrepro.seeding import replica_generators


def test_a_narrowed_problem_holds_the_rows_it_took(job_config):
    """take(problem, rows): its objective and gradients are the full problem's rows (float64: the same numbers),
    its samples keep their position-major layout, and training it leaves the full problem as it was."""
    cfg, vcfg = job_config("experiment=xor_sample_complexity_trained", "task.d=16", "task.n_per_d=4", "n_seeds=4",
                           "train.dtype=float64")
    problem, _ = build_xor(vcfg.task, vcfg.model, vcfg.train, replica_generators(0, 4))
    full = problem.accumulate(lambda loss: loss.backward())
    rows = torch.tensor([3, 1])
    narrowed = take(problem, rows)
    assert problem.samples.x.transpose(1, 2).is_contiguous() and narrowed.samples.x.transpose(1, 2).is_contiguous()
    for p, q in zip(problem.parameters(), narrowed.parameters(), strict=True):
        torch.testing.assert_close(q.grad, p.grad[rows], rtol=0, atol=0)
        q.grad = None
    torch.testing.assert_close(narrowed.accumulate(lambda loss: loss.backward()), full[rows], rtol=0, atol=0)
    before = [p.detach().clone() for p in problem.parameters()]
    with torch.no_grad():
        for q in narrowed.parameters():
            q.add_(1.0)
    for p, b in zip(problem.parameters(), before, strict=True):
        assert torch.equal(p.detach(), b)


def test_a_narrowed_adam_goes_on_as_before():
    """Adam narrowed to rows (0, 2) after 5 steps takes, on those rows, the steps the full optimiser takes: its
    moments and step count went along."""
    torch.manual_seed(0)
    target = torch.randn(3, 4, dtype=torch.float64)
    full = torch.nn.Parameter(torch.zeros(3, 4, dtype=torch.float64))
    opt = torch.optim.Adam([full], lr=0.1)

    def step(p, o, t):
        o.zero_grad()
        ((p - t) ** 4).sum().backward()
        o.step()

    for _ in range(5):
        step(full, opt, target)
    keep = torch.tensor([0, 2])
    part = torch.nn.Parameter(full.detach()[keep].clone())
    other = torch.optim.Adam([full], lr=0.1)
    other.load_state_dict(copy.deepcopy(opt.state_dict()))  # its own step count
    narrow_optimizer(other, [part], keep)
    for _ in range(5):
        step(full, opt, target)
        step(part, other, target[keep])
    torch.testing.assert_close(part.detach(), full.detach()[keep], rtol=0, atol=0)


def test_a_stopped_replica_is_not_evaluated_again(job_config, monkeypatch):
    """After a seed stops, the objective is computed for the others only: the batch shrinks with every stop,
    and every seed ends where it ends with the narrowing off (all evaluated, the stopped ones held by
    L-BFGS); that each seed also ends where it ends alone: tests/test_runner.py."""
    _, cfg = job_config("experiment=tied_interpolation_peak", "train=lbfgs_fullbatch", "task.d=16", "task.alpha=0.2",
                        "model.lam=0.01", "train.tol_grad=3e-5", "train.steps=100", "n_seeds=4")
    batches = []
    accumulate = TiedAttentionProblem.accumulate

    def counted(self, backward):
        batches.append(next(self.parameters()).shape[0])
        return accumulate(self, backward)

    monkeypatch.setattr(TiedAttentionProblem, "accumulate", counted)
    problem, module, *_ = train(cfg, cfg.trainer)
    assert len(set(module.stop_step)) == 4, module.stop_step
    training = batches[:-1]  # the last: jobs.fit.convergence's check of every seed at its end point
    assert training[0] == 4 and training == sorted(training, reverse=True) and set(training) == {4, 3, 2, 1}
    assert batches[-1] == 4
    monkeypatch.setattr(ReplicaModule, "narrowing", False)
    batches.clear()
    held, module_held, *_ = train(cfg, cfg.trainer)
    assert set(batches) == {4} and module_held.stop_step == module.stop_step
    for p, q in zip(problem.parameters(), held.parameters(), strict=True):
        torch.testing.assert_close(p.detach(), q.detach(), rtol=1e-12, atol=1e-12)


def test_a_problem_without_the_replica_axis_is_refused_unless_it_says_so():
    """A buffer without a leading replica axis of the parameters' length: a one-line error naming the shapes;
    named in shared_buffers, it is accepted and every narrowed copy holds that very tensor."""
    class Shared(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.w = torch.nn.Parameter(torch.arange(6.0).reshape(3, 2))
            self.register_buffer("scale", torch.ones(5))

    with pytest.raises(ValueError, match="replica axis first.*'scale': \\(5,\\)"):
        ReplicaModule(Shared(), "sgd", 0.1, 10, 5)
    problem = Shared()
    problem.shared_buffers = ("scale",)
    ReplicaModule(problem, "sgd", 0.1, 10, 5)
    narrowed = take(problem, torch.tensor([2]))
    assert narrowed.scale is problem.scale and torch.equal(narrowed.w, problem.w[2:].detach())


def test_narrowing_is_off_for_lbfgs_only(monkeypatch):
    """Without narrowing only L-BFGS holds a stopped replica where it stopped: SGD and Adam are refused."""
    monkeypatch.setattr(ReplicaModule, "narrowing", False)
    problem = torch.nn.Linear(2, 3)
    with pytest.raises(ValueError, match="L-BFGS only"):
        ReplicaModule(problem, "adam", 0.1, 10, 5)
