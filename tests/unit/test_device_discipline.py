"""Device discipline without a GPU (tests/support/device_discipline.py): the server's GPU code paths run with their device
set to cuda:0 while computing on the CPU, and any tensor left on the host where the device is needed raises as
CUDA would. Covered: every aggregator (the mean, each robust rule, DP's Gaussian mean) on the silo exchange's
rows and on the cross-device exchange's, with the weightings the server hands them (FV's and the fixed one, and
the cross-device example counts, all on the host), alone and behind the server's upload check (which excludes
the outlier: its norms read once, the kept weights and rows on the device); FV's candidate builder before and after a resume; and the
exchanges' point-to-point traffic, legal for its backend (gloo: host tensors only; NCCL: device tensors,
receives posted in the order the peer sends). Each result equals the CPU run's bit for bit."""
from __future__ import annotations

import io
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from device_discipline import DEVICE, DeviceMix, OnDevice
from fedmpi.aggregation.aggregators import WeightedMean
from fedmpi.aggregation.bulyan import Bulyan, BulyanOptions
from fedmpi.aggregation.dp import GaussianMechanism
from fedmpi.aggregation.krum import Krum, KrumOptions, MultiKrum, MultiKrumOptions
from fedmpi.aggregation.median import Median
from fedmpi.aggregation.trimmed_mean import TrimmedMean, TrimmedMeanOptions
from fedmpi.aggregation.upload_check import UploadCheck
from fedmpi.comm import p2p
from fedmpi.config.aggregation import DPConfig
from fedmpi.crossdevice import exchange as crossdevice_exchange
from fedmpi.crossdevice.exchange import UPLOAD_TAG, ClientExchange
from fedmpi.core.context import Control
from fedmpi.crossdevice.sampler import ClientSampler
from fedmpi.fv import validator_client
from fedmpi.fv.weighting import FederatedValidation
from fedmpi.silo.exchange import SiloExchange

P, D = 7, 12
UPLOADS = 1.0 + 0.1 * torch.randn(P, D, generator=torch.Generator().manual_seed(3))
UPLOADS[0] *= -8.0      # an outlier the robust rules must leave out
W = torch.tensor([0.3, 0.1, 0.1, 0.15, 0.15, 0.1, 0.1], dtype=torch.float64)


def aggregators(reference: torch.Tensor):
    dp = DPConfig(enabled=True, clip=0.5, noise_multiplier=0.7, seed=5)
    adaptive = DPConfig(enabled=True, clip=0.5, noise_multiplier=0.7, seed=5, adaptive=True, count_noise=2.0)
    return {"mean": WeightedMean(), "median": Median(), "trimmed_mean": TrimmedMean(TrimmedMeanOptions(beta=0.2)),
            "krum": Krum(KrumOptions(f=1)), "multikrum": MultiKrum(MultiKrumOptions(f=1, m=3)),
            "bulyan": Bulyan(BulyanOptions(f=1)), "dp_mean": dp_around_the_mean(dp, reference),
            "dp_mean_adaptive": dp_around_the_mean(adaptive, reference)}


def dp_around_the_mean(options, reference: torch.Tensor) -> GaussianMechanism:
    mechanism = GaussianMechanism(WeightedMean(), options, count=P)
    mechanism.starts_from(reference)
    return mechanism


def aggregate(aggregator, uploads, w, reference, out, checked: bool) -> torch.Tensor:
    """The server step's order: with `checked`, the upload check first (fed.upload_check's default, which excludes
    UPLOADS[0], 90 x the others' update norm), then the aggregator."""
    if checked:
        uploads, w = UploadCheck("exclude", 10.0, reference, stream=io.StringIO())(
            uploads, w, aggregator.clips_uploads, aggregator.needs_uploads)
    return aggregator(uploads, w, out)


def silo_round(device, name: str, checked: bool = False) -> torch.Tensor:
    """One server step's aggregation on the silo exchange's rows (set up as the server sets them up)."""
    parties = [SimpleNamespace(leader=1 + i, name=f"p{i}") for i in range(P)]
    exchange = SiloExchange(parties, None, None, up_numel=D, down_numel=D, device=torch.device(device),
                            dtype=torch.float32, kept=1)
    exchange._latest = exchange._new_buffers()[0]
    exchange._latest.rows.copy_(UPLOADS)
    reference = torch.ones(D, device=device)           # Θ, the server's global payload
    out = torch.empty(D, device=device)
    return aggregate(aggregators(reference)[name], exchange, W.clone(), reference, out, checked)


