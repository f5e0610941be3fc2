# attnrepro: `make reproduce-figures` and `make test` install what they need first.
PYTHON_BASE ?= python3
VENV        ?= .venv
PY          := $(VENV)/bin/python
CLI         := $(VENV)/bin/attnrepro
# torch goes in first, pinned: an unpinned torch pulls a multi-GB CUDA build.
# A CUDA build: TORCH_SPEC=torch==2.13.0 TORCH_INDEX=https://download.pytorch.org/whl/cu128 (any CUDA wheel index).
TORCH_SPEC  ?= torch==2.13.0
TORCH_INDEX ?=
PROFILE     ?= quick
# The suite in TEST_WORKERS processes (pytest-xdist; 1: one process): a test file runs in one worker (its
# module fixtures once; the tests marked slurm are all in tests/test_slurm.py), and the workers share one
# background smoke reproduction (tests/conftest.py). (--dist loadgroup would not do: pytest-xdist 3.8 cannot
# rename pytest 9's node ids, so its groups are ignored.)
# PYTEST_ARGS: more pytest options (.ci/run: --durations).
TEST_WORKERS ?= 2
PYTEST      := $(PY) -m pytest -q $(if $(filter-out 1,$(TEST_WORKERS)),-n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder) $(PYTEST_ARGS)
STAMP       := $(VENV)/.installed

.PHONY: install test test-full reproduce-figures figures bench gpu-check lint clean sync-wandb

install: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON_BASE) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet "$(TORCH_SPEC)" $(if $(TORCH_INDEX),--index-url $(TORCH_INDEX))
	$(PY) -m pip install --quiet -e ".[dev]"
	touch $(STAMP)

test: install
	$(PYTEST)

test-full: install
	$(PYTEST) -m ""

reproduce-figures: install
	$(CLI) reproduce profile=$(PROFILE)

figures: install
	$(CLI) figures

bench: install
	$(PY) pipelines/bench.py

# A time-boxed slice of the paper profile on one GPU (outputs/gpu_check/): tied_error_vs_alpha and
# tied_scaling_laws at d = 400, xor_phase_dm to d = 16384; without CUDA, the same slice at d = 100.
gpu-check: install
	$(PY) pipelines/gpu_check.py $(GPU_CHECK_ARGS)

lint: install
	$(VENV)/bin/ruff check src pipelines tests

# Offline W&B runs (logger=wandb without a login) are in <outputs>/wandb/offline-run-*; runs
# uploaded before are skipped by `wandb sync`.
WANDB_RUNS  = $(or $(ATTNREPRO_OUTPUTS),outputs)/wandb
sync-wandb: install
	@if ls -d $(WANDB_RUNS)/offline-run-* >/dev/null 2>&1; then \
	  $(VENV)/bin/wandb sync $(WANDB_RUNS)/offline-run-*; \
	else echo "no offline W&B runs under $(WANDB_RUNS)"; fi

clean:
	rm -rf outputs/runs outputs/results outputs/figures outputs/report outputs/hydra outputs/theory outputs/derived outputs/bench
