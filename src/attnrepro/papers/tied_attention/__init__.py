"""Paper B (Boncoraglio et al. 2026): single-head tied attention in high dimensions. Weight-decayed
ERM's test and training error, the spectrum of the learned weights, factorized vs direct training,
the interpolation threshold and power-law scaling laws, with the state evolution beside them."""

PROBLEMS = {"attention_indexed": "problem"}
SOLVERS = {"psd_exact_fit": "exact_fit_problem"}
CONFIG = "config"
FIGURES = ("figures.tied_error_vs_alpha", "figures.tied_factorized_vs_direct", "figures.tied_spectra",
           "figures.tied_scaling_laws", "figures.tied_error_decomposition", "figures.tied_bayes_gap",
           "figures.tied_interpolation_threshold")
THEORY = "theory_curves"
THEORY_SETTINGS = "theory_settings"
COMMANDS = {"compare-theory": "compare_theory"}
