PY ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
# mypy checks the whole package (core/ under strict rules: pyproject's [tool.mypy]).
TYPED := training_platform
export PIP_CONSTRAINT := $(CURDIR)/constraints.txt

.PHONY: setup setup-gpu test lint demo up ui clean

# make test runs the suite on two pytest-xdist workers (tests/conftest.py: which tests share a worker, and why);
# `make test XDIST=` runs it in one process.
XDIST ?= -n 2 --no-loadscope-reorder

setup: $(BIN)/tp

# Python >= 3.11 (pyproject's requires-python): said plainly, before pip says it in its own words.
PYCHECK = import sys; v = sys.version_info; sys.exit(0 if v >= (3, 11) else \
	f"error: training_platform needs Python >= 3.11; {sys.executable} is {v.major}.{v.minor} (make setup PY=python3.11)")

$(BIN)/tp: pyproject.toml constraints.txt
	@$(PY) -c '$(PYCHECK)'
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/pip install -q torch==2.13.0
	$(BIN)/pip install -q -e '.[dev,tracking,verl,bench]'  # bench: the anchors bench/ compares with (smoke-run by make test)
	$(BIN)/pip install -q --no-deps verl==0.9.1  # its requirements are the [verl] extra (no wandb)
	touch $(BIN)/tp

# The GPU stack (an NVIDIA node): verl with its vLLM rollout, pinned by constraints-gpu.txt (torch 2.11.0 + CUDA,
# vllm 0.24.0, transformers 5.9.0). Its own venv; never on a CPU machine (several GB of CUDA wheels).
# scripts/check_gpu_stack.sh checks that it resolves, scripts/verl_gpu_smoke.sh runs GRPO on it.
GPU_VENV ?= .venv-gpu
GPU_BIN := $(GPU_VENV)/bin

setup-gpu: $(GPU_BIN)/tp

$(GPU_BIN)/tp: export PIP_CONSTRAINT := $(CURDIR)/constraints-gpu.txt
$(GPU_BIN)/tp: pyproject.toml constraints-gpu.txt
	test -x $(GPU_BIN)/python || $(PY) -m venv $(GPU_VENV)
	$(GPU_BIN)/pip install -q -e '.[dev,tracking,verl]' 'verl[vllm]==0.9.1'
	$(GPU_BIN)/python -c "import torch, vllm; print(torch.__version__, torch.version.cuda, vllm.__version__)"
	touch $(GPU_BIN)/tp

test: setup
	$(BIN)/ruff check training_platform tests bench
	$(BIN)/ruff format --check training_platform tests bench
	$(BIN)/lint-imports  # the layers of DESIGN.md (.importlinter)
	$(BIN)/mypy $(TYPED)  # settings in pyproject's [tool.mypy]
	HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 $(BIN)/pytest -q --durations=30 --junitxml=var/junit.xml $(XDIST) tests  # var/junit.xml: every test's time, to find what to trim

lint: setup
	$(BIN)/ruff check training_platform tests bench
	$(BIN)/ruff format --check training_platform tests bench
	$(BIN)/lint-imports
	$(BIN)/mypy $(TYPED)

up: setup
	$(BIN)/tp up

# Rebuild the web UI (Vue 3 + Vite) into training_platform/api/static/ui (committed, so `make up` needs no Node).
ui:
	cd frontend && npm ci && npm run build

demo: setup
	$(BIN)/tp demo prepare
	$(BIN)/tp train configs/examples/sft_tiny.yaml

clean:
	rm -rf var .pytest_cache
