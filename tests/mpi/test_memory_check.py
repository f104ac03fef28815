"""The launch's memory check (fedmpi/memory): the model's sizes against the real backbone and rules, the refusal
line for the paper's headline layout on a 24 GB node (faked MemAvailable, the real 17-rank layout), a GPU node
(faked free memory), the node's figure from /proc/meminfo, cgroups or FEDMPI_MEMORY_AVAILABLE, and under mpirun
one cheap refusal and `run.memory_check=false`."""
from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from fedmpi.comm.nodes import RankPlace
from fedmpi.layout import build_layout
from fedmpi.config import ConfigError, load_config
from fedmpi.core.malloc import TUNABLES
from fedmpi.core.state import BackboneState
from fedmpi.memory import available as avail
from fedmpi.memory.check import check_memory, judge
from fedmpi.memory.model import backbone_size, estimate, place_shared
from fedmpi.models.iresnet import iresnet
from jobs.mpirun import mpirun

ROOT = Path(__file__).resolve().parents[2]
GB = 1024 ** 3


@pytest.mark.parametrize("backbone, width, embedding, size", [("ir18", 1.0, 512, 112), ("ir18", 0.25, 128, 32),
                                                               ("ir50", 0.5, 256, 64), ("ir34", 0.125, 16, 16)])
def test_backbone_size_is_the_real_flat_state(backbone, width, embedding, size):
    state = BackboneState(iresnet(backbone, embedding, size, width))
    assert backbone_size(backbone, width, embedding, size) == (state.numel, state.n_trainable)


OVER_BACKBONES = [["fed.algorithm=fedaws", "fed.options.backbone=pfm"],
                  ["fed.algorithm=privacyface", "fed.options.backbone=pfm"],
                  ["fed.algorithm=fedgc", "fed.options.backbone=scaffold"],
                  ["fed.algorithm=fedaws", "fed.options.backbone=fedavgm"],
                  ["fed.algorithm=fedgc", "fed.options.backbone=feddyn", "fed.options.alpha=0.1"],
                  ["fed.algorithm=fedaws", "fed.options.backbone=mime_lite"]]


def test_the_rules_tensors_are_the_rules_own():
    """What the memory check reads before torch (the method's facts: its backbone's beside its parts') is what
    the built rule holds, for every rule and for class methods over other backbones."""
    from fedmpi.algorithms.registry import RULES
    from fedmpi.config.rules import algorithm_method
    from fedmpi.core.build import build_rule

    for overrides in [*([f"fed.algorithm={name}"] for name in RULES), *OVER_BACKBONES]:
        cfg = load_config(None, overrides)
        algorithm, facts, name = build_rule(cfg), algorithm_method(cfg), " ".join(overrides)
        params = [torch.zeros(5)]
        trainer = algorithm.init_trainer_state(params)
        server = algorithm.init_server_state(torch.zeros(5), {k: torch.zeros(5) for k in algorithm.down})
        # vectors of n values (a scalar counter, PrivacyFace's releases, is not one); the trainer's local momentum
        # apart (fed.local_momentum)
        count = lambda state: sum(1 for v in state.values() if isinstance(v, list)
                                  or (isinstance(v, torch.Tensor) and v.dim() > 0))
        trainer.pop("momentum", None)
        assert (len(facts.up), len(facts.down), facts.trainer_tensors, facts.server_tensors) == (
            len(algorithm.up), len(algorithm.down), count(trainer), count(server)), name
        assert facts.averages_at_server() == algorithm.server_averages, name
        assert bool(facts.global_state) == bool(algorithm.global_state), name
        assert facts.classes is type(algorithm.classes) and facts.training is algorithm.training, name
        assert facts.cohort_vectorisable == algorithm.cohort_vectorisable, name


