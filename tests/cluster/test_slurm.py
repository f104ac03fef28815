"""The sbatch scripts: sizing (no Slurm needed), then real runs on the one-node Slurm of slurm_cluster.py
(CPU mode: FEDMPI_CPU=1, gloo, srun --mpi=pmix). The scripts across nodes are in tests/cluster/test_multinode.py: the
3-party script sizing itself, preempted (USR1), requeued and resumed; the 12-party script on 4 nodes launched
with mpirun (FEDMPI_LAUNCHER=mpirun)."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import h5py
import pytest
import yaml

from slurm_cluster import slurm_cluster  # noqa: F401  (the session fixture)

ROOT = Path(__file__).resolve().parents[2]
SCRIPTS = {"3party": ROOT / "slurm" / "fedface_3party.sh", "12party": ROOT / "slurm" / "fedface_12party.sh"}
CONFIGS = {"3party": ROOT / "configs" / "fedface_3party.yaml", "12party": ROOT / "configs" / "fedface_12party.yaml"}
JOB_TIMEOUT_S = 600    # the 17-rank job: 45 s alone, 138 s in the suite here, over 240 s once in CI
ENDED = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY", "BOOT_FAIL", "DEADLINE"}

# The paper's layouts with everything else shrunk to a few seconds of CPU work per rank (what is under test
# here is the allocation, the placement and the launch, not FV or the evaluation).
SHRINK = ["optim.epochs=1", "optim.steps_per_epoch=2", "fed.K=1", "optim.milestones=[]", "optim.batch_size=4",
          "model.width=0.25", "model.embedding_size=128", "data.image_size=32", "data.val_pairs_per_fold=10",
          "data.val_sets=[lfw]", "data.workers=0", "fv.enabled=false"]


def shrink_parties(config: Path) -> list[str]:
    """Small synthetic sets for every party of a config (enough identities for a class on every rank of
    every split part)."""
    parties = yaml.safe_load(config.read_text())["parties"]
    out = []
    for p in parties:
        parts = p.get("data", {}).get("split_count", 1)
        out += [f"parties.{p['name']}.data.identities={16 * parts}", f"parties.{p['name']}.data.images_per_identity=2"]
    return out


def dry_run(script: Path, *args: str, **env: str) -> list[str]:
    out = subprocess.run(["bash", str(script), *args], capture_output=True, text=True, timeout=60,
                         env={**os.environ, "FEDMPI_DRY_RUN": "1", **env})
    assert out.returncode == 0, out.stderr
    return out.stdout.split()


def static_options(script: Path) -> list[str]:
    return [line.split(None, 1)[1].strip() for line in script.read_text().splitlines()
            if line.startswith("#SBATCH ")]


def rounds_logged(log: Path) -> list[int]:
    with h5py.File(log, "r") as f:
        return [int(r) for r in f["rounds/round"][:]]


# ---------------------------------------------------------------- sizing (no Slurm)


@pytest.mark.parametrize("name", ["3party", "12party"])
def test_static_allocation_is_the_sized_one_for_8_gpu_nodes(name):
    sized = dry_run(SCRIPTS[name])
    assert sized[0] == "sbatch"
    assert sized[-1] == str(SCRIPTS[name])
    allocation = [o for o in sized if o.startswith(("--nodes", "--ntasks-per-node", "--gres"))]
    assert allocation == ["--nodes=3", "--ntasks-per-node=8", "--gres=gpu:8"]
    static = static_options(SCRIPTS[name])
    assert [o for o in static if o.startswith(("--nodes", "--ntasks-per-node", "--gres"))] == allocation
    assert "--signal=B:USR1@300" in static and "--requeue" in static


def test_sizing_follows_the_site_and_the_overrides(tmp_path):
    four = dry_run(SCRIPTS["3party"], "fed.K=400", FEDMPI_GPUS_PER_NODE="4")
    assert "--nodes=5" in four and "--gres=gpu:4" in four and four[-1] == "fed.K=400"
    cpu = dry_run(SCRIPTS["12party"], FEDMPI_CPU="1")
    assert "--nodes=1" in cpu and "--ntasks-per-node=17" in cpu and "--gres=none" in cpu
    validators = dry_run(SCRIPTS["3party"], "fv.placement=dedicated", "fv.validators=3", FEDMPI_CPU="1")
    assert "--ntasks-per-node=20" in validators
    site = tmp_path / "site.env"
    site.write_text("FEDMPI_PARTITION=gpu\nFEDMPI_ACCOUNT=proj42\nFEDMPI_TIME=2-00:00:00\nFEDMPI_GPUS_PER_NODE=4\n")
    from_site = dry_run(SCRIPTS["3party"], FEDMPI_SITE_FILE=str(site))
    assert {"--partition=gpu", "--account=proj42", "--time=2-00:00:00", "--nodes=5"} <= set(from_site)
    env_wins = dry_run(SCRIPTS["3party"], FEDMPI_SITE_FILE=str(site), FEDMPI_GPUS_PER_NODE="8")
    assert "--nodes=3" in env_wins


def test_bad_arguments_are_refused_before_submitting():
    out = subprocess.run(["bash", str(SCRIPTS["3party"]), "fed.K"], capture_output=True, text=True, timeout=60,
                         env={**os.environ, "FEDMPI_DRY_RUN": "1"})
    assert out.returncode == 1
    assert "argument 'fed.K' is not an override: write key.path=value" in out.stderr
    out = subprocess.run(["bash", str(SCRIPTS["3party"]), "fed.K=0"], capture_output=True, text=True, timeout=60,
                         env={**os.environ, "FEDMPI_DRY_RUN": "1"})
    assert out.returncode == 1 and "fed.K: must be > 0, got 0" in out.stderr


def srun_line_in_a_job(tmp_path: Path, cpus_per_task: str | None, **slurm: str) -> list[str]:
    """The srun command the script runs inside a job (SLURM_* as Slurm sets them), recorded by a stand-in
    srun on PATH instead of launched."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(parents=True, exist_ok=True)
    (bin_dir / "scontrol").write_text("#!/bin/bash\n[ \"$1 $2\" = 'show hostnames' ] && echo node1\n")
    (bin_dir / "srun").write_text(f"#!/bin/bash\nprintf '%s\\n' \"$@\" > {tmp_path}/srun-args\n")
    for tool in ("scontrol", "srun"):
        (bin_dir / tool).chmod(0o755)
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "SLURM_JOB_ID": "42", "FEDMPI_CPU": "1",
           "SLURM_JOB_NODELIST": "node1", "SLURM_TASKS_PER_NODE": "17", "FEDMPI_ROOT": str(ROOT),
           "FEDMPI_PYTHON": os.environ.get("FEDMPI_PYTHON", sys.executable)}
    env.pop("SLURM_CPUS_PER_TASK", None)
    if cpus_per_task:
        env["SLURM_CPUS_PER_TASK"] = cpus_per_task
    env.update(slurm)
    subprocess.run(["bash", str(SCRIPTS["3party"]), f"log.dir={tmp_path}"], capture_output=True, text=True,
                   timeout=120, env=env)
    return (tmp_path / "srun-args").read_text().splitlines()


