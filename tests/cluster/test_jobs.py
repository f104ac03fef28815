"""jobs/: rank placement, the paper's sweeps, site settings (no Slurm), then submitit runs on the one-node
Slurm of slurm_cluster.py (CPU mode)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import h5py
import pytest

from fedmpi.config import load_config
from jobs.placement import allocation, expand_tasks_per_node, hosts_per_rank, place
from jobs.site import load_site
from jobs.sweep_plans import plan
from slurm_cluster import slurm_cluster  # noqa: F401  (the session fixture)

ROOT = Path(__file__).resolve().parents[2]
THREE = {"world": 17, "server": 1, "parties": {"ms1m": 8, "ga": 4, "vgg": 4}, "validators": 0}
TWELVE = {"world": 17, "server": 1, "validators": 0,
          "parties": {**{f"ms1m_{i}": 2 for i in range(4)}, **{f"ga_{i}": 1 for i in range(4)},
                      **{f"vgg_{i}": 1 for i in range(4)}}}


# ---------------------------------------------------------------- placement


def test_3party_on_8_gpu_nodes_keeps_each_party_on_one_node():
    alloc = allocation(THREE, 8, gpus=True)
    assert (alloc.nodes, alloc.tasks_per_node) == (3, 8)
    assert alloc.sbatch_options() == ["--nodes=3", "--ntasks-per-node=8", "--gres=gpu:8"]
    nodes = place(THREE, [8, 8, 8])
    assert nodes == [list(range(1, 9)), list(range(9, 17)), [0]]
    assert hosts_per_rank(nodes, ["n1", "n2", "n3"]) == ["n3"] + ["n1"] * 8 + ["n2"] * 8


def test_12party_on_8_gpu_nodes_never_splits_a_party():
    nodes = place(TWELVE, [8, 8, 8])
    assert nodes == [list(range(1, 9)), list(range(9, 17)), [0]]


def test_a_party_larger_than_a_node_takes_whole_nodes():
    alloc = allocation(THREE, 4, gpus=True)
    assert (alloc.nodes, alloc.tasks_per_node) == (5, 4)
    assert place(THREE, [4] * 5) == [[1, 2, 3, 4], [5, 6, 7, 8], [9, 10, 11, 12], [13, 14, 15, 16], [0]]


def test_dedicated_validators_go_with_the_server():
    layout = {**THREE, "world": 19, "validators": 2}
    assert place(layout, [8, 8, 8]) == [list(range(1, 9)), list(range(9, 17)), [0, 17, 18]]


def test_cpu_mode_fits_on_one_node():
    alloc = allocation(THREE, 17, gpus=False)
    assert alloc.sbatch_options() == ["--nodes=1", "--ntasks-per-node=17", "--gres=none"]
    assert place(THREE, [20]) == [list(range(17))]


def test_uneven_nodes_place_every_rank_once_within_capacity():
    nodes = place(THREE, [6, 6, 6])
    assert sorted(r for n in nodes for r in n) == list(range(17))
    assert [len(n) <= 6 for n in nodes] == [True] * 3
    assert nodes[0] == [1, 2, 3, 4, 5, 6]          # MS1M fills a node, its last 2 ranks go on together


def test_too_small_an_allocation_names_the_need():
    with pytest.raises(ValueError, match=r"the layout needs 17 ranks \(server 1 \+ ms1m 8 \+ ga 4 \+ vgg 4\), "
                                         r"the nodes offer 16 slots \(8, 8\)"):
        place(THREE, [8, 8])


def test_slurm_tasks_per_node_is_expanded():
    assert expand_tasks_per_node("8(x3),4") == [8, 8, 8, 4]
    assert expand_tasks_per_node("17") == [17]
    with pytest.raises(ValueError, match="cannot read"):
        expand_tasks_per_node("8(3)")


# ---------------------------------------------------------------- sweeps


def test_fig4_is_six_settings_by_five_methods():
    runs = {r.name: r for r in plan("fig4")}
    assert len(runs) == 30
    assert "fed.K=1600" in runs["c-pfm"].overrides
    assert {"model.head=cosface", "fed.K=100"} <= set(runs["d-fedavg"].overrides)
    assert "model.backbone=ir34" in runs["e-centralized"].overrides
    assert runs["f-fedface"].config == "configs/fedface_12party.yaml"
    assert runs["a-fedface"].overrides[-2:] == ("fed.algorithm=pfm", "fv.enabled=true")
    assert runs["a-fedavg-fv"].overrides[-2:] == ("fed.algorithm=fedavg", "fv.enabled=true")
    assert runs["a-centralized"].overrides[-3:] == ("fed.setting=centralized", "fed.algorithm=fedavg",
                                                    "fv.enabled=false")


def test_table1_and_fig5():
    table = {r.name: r for r in plan("table1")}
    assert len(table) == 18
    assert table["ir34-arcface-solo-ga"].overrides[-4:] == ("fed.setting=solo", "fed.algorithm=fedavg",
                                                           "fv.enabled=false", "fed.solo_party=ga")
    fig5 = {r.name: r for r in plan("fig5")}
    assert sorted(fig5) == ["fedavg-fv-local", "fedavg-fv-moving", "fedface-local", "fedface-moving"]
    assert fig5["fedface-moving"].overrides[-1] == "fv.norm=moving"


def test_the_rules_sweep_runs_every_registered_rule_with_and_without_fv():
    from fedmpi.algorithms.registry import RULES

    runs = {r.name: r for r in plan("rules")}
    assert sorted(runs) == sorted([*RULES, *(f"{name}-fv" for name in RULES)])
    assert runs["pfm-fv"].overrides[-2:] == ("fed.algorithm=pfm", "fv.enabled=true")


@pytest.mark.parametrize("name", ["fig4", "table1", "fig5"])
def test_every_planned_run_is_a_valid_config(name):
    for run in plan(name):
        load_config(ROOT / run.config, list(run.overrides))


def test_only_and_extra_overrides():
    runs = plan("fig4", only=["a-fedavg,b-*"], extra=["optim.epochs=1"])
    assert [r.name for r in runs] == ["a-fedavg", "b-centralized", "b-fedavg", "b-fedavg-fv", "b-pfm", "b-fedface"]
    assert all(r.overrides[-1] == "optim.epochs=1" for r in runs)
    with pytest.raises(ValueError, match="--only zz: no run of fig4 matches"):
        plan("fig4", only=["zz"])
    with pytest.raises(ValueError, match="unknown sweep 'fig9'"):
        plan("fig9")


def test_sweep_dry_run_prints_the_plan_without_slurm(tmp_path):
    out = subprocess.run([sys.executable, "-m", "jobs.sweep", "fig5", "--dry-run", "--folder", str(tmp_path)],
                         capture_output=True, text=True, timeout=60, cwd=str(ROOT))
    assert out.returncode == 0, out.stderr
    assert "fedface-moving: 17 ranks on 3 node(s) x 8 GPUs" in out.stdout
    assert f"log.dir={tmp_path}/runs log.name=fedface-moving" in out.stdout
    assert out.stdout.strip().endswith(f"4 runs; logs under {tmp_path}/runs")
    assert not (tmp_path / "index.json").exists()


# ---------------------------------------------------------------- site settings


def test_site_file_with_the_environment_winning(tmp_path):
    site_file = tmp_path / "site.env"
    site_file.write_text("FEDMPI_PARTITION=gpu\nFEDMPI_GPUS_PER_NODE=4\nFEDMPI_VENV=/opt/venv\n"
                         "FEDMPI_MODULES=\"cuda/12 openmpi/5\"\n")
    site = load_site({"FEDMPI_SITE_FILE": str(site_file), "FEDMPI_GPUS_PER_NODE": "8"})
    assert (site.partition, site.gpus_per_node, site.python) == ("gpu", 8, "/opt/venv/bin/python")
    assert "module load cuda/12 openmpi/5" in site.setup_lines()
    with pytest.raises(ValueError, match="FEDMPI_CPU='yes': must be 0 or 1"):
        load_site({"FEDMPI_SITE_FILE": str(site_file), "FEDMPI_CPU": "yes"})
    with pytest.raises(ValueError, match="no such file"):
        load_site({"FEDMPI_SITE_FILE": str(tmp_path / "missing.env")})


# ---------------------------------------------------------------- on the local Slurm

# The CPU demo's model and layout (server + 2/1/1) or smaller, and two rounds of one small step.
SMALL = ["optim.epochs=1", "optim.steps_per_epoch=2", "fed.K=1", "optim.milestones=[]", "optim.batch_size=4",
         "model.width=0.25", "model.embedding_size=128", "data.image_size=32", "data.val_pairs_per_fold=10",
         "data.val_sets=[lfw]", "data.workers=0"]
ONE_RANK_PARTIES = [f"parties.{p}.{k}" for p in ("ms1m", "ga", "vgg")
                    for k in ("ranks=1", "data.identities=16", "data.images_per_identity=2")]
WAIT_S = 300
DEMO = "configs/demo_cpu.yaml"


def cpu_env(tmp_path: Path) -> dict:
    return {**os.environ, "FEDMPI_CPU": "1", "PYTHONPATH": str(ROOT)}


def test_submit_one_run_returns_its_result(slurm_cluster, tmp_path):
    argv = [sys.executable, "-m", "jobs.submit", "--config", "configs/demo_cpu.yaml", "--timeout", str(WAIT_S),
            *SMALL, "fv.enabled=false", f"data.root={tmp_path / 'data'}", f"log.dir={tmp_path / 'runs'}",
            "log.name=one"]
    out = subprocess.run(argv, capture_output=True, text=True, timeout=WAIT_S + 60, env=cpu_env(tmp_path),
                         cwd=str(ROOT))
    assert out.returncode == 0, out.stdout + out.stderr
    result = json.loads(out.stdout)
    assert result["state"] == "COMPLETED" and result["exit_status"] == 0
    assert result["log"] == str(tmp_path / "runs" / "one" / "log.h5")
    with h5py.File(result["log"], "r") as f:
        assert list(f["rounds/round"][:]) == [0, 1]   # 0-based round numbers
        assert f.attrs["run_name"] == "one"


def test_sweep_of_3_runs_in_2_settings_completes_with_its_index(slurm_cluster, tmp_path):
    """Two methods in setting a (the rule differs), two settings for PFM (the head differs); 3 runs over
    --parallel 2, so the array's throttle holds one back."""
    folder = tmp_path / "sweep"
    argv = [sys.executable, "-m", "jobs.sweep", "fig4", "--only", "a-fedavg,a-pfm,d-pfm", "--wait",
            "--parallel", "2", "--timeout", str(WAIT_S), "--folder", str(folder), *SMALL, *ONE_RANK_PARTIES,
            f"data.root={tmp_path / 'data'}"]
    out = subprocess.run(argv, capture_output=True, text=True, timeout=WAIT_S + 60, env=cpu_env(tmp_path),
                         cwd=str(ROOT))
    assert out.returncode == 0, out.stdout + out.stderr
    index = json.loads((folder / "index.json").read_text())
    runs = {r["name"]: r for r in index["runs"]}
    assert sorted(runs) == ["a-fedavg", "a-pfm", "d-pfm"]
    assert len({r["array_job"] for r in runs.values()}) == 1          # one layout: one job array
    assert len({r["job_id"] for r in runs.values()}) == 3
    for name, run in runs.items():
        assert (run["state"], run["exit_status"], run["world"]) == ("COMPLETED", 0, 4), run
        assert run["log"] == str(folder / "runs" / name / "log.h5")
        with h5py.File(run["log"], "r") as f:
            assert f.attrs["algorithm"] == name.split("-")[1]
            assert ("head: cosface" in f["config"][()].decode()) == name.startswith("d-")


