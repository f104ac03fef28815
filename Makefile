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

.PHONY: demo eval-demo test venv bench clean hsu-cpu hsu-cpu-long hsu-gpu fedface-cpu badparty-cpu fr-baselines-cpu \
	faces-devices-cpu privacy-audit-cpu bytecode gpu-check

# torch build: cuda where an NVIDIA driver is present, else cpu (override: make venv TORCH=cuda). The CPU build
# comes from PyTorch's own index (PyPI has only the CUDA build); where that index cannot be reached, the CUDA
# build from PyPI is installed instead, which runs on CPU too. See README, "Installation".
TORCH ?= $(shell { test -e /dev/nvidiactl || command -v nvidia-smi; } >/dev/null 2>&1 && echo cuda || echo cpu)

$(STAMP): requirements.txt requirements-cpu.txt pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	if [ "$(TORCH)" = cpu ]; then \
		$(PY) -m pip install --quiet --no-deps --timeout 20 --retries 1 -r requirements-cpu.txt \
		|| echo "note: the CPU build of torch could not be installed; using the CUDA build (runs on CPU)"; \
	fi
	$(PY) -m pip install --quiet -r requirements.txt
	$(PY) -m pip install --quiet --no-deps -e .   # `python -m fedmpi.run` and the fedmpi-* commands from any folder
	touch $@

$(TEST_STAMP): $(STAMP) requirements-test.txt
	$(PY) -m pip install --quiet -r requirements-test.txt
	touch $@

venv: $(STAMP)

# Every rank of every launch imports fedmpi: where Python may not write bytecode (PYTHONDONTWRITEBYTECODE, a
# read-only checkout) each would compile its sources again, about 0.1 s of CPU per rank. Written once here
# (only what changed since), read by every rank.
bytecode: $(STAMP)
	$(PY) -m compileall -q fedmpi jobs tools

demo: $(STAMP) bytecode
	$(VENV)/bin/mpirun --bind-to none -n $$($(PY) -m fedmpi.layout --world --config configs/demo_cpu.yaml) \
		$(PY) -m fedmpi.run --config configs/demo_cpu.yaml $(ARGS)

# The large-scale benchmarks end to end on synthetic IJB-B/IJB-C/MegaFace releases: a short demo run evaluates
# them in-run (eval.sets), then tools.evaluate scores its final checkpoint, one benchmark per rank.
EVAL_DEMO := fed.algorithm=fedavg fv.enabled=false optim.epochs=2 optim.milestones=[] checkpoint.every=8 \
	log.name=eval-demo eval.every=8 eval.sets.ijbb=synthetic eval.sets.ijbc=synthetic eval.sets.megaface=synthetic
eval-demo: $(STAMP) bytecode
	$(VENV)/bin/mpirun --bind-to none -n 5 $(PY) -m fedmpi.run --config configs/demo_cpu.yaml $(EVAL_DEMO)
	$(VENV)/bin/mpirun --bind-to none -n 3 $(PY) -m tools.evaluate runs/eval-demo --make-fixtures \
		--ijbb data/benchmarks/IJBB --ijbc data/benchmarks/IJBC --megaface data/benchmarks/megaface \
		--out runs/eval-demo/benchmarks

# Three pytest-xdist workers on 2 cores: much of the suite waits (Slurm jobs, launches, timeouts) or runs one thread
# in-process (with 2 workers the cores were busy 127 % of 200 %). Groups of tests (tests/conftest.py) start in
# collection order, the longest first (not xdist's order by count).
TEST_WORKERS ?= 3
test: $(TEST_STAMP) bytecode
	$(PY) -m pytest tests -q -ra -n $(TEST_WORKERS) --dist loadgroup --no-loadscope-reorder $(PYTEST_ARGS)

# The GPU path in one command of at most 8 minutes (bench/gpu_check.py, docs/GPU.md): the speed table (the trainer
# by default and option by option against a plain PyTorch loop, IR-50 and IR-100), the sharded classifier on CUDA, DP + fp16 + the sharded classifier, the cross-device exchange with
# SCAFFOLD and Krum, dedicated FV resumed bitwise, the startup and FV benchmarks on the cores. Without a GPU it
# says why the GPU parts are skipped and runs the rest on the CPU, scaled down.
gpu-check: $(STAMP) bytecode
	$(PY) -m bench.gpu_check $(ARGS)

