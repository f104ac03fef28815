"""What only a GPU run reaches, checked on the CPU where the CPU can show it: GPUs told apart by their identity,
not their index; a rank's own GPU generator saved and restored whatever the allocation shows; fp16's overflow
check as one flag, reduced over the party and read once a step; the sharded classifier's per-step host reads;
NCCL's error handling and a device out-of-memory error named as this rank's own; at most two FV candidates in
flight to a dedicated validator."""
from __future__ import annotations

import os
from types import SimpleNamespace

import pytest
import torch
from torch.overrides import TorchFunctionMode

from fedmpi import comm
from fedmpi.fv import validator_client
from fedmpi.silo import precision as precision_module
from fedmpi.silo.precision import Precision
from fedmpi.store import rng


# ---------------------------------------------------------------- which GPU a rank has


def test_a_gpu_is_named_by_its_uuid_not_its_index(monkeypatch):
    """With one GPU bound per task every rank sees its GPU as device 0: the identity must still tell them
    apart, so that NCCL groups stay NCCL."""
    uuids = iter(["58d4a5a4-0000-1111-2222-333344445555", "9f00aa11-0000-1111-2222-333344445555"])
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda i: SimpleNamespace(uuid=next(uuids)))
    first, second = comm.gpu_identity(0), comm.gpu_identity(0)
    assert first == "GPU-58d4a5a4-0000-1111-2222-333344445555" and first != second
    monkeypatch.setitem(comm._STATE, "backend", "nccl")
    monkeypatch.setitem(comm._STATE, "gpus", [("n1", first), ("n1", second), ("n1", second)])
    assert comm.group_backend([0, 1]) == "nccl"
    assert comm.group_backend([0, 1, 2]) == "gloo"      # ranks 1 and 2 do share one GPU


def test_without_a_uuid_the_pci_address_names_the_gpu(monkeypatch):
    props = SimpleNamespace(uuid=None, pci_domain_id=0, pci_bus_id=0x3b, pci_device_id=0)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda i: props)
    assert comm.gpu_identity(0) == "PCI 0000:3b:00"


def test_nccl_errors_are_raised_in_the_rank_not_fatal_in_the_watchdog(monkeypatch):
    monkeypatch.delenv("TORCH_NCCL_ASYNC_ERROR_HANDLING", raising=False)
    comm.nccl_reports_errors()
    assert os.environ["TORCH_NCCL_ASYNC_ERROR_HANDLING"] == "2"
    monkeypatch.setenv("TORCH_NCCL_ASYNC_ERROR_HANDLING", "1")
    comm.nccl_reports_errors()
    assert os.environ["TORCH_NCCL_ASYNC_ERROR_HANDLING"] == "1"


def test_out_of_device_memory_is_this_ranks_failure_not_a_silent_peer():
    with pytest.raises(comm.DeviceOutOfMemory) as caught:
        with comm.naming_failures("round 3: party ms1m's local steps"):
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB (GPU 0; 79.1 GiB total)\n"
                                         "more lines")
    assert not isinstance(caught.value, comm.CommFailure)
    assert str(caught.value) == ("round 3: party ms1m's local steps: CUDA out of memory. Tried to allocate 2.00 GiB "
                                 "(GPU 0; 79.1 GiB total)")


# ---------------------------------------------------------------- the GPU generator in a checkpoint


class FakeCuda:
    """torch.cuda as a rank sees it on an allocation of `count` GPUs, its own being `current`."""

    def __init__(self, count: int, current: int):
        self.count, self.current = count, current
        self.states = {i: torch.full((16,), i, dtype=torch.uint8) for i in range(count)}

    def install(self, monkeypatch):
        cuda = torch.cuda
        monkeypatch.setattr(cuda, "is_available", lambda: True)
        monkeypatch.setattr(cuda, "is_initialized", lambda: True)
        monkeypatch.setattr(cuda, "device_count", lambda: self.count)
        monkeypatch.setattr(cuda, "current_device", lambda: self.current)
        monkeypatch.setattr(cuda, "get_rng_state", lambda device="cuda": self.states[self._index(device)].clone())
        monkeypatch.setattr(cuda, "get_rng_state_all", lambda: [self.states[i].clone() for i in range(self.count)])
        monkeypatch.setattr(cuda, "set_rng_state", self._set)
        monkeypatch.setattr(cuda, "set_rng_state_all", lambda states: [self._set(s, i) for i, s in enumerate(states)])

    def _index(self, device) -> int:
        return self.current if device == "cuda" else int(device)

    def _set(self, state, device="cuda"):
        index = self._index(device)
        if index >= self.count:
            raise IndexError(f"device {index} of {self.count}")
        self.states[index] = state.clone()


def test_a_rank_saves_and_restores_only_its_own_gpus_generator(monkeypatch):
    """Saved on GPU 2 of a 4-GPU node, restored on an allocation that shows the rank one GPU (its own, index 0)."""
    saved_on = FakeCuda(count=4, current=2)
    saved_on.install(monkeypatch)
    state = rng.capture_rng()
    assert torch.equal(state["cuda"], torch.full((16,), 2, dtype=torch.uint8))
    restored_on = FakeCuda(count=1, current=0)
    restored_on.install(monkeypatch)
    rng.restore_rng(state)
    assert torch.equal(restored_on.states[0], torch.full((16,), 2, dtype=torch.uint8))