NAMES = list(aggregators(torch.ones(D)))


@pytest.mark.parametrize("checked", [False, True])
@pytest.mark.parametrize("name", NAMES)
def test_every_aggregator_on_the_silo_rows_keeps_to_the_device(name, checked):
    on_cpu = silo_round("cpu", name, checked)
    with OnDevice() as mode:
        on_gpu = silo_round(DEVICE, name, checked)
        assert mode.on_device(on_gpu)
    assert torch.equal(on_gpu, on_cpu)


class FakeStore:
    """The server's client states (crossdevice/client_state.ClientStore keeps them in host memory)."""
    layout = SimpleNamespace(numel=5)
    initial = torch.zeros(5)

    def get(self, k):
        return torch.full((5,), float(k))

    def put(self, k, flat):
        pass

    def put_round(self, r, returned):
        for k, flat in returned:
            self.put(k, flat)


class Wire:
    """torch.distributed's point-to-point calls recorded instead of made, as under backend `backend`: every
    tensor handed over must be legal for it (gloo: host memory; NCCL: the device)."""

    def __init__(self, mode: OnDevice, backend: str):
        self.mode, self.backend, self.calls = mode, backend, []

    def _record(self, op, tensor, peer, tag):
        on_device = self.mode.on_device(tensor)
        if self.backend == "gloo" and on_device:
            raise AssertionError(f"{op} of a device tensor on a gloo group (gloo sends host memory only)")
        if self.backend == "nccl" and not on_device:
            raise AssertionError(f"{op} of a host tensor on an NCCL group")
        self.calls.append((op, peer, tag, tensor.numel()))
        return SimpleNamespace(wait=lambda: True, is_completed=lambda: True)

    def install(self, monkeypatch):
        fake = SimpleNamespace(get_backend=lambda group=None: self.backend,
                               isend=lambda t, dst, group=None, tag=0: self._record("isend", t, dst, tag),
                               irecv=lambda t, src, group=None, tag=0: self._record("irecv", t, src, tag),
                               send=lambda t, dst, group=None, tag=0: self._record("send", t, dst, tag),
                               recv=lambda t, src, group=None, tag=0: self._record("recv", t, src, tag))
        monkeypatch.setattr(p2p, "dist", fake)


def client_exchange(monkeypatch, device, every_upload=True, store=None) -> ClientExchange:
    monkeypatch.setattr(crossdevice_exchange.comm, "bcast", lambda *a, **k: None)
    sampler = ClientSampler(population=20, fraction=P / 20, seed=1)
    sizes = np.arange(20) + 3
    return ClientExchange([1, 2], None, Control(None, 5.0), sampler, sizes, up_numel=D, device=torch.device(device),
                          dtype=torch.float32, every_upload=every_upload, store=store)


def crossdevice_round(monkeypatch, device, name: str, checked: bool = False) -> torch.Tensor:
    exchange = client_exchange(monkeypatch, device)
    exchange.clients = np.array([0, 2, 3, 5, 8, 13, 19])
    exchange._rows.copy_(UPLOADS)
    out = torch.empty(D, device=device)
    reference = torch.ones(D, device=device)
    return aggregate(aggregators(reference)[name], exchange, exchange.example_weights(), reference, out, checked)


@pytest.mark.parametrize("checked", [False, True])
@pytest.mark.parametrize("name", NAMES)
def test_every_aggregator_on_the_crossdevice_rows_keeps_to_the_device(monkeypatch, name, checked):
    on_cpu = crossdevice_round(monkeypatch, "cpu", name, checked)
    with OnDevice() as mode:
        on_gpu = crossdevice_round(monkeypatch, DEVICE, name, checked)
        assert mode.on_device(on_gpu)
    assert torch.equal(on_gpu, on_cpu)


def test_user_level_dp_on_the_reduced_payload_keeps_to_the_device(monkeypatch):
    def noised(device):
        exchange = client_exchange(monkeypatch, device, every_upload=False)
        exchange.payload.copy_(torch.arange(D + 1, dtype=torch.float64) + 1)
        out = torch.empty(D, device=device)
        GaussianMechanism(WeightedMean(), DPConfig(enabled=True, clip=0.5, noise_multiplier=0.7, seed=5), count=P,
                          clip_at_server=False)(exchange, None, out)
        return out

    on_cpu = noised("cpu")
    with OnDevice() as mode:
        on_gpu = noised(DEVICE)
        assert mode.on_device(on_gpu)
    assert torch.equal(on_gpu, on_cpu)


