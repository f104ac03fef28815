"""The malloc settings fedmpi.run starts its ranks under (fedmpi/core/malloc.py): where a node would be short of memory
under glibc's defaults (or when asked), added once, never over a user's; and what a cross-device CPU rank sets at
run time instead (keep_freed_buffers)."""
import os
import subprocess
import sys
from types import SimpleNamespace

from fedmpi.core.malloc import TUNABLES, keep_freed_buffers, running_tuned, tuned_environment
from fedmpi.memory.check import ranks_per_node
from fedmpi.run import memory_short


def test_the_tunables_are_added_once_beside_other_tunables():
    env = tuned_environment({"PATH": "/bin", "GLIBC_TUNABLES": "glibc.pthread.rseq=0"}, libc="glibc")
    assert env["GLIBC_TUNABLES"] == f"glibc.pthread.rseq=0:{TUNABLES}" and env["PATH"] == "/bin"
    assert tuned_environment(env, libc="glibc") is None          # the restarted process does not start again
    assert tuned_environment({}, libc="glibc")["GLIBC_TUNABLES"] == TUNABLES


def test_a_users_own_malloc_setting_or_the_opt_out_is_kept():
    for env in ({"GLIBC_TUNABLES": "glibc.malloc.arena_max=2"}, {"MALLOC_MMAP_THRESHOLD_": "131072"},
                {"FEDMPI_MALLOC": "default"}):
        assert tuned_environment(env, libc="glibc") is None
    assert tuned_environment({}, libc="musl") is None


def test_unset_or_auto_tunes_only_where_memory_is_short_and_tuned_always():
    for mode in ({}, {"FEDMPI_MALLOC": "auto"}):
        assert tuned_environment(mode, libc="glibc", short=lambda: False) is None
        assert tuned_environment(mode, libc="glibc", short=lambda: True)["GLIBC_TUNABLES"] == TUNABLES
    assert tuned_environment({"FEDMPI_MALLOC": "tuned"}, libc="glibc", short=lambda: False) is not None
    assert running_tuned({"GLIBC_TUNABLES": f"glibc.pthread.rseq=0:{TUNABLES}"}) and not running_tuned({})


def test_a_launch_is_short_where_its_node_would_not_hold_it_under_glibcs_defaults(monkeypatch):
    monkeypatch.setenv("OMPI_COMM_WORLD_LOCAL_SIZE", "5")
    demo = ["--config", "configs/demo_cpu.yaml", "run.device=cpu"]
    monkeypatch.setenv("FEDMPI_MEMORY_AVAILABLE", "64G")
    assert not memory_short(demo)                                  # the demo's 5 ranks fit: glibc's defaults
    monkeypatch.setenv("FEDMPI_MEMORY_AVAILABLE", "2G")
    assert memory_short(demo)                                      # 2 GB: the tuned malloc's smaller peaks
    assert not memory_short(["--config", "configs/hsu_cifar10.yaml", "run.device=cpu"])  # cross-device: never
    assert not memory_short(["--config", "configs/demo_cpu.yaml", "no.such.key=1"])     # main() reports it


def test_ranks_per_node_come_from_the_launcher():
    assert ranks_per_node({"OMPI_COMM_WORLD_LOCAL_SIZE": "4"}, 17) == 4
    assert ranks_per_node({"SLURM_NTASKS": "17", "SLURM_STEP_NUM_NODES": "2"}, 17) == 9
    assert ranks_per_node({}, 17) == 17


def test_the_headline_layout_is_short_with_the_estimates_error_as_margin(monkeypatch):
    """`mpirun -n 17 python -m fedmpi.run optim.batch_size=8` on a 24 GB node (23.1 GiB available): its estimate
    under glibc's defaults fits FIT_SHARE of the node, but not once raised by the estimate's 25 % error, so it starts
    under the tuned malloc; the decision's line is the estimate x 1.25 / 0.9 of available memory."""
    from fedmpi.config import load_config
    from fedmpi.layout import build_layout
    from fedmpi.memory.available import torch_build
    from fedmpi.memory.check import ESTIMATE_ERROR, FIT_SHARE, GB, _places

    assert FIT_SHARE / (1 + ESTIMATE_ERROR) == 0.72
    headline = ["optim.batch_size=8", "run.device=cpu"]
    cfg = load_config(None, headline)
    totals, _, _ = _places(cfg, build_layout(cfg), ["0"] * 17, [("0", 0)] * 17, {"0": 1}, None, "cpu",
                           torch_build(), tuned_malloc=False)
    estimate = totals["node 0 (17 ranks)"]
    monkeypatch.setenv("OMPI_COMM_WORLD_LOCAL_SIZE", "17")
    monkeypatch.setenv("FEDMPI_MEMORY_AVAILABLE", f"{int(23.1 * GB)}")
    assert estimate <= FIT_SHARE * 23.1 * GB            # what the check alone calls fitting
    assert memory_short(headline)
    line = estimate * 1.25 / 0.9
    monkeypatch.setenv("FEDMPI_MEMORY_AVAILABLE", f"{int(line) + 16}")
    assert not memory_short(headline)
    monkeypatch.setenv("FEDMPI_MEMORY_AVAILABLE", f"{int(line) - 16}")
    assert memory_short(headline)


def test_a_cross_device_cpu_rank_keeps_nothing_over_a_users_choice():
    for env in ({"FEDMPI_MALLOC": "default"}, {"FEDMPI_MALLOC": "tuned"}, {"GLIBC_TUNABLES": TUNABLES},
                {"MALLOC_TRIM_THRESHOLD_": "0"}, {"GLIBC_TUNABLES": "glibc.malloc.arena_max=2"}):
        assert not keep_freed_buffers(env, libc="glibc")
    assert not keep_freed_buffers({}, libc="musl")


KEEP_CHILD = """
import sys, torch
from fedmpi.core.malloc import keep_freed_buffers
def anon_mb():
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) / 1024 for line in f if line.startswith("RssAnon"))
kept = keep_freed_buffers({}) if sys.argv[1] == "keep" else None
before = anon_mb()
buffer = torch.ones(64, 64, 32, 32)     # conv1's activations of a CIFAR batch of 64: 16 MiB
del buffer
print(kept, anon_mb() - before)
"""


def test_a_freed_step_buffer_stays_with_the_rank_only_when_kept():
    """glibc's defaults map a 16.8 MB buffer on its own and hand it back when freed (its pages faulted in again by
    the next step); kept, it stays in the heap for the next step."""
    def grown(mode):
        out = subprocess.run([sys.executable, "-c", KEEP_CHILD, mode], capture_output=True, text=True,
                             env={**os.environ, "FEDMPI_MALLOC": "auto"}, check=True).stdout.split()
        return out[0], float(out[1])

    kept, kept_mb = grown("keep")
    default, default_mb = grown("default")
    assert kept == "True" and default == "None"
    assert kept_mb > 12 and default_mb < 2, (kept_mb, default_mb)


def test_cross_device_ranks_on_cpu_keep_their_buffers(monkeypatch):
    import torch
    from fedmpi.crossdevice import roles, setting, trainer

    calls = []
    monkeypatch.setattr(roles, "keep_freed_buffers", lambda: calls.append(1))
    monkeypatch.setattr(setting, "run_client_server", lambda *a: 0)
    monkeypatch.setattr(trainer, "run_client_trainer", lambda *a: 0)
    for rank, device in ((0, "cpu"), (1, "cpu"), (1, "cuda")):
        roles.run_cross_device(None, SimpleNamespace(rank=rank), SimpleNamespace(device=torch.device(device)), None)
    assert len(calls) == 2
