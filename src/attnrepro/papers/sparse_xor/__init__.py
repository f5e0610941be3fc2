"""Paper A (Han & Ghoshdastidar 2026): a one-layer, two-head softmax transformer learns sparse XOR
in one gradient step with polylog(d) parameters; feed-forward nets need Omega(d); linear and erf
attention fail. Beyond the paper: k-sparse parity with k heads (kparity, kheads, kparity_problem)."""

PROBLEMS = {"sparse_xor": "problem", "k_parity": "kparity_problem"}
CONFIG = "config"
FIGURES = ("figures.xor_one_step_attention", "figures.xor_phase_dm", "figures.xor_attention_variants",
           "figures.xor_sample_complexity", "figures.xor_params_vs_ffnn", "figures.xor_k_parity")
THEORY = None