def test_a_checkpoint_with_every_visible_gpus_generator_restores_the_own_one():
    saved = [torch.full((4,), i, dtype=torch.uint8) for i in range(4)]
    assert torch.equal(rng.own_gpu_state(saved, 1), saved[1])
    assert torch.equal(rng.own_gpu_state(torch.stack(saved), 3), saved[3])
    assert torch.equal(rng.own_gpu_state(saved[:1], 2), saved[0])


# ---------------------------------------------------------------- fp16's overflow check


class HostReads(TorchFunctionMode):
    """Counts the reads of a tensor's value into Python (each a host sync on a GPU)."""
    READS = {torch.Tensor.item, torch.Tensor.__bool__, torch.Tensor.__float__, torch.Tensor.__int__,
             torch.Tensor.tolist}

    def __init__(self):
        super().__init__()
        self.count = 0

    def __torch_function__(self, func, types, args=(), kwargs=None):
        self.count += func in self.READS
        return func(*args, **(kwargs or {}))


def scaling(group=None) -> Precision:
    precision = Precision("fp16", torch.device("cpu"), init_scale=8.0, group=group)
    precision.scaling = True        # what a CUDA device turns on; the arithmetic is the same on the CPU
    return precision


def grads(count: int, bad: int | None = None) -> list[torch.nn.Parameter]:
    params = []
    for i in range(count):
        p = torch.nn.Parameter(torch.zeros(3))
        p.grad = torch.full((3,), 8.0 * (i + 1))
        if i == bad:
            p.grad[1] = float("inf")
        params.append(p)
    return params


def test_fp16_unscales_and_checks_with_one_host_read_per_step():
    params = grads(200)
    with HostReads() as reads:
        assert scaling().unscale_and_check(params)
    assert reads.count == 1
    assert all(torch.equal(p.grad, torch.full((3,), float(i + 1))) for i, p in enumerate(params))


def test_fp16_overflow_skips_the_step_and_halves_the_scale():
    precision = scaling()
    assert not precision.unscale_and_check(grads(5, bad=3)) and precision.scale == 4.0
    found = precision_module.unscale_found_inf([torch.ones(2), torch.tensor([1.0, float("nan")], dtype=torch.float64)], 0.5,
                              torch.device("cpu"))
    assert found.tolist() == [1.0]


def test_fp16_skips_on_every_rank_of_the_party_when_one_overflows(monkeypatch):
    """The found-inf flag is reduced (MAX) over the party: a rank whose own gradients are finite skips too."""
    reduced = []

    def all_reduce(flag, op=None, group=None):
        reduced.append((op, group))
        flag.fill_(1.0)         # another rank of the party overflowed

    monkeypatch.setattr("fedmpi.silo.precision.dist.all_reduce", all_reduce)
    precision = scaling(group="party")
    assert not precision.unscale_and_check(grads(4)) and precision.scale == 4.0
    assert reduced == [(torch.distributed.ReduceOp.MAX, "party")]


# ---------------------------------------------------------------- the sharded classifier's host reads


def test_sampled_classifier_reads_its_step_counter_once_not_every_step():
    from fedmpi.models.heads import make_margin
    from fedmpi.models.sharded import ShardedClassifier

    torch.manual_seed(0)
    classifier = ShardedClassifier(40, 8, make_margin("arcface", 64.0, 0.5), sample_rate=0.25)
    embeddings, labels = torch.randn(6, 8), torch.tensor([0, 3, 7, 11, 20, 39])
    classifier(embeddings, labels)
    with HostReads() as reads:
        classifier(embeddings, labels)
    assert reads.count == 1      # the label check, which a GPU rank makes on the host before the step
    fresh = ShardedClassifier(40, 8, make_margin("arcface", 64.0, 0.5), sample_rate=0.25)
    fresh.load_state_dict(classifier.state_dict())          # a resumed run goes on from the saved step
    assert int(fresh.sample_step) == 2 and fresh._next_sample_step() == 2 and int(fresh.sample_step) == 3


# ---------------------------------------------------------------- FV's candidates to a dedicated validator


def test_at_most_two_candidates_are_in_flight_to_a_dedicated_validator(monkeypatch):
    sent, replies = [], []
    mpi = SimpleNamespace(send=lambda word, dest, tag: sent.append(("control", word)),
                          Iprobe=lambda source, tag: bool(replies), recv=lambda source, tag: replies.pop(0))
    monkeypatch.setattr(validator_client.comm, "mpi_comm", lambda: mpi)
    monkeypatch.setattr(validator_client.p2p, "isend",
                        lambda t, dst, group: sent.append(("backbone", float(t[0]))) or SimpleNamespace(wait=bool))
    endpoint = validator_client.RemoteEndpoint(3, ["lfw"], group=None)
    requests = [validator_client.Request("score", torch.full((2,), float(t)), ["lfw"]) for t in range(3)]
    for request in requests:
        endpoint.post(request)
    assert [s for s in sent if s[0] == "backbone"] == [("backbone", 0.0), ("backbone", 1.0)]
    replies.append({"lfw": 0.9})
    assert endpoint.progress() and requests[0].done
    assert [s for s in sent if s[0] == "backbone"][-1] == ("backbone", 2.0)
    assert sent.count(("control", "score")) == 3
