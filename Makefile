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

.PHONY: demo eval-demo test venv bench clean

$(STAMP): requirements.txt pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -r requirements.txt
	$(PY) -m pip install --quiet --no-deps -e .   # `python -m fedmpi.run` and the fedmpi-* commands from any folder
	touch $@

$(TEST_STAMP): $(STAMP) requirements-test.txt
	$(PY) -m pip install --quiet -r requirements-test.txt
	touch $@

venv: $(STAMP)

demo: $(STAMP)
	$(VENV)/bin/mpirun --bind-to none -n $$($(PY) -m fedmpi.layout --config configs/demo_cpu.yaml | $(PY) -c 'import json,sys; print(json.load(sys.stdin)["world"])') \
		$(PY) -m fedmpi.run --config configs/demo_cpu.yaml $(ARGS)

# The large-scale benchmarks end to end on synthetic IJB-B/IJB-C/MegaFace releases: a short demo run evaluates
# them in-run (eval.sets), then tools.evaluate scores its final checkpoint, one benchmark per rank.
EVAL_DEMO := fed.algorithm=fedavg fv.enabled=false optim.epochs=2 optim.milestones=[] checkpoint.every=8 \
	log.name=eval-demo eval.every=8 eval.sets.ijbb=synthetic eval.sets.ijbc=synthetic eval.sets.megaface=synthetic
eval-demo: $(STAMP)
	$(VENV)/bin/mpirun --bind-to none -n 5 $(PY) -m fedmpi.run --config configs/demo_cpu.yaml $(EVAL_DEMO)
	$(VENV)/bin/mpirun --bind-to none -n 3 $(PY) -m tools.evaluate runs/eval-demo --make-fixtures \
		--ijbb data/benchmarks/IJBB --ijbc data/benchmarks/IJBC --megaface data/benchmarks/megaface \
		--out runs/eval-demo/benchmarks

test: $(TEST_STAMP)
	$(PY) -m pytest tests -q -ra $(PYTEST_ARGS)

clean:
	rm -rf runs data .pytest_cache
