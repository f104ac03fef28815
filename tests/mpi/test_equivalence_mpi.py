"""docs/DESIGN.md sec. 4 invariants through fedmpi.run's main under mpirun with real process groups (gloo,
float64): PFM K=1 with batch-proportional weights follows centralized momentum SGD on the same per-rank
batches; FedAvg K=1 without momentum follows centralized SGD; FedAvgM with beta=0 equals FedAvg. The four runs
are made in the session's one launch of shared runs (tests/support/shared_runs.py)."""
import torch

from fedmpi.config import load_config
from fedmpi.core.state import BackboneState
from fedmpi.models.backbone import build_backbone
from fedmpi.silo.setting import initial_weights
from fedmpi.silo.party_data import batch_stream, open_party_dataset
from fedmpi.run import prepare_data
from fedmpi.layout import build_layout
from shared_runs import data_root_of, declare
from tiny_runs import SMALL  # party a: 2 ranks (DDP + sharded classifier), party b: 1 rank


PFM_K1 = ["fed.algorithm=pfm", "fed.K=1", "fed.weighting=batch"]
FEDAVG_K1 = ["fed.algorithm=fedavg", "fed.K=1", "fed.weighting=batch", "fed.local_momentum=0", "optim.momentum=0"]
K3 = ["fed.K=3", "optim.steps_per_epoch=3", "fed.local_momentum=0.9"]
declare("eq-pfm-k1", [*SMALL, *PFM_K1])
declare("eq-pfm-k1-own-copies", [*SMALL, *PFM_K1, "run.share_node_memory=false"])
declare("eq-fedavg-k1", [*SMALL, *FEDAVG_K1])
declare("eq-fedavg-k3", [*SMALL, "fed.algorithm=fedavg", *K3])
declare("eq-fedavgm-b0", [*SMALL, "fed.algorithm=fedavgm", "fed.server_momentum=0", "fed.nesterov=true", *K3])


def run_federated(shared_runs, name):
    """The trainable part of a run's final global model (run.save_final)."""
    saved = torch.load(f"{shared_runs[name]}.pt")
    return saved["theta"][: saved["n_trainable"]]


def centralized_reference(data, overrides, momentum):
    """Momentum SGD on the union of every rank's batch: backbone gradient sum_i w_i dL_i/dtheta, where L_i is
    party i's mean loss over all its ranks' samples; each party's classifier its own momentum SGD (eq. 1-2)."""
    from fedmpi.models.classifier import build_classifier

    cfg = load_config(None, [*SMALL, *overrides, f"data.root={data}"])
    layout = build_layout(cfg)
    prepare_data(cfg, layout)
    dtype, cpu = torch.float64, torch.device("cpu")
    backbone = build_backbone(cfg, cpu, dtype)
    state = BackboneState(backbone)
    w = initial_weights(cfg, layout).tolist()
    o = cfg.optim
    opt = torch.optim.SGD(state.trainable, lr=o.lr, momentum=momentum, weight_decay=o.weight_decay)
    parties = []
    for party in layout.parties:
        dataset = open_party_dataset(party, cfg.data)
        head = build_classifier(dataset.num_classes, cfg.model.embedding_size, kind=cfg.model.head,
                                scale=cfg.model.scale, margin=cfg.margin, group=None,
                                seed=cfg.run.seed + 1 + party.index, dtype=dtype)
        head_opt = torch.optim.SGD(head.parameters(), lr=o.lr, momentum=momentum, weight_decay=o.weight_decay)
        streams = [batch_stream(dataset, party, r, cfg, 0, cpu) for r in party.ranks]
        parties.append((head, head_opt, streams))
    for step in range(cfg.total_steps):
        lr = cfg.lr_at_round(step)  # K = 1: one step per round
        for group in [*opt.param_groups, *(g for _, ho, _ in parties for g in ho.param_groups)]:
            group["lr"] = lr
        total = 0
        for wi, (head, _, streams) in zip(w, parties):
            batches = [next(s) for s in streams]
            embeddings = torch.cat([backbone(x.to(dtype)) for x, _ in batches])  # BN statistics per rank
            labels = torch.cat([y for _, y in batches])
            total = total + wi * head(embeddings, labels)
        total.backward()
        opt.step()
        for wi, (head, head_opt, _) in zip(w, parties):
            for p in head.parameters():
                p.grad.div_(wi)  # the party's classifier follows dL_i, not w_i dL_i
            head_opt.step()
            head_opt.zero_grad()
        opt.zero_grad()
    return torch.cat([p.detach().reshape(-1) for p in state.trainable])


def test_pfm_k1_follows_centralized_momentum_sgd(shared_runs):
    federated = run_federated(shared_runs, "eq-pfm-k1")
    reference = centralized_reference(data_root_of(shared_runs["eq-pfm-k1"]), PFM_K1, momentum=0.9)
    assert federated.shape == reference.shape
    assert torch.allclose(federated, reference, atol=1e-9, rtol=0), (federated - reference).abs().max()


def test_a_party_sharing_one_copy_of_theta_and_m_per_node_computes_what_own_copies_compute(shared_runs):
    """Party a's two ranks share Θ and PFM's M in MPI-3 memory (the default on CPU): bitwise the run where each rank
    holds its own, and the intra-party broadcast, which then stays in the node's memory, moves no bytes."""
    from fedmpi.store.h5log import LogReader

    shared, own = run_federated(shared_runs, "eq-pfm-k1"), run_federated(shared_runs, "eq-pfm-k1-own-copies")
    assert torch.equal(shared, own)
    rounds = {}
    for name in ("eq-pfm-k1", "eq-pfm-k1-own-copies"):
        with LogReader(shared_runs[name] / "log.h5") as log:
            rounds[name] = log.table("rounds")
    down_per_party = rounds["eq-pfm-k1-own-copies"]["bytes_down"] // 2
    assert (rounds["eq-pfm-k1-own-copies"]["bytes_intra"] == down_per_party).all()   # a's leader -> a's 2nd rank
    assert (rounds["eq-pfm-k1"]["bytes_intra"] == 0).all()


def test_fedavg_k1_without_momentum_follows_centralized_sgd(shared_runs):
    federated = run_federated(shared_runs, "eq-fedavg-k1")
    data = data_root_of(shared_runs["eq-fedavg-k1"])
    reference = centralized_reference(data, FEDAVG_K1, momentum=0.0)
    assert torch.allclose(federated, reference, atol=1e-9, rtol=0), (federated - reference).abs().max()
    moved = (reference - centralized_reference(data, FEDAVG_K1, momentum=0.9)).abs().max()
    assert moved > 1e-6  # the comparison can tell momentum from none


def test_fedavgm_with_zero_server_momentum_equals_fedavg(shared_runs):
    """(That a non-zero server momentum changes the result is checked in test_algorithms.)"""
    fedavg, fedavgm = run_federated(shared_runs, "eq-fedavg-k3"), run_federated(shared_runs, "eq-fedavgm-b0")
    assert torch.allclose(fedavg, fedavgm, atol=1e-12, rtol=0)
