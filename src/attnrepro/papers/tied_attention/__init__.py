"""Paper B (Boncoraglio et al. 2026): single-head tied attention in high dimensions. Weight-decayed
ERM's test and training error, the spectrum of the learned weights, factorized vs direct training,
the interpolation threshold and power-law scaling laws, with the state evolution beside them."""

TASKS = {"attention_indexed": "problem"}
CONFIG = "config"
FIGURES = ("figures", "figure_threshold")
THEORY = "theory_curves"
