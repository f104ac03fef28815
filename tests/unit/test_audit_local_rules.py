"""The audit simulates a participant's local steps as the rule takes them (fedmpi/audit/local_rules.py): from the
same images, labels and Θ, inversion.local_update_of with the rule's step gives the update the rule's own
local_step gives (FedProx's μ(θ − Θ), PFM's β·M/K with M rebuilt from the recorded global models, weight decay
and momentum), to float precision; a rule whose local step the server cannot simulate is refused in one line."""
from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from fedmpi.algorithms import LocalRound
from fedmpi.algorithms.fedprox import FedProx, FedProxOptions
from fedmpi.algorithms.pfm import PFM
from fedmpi.audit.inversion import local_update_of
from fedmpi.audit.local_rules import local_step
from fedmpi.audit.run_view import Refused
from fedmpi.core.received import ReceivedRecorder

K, LR, DECAY = 3, 0.5, 0.01
LOSS = torch.nn.functional.cross_entropy


def tiny():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(12, 5), torch.nn.Tanh(),
                               torch.nn.Linear(5, 3)).double()


def view_of(tmp_path, algorithm: str, round_number: int, options: dict, previous=None, theta=None):
    """The audit's view of a recorded round: the config's public facts (and round R − 1 recorded if given)."""
    tmp_path.mkdir(exist_ok=True)
    (tmp_path / "log.h5").touch()
    if previous is not None:
        recorder = ReceivedRecorder(tmp_path, [round_number - 1], {})
        recorder.before_step(round_number - 2, previous, SimpleNamespace(rows=None, upload_names=[],
                                                                         gives_uploads=False))
        recorder.after_step(round_number - 2, theta)
    cfg = SimpleNamespace(fed=SimpleNamespace(algorithm=algorithm, options=options, K=K, local_momentum=0.0),
                          optim=SimpleNamespace(weight_decay=DECAY, momentum=0.9), lr_at_round=lambda r: 0.25)
    return SimpleNamespace(run=tmp_path, round=round_number, cfg=cfg,
                           received={"n_trainable": len(theta), "theta_before": theta})


def by_the_rule(model, rule, x, y, state) -> torch.Tensor:
    """θ_K − Θ after K of the rule's own local steps on (x, y)."""
    params = [p.detach().clone().requires_grad_() for p in model.parameters()]
    start = [p.detach().clone() for p in params]
    for k in range(K):
        out = torch.func.functional_call(model, dict(zip([n for n, _ in model.named_parameters()], params)), (x,))
        grads = list(torch.autograd.grad(LOSS(out, y), params))
        with torch.no_grad():
            rule.local_step(params, grads, LocalRound(lr=LR, K=K, global_params=start, step=k), state)
    return torch.cat([(p - s).reshape(-1) for p, s in zip(params, start)]).detach()


def simulated(model, step, x, y) -> torch.Tensor:
    update = local_update_of(model, LOSS, y, LR, K, momentum=step.momentum, weight_decay=step.weight_decay,
                             correct=step.correct)(x)
    return torch.cat([u.reshape(-1) for u in update]).detach()


def flat(model) -> torch.Tensor:
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()])


def test_fedprox_local_steps_are_simulated_exactly(tmp_path):
    model, x, y = tiny(), torch.randn(4, 3, 2, 2, dtype=torch.float64), torch.tensor([0, 1, 2, 1])
    step = local_step(view_of(tmp_path, "fedprox", 2, {"mu": 0.3}, theta=flat(model)), model, K)
    rule = FedProx(FedProxOptions(mu=0.3), weight_decay=DECAY)
    torch.testing.assert_close(simulated(model, step, x, y), by_the_rule(model, rule, x, y, {}), rtol=1e-12,
                               atol=1e-14)
    plain = local_step(view_of(tmp_path, "fedprox", 2, {"mu": 0.0}, theta=flat(model)), model, K)
    assert not torch.allclose(simulated(model, plain, x, y), simulated(model, step, x, y))


def test_pfm_local_steps_add_the_momentum_of_the_recorded_global_models(tmp_path):
    model, x, y = tiny(), torch.randn(4, 3, 2, 2, dtype=torch.float64), torch.tensor([0, 1, 2, 1])
    theta = flat(model)
    previous = theta + 0.1 * torch.randn(len(theta), dtype=torch.float64)
    step = local_step(view_of(tmp_path, "pfm", 2, {}, previous, theta), model, K)
    M = (previous - theta) / 0.25                         # eq. 6, η of round 1
    expected = by_the_rule(model, PFM(momentum=0.9, weight_decay=DECAY), x, y, {"global_momentum": M})
    torch.testing.assert_close(simulated(model, step, x, y), expected, rtol=1e-12, atol=1e-14)
    first = local_step(view_of(tmp_path / "r1", "pfm", 1, {}, theta=theta), model, K)   # M = 0 in round 1
    zero = by_the_rule(model, PFM(momentum=0.9, weight_decay=DECAY), x, y, {"global_momentum": 0 * M})
    torch.testing.assert_close(simulated(model, first, x, y), zero, rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("algorithm, round_number, message", [
    ("pfm", 3, r"fed.algorithm=pfm: its local step adds β·M/K, M = \(Θ_\{R−1\} − Θ_R\)/η from the global model of "
               r"round 2, which was not recorded \(record it too: log.record_received=\[2, 3\]\)$"),
    ("scaffold", 1, r"fed.algorithm=scaffold: the local step of scaffold reads state the recording does not hold, so "
                    r"the audit does not simulate it \(simulated: fedavg, fedprox, pfm\)$"),
])
def test_a_local_step_the_server_cannot_simulate_is_refused(tmp_path, algorithm, round_number, message):
    model = tiny()
    with pytest.raises(Refused, match=message):
        local_step(view_of(tmp_path, algorithm, round_number, {}, theta=flat(model)), model, K)
