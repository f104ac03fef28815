"""What a silo trainer rank's local step updates beside the backbone (silo/party_parts.step_parts): the party's
classifier and the local objective's own parameters, each stepped by a momentum SGD of its own at optim's lr,
momentum and weight decay (eq. 1-2), the classifier's first; the objective's gradients averaged over the party
beside the backbone's."""
from types import SimpleNamespace

import torch

from fedmpi.silo.party_parts import step_parts

# binary fractions: every value of a step below is exact
OPTIM = SimpleNamespace(lr=0.5, momentum=0.5, weight_decay=0.25)


class Objective:
    def __init__(self, own: list):
        self.own = own

    def parameters(self) -> list:
        return self.own


def classifier() -> torch.nn.Linear:
    head = torch.nn.Linear(2, 1, bias=False).double()
    with torch.no_grad():
        head.weight.copy_(torch.tensor([[1.0, -2.0]], dtype=torch.float64))
    return head


def test_the_classifier_and_the_objective_each_step_with_a_momentum_sgd_at_the_configs_numbers():
    head, own = classifier(), torch.nn.Parameter(torch.tensor([4.0], dtype=torch.float64))
    stepped = step_parts(Objective([own]), head, None, None, OPTIM, fused=True)
    assert [id(p) for p in stepped.extra] == [id(head.weight), id(own)]
    assert [opt.param_groups[0]["params"] for opt in stepped.optimizers] == [[head.weight], [own]]
    assert stepped.classifier_optimizer is stepped.optimizers[0]
    assert [opt.fused for opt in stepped.optimizers] == [True, False]   # fused where the GPU runs the classifier's
    assert stepped.averaged == []       # one rank, no backbone average: nothing made the party's mean
    stepped.optimizers[0].fused = False  # the step below on CPU; torch's fused kernel is equal within rounding
    for _ in range(2):
        head.weight.grad = torch.tensor([[1.0, 1.0]], dtype=torch.float64)
        own.grad = torch.tensor([2.0], dtype=torch.float64)
        for opt in stepped.optimizers:
            opt.step()
    # b1 = g + wd p, p1 = p - lr b1; b2 = m b1 + g + wd p1, p2 = p1 - lr b2
    assert head.weight.tolist() == [[-0.484375, -2.59375]]
    assert own.tolist() == [0.4375]


def test_an_objective_without_parameters_leaves_the_classifier_alone_in_the_step():
    head, backbone_average = classifier(), object()
    stepped = step_parts(Objective([]), head, backbone_average, object(), OPTIM, fused=False)
    assert [id(p) for p in stepped.extra] == [id(head.weight)]
    assert len(stepped.optimizers) == 1 and stepped.classifier_optimizer.param_groups[0]["params"] == [head.weight]
    assert stepped.averaged == [backbone_average]
