"""The one-call theory curve is the state evolution of the parts it names (law, channel, rule)."""

import pytest

from attnrepro.theory.erm_curve import erm_state_evolution
from attnrepro.theory.gaussian_rules import sobol
from attnrepro.theory.output_channel import SoftmaxChannel
from attnrepro.theory.spectral_laws import MarchenkoPastur
from attnrepro.theory.state_evolution import state_evolution_curve


def test_one_call_equals_the_parts():
    law = MarchenkoPastur(0.7)
    parts = state_evolution_curve(law, SoftmaxChannel(2, law.Q0, 1.0, sobol(4, 8, 3), 2.0, 1.0), [0.12], 0.1, 0.8, 2,
                                  1.0, 0.5, tol=1e-6, max_evals=40, nodes=200)
    (row,) = erm_state_evolution([0.12], lam=0.1, kappa=0.8, kappa0=0.7, Delta=1.0, beta=2.0, points=8, seed=3)
    assert row["converged"] and parts[0]["converged"]
    for k in ("test_error", "train_loss", "estimation_error", "eta", "delta", "eps"):
        assert row[k] == pytest.approx(parts[0][k], rel=1e-12), k
    (other,) = erm_state_evolution([0.12], lam=0.1, kappa=0.8, kappa0=0.7, Delta=1.0, beta=1.0, points=8, seed=3)
    assert abs(other["test_error"] - row["test_error"]) > 1e-6  # beta is passed through