# Hsu et al.'s claims at CPU scale (jobs/hsu_study.py, docs/results/README.md): M = 100 clients of 20 synthetic
# images, B = 10, E = 1, 40 rounds; FedAvg and FedAvgM (beta 0.9, 0.97) x C in {0.1, 0.05} x alpha in {100, 0} at 5
# eta_eff on seed 0, then each at its best eta_eff on seeds 1, 2: 84 runs into docs/results/hsu_cpu.md; the runs
# hold LOCK only while they run (released between runs once held LOCK_HOLD seconds)
hsu-cpu: $(STAMP) bytecode
	$(PY) -m jobs.reproduce hsu --scale cpu --folder docs/results/hsu-cpu --lock $(LOCK) --lock-hold $(LOCK_HOLD) \
		data.root=data $(ARGS)

# Hsu et al.'s alpha = 0 claim at length (jobs/hsu_long.py): FedAvg and FedAvgM beta 0.9 at C = 0.1 for 300 rounds,
# evaluated every 20, at the eta_eff hsu-cpu chose (its neighbours re-checked at alpha = 0) on seed 0, then the best
# on seeds 1, 2: 16 runs, about 45 minutes of 2 cores, into docs/results/hsu_cpu_long.md
hsu-cpu-long: $(STAMP) bytecode
	$(PY) -m jobs.reproduce hsu-long --scale cpu --folder docs/results/hsu-cpu-long --out docs/results/hsu_cpu_long.md \
		--lock $(LOCK) --lock-hold $(LOCK_HOLD) data.root=data $(ARGS)

# Hsu et al. at the paper's client size on one GPU, in at most 9 minutes (jobs/hsu_gpu.py, docs/GPU.md): the speed
# rows of IR-50 and IR-100, the vectorised cohort against the client loop, FedAvg and FedAvgM at alpha 100 and 0
# (M = 100 x 500, B = 64, C = 0.1) for as many rounds as fit, into docs/results/hsu_gpu.md
hsu-gpu: $(STAMP) bytecode
	$(PY) -m jobs.hsu_gpu $(ARGS)

clean:
	rm -rf runs data .pytest_cache

# FedFace's Table 1, Fig. 4-6 and a bad-party run at CPU scale (jobs/fedface_study.py) into docs/results/fedface_cpu.md
fedface-cpu: $(STAMP) bytecode
	$(PY) -m jobs.reproduce fedface --scale cpu $(ARGS)

# A bad party vs FedAvg, FedFace's FV and the robust rules, and DP-FedAvg's privacy-utility curve
# (jobs/badparty_study.py) into docs/results/badparty_cpu.md; LOCK: a flock file the runs hold while they run
# (released between runs once held LOCK_HOLD seconds)
LOCK ?= /tmp/fedmpi-heavy.lock
LOCK_HOLD ?= 300
badparty-cpu: $(STAMP) bytecode
	$(PY) -m jobs.reproduce badparty --scale cpu --folder docs/results/badparty-cpu --lock $(LOCK) \
		--lock-hold $(LOCK_HOLD) $(ARGS)

# The field's FR baselines (FedAwS, FedGC, PrivacyFace) beside FedAvg, PFM, FedFace and centralized, and FedFR beside
# FedAvg and FedFace on 12 small parties from a pretrained start (its pretraining run first), two seeds each
# (jobs/frbaselines_study.py), into docs/results/fr-baselines_cpu.md; the lock as in badparty-cpu
fr-baselines-cpu: $(STAMP) bytecode
	$(PY) -m jobs.reproduce fr-baselines --scale cpu --folder docs/results/fr-baselines-cpu --lock $(LOCK) \
		--lock-hold $(LOCK_HOLD) $(ARGS)

# A phone per person (jobs/faces_devices_study.py): a public pretraining, then 500 one-identity clients of the
# synthetic faces from it (10 local epochs at lr 0.1), positive-only FedAvg and FedAwS (one step; FedFR's 20-step
# form) with BatchNorm frozen, PrivacyFace on albums of 4, and FedAvg / FedAwS with BatchNorm by batch (the
# collapse), two seeds, verification and the synthetic IJB-C against the start itself, into
# docs/results/faces-devices-cpu/report.md (about 28 minutes on 2 cores; runs already there are reused); each run
# holds LOCK only while it runs
faces-devices-cpu: $(STAMP) bytecode
	$(PY) -m jobs.faces_devices_study --folder docs/results/faces-devices-cpu --lock $(LOCK) $(ARGS)

# What the server learns, measured (jobs/privacy_audit_study.py): small runs of every setting from one public
# pretraining, each recording its server's first round, audited by tools.audit (update inversion, template
# re-identification, membership), one table attack x setting and the reconstructions, into
# docs/results/privacy-audit-cpu/report.md; runs and audits already there are reused; each holds LOCK while it runs
privacy-audit-cpu: $(STAMP) bytecode
	$(PY) -m jobs.privacy_audit_study --folder docs/results/privacy-audit-cpu --lock $(LOCK) $(ARGS)
