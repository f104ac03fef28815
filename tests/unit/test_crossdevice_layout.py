"""The cross-device clients' model in NHWC on CPU (run.channels_last empty: on where the clients train one by one,
core/build.py clients_channels_last): the flat Θ every rank exchanges keeps the NCHW order, the clients compute
the NCHW model's numbers within float32 rounding, and the setting is the user's to turn off or on."""
from __future__ import annotations

import pytest
import torch

from crossdevice_harness import CONFIG, simulate
from fedmpi.config import load_config
from fedmpi.errors import ConfigError
from fedmpi.core.build import build_parts, clients_channels_last

CPU = torch.device("cpu")
TINY = ["clients.train_images=200", "clients.test_images=20", "clients.population=4", "clients.images=40",
        "clients.fraction=0.5", "optim.batch_size=16", "clients.rounds=2", "eval.every=0", "run.device=cpu"]


def test_cpu_clients_train_in_nhwc_unless_asked_not_to_or_stacked():
    def chosen(*overrides, device=CPU):
        return clients_channels_last(load_config(CONFIG, list(overrides)), device)

    assert chosen() and chosen("run.channels_last=true")
    assert not chosen("run.channels_last=false")
    assert not chosen("clients.cohort=vectorised")               # the stacked cohort's weights stay NCHW
    assert not chosen(device=torch.device("cuda")) and chosen("run.channels_last=true", device=torch.device("cuda"))


def test_the_flat_state_keeps_the_nchw_order():
    nhwc = build_parts(load_config(CONFIG, ["run.device=cpu"]), CPU, torch.float32)
    nchw = build_parts(load_config(CONFIG, ["run.device=cpu", "run.channels_last=false"]), CPU, torch.float32)
    conv = nhwc.model.features[0].weight
    assert conv.is_contiguous(memory_format=torch.channels_last) and not conv.is_contiguous()
    assert nchw.model.features[0].weight.is_contiguous()
    theta = nhwc.state.read()
    assert torch.equal(theta, nchw.state.read())                # the same initial Θ, element by element
    nhwc.state.write(theta.flip(0))
    assert torch.equal(nhwc.state.read(), theta.flip(0))
    assert torch.equal(nhwc.model.features[0].weight, theta.flip(0)[:conv.numel()].view(64, 3, 5, 5))


def test_nhwc_clients_compute_the_nchw_clients_model(tmp_path):
    """Two rounds agree with the NCHW clients' to the last digits in float64; in float32 one step's loss and
    gradients are as far from float64's in either layout (rounding: a few 1e-7; two rounds of steps amplify it)."""
    common = [*TINY, f"data.root={tmp_path}"]
    nhwc, nchw = simulate(common), simulate([*common, "run.channels_last=false"])
    assert not torch.equal(nhwc.theta, nchw.theta)              # other kernels: the sums in another order
    assert torch.allclose(nhwc.theta, nchw.theta, rtol=0, atol=1e-12)
    assert nhwc.losses == pytest.approx(nchw.losses, rel=1e-12)

    torch.manual_seed(0)
    x, y = torch.randn(16, 3, 32, 32, dtype=torch.float64), torch.randint(0, 10, (16,))

    def loss_and_grads(channels_last: str, dtype):
        parts = build_parts(load_config(CONFIG, ["run.device=cpu", f"run.channels_last={channels_last}"]), CPU, dtype)
        loss = torch.nn.functional.cross_entropy(parts.model(x.to(dtype)), y)
        loss.backward()
        return torch.cat([loss.detach().double().view(1)] + [p.grad.double().reshape(-1)
                                                              for p in parts.model.parameters()])

    exact = loss_and_grads("false", torch.float64)
    for layout in ("true", "false"):
        error = (loss_and_grads(layout, torch.float32) - exact).norm() / exact.norm()
        assert error < 2e-6, (layout, error)


def test_compiling_the_clients_step_is_refused():
    with pytest.raises(ConfigError, match="run.compile: applies to the silo parties' trainer"):
        load_config(CONFIG, ["run.compile=default"])
