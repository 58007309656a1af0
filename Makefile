# perception-judge — developer and user entry points. Everything runs from the repo-local .venv.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.perception-judge-installed
PIP := $(PY) -m pip --disable-pip-version-check
# pip on these machines prints one harmless warning per missing local mirror folder; keep installs readable.
PIP_FILTER := grep -v "^WARNING: Location 'file://" || true

export HF_HUB_OFFLINE := 1
export TRANSFORMERS_OFFLINE := 1
export HF_DATASETS_OFFLINE := 1
export WANDB_MODE ?= disabled
export TOKENIZERS_PARALLELISM := false

# Default suite: everything except the slow, DeepSpeed and GPU markers.
PYTEST_ARGS ?= -m "not slow and not deepspeed and not gpu"

.PHONY: install test test-slow test-deepspeed lint format demo bench clean help

help:
	@echo "make install         create .venv/ with the tested CPU set (idempotent)"
	@echo "make test            install if needed, then run the default test suite"
	@echo "make test-slow       the slow tests (learning signal, long runs)"
	@echo "make test-deepspeed  DeepSpeed ZeRO-2/3 on 2 CPU processes (installs deepspeed)"
	@echo "make demo            the whole pipeline at toy scale under runs/demo/ (FRESH=1 starts over)"
	@echo "make bench           every benchmark in bench/, one table of measured ratios"
	@echo "make lint            ruff"

install: $(STAMP)
	@:

$(STAMP): pyproject.toml constraints.txt
	@echo "==> installing into $(VENV)/ (first time: about 2 minutes)"
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	@$(PIP) install -q -c constraints.txt torch torchvision 2>&1 | $(PIP_FILTER)
	@$(PIP) install -q -c constraints.txt -e '.[dev]' 2>&1 | $(PIP_FILTER)
	@$(PY) -c "import torch, torchvision, transformers, trl, peft, accelerate, datasets" \
		|| { echo "install check failed: see the errors above"; exit 1; }
	@touch $(STAMP)
	@echo "==> installed: $$($(PY) -c 'import torch,transformers,trl;print("torch",torch.__version__,"transformers",transformers.__version__,"trl",trl.__version__)')"

test: install
	$(PY) -m pytest $(PYTEST_ARGS)

test-slow: install
	$(PY) -m pytest -m slow

test-deepspeed: install
	@$(PY) -c "import deepspeed" 2>/dev/null || DS_BUILD_OPS=0 $(PIP) install -q -c constraints.txt '.[deepspeed]' 2>&1 | $(PIP_FILTER)
	$(PY) -m pytest -m deepspeed

lint: install
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

format: install
	$(VENV)/bin/ruff check --fix .
	$(VENV)/bin/ruff format .

clean:
	rm -rf runs/demo .pytest_cache .ruff_cache

# The whole loop at toy scale (about 2 minutes on 2 CPU cores after the install). Re-running resumes;
# FRESH=1 starts over. Everything lands in runs/demo/.
demo: install
	$(PY) -m perception_judge.cli demo $(if $(FRESH),--fresh)

bench: install
	$(PY) bench/run_all.py
