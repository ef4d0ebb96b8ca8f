# The two commands a newcomer needs:  make bench  and  make test.
# Both create .venv on first use and install the project into it.
#
# Where the chosen Python already has torch and triton (a GPU machine such as our H200, which cannot
# reach a package registry), the venv reuses them (--system-site-packages) and the project is linked
# in with a .pth file: nothing is downloaded. Elsewhere the venv gets torch (CPU build), triton
# 3.6.0, numpy<2.4 and pytest from the registry.

PYTHON ?= python3
VENV   ?= .venv
VPY    := $(VENV)/bin/python
TORCH_SPEC ?= torch==2.13.0
PYTEST_ARGS ?=
BENCH_ARGS ?=

.PHONY: test bench venv clean gpu-check

venv: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml Makefile
	@if $(PYTHON) -c 'import torch, triton' >/dev/null 2>&1; then \
	  echo "[make] $(PYTHON) already has torch and triton: reusing them (no download)"; \
	  $(PYTHON) -m venv --system-site-packages --without-pip --clear $(VENV) || exit 1; \
	  site=$$($(VPY) -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])'); \
	  echo "$(CURDIR)" > "$$site/fusedattn-dev.pth"; \
	  $(VPY) -c 'import torch, triton; print("[make] torch", torch.__version__, "triton", triton.__version__)'; \
	  $(VPY) -c 'import triton, sys; v = triton.__version__; v == "3.6.0" or print("[make] warning: fusedattn is tested with triton 3.6.0, found", v, file=sys.stderr)'; \
	  $(VPY) -c 'import pytest' >/dev/null 2>&1 || { echo "[make] pytest is missing from $(PYTHON)"; exit 1; }; \
	else \
	  echo "[make] creating $(VENV) and installing torch, triton 3.6.0 and the project"; \
	  $(PYTHON) -m venv --clear $(VENV) || exit 1; \
	  $(VPY) -m pip install -q --upgrade pip || exit 1; \
	  $(VPY) -m pip install -q "$(TORCH_SPEC)" || exit 1; \
	  $(VPY) -m pip install -q -e ".[test,bench]" || exit 1; \
	fi
	@touch $@

test: venv
	$(VPY) -m pytest -q $(PYTEST_ARGS)

bench: venv
	$(VPY) -m fusedattn.bench $(BENCH_ARGS)

# On a GPU machine: GPU tests, sanitizer and timings, logs written to $(OUT_DIR).
OUT_DIR ?= out
gpu-check: venv
	bash scripts/gpu_check.sh $(OUT_DIR)

clean:
	rm -rf $(VENV) build *.egg-info