def test_a_class_method_over_pfm_counts_pfms_momentum_on_every_trainer_rank():
    """fed.options.backbone=pfm: the trainer ranks of FedAwS, FedGC and PrivacyFace hold PFM's M (one
    backbone-sized tensor, n trainable values) as PFM's own ranks do: on a GPU one per trainer rank, on CPU one per
    party and node (node-shared), the rest of the estimate that of the method over FedAvg."""
    cfg, layout = headline("fed.algorithm=pfm")
    _, n = backbone_size(cfg.model.backbone, cfg.model.width, cfg.model.embedding_size, cfg.data.image_size)
    M = n * 4                                            # float32
    trainers = lambda need: [r for r in need.ranks if r.role.startswith("trainer")]
    pfm_gpu, pfm_cpu = estimate(cfg, layout, "cuda"), estimate(cfg, layout, "cpu")
    for name in ("fedaws", "fedgc", "privacyface"):
        over = load_config(None, [f"fed.algorithm={name}", "fed.options.backbone=pfm"])
        alone = load_config(None, [f"fed.algorithm={name}"])
        gpu_over, gpu_alone = estimate(over, layout, "cuda"), estimate(alone, layout, "cuda")
        assert len(trainers(gpu_over)) == 16
        for a, b, pfm in zip(trainers(gpu_over), trainers(gpu_alone), trainers(pfm_gpu)):
            assert a.gpu["rule state"] == b.gpu["rule state"] + M == pfm.gpu["rule state"], name
            assert {k: v for k, v in a.gpu.items() if k != "rule state"} == \
                   {k: v for k, v in b.gpu.items() if k != "rule state"}, name
        cpu_over, cpu_alone = estimate(over, layout, "cpu"), estimate(alone, layout, "cpu")
        for party in cpu_over.shared_bytes_per_party:
            assert cpu_over.shared_bytes_per_party[party] == cpu_alone.shared_bytes_per_party[party] + M \
                == pfm_cpu.shared_bytes_per_party[party], (name, party)


def headline(*overrides):
    cfg = load_config(None, list(overrides))
    return cfg, build_layout(cfg)


def test_the_unoverridden_headline_on_a_24_gb_node_is_refused_naming_batch_8():
    cfg, layout = headline()
    # 21 GB: what this 24 GB node has available with nothing else running
    line = judge(cfg, layout, ["vm"] * 17, list(range(17)), {"vm": 21 * GB})
    assert line.startswith("run.memory_check: this layout needs about 48.2 GB on node vm (17 ranks); a trainer "
                           "rank 2.94 GB, of it activations 2.43 GB at optim.batch_size=64, 112 px; it has 21.0 GB "
                           "available; optim.batch_size=8 fits (about 14.5 GB there)"), line
    assert line.endswith("run.memory_check=false starts it anyway") and "\n" not in line
    cfg8, layout8 = headline("optim.batch_size=8")
    assert judge(cfg8, layout8, ["vm"] * 17, list(range(17)), {"vm": 21 * GB}) is None
    # two nodes of 24 GB: each holds about half the ranks and fits at batch 32
    nodes = ["a"] * 9 + ["b"] * 8
    line = judge(cfg, layout, nodes, [*range(9), *range(8)], {"a": 21 * GB, "b": 21 * GB})
    assert "on node a (9 ranks)" in line and "optim.batch_size=32 fits" in line
    assert judge(cfg, layout, ["vm"] * 17, list(range(17)), {"vm": None}) is None   # unknown: not checked
    # 22.9 GB: batch 16 (about 19.3 GB) is within 90 % of it
    assert "optim.batch_size=16 fits" in judge(cfg, layout, ["vm"] * 17, list(range(17)), {"vm": int(22.9 * GB)})


def test_a_party_shares_one_copy_per_node_on_cpu_only():
    cfg, layout = headline("optim.batch_size=8")
    one = place_shared(estimate(cfg, layout), layout, ["vm"] * 17)
    assert len(one.shared) == 3                                  # one copy per party on the one node
    split = place_shared(estimate(cfg, layout), layout, ["a"] * 9 + ["b"] * 8)
    assert sorted(split.shared) == [("ga", "b"), ("ms1m", "a"), ("vgg", "b")]
    unshared = estimate(load_config(None, ["optim.batch_size=8", "run.share_node_memory=false"]), layout)
    assert sum(unshared.shared_bytes_per_party.values()) == 0
    per_rank = lambda need: {r.rank: r.host_total for r in need.ranks}
    assert per_rank(unshared)[2] - per_rank(one)[2] == pytest.approx(one.shared_bytes_per_party["ms1m"])


