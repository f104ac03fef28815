"""The faster GPU step's transforms on CPU (fedmpi/models/speed.py, fedmpi/silo/step_speed.py): each computes the
eager NCHW model's outputs and gradients within float32 rounding, keeps the state_dict keys and the flat state
the exchange moves; the settings are refused in one line where they cannot apply.

"Within float32 rounding", stated: a transform reorders sums, it changes no arithmetic, so its outputs and
gradients lie as close to the exact ones (the same model in float64) as the eager float32 model's do: within
ROUNDING_FACTOR times the eager model's own largest error, tensor by tensor. (Through training-mode BatchNorm the
gradients of the early layers are differences of near-equal sums: the eager float32 model itself is 1e-3 off
there, relative, and a bias before a BatchNorm, exactly 0 in exact arithmetic, gets rounding noise of 1e-11.)
A transform that broke the arithmetic is off by the values themselves."""
from __future__ import annotations

import pytest
import torch
from torch import nn

from fedmpi.config import ConfigError, load_config
from fedmpi.core.flat import flatten
from fedmpi.models import speed
from fedmpi.models.bn_groups import normalise_in_groups
from fedmpi.models.iresnet import IResNet
from fedmpi.models.sgd import MomentumSGD

ROUNDING_FACTOR = 10


def small_iresnet(dtype=torch.float32) -> IResNet:
    """An IResNet of one block per stage, 16 px: every kind of layer of IR-18..IR-100, few of each."""
    torch.manual_seed(0)
    return IResNet((1, 1, 1, 1), embedding_size=16, input_size=16, width=0.25).to(dtype)


def batch(channels_last: bool = False, dtype=torch.float32) -> torch.Tensor:
    x = torch.randn(8, 3, 16, 16, generator=torch.Generator().manual_seed(1)).to(dtype)
    return x.contiguous(memory_format=torch.channels_last) if channels_last else x


def outputs_and_grads(model: nn.Module, x: torch.Tensor, forward=None):
    model.zero_grad(set_to_none=True)
    y = (model if forward is None else forward)(x)
    (y * torch.linspace(-1, 1, y.shape[1], dtype=y.dtype)).square().sum().backward()
    return [y.detach(), *[p.grad.clone() for p in model.parameters() if p.requires_grad]]


def exact_and_eager():
    """(the float64 model's outputs and gradients, the eager float32 model's)."""
    return outputs_and_grads(small_iresnet(torch.float64), batch(dtype=torch.float64)), \
        outputs_and_grads(small_iresnet(), batch())


def assert_within_rounding(got: list[torch.Tensor], exact: list[torch.Tensor], eager: list[torch.Tensor]) -> None:
    assert len(got) == len(exact) == len(eager)
    for k, (a, x, e) in enumerate(zip(got, exact, eager)):
        eager_error = (e.double() - x).abs().max().item()
        assert (a.double() - x).abs().max().item() <= ROUNDING_FACTOR * eager_error, f"tensor {k}"


def test_channels_last_computes_the_nchw_model_and_keeps_its_flat_state():
    eager, nhwc = small_iresnet(), speed.to_channels_last(small_iresnet())
    assert nhwc.conv1.weight.is_contiguous(memory_format=torch.channels_last)
    assert not nhwc.conv1.weight.is_contiguous()
    assert list(nhwc.state_dict()) == list(eager.state_dict())
    assert torch.equal(flatten(list(nhwc.parameters())), flatten(list(eager.parameters())))  # NCHW order in the flat
    assert_within_rounding(outputs_and_grads(nhwc, batch(channels_last=True)), *exact_and_eager())


def test_compiled_model_computes_the_eager_model():
    compiled = small_iresnet()
    forward = speed.compiled(compiled, "default")
    want = exact_and_eager()
    assert_within_rounding(outputs_and_grads(compiled, batch(), forward), *want)
    assert_within_rounding(outputs_and_grads(compiled, batch(), forward), *want)   # and again, compiled once


def test_batchnorm_in_float32_under_autocast_keeps_keys_and_computes_in_float32():
    model = small_iresnet()
    normalise_in_groups(model.layer1, 8, 4)            # a grouped BatchNorm too (model.bn_batch)
    keys = list(model.state_dict())
    reference = small_iresnet()
    normalise_in_groups(reference.layer1, 8, 4)
    assert speed.keep_batchnorm_fp32(model) == sum(isinstance(m, nn.BatchNorm2d) for m in model.modules()) == 18
    assert speed.keep_batchnorm_fp32(model) == 0       # once is enough
    assert list(model.state_dict()) == keys
    x = torch.randn(8, 16, 16, 16, generator=torch.Generator().manual_seed(2)).to(torch.bfloat16)  # layer1's input
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = model.layer1[0].bn1(x)
        plain = reference.layer1[0].bn1(x)
    assert out.dtype == torch.float32 and plain.dtype == torch.bfloat16
    assert torch.equal(out, reference.layer1[0].bn1.float()(x.float()))
    assert all(torch.equal(a, b) for a, b in zip(outputs_and_grads(model, batch()),
                                                   outputs_and_grads(reference, batch())))  # no autocast: the same


