"""A face client's BatchNorm (clients.batch_norm): with one identity a batch, batch statistics subtract what the
identity's images share; frozen, the layers normalise by Θ's running statistics, keep them, and still train their
scale and shift."""
import copy

import torch

from fedmpi.crossdevice.client_heads import OwnClassRows
from fedmpi.models.frozen_batch_norm import BatchNormMode


def one_identity_batch(d: int = 8, n: int = 6) -> tuple[torch.Tensor, torch.Tensor]:
    """n images of one person: a shared component (the identity) plus small per-image noise."""
    g = torch.Generator().manual_seed(0)
    shared = 3.0 * torch.randn(d, generator=g, dtype=torch.float64)
    return shared, shared + 0.1 * torch.randn(n, d, generator=g, dtype=torch.float64)


def model_with_running_statistics(d: int = 8) -> torch.nn.Module:
    model = torch.nn.Sequential(torch.nn.Linear(d, d, bias=False), torch.nn.BatchNorm1d(d)).double()
    with torch.no_grad():
        model[0].weight.copy_(torch.eye(d, dtype=torch.float64))
    model[1].running_mean.zero_()          # Θ's statistics over many identities: centred, unit variance
    model[1].running_var.fill_(1.0)
    return model.train()


def test_batch_statistics_of_one_identity_subtract_what_its_images_share():
    shared, x = one_identity_batch()
    model = model_with_running_statistics()
    BatchNormMode(model, frozen=False).apply()
    out = model(x)
    # every coordinate centred over the batch: the identity's shared component is gone from the embeddings
    torch.testing.assert_close(out.mean(dim=0), torch.zeros_like(shared), atol=1e-12, rtol=0)
    assert torch.nn.functional.cosine_similarity(out.mean(dim=0, keepdim=True), shared[None]).abs() < 1e-6


def test_frozen_batch_norm_keeps_the_identity_and_the_running_statistics_and_trains_scale_and_shift():
    shared, x = one_identity_batch()
    model = model_with_running_statistics()
    before = copy.deepcopy(model[1].state_dict())
    BatchNormMode(model, frozen=True).apply()
    assert model.training and not model[1].training
    out = model(x)
    eps = model[1].eps
    torch.testing.assert_close(out, x / (1.0 + eps) ** 0.5, atol=1e-12, rtol=0)      # (x − 0) / √(1 + ε)
    assert torch.nn.functional.cosine_similarity(out.mean(dim=0, keepdim=True), shared[None]) > 0.999
    out.square().sum().backward()
    for key in ("running_mean", "running_var", "num_batches_tracked"):
        assert torch.equal(model[1].state_dict()[key], before[key]), key
    assert model[1].weight.grad.abs().sum() > 0 and model[1].bias.grad.abs().sum() > 0


def test_a_face_client_freezes_batch_norm_again_after_an_evaluation_put_the_model_back_in_training():
    class OneIdentity:
        per_client, parts = 1, [[0]]

    model = model_with_running_statistics()
    head = OwnClassRows(model, OneIdentity(), embedding_size=8, nu=0.9, batch_size=6, frozen_batch_norm=True)
    model.eval()
    model.train(True)                                   # what an evaluation leaves behind
    head.begin(0, torch.ones(8, dtype=torch.float64))
    assert not model[1].training and model[0].training
    unfrozen = OwnClassRows(model.train(), OneIdentity(), 8, 0.9, 6, frozen_batch_norm=False)
    unfrozen.begin(0, torch.ones(8, dtype=torch.float64))
    assert model[1].training
