# attnrepro: `make reproduce-figures` and `make test` install what they need first.
PYTHON_BASE ?= python3
VENV        ?= .venv
PY          := $(VENV)/bin/python
CLI         := $(VENV)/bin/attnrepro
# torch goes in first, pinned: an unpinned torch pulls a multi-GB CUDA build.
TORCH_SPEC  ?= torch==2.13.0
PROFILE     ?= quick
STAMP       := $(VENV)/.installed

.PHONY: install test test-full reproduce-figures figures bench lint clean sync-wandb

install: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON_BASE) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet "$(TORCH_SPEC)"
	$(PY) -m pip install --quiet -e ".[dev]"
	touch $(STAMP)

test: install
	$(PY) -m pytest -q

test-full: install
	$(PY) -m pytest -q -m ""

reproduce-figures: install
	$(CLI) reproduce profile=$(PROFILE)

figures: install
	$(CLI) figures

bench: install
	$(PY) pipelines/bench.py

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
