"""The audit's attacks on cases with a known answer: an FC layer's input recovered exactly from its gradient
[Phong et al.], the label read off one example's last layer [iDLG], and Inverting Gradients recovering planted
images from a gradient and from a FedAvg local update [Geiping et al.]."""
import math

import pytest
import torch

from fedmpi.audit.analytic import label_from_last_layer, recover_fc_input, recover_fc_input_best
from fedmpi.audit.inversion import cosine_distance, gradient_of, invert, local_update_of, total_variation
from fedmpi.audit.party_update import invert_party_update, margin_loss
from fedmpi.audit.scoring import score_reconstructions

LOSS = torch.nn.CrossEntropyLoss()


def fc_gradients(layer, x, y):
    layer.zero_grad()
    LOSS(layer(x), y).backward()
    return layer.weight.grad.clone(), layer.bias.grad.clone()


def test_one_input_is_recovered_exactly_from_an_fc_layers_gradient():
    torch.manual_seed(0)
    layer = torch.nn.Linear(20, 6).double()
    x = torch.randn(1, 20, dtype=torch.float64)
    weight_grad, bias_grad = fc_gradients(layer, x, torch.tensor([2]))
    every_row = recover_fc_input(weight_grad, bias_grad)
    assert every_row.shape == (6, 20)
    torch.testing.assert_close(every_row, x.expand(6, 20), rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(recover_fc_input_best(weight_grad, bias_grad), x[0], rtol=1e-12, atol=1e-12)


def test_a_batch_gives_each_row_a_weighted_mix_of_its_inputs():
    torch.manual_seed(1)
    layer = torch.nn.Linear(5, 4).double()
    x = torch.randn(3, 5, dtype=torch.float64)
    y = torch.tensor([0, 3, 1])
    weight_grad, bias_grad = fc_gradients(layer, x, y)
    logits = layer(x).detach()
    per_example = (torch.softmax(logits, dim=1) - torch.nn.functional.one_hot(y, 4)) / 3   # ∂L/∂y_n, mean loss
    mix = (per_example.T @ x) / per_example.sum(dim=0)[:, None]
    torch.testing.assert_close(recover_fc_input(weight_grad, bias_grad), mix, rtol=1e-10, atol=1e-10)
    assert not torch.allclose(mix[0], x[0], atol=1e-2)


def test_no_bias_gradient_is_refused_in_one_line():
    with pytest.raises(ValueError, match=r"no row of ∂L/∂b exceeds 0 in magnitude"):
        recover_fc_input(torch.ones(2, 3), torch.zeros(2))


@pytest.mark.parametrize("bias", [True, False])
def test_idlg_reads_the_true_label_of_one_example(bias):
    torch.manual_seed(2)
    features = torch.nn.Sequential(torch.nn.Linear(12, 16), torch.nn.ReLU())
    head = torch.nn.Linear(16, 10, bias=bias)
    for trial in range(20):
        x, label = torch.randn(1, 12), trial % 10
        head.zero_grad()
        LOSS(head(features(x)), torch.tensor([label])).backward()
        assert label_from_last_layer(head.weight.grad, head.bias.grad if bias else None) == label


def tiny_model():
    torch.manual_seed(3)
    return torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(48, 32), torch.nn.Sigmoid(),
                               torch.nn.Linear(32, 10))


def test_inverting_gradients_recovers_a_planted_image():
    model = tiny_model()
    image, label = torch.rand(1, 3, 4, 4, generator=torch.Generator().manual_seed(4)), torch.tensor([3])
    observed = torch.autograd.grad(LOSS(model(image), label), list(model.parameters()))
    found = invert(gradient_of(model, LOSS, label), observed, image.shape, iterations=300, tv=0.0, restarts=2)
    assert len(found.objectives) == 2 and found.objective == min(found.objectives) < 1e-6
    assert score_reconstructions(found.images, image)["psnr"][0] > 40.0


