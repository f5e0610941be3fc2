"""Paper A (Han & Ghoshdastidar 2026): a one-layer, two-head softmax transformer learns sparse XOR
in one gradient step with polylog(d) parameters; feed-forward nets need Omega(d); linear and erf
attention fail."""

TASKS = {"sparse_xor": "problem"}
CONFIG = "config"
FIGURES = ("figures.xor_one_step_attention", "figures.xor_phase_dm", "figures.xor_attention_variants",
           "figures.xor_sample_complexity", "figures.xor_params_vs_ffnn")
THEORY = None