@pytest.mark.parametrize("compile, graphs, mode", [
    ("off", False, None), ("default", False, "default"), ("default", True, "reduce-overhead"),
    ("max-autotune", False, "max-autotune-no-cudagraphs"), ("max-autotune", True, "max-autotune")])
def test_compile_mode_of_the_settings(compile, graphs, mode):
    assert speed.compile_mode(compile, graphs) == mode


def test_fused_classifier_step_equals_the_foreach_step():
    start = torch.randn(40, 16, generator=torch.Generator().manual_seed(0))
    weights = [nn.Parameter(start.clone()) for _ in range(2)]
    steppers = [MomentumSGD([w], lr=0.1, momentum=0.9, weight_decay=5e-4, fused=fused)
                for w, fused in zip(weights, (False, True))]
    for _ in range(4):
        grad = torch.randn(40, 16)
        for w, opt in zip(weights, steppers):
            w.grad = grad.clone()
            opt.step()
    for fused, foreach in ((weights[1], weights[0]), (steppers[1].momentum_buffers[0], steppers[0].momentum_buffers[0])):
        assert torch.allclose(fused, foreach, rtol=4 * torch.finfo(torch.float32).eps, atol=0)
    assert steppers[1].state_dict()["state"][0]["momentum_buffer"].shape == (40, 16)


@pytest.mark.parametrize("overrides, message", [
    (["run.cuda_graphs=true", "run.device=cpu"], "run.cuda_graphs: CUDA graphs need a GPU, but run.device is cpu"),
    (["data.decoder=gpu", "run.device=cpu"],
     "data.decoder: gpu decodes on the rank's GPU, but run.device is cpu"),
    (["data.decoder=auto"], "data.decoder: must be one of cpu, gpu, got 'auto'"),
    (["optim.amp_batchnorm=fp32"],
     "optim.amp_batchnorm: fp32 keeps BatchNorm out of autocast, but optim.amp is none (no autocast)"),
    (["run.compile=fast"], "run.compile: must be one of off, default, max-autotune, got 'fast'"),
    (["run.ddp_compression=fp8"], "run.ddp_compression: must be one of none, fp16, bf16, got 'fp8'"),
    (["--config", "configs/hsu_cifar10.yaml", "run.compile=default"],
     "run.compile: applies to the silo parties' trainer; the cross-device clients' step (clients.population > 0) "
     "takes run.compile=off"),
])
def test_settings_that_cannot_apply_are_refused_in_one_line(overrides, message):
    config = overrides[1] if overrides[0] == "--config" else None
    with pytest.raises(ConfigError) as err:
        load_config(config, overrides[2:] if config else overrides)
    assert str(err.value) == message


def test_a_rank_without_a_gpu_refuses_what_needs_one():
    from fedmpi.silo.step_speed import StepSpeed

    cpu = torch.device("cpu")
    with pytest.raises(ConfigError, match=r"^run.cuda_graphs: CUDA graphs need a GPU; this rank runs on cpu$"):
        StepSpeed(load_config(None, ["run.cuda_graphs=true"]), cpu)
    with pytest.raises(ConfigError, match=r"^data.decoder: gpu decodes on the rank's GPU; this rank runs on cpu$"):
        StepSpeed(load_config(None, ["data.decoder=gpu"]), cpu)
    chosen = StepSpeed(load_config(None, ["optim.amp=bf16", "optim.amp_batchnorm=fp32"]), cpu)
    assert not chosen.channels_last and not chosen.batchnorm_fp32 and not chosen.fused and chosen.timer is None


def test_compiled_margin_head_of_a_one_rank_party_computes_the_eager_one():
    """The head a one-rank party compiles beside its backbone (run.compile): loss and gradients as eager."""
    from fedmpi.models import build_classifier

    def loss_and_grads(head, forward):
        embeddings = torch.randn(6, 16, generator=torch.Generator().manual_seed(3), requires_grad=True)
        labels = torch.tensor([0, 3, 5, 5, 9, 1])
        loss = forward(embeddings, labels)
        loss.backward()
        return [loss.detach(), embeddings.grad, head.weight.grad]

    eager, compiled = (build_classifier(10, 16, kind="arcface", seed=4) for _ in range(2))
    want = loss_and_grads(eager, eager)
    got = loss_and_grads(compiled, speed.compiled(compiled, "default"))
    for a, b in zip(got, want):
        assert torch.allclose(a, b, rtol=1e-5, atol=1e-7)
