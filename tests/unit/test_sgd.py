"""fedmpi.models.sgd.MomentumSGD is bitwise torch.optim.SGD (momentum, weight decay, lr changed between steps, a
parameter without a gradient) and their state_dicts load into each other."""
import pytest
import torch

from fedmpi.models.sgd import MomentumSGD


def make_params(dtype):
    g = torch.Generator().manual_seed(3)
    return [torch.randn(5, 3, generator=g, dtype=dtype).requires_grad_(),
            torch.randn(7, generator=g, dtype=dtype).requires_grad_(),
            torch.randn(2, 2, generator=g, dtype=dtype).requires_grad_()]


def set_grads(params, step, skip_last):
    g = torch.Generator().manual_seed(100 + step)
    for k, p in enumerate(params):
        p.grad = None if (skip_last and k == len(params) - 1) else torch.randn(p.shape, generator=g, dtype=p.dtype)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("momentum,weight_decay", [(0.9, 5e-4), (0.0, 5e-4), (0.9, 0.0)])
@pytest.mark.parametrize("foreach", [False, True])
def test_steps_equal_torch_sgd_bitwise(dtype, momentum, weight_decay, foreach):
    ours, theirs = make_params(dtype), make_params(dtype)
    opt = MomentumSGD(ours, lr=0.1, momentum=momentum, weight_decay=weight_decay)
    ref = torch.optim.SGD(theirs, lr=0.1, momentum=momentum, weight_decay=weight_decay, foreach=foreach)
    for step in range(6):
        lr = 0.1 if step < 3 else 0.01
        opt.param_groups[0]["lr"] = ref.param_groups[0]["lr"] = lr
        set_grads(ours, step, skip_last=step < 2)   # the last parameter gets its first gradient at step 2
        set_grads(theirs, step, skip_last=step < 2)
        opt.step()
        ref.step()
        for a, b in zip(ours, theirs):
            assert torch.equal(a, b), f"step {step}: {(a - b).abs().max()}"


def test_state_dict_round_trips_with_torch_sgd():
    ours, theirs = make_params(torch.float64), make_params(torch.float64)
    ref = torch.optim.SGD(theirs, lr=0.05, momentum=0.9, weight_decay=1e-3)
    for step in range(2):
        set_grads(theirs, step, skip_last=True)
        ref.step()
    with torch.no_grad():
        for a, b in zip(ours, theirs):
            a.copy_(b)
    opt = MomentumSGD(ours, lr=1.0, momentum=0.9, weight_decay=1e-3)
    opt.load_state_dict(ref.state_dict())  # a checkpoint written by torch.optim.SGD
    assert opt.param_groups[0]["lr"] == 0.05
    saved = opt.state_dict()
    assert sorted(saved["state"]) == [0, 1] and saved["param_groups"][0]["params"] == [0, 1, 2]
    assert set(saved["param_groups"][0]) == set(ref.state_dict()["param_groups"][0])
    for step in range(2, 5):
        set_grads(ours, step, skip_last=False)
        set_grads(theirs, step, skip_last=False)
        opt.step()
        ref.step()
    assert all(torch.equal(a, b) for a, b in zip(ours, theirs))
    back = torch.optim.SGD(make_params(torch.float64), lr=1.0, momentum=0.9, weight_decay=1e-3)
    back.load_state_dict(opt.state_dict())  # and the other way
    for k in range(3):
        assert torch.equal(back.state_dict()["state"][k]["momentum_buffer"], ref.state_dict()["state"][k]["momentum_buffer"])


def test_state_of_another_model_is_refused():
    opt = MomentumSGD(make_params(torch.float32), lr=0.1, momentum=0.9)
    other = torch.optim.SGD([torch.zeros(2, requires_grad=True)], lr=0.1, momentum=0.9)
    with pytest.raises(ValueError, match="1 parameters in 1 groups, expected 3 in 1"):
        opt.load_state_dict(other.state_dict())