def test_a_job_that_dies_or_is_cancelled_is_reported_within_the_bound(slurm_cluster, tmp_path):
    from jobs.submit import submit_run
    from jobs.watch import wait_for

    site = load_site({"FEDMPI_CPU": "1"})
    # files that exist but hold no record: the launch's file check passes them, the reader fails inside the job
    broken = tmp_path / "broken"
    broken.mkdir()
    for name in ("train.rec", "train.idx"):
        (broken / name).write_bytes(b"")
    dies = submit_run(DEMO, [*SMALL, *ONE_RANK_PARTIES, "parties.ga.data.kind=rec",
                              f"parties.ga.data.path={broken}", f"data.root={tmp_path / 'data'}",
                              f"log.dir={tmp_path / 'runs'}", "log.name=dies"], site=site, workdir=ROOT)
    cancelled = submit_run(DEMO, [*ONE_RANK_PARTIES, "fv.enabled=false", f"data.root={tmp_path / 'data'}",
                                   f"log.dir={tmp_path / 'runs'}", "log.name=cancelled"], site=site, workdir=ROOT)
    slurm_cluster.wait_for_state(cancelled.job_id, {"RUNNING"}, WAIT_S)
    slurm_cluster.run(["scancel", cancelled.job_id])
    started = time.monotonic()
    outcomes = wait_for([dies, cancelled], timeout_s=WAIT_S, poll_s=1.0)
    assert time.monotonic() - started < WAIT_S
    assert outcomes[dies.job_id].state == "FAILED", outcomes[dies.job_id]
    assert outcomes[dies.job_id].result is None
    assert "without a result" in outcomes[dies.job_id].error
    assert outcomes[cancelled.job_id].state == "CANCELLED"
    assert dies.state == "FAILED" and cancelled.state.startswith("CANCELLED")   # submitit itself sees it too