def test_on_a_gpu_node_the_activations_are_the_gpus():
    cfg, layout = headline()
    nodes, local = ["g"] * 17, list(range(17))
    line = judge(cfg, layout, nodes, local, {"g": 256 * GB}, {"g": [12 * GB] * 4}, device="cuda")
    # 17 ranks on 4 GPUs: GPU 0 runs local ranks 0, 4, 8, 12, 16 (the server and 4 trainers)
    assert "on GPU 0 of node g (5 ranks)" in line and "it has 12.0 GB available" in line, line
    assert "activations 2.43 GB at optim.batch_size=64" in line and "; optim.batch_size=32 fits" in line
    assert judge(cfg, layout, nodes, local, {"g": 256 * GB}, {"g": [16 * GB] * 4}, device="cuda") is None
    # forked workers (2 per trainer on a GPU) are the node's: on a small node they are what is refused first
    line = judge(cfg, layout, nodes, local, {"g": 16 * GB}, {"g": [80 * GB] * 4}, device="cuda")
    assert "on node g (17 ranks)" in line and "; data.workers=0 fits" in line, line


class FakeComm:
    """Rank 0's view of MPI_COMM_WORLD for check_memory: allgather gives rank 0's value and, for the others,
    no node figure (not their node's first rank) and their GPU's as `gpu(rank)` says (None: no GPU)."""

    def __init__(self, size: int, gpu=lambda rank: None):
        self.size, self.gpu = size, gpu

    def Get_rank(self) -> int:
        return 0

    def allgather(self, value):
        return [value] + [(None, self.gpu(r)) for r in range(1, self.size)]


def test_check_memory_reads_the_node_and_is_skipped_when_off(monkeypatch):
    cfg, layout = headline("run.device=cpu")
    places = [RankPlace(r, "vm", r, "127.0.0.1", None) for r in range(17)]
    monkeypatch.setenv(avail.AVAILABLE_ENV, "21G")
    monkeypatch.setenv("GLIBC_TUNABLES", TUNABLES)     # a rank fedmpi.run restarted under the tuned malloc
    with pytest.raises(ConfigError, match=r"needs about 48.2 GB on node vm \(17 ranks\).*optim.batch_size=8 fits"):
        check_memory(cfg, layout, FakeComm(17), places)
    monkeypatch.delenv("GLIBC_TUNABLES")               # glibc's defaults keep more of each step's activations
    with pytest.raises(ConfigError, match=r"needs about 79.7 GB on node vm \(17 ranks\).*optim.batch_size=8 fits"):
        check_memory(cfg, layout, FakeComm(17), places)
    check_memory(load_config(None, ["run.device=cpu", "run.memory_check=false"]), layout, FakeComm(17), places)


def test_check_memory_on_a_gpu_node_reads_each_ranks_own_gpu(monkeypatch):
    """4 GPUs of 12 GB free: each rank reports its own (local rank % 4); GPU 0's five ranks do not fit."""
    from fedmpi.memory import check

    fake = lambda local_rank: (4, local_rank % 4, 12 * GB)
    monkeypatch.setattr(check, "own_gpu_free", fake)
    monkeypatch.setenv(avail.AVAILABLE_ENV, "256G")
    cfg, layout = headline("run.device=cuda")
    places = [RankPlace(r, "g", r, "127.0.0.1", None) for r in range(17)]
    with pytest.raises(ConfigError, match=r"on GPU 0 of node g \(5 ranks\).*12.0 GB available; optim.batch_size=32 fits"):
        check_memory(cfg, layout, FakeComm(17, fake), places)
    fake = lambda local_rank: (4, local_rank % 4, 16 * GB)
    monkeypatch.setattr(check, "own_gpu_free", fake)
    check_memory(cfg, layout, FakeComm(17, fake), places)


