# `make demo` and `make test` set themselves up: they create .venv and install what is needed.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
TEST_STAMP := $(VENV)/.installed-test
export OMPI_ALLOW_RUN_AS_ROOT := 1
export OMPI_ALLOW_RUN_AS_ROOT_CONFIRM := 1
export OMP_NUM_THREADS := 1
export PRTE_MCA_rmaps_default_mapping_policy := :oversubscribe

.PHONY: demo test venv bench clean

# torch build: cuda where an NVIDIA driver is present, else cpu (override: make venv TORCH=cuda). The CPU build
# comes from PyTorch's own index (PyPI has only the CUDA build); where that index cannot be reached, the CUDA
# build from PyPI is installed instead, which runs on CPU too. See README, "Installation".
TORCH ?= $(shell { test -e /dev/nvidiactl || command -v nvidia-smi; } >/dev/null 2>&1 && echo cuda || echo cpu)

$(STAMP): requirements.txt requirements-cpu.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	if [ "$(TORCH)" = cpu ]; then \
		$(PY) -m pip install --quiet --no-deps --timeout 20 --retries 1 -r requirements-cpu.txt \
		|| echo "note: the CPU build of torch could not be installed; using the CUDA build (runs on CPU)"; \
	fi
	$(PY) -m pip install --quiet -r requirements.txt
	touch $@

$(TEST_STAMP): $(STAMP) requirements-test.txt
	$(PY) -m pip install --quiet -r requirements-test.txt
	touch $@

venv: $(STAMP)

demo: $(STAMP)
	$(VENV)/bin/mpirun --bind-to none -n $$($(PY) -m fedmpi.layout --config configs/demo_cpu.yaml | $(PY) -c 'import json,sys; print(json.load(sys.stdin)["world"])') \
		$(PY) -m fedmpi.run --config configs/demo_cpu.yaml $(ARGS)

test: $(TEST_STAMP)
	$(PY) -m pytest tests -q -ra $(PYTEST_ARGS)

clean:
	rm -rf runs data .pytest_cache