def test_srun_is_given_the_jobs_cpus_per_task(tmp_path):
    """srun of Slurm >= 22.05 does not inherit the job's --cpus-per-task: the script passes it on."""
    args = srun_line_in_a_job(tmp_path, "3")
    assert "--cpus-per-task=3" in args and args[args.index("--kill-on-bad-exit=1") + 1] == "--cpus-per-task=3"
    assert not any(a.startswith("--cpus-per-task") for a in srun_line_in_a_job(tmp_path / "none", None))


def test_a_requeued_job_on_a_smaller_allocation_resumes_with_the_parties_that_fit_it(tmp_path):
    """The 3-party layout needs 17 ranks; requeued onto 13 slots, ms1m goes from 8 ranks x 64 to 4 x 128 (its
    batch per step kept) and the run resumes with --resume auto."""
    args = srun_line_in_a_job(tmp_path, None, SLURM_RESTART_COUNT="1", SLURM_TASKS_PER_NODE="13")
    assert "--ntasks=13" in args
    assert args[args.index("--resume") + 1] == "auto"
    assert "parties.ms1m.ranks=4" in args and "parties.ms1m.batch_size=128" in args
    assert not any(a.startswith(("parties.ga.", "parties.vgg.")) for a in args)
    same = srun_line_in_a_job(tmp_path / "same", None, SLURM_RESTART_COUNT="1", SLURM_TASKS_PER_NODE="17")
    assert "--ntasks=17" in same and not any(a.startswith("parties.") for a in same)   # it fits: as it was


# ---------------------------------------------------------------- on the local Slurm


def job_id(submitted: subprocess.CompletedProcess) -> str:
    """The id `sbatch --parsable` printed (`ID` or `ID;cluster`)."""
    assert submitted.returncode == 0, f"{submitted.stdout}\n{submitted.stderr}"
    return submitted.stdout.strip().splitlines()[-1].split(";")[0]


def wait_until_ended(cluster, job: str, out: Path | None = None) -> dict[str, str]:
    """The job's scontrol record once it has ended, polled every 0.5 s (bounded). Not `sbatch --wait`: with the
    cluster's MinJobAge of an hour it polls after 2, 10, 42, 74, ... s, so a job of 45 s reported at 74 s."""
    return cluster.wait_for_state(job, ENDED, JOB_TIMEOUT_S, output=out)


def sbatch_until_ended(cluster, argv: list[str], out: Path) -> dict[str, str]:
    submitted = cluster.run(["sbatch", "--parsable", f"--output={out}", *argv], check=False, timeout=60,
                            env={"FEDMPI_CPU": "1"}, cwd=str(ROOT))
    return wait_until_ended(cluster, job_id(submitted), out)


def test_3party_script_runs_all_17_ranks(slurm_cluster, tmp_path):
    out = tmp_path / "job.out"
    args = [*SHRINK, *shrink_parties(CONFIGS["3party"]), f"data.root={tmp_path / 'data'}",
            f"log.dir={tmp_path / 'runs'}", "log.name=3party"]
    fields = sbatch_until_ended(slurm_cluster, ["--nodes=1", "--ntasks-per-node=17", "--gres=none",
                                                str(SCRIPTS["3party"]), *args], out)
    text = out.read_text() if out.exists() else ""
    assert (fields["JobState"], fields["ExitCode"]) == ("COMPLETED", "0:0"), text
    assert "17 ranks in CPU mode" in text
    log = tmp_path / "runs" / "3party" / "log.h5"
    assert rounds_logged(log) == [0, 1], text     # 0-based round numbers
    with h5py.File(log, "r") as f:
        assert f["rounds/loss"].shape == (2, 3)


def test_a_too_small_allocation_is_refused_with_the_options_it_needs(slurm_cluster, tmp_path):
    out = tmp_path / "job.out"
    fields = sbatch_until_ended(slurm_cluster, ["--nodes=1", "--ntasks=4", "--gres=none", str(SCRIPTS["3party"])],
                                out)
    text = out.read_text()
    assert (fields["JobState"], fields["ExitCode"]) == ("FAILED", "1:0"), text
    assert "allocation too small: the layout needs 17 ranks (server 1 + ms1m 8 + ga 4 + vgg 4)" in text
    assert "submit with sbatch --nodes=1 --ntasks-per-node=17 --gres=none" in text