def test_the_node_figure_from_meminfo_cgroups_or_the_variable(tmp_path, monkeypatch):
    meminfo = tmp_path / "meminfo"
    meminfo.write_text("MemTotal:       24000000 kB\nMemFree:  1000 kB\nMemAvailable:   22000000 kB\n")
    assert avail.meminfo_available(meminfo) == 22000000 * 1024
    v2 = tmp_path / "v2"
    (v2 / "job").mkdir(parents=True)
    (v2 / "job" / "memory.max").write_text("8589934592\n")
    (v2 / "job" / "memory.current").write_text("1073741824\n")
    self_v2 = tmp_path / "self-v2"
    self_v2.write_text("0::/job\n")
    assert avail.cgroup_room(v2, self_v2) == 7 * GB
    (v2 / "job" / "memory.max").write_text("max\n")
    assert avail.cgroup_room(v2, self_v2) is None
    v1 = tmp_path / "v1"
    (v1 / "memory" / "slurm").mkdir(parents=True)
    (v1 / "memory" / "slurm" / "memory.limit_in_bytes").write_text(str(4 * GB))
    (v1 / "memory" / "slurm" / "memory.usage_in_bytes").write_text(str(GB))
    self_v1 = tmp_path / "self-v1"
    self_v1.write_text("12:cpu,cpuacct:/slurm\n4:memory:/slurm\n")
    assert avail.cgroup_room(v1, self_v1) == 3 * GB
    monkeypatch.setenv(avail.AVAILABLE_ENV, "1.5G")
    assert avail.node_available() == int(1.5 * GB)
    assert avail.parse_bytes("2048") == 2048 and avail.parse_bytes("3MiB") == 3 * 1024 ** 2
    with pytest.raises(ValueError, match="FEDMPI_MEMORY_AVAILABLE='lots': expected bytes"):
        avail.parse_bytes("lots")


def test_under_mpirun_a_layout_that_cannot_fit_is_refused_in_one_line_before_torch(tmp_path):
    """The demo's 5 ranks on a node said to have 1 GB: every rank exits 2 within seconds, rank 0 says why once,
    no run folder is made. With run.memory_check=false the same launch goes past the check (to the next refusal:
    a log.name that exists)."""
    args = ["-m", "fedmpi.run", "--config", "configs/demo_cpu.yaml", f"log.dir={tmp_path}", "log.name=refused",
            f"data.root={tmp_path / 'data'}"]
    env = {avail.AVAILABLE_ENV: "1G"}
    started = time.monotonic()
    out = mpirun(5, args, timeout=120, env=env)
    took = time.monotonic() - started
    assert out.returncode != 0
    errors = [line for line in out.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and errors[0].startswith("error: run.memory_check: this layout needs about 1.9 GB on "
                                                     "node "), out.stderr
    assert ("(5 ranks); a trainer rank 0.38 GB, of it activations 0.05 GB at optim.batch_size=32, 32 px; it has 1.0 "
            "GB available; even optim.batch_size=1 does not fit: use more nodes or fewer ranks per node") in errors[0]
    assert not (tmp_path / "refused").exists() and not (tmp_path / "data").exists()
    assert took < 60, took
    (tmp_path / "taken").mkdir()
    (tmp_path / "taken" / "log.h5").write_text("")
    out = mpirun(5, [*args[:-2], "log.name=taken", f"data.root={tmp_path / 'data'}", "run.memory_check=false"],
                 timeout=120, env=env)
    assert out.returncode != 0 and "run.memory_check" not in out.stderr
    assert "log.name: " in out.stderr and "already exists" in out.stderr, out.stderr


def test_gpus_hidden_by_cuda_visible_devices_are_not_planned_for(tmp_path, monkeypatch):
    """A GPU node whose ranks are told CUDA_VISIBLE_DEVICES="" (or -1) runs on the CPU (torch sees no device): the
    memory check plans for the CPU too, and a rank asked for cuda that sees no GPU says so in one line."""
    (tmp_path / "nvidiactl").touch()
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    assert avail.gpu_present(tmp_path)
    for hidden in ("", " ", "-1", "-1,0"):
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", hidden)
        assert not avail.gpu_present(tmp_path), hidden
    for shown in ("0", "1,0", "GPU-4fccf6e1-3873-3aaa-1ca9-d02b12b34432"):
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", shown)
        assert avail.gpu_present(tmp_path), shown
    assert not avail.gpu_present(tmp_path / "no-such-dev")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    monkeypatch.setattr("torch.cuda.device_count", lambda: 0)
    with pytest.raises(RuntimeError, match=r"^run\.device=cuda, but this rank sees no GPU \(CUDA_VISIBLE_DEVICES=''\)$"):
        avail.own_gpu_free(0)
