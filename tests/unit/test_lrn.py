"""models/lrn.py: the fused local response normalisation is torch's LocalResponseNorm to float64 rounding, in
values, first and second derivatives, in both memory layouts, and the CIFAR clients on CPU get it."""
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from crossdevice_harness import CONFIG
from fedmpi.config import load_config
from fedmpi.core.build import build_parts
from fedmpi.models.cifar_cnn import CifarCNN
from fedmpi.models.lrn import FusedLocalResponseNorm, fuse_local_response_norms

CPU = torch.device("cpu")


def _input(layout, channels=13, seed=0):
    torch.manual_seed(seed)
    a = torch.randn(3, channels, 5, 4, dtype=torch.float64) * 3
    return a.contiguous(memory_format=layout).requires_grad_()


@pytest.mark.parametrize("layout", [torch.contiguous_format, torch.channels_last])
@pytest.mark.parametrize("size,beta", [(9, 0.75), (4, 0.75), (5, 0.6), (1, 0.75), (20, 0.75)])
def test_values_and_gradients_are_torchs(layout, size, beta):
    a = _input(layout)
    options = dict(size=size, alpha=0.3, beta=beta, k=1.5)
    g = torch.randn(a.shape, dtype=torch.float64)
    want = nn.LocalResponseNorm(**options)(a)
    got = FusedLocalResponseNorm(**options)(a)
    assert got.is_contiguous(memory_format=layout)
    torch.testing.assert_close(got, want, rtol=1e-13, atol=1e-14)
    (gw,) = torch.autograd.grad(want, a, g)
    (gg,) = torch.autograd.grad(got, a, g)
    torch.testing.assert_close(gg, gw, rtol=1e-12, atol=1e-13)


def test_second_derivatives_are_torchs():
    """create_graph (the audit's gradient matching) differentiates the fused layer's gradient as torch's."""
    a = _input(torch.channels_last, channels=6)
    fused, torchs = FusedLocalResponseNorm(3, 0.5, 0.75, 1.0), nn.LocalResponseNorm(3, 0.5, 0.75, 1.0)
    assert torch.autograd.gradgradcheck(fused, (a,))
    g = torch.randn(a.shape, dtype=torch.float64)

    def second(layer):
        (first,) = torch.autograd.grad(layer(a), a, g, create_graph=True)
        return torch.autograd.grad(first.square().sum(), a)[0]

    torch.testing.assert_close(second(fused), second(torchs), rtol=1e-12, atol=1e-13)


def test_float32_step_is_as_close_to_float64_as_torchs():
    """One SGD step of McMahan's CNN in float32: the fused layers' loss and gradients sit as near float64's as
    torch's layers do."""
    torch.manual_seed(0)
    x, y = torch.randn(16, 3, 32, 32), torch.randint(0, 10, (16,))

    def grads(dtype, fused):
        torch.manual_seed(1)
        net = CifarCNN().to(dtype)
        if fused:
            assert fuse_local_response_norms(net) == 2
        loss = F.cross_entropy(net(x.to(dtype)), y)
        return loss.item(), torch.cat([g.flatten() for g in torch.autograd.grad(loss, list(net.parameters()))])

    loss64, g64 = grads(torch.float64, False)
    for fused in (False, True):
        loss32, g32 = grads(torch.float32, fused)
        assert abs(loss32 - loss64) < 1e-5 * abs(loss64)
        assert (g32.double() - g64).norm() < 1e-5 * g64.norm()


def test_state_dict_unchanged_and_other_input_ranks_left_to_torch():
    net = CifarCNN()
    keys = list(net.state_dict())
    assert fuse_local_response_norms(net) == 2
    assert fuse_local_response_norms(net) == 0      # already fused
    assert list(net.state_dict()) == keys
    a = torch.randn(2, 7, 5, dtype=torch.float64)
    torch.testing.assert_close(FusedLocalResponseNorm(3)(a), nn.LocalResponseNorm(3)(a), rtol=0, atol=0)


def _lrn_classes(cfg_overrides):
    cfg = load_config(CONFIG, cfg_overrides)
    model = build_parts(cfg, CPU, torch.float32).model
    return {type(m) for m in model.modules() if isinstance(m, nn.LocalResponseNorm)}


def test_cifar_clients_on_cpu_get_the_fused_layers_a_vectorised_cohort_does_not():
    assert _lrn_classes([]) == {FusedLocalResponseNorm}
    assert _lrn_classes(["clients.cohort=vectorised"]) == {nn.LocalResponseNorm}