def test_the_fedavg_variant_recovers_two_images_behind_three_local_steps():
    model = tiny_model()
    images, labels = torch.rand(2, 3, 4, 4, generator=torch.Generator().manual_seed(5)), torch.tensor([1, 7])
    simulate = local_update_of(model, LOSS, labels, lr=0.5, steps=3)
    upload = [u.detach() for u in simulate(images)]
    assert float(sum(u.abs().sum() for u in upload)) > 0
    found = invert(simulate, upload, images.shape, iterations=300, tv=0.0)
    scores = score_reconstructions(found.images, images)
    assert sorted(scores["assigned"]) == [0, 1] and scores["psnr"].min() > 30.0


def test_local_steps_follow_sgd_with_the_known_learning_rate():
    model = torch.nn.Linear(3, 2).double()
    x, y = torch.randn(4, 3, dtype=torch.float64), torch.tensor([0, 1, 1, 0])
    update = local_update_of(model, LOSS, y, lr=0.1, steps=2, batches=[torch.arange(2), torch.arange(2, 4)])(x)
    reference = torch.nn.Linear(3, 2).double()
    reference.load_state_dict(model.state_dict())
    optimiser = torch.optim.SGD(reference.parameters(), lr=0.1)
    for rows in (slice(0, 2), slice(2, 4)):
        optimiser.zero_grad()
        LOSS(reference(x[rows]), y[rows]).backward()
        optimiser.step()
    for delta, after, before in zip(update, reference.parameters(), model.parameters()):
        torch.testing.assert_close(delta.detach(), (after - before).detach())


def test_objective_parts_on_known_values():
    assert float(cosine_distance([torch.tensor([1.0, 0.0])], [torch.tensor([0.0, 2.0])])) == pytest.approx(1.0)
    assert float(cosine_distance([torch.tensor([1.0]), torch.tensor([1.0])],
                                 [torch.tensor([2.0]), torch.tensor([2.0])])) == pytest.approx(0.0, abs=1e-6)
    stripes = torch.tensor([[0.0, 1.0], [0.0, 1.0]]).reshape(1, 1, 2, 2)
    assert float(total_variation(stripes)) == pytest.approx(1.0)   # 0 down the columns, 1 across
    assert math.isclose(float(total_variation(torch.ones(1, 1, 3, 3))), 0.0)


def test_a_partys_image_is_recovered_behind_two_local_steps_with_its_classifier_unknown():
    """The party's margin classifier (4 classes) never leaves it: the attack optimises a surrogate beside the
    image and still recovers it, the first FC layer's update fixing the input as in Phong et al."""
    torch.manual_seed(3)
    model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(48, 32), torch.nn.Sigmoid(),
                                torch.nn.Linear(32, 8)).double()
    image = torch.rand(1, 3, 4, 4, generator=torch.Generator().manual_seed(5), dtype=torch.float64)
    classifier = torch.randn(4, 8, dtype=torch.float64)
    party_loss = lambda out, y: margin_loss(out, classifier, y, 16.0, 0.2)
    upload = [u.detach() for u in local_update_of(model, party_loss, torch.tensor([1]), 0.5, 2)(image)]
    found = invert_party_update(model, upload, 1, (3, 4, 4), steps=2, lr=0.5, momentum=0.0, scale=16.0, margin=0.2,
                                iterations=400, restarts=1, data_range=(0.0, 1.0), tv=0.0)
    assert score_reconstructions(found.images, image)["psnr"][0] > 40.0


def test_the_margin_loss_on_known_values():
    rows = torch.tensor([[1.0, 0.0], [0.0, 1.0]], dtype=torch.float64)
    embedding = torch.tensor([[2.0, 0.0]], dtype=torch.float64)      # cosines 1 and 0; the label's less m
    expected = -math.log(math.exp(4 * 0.5) / (math.exp(4 * 0.5) + 1.0))
    assert float(margin_loss(embedding, rows, torch.tensor([0]), 4.0, 0.5)) == pytest.approx(expected)