class PostedBackbones:
    """The validators, as FV sees them: what was posted, and where it lived."""
    val_sets = ["lfw"]

    def __init__(self, mode=None):
        self.mode, self.posted = mode, []

    def post(self, word, flat):
        if self.mode is not None:
            assert self.mode.on_device(flat), "a candidate backbone built in host memory"
        self.posted.append(flat.cpu().clone())
        return SimpleNamespace(done=True, result=lambda: {"lfw": 0.5})


def fv_candidates(device, mode=None, resumed=False) -> list[torch.Tensor]:
    cfg = SimpleNamespace(fv=SimpleNamespace(T=3, phi=0.1, gamma=0.01, eps=1e-3, norm="local"),
                          run=SimpleNamespace(seed=4))
    pool = PostedBackbones(mode)
    fv = FederatedValidation(cfg, P, pool, log=None, initial_w=np.full(P, 1 / P), device=device)
    rows = UPLOADS.to(device)
    if resumed:    # θ' and the search state as the checkpoint gives them back: in host memory
        saved = FederatedValidation(cfg, P, pool, log=None, initial_w=np.full(P, 1 / P))
        saved.latest = UPLOADS.clone()
        fv.load_state_dict(saved.state_dict())
    else:
        fv.for_round(0, rows)      # θ' = the gathered rows, in place on the device
    fv.start()
    return pool.posted


@pytest.mark.parametrize("resumed", [False, True], ids=["running", "resumed"])
def test_fv_builds_its_candidates_on_the_device_also_after_a_resume(resumed):
    on_cpu = fv_candidates("cpu", resumed=resumed)
    with OnDevice() as mode:
        on_gpu = fv_candidates(DEVICE, mode, resumed=resumed)
    assert len(on_gpu) == 3 and all(torch.equal(a, b) for a, b in zip(on_gpu, on_cpu))


@pytest.mark.parametrize("backend", ["gloo", "nccl"])
def test_crossdevice_point_to_point_is_legal_and_in_the_peers_order(monkeypatch, backend):
    """The server's sends and receives of a round with per-client state and every upload kept: each tensor legal
    for the backend (a device tensor goes through host memory on gloo), and, per trainer rank, the receives in
    the order the rank sends: its clients' uploads while it trains them, then their states."""
    with OnDevice() as mode:
        wire = Wire(mode, backend)
        wire.install(monkeypatch)
        exchange = client_exchange(monkeypatch, DEVICE, store=FakeStore())
        exchange.post(0)
        exchange.wait()
    for rank in (1, 2):
        ops = [(op, tag, numel) for op, peer, tag, numel in wire.calls if peer == rank]
        count = sum(1 for op, _, _ in ops if op == "isend")
        assert count > 0
        assert ops == ([("isend", 0, 5)] * count + [("irecv", UPLOAD_TAG, D)] * count
                       + [("irecv", 0, 5)] * count)


@pytest.mark.parametrize("backend", ["gloo", "nccl"])
def test_a_candidate_posted_to_a_dedicated_validator_is_legal_for_the_backend(monkeypatch, backend):
    with OnDevice() as mode:
        wire = Wire(mode, backend)
        wire.install(monkeypatch)
        monkeypatch.setattr(validator_client.comm, "mpi_comm", lambda: SimpleNamespace(send=lambda *a, **k: None))
        endpoint = validator_client.RemoteEndpoint(3, ["lfw"], group=None)
        endpoint.post(validator_client.Request("score", torch.ones(D, device=DEVICE), ["lfw"]))
    assert wire.calls == [("isend", 3, 0, D)]


def test_the_mode_catches_what_cuda_refuses():
    """The stand-in raises where CUDA does and lets through what CUDA allows."""
    with OnDevice() as mode:
        rows = torch.ones(3, 4, device=DEVICE)
        with pytest.raises(DeviceMix, match="Expected all tensors to be on the same device"):
            torch.mv(rows.t(), torch.ones(3, dtype=torch.float32))
        with pytest.raises(DeviceMix):
            torch.zeros(3)[torch.tensor([0], device=DEVICE)]
        with pytest.raises(TypeError, match="can't convert cuda:0"):
            rows.numpy()
        assert mode.on_device(rows * torch.tensor(2.0)) and mode.on_device(rows[torch.tensor([0, 2])])
        assert mode.on_device(torch.ones(3).to(rows.device)) and not mode.on_device(rows.cpu())
        assert rows.device == DEVICE and float(rows.sum()) == 12.0
