# The two commands a newcomer needs:  make bench  and  make test.
# Both create .venv on first use and install the project into it.
#
# Where python3 already has torch and triton (a GPU machine such as our H200, which cannot reach a
# package registry), that Python is used as it is and nothing is downloaded. Elsewhere .venv gets
# torch, triton 3.6.0, numpy<2.4 and pytest from the package index pip is configured with. Which
# torch build that is depends on the index: this project's CPU machines serve the CPU wheel; from
# PyPI on Linux it is the CUDA build, which runs on the CPU too. For the CPU build from PyPI:
#     make test TORCH_PIP_ARGS="--index-url https://download.pytorch.org/whl/cpu"

PYTHON ?= python3
VENV   ?= .venv
VPY    := $(VENV)/bin/python
TORCH_SPEC ?= torch==2.13.0
TORCH_PIP_ARGS ?=
PYTEST_ARGS ?=
BENCH_ARGS ?=

.PHONY: test bench venv clean gpu-check

# A Python that already has torch and triton is used as it is, with the project on PYTHONPATH.
REUSE := $(shell $(PYTHON) -c 'import torch, triton' >/dev/null 2>&1 && echo yes)
ifeq ($(REUSE),yes)
RUN := PYTHONPATH=$(CURDIR)$${PYTHONPATH:+:$$PYTHONPATH} $(PYTHON)
venv:
	@$(PYTHON) -c 'import torch, triton, sys; print("[make] using", sys.executable, "with torch", torch.__version__, "and triton", triton.__version__, "as installed (no download)")'
	@$(PYTHON) -c 'import triton, sys; v = triton.__version__; v == "3.6.0" or print("[make] warning: fusedattn is tested with triton 3.6.0, found", v, file=sys.stderr)'
# (pytest only for make test: the bench does not need it)
NEED_PYTEST := @$(PYTHON) -c 'import pytest' >/dev/null 2>&1 || { echo "[make] pytest is missing from $(PYTHON) and there is no registry to install it from"; exit 1; }
else
RUN := $(VPY)
venv: $(VENV)/.installed
NEED_PYTEST := @true
endif

$(VENV)/.installed: pyproject.toml Makefile
	@echo "[make] creating $(VENV) and installing torch, triton 3.6.0 and the project"
	$(PYTHON) -m venv --clear $(VENV)
	$(VPY) -m pip install -q --upgrade pip
	$(VPY) -m pip install -q $(TORCH_PIP_ARGS) "$(TORCH_SPEC)"
	$(VPY) -m pip install -q -e ".[test,bench]"
	@touch $@

test: venv
	$(NEED_PYTEST)
	$(RUN) -m pytest -q $(PYTEST_ARGS)

bench: venv
	$(RUN) -m fusedattn.bench $(BENCH_ARGS)

# On a GPU machine: GPU tests, sanitizer and timings, logs written to $(OUT_DIR).
OUT_DIR ?= out
gpu-check: venv
	PYTHON="$(RUN)" bash scripts/gpu_check.sh $(OUT_DIR)

clean:
	rm -rf $(VENV) build *.egg-info
