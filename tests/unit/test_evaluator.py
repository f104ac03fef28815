import numpy as np
import pytest
import torch
from torch import nn

from fedmpi.metrics.evaluator import Evaluator
from fedmpi.metrics.embed import embed_images, pair_scores
from fedmpi.metrics.roc import tar_at_far
from fedmpi.metrics.verification import fv_accuracy, heldout_accuracy

H = W = 8


def tiny_backbone(seed=0):
    """Conv + BatchNorm + linear: not flip-symmetric, and BatchNorm tells eval mode from train mode."""
    torch.manual_seed(seed)
    net = nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.BatchNorm2d(4), nn.ReLU(), nn.Flatten(),
                        nn.Linear(4 * H * W, 6))
    with torch.no_grad():
        net[1].running_mean.uniform_(-0.2, 0.2)
        net[1].running_var.uniform_(0.5, 2.0)
    return net


def random_images(n, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, 256, (n, 3, H, W), dtype=torch.uint8, generator=g)


def manual_embeddings(net, images):
    net.eval()
    with torch.no_grad():
        x = (images.float() / 255 - 0.5) / 0.5
        e = net(x) + net(torch.flip(x, dims=(3,)))
    return e / e.norm(dim=1, keepdim=True)


def test_embeddings_are_the_normalised_flip_sum_in_eval_mode():
    net = tiny_backbone()
    net.train()
    images = random_images(10)
    embeddings = embed_images(net, images, batch_size=3)  # batches that do not divide N
    assert net.training  # mode restored
    assert embeddings.shape == (10, 6) and embeddings.dtype == torch.float32
    assert torch.allclose(embeddings, manual_embeddings(net, images), atol=1e-6)
    assert torch.allclose(embeddings.norm(dim=1), torch.ones(10), atol=1e-6)
    unflipped = nn.functional.normalize(net.eval()(((images.float() / 255) - 0.5) / 0.5), dim=1)
    assert not torch.allclose(embeddings, unflipped, atol=1e-3)  # the flip does contribute


def test_embed_rejects_float_images():
    with pytest.raises(ValueError, match="uint8"):
        embed_images(tiny_backbone(), torch.zeros(2, 3, H, W))


def test_pair_scores_are_cosines_of_consecutive_rows():
    emb = np.array([[1.0, 0.0], [0.0, 2.0], [3.0, 4.0], [3.0, 4.0]])
    assert pair_scores(emb) == pytest.approx([0.0, 1.0])
    with pytest.raises(ValueError, match="even number of rows"):
        pair_scores(emb[:3])


def pair_set(n_pairs=40, seed=0, noise_level=3):
    """Pairs laid out as a .bin file: image 2i and 2i+1; matched pairs are copies with a little noise."""
    rng = np.random.default_rng(seed)
    issame = np.tile([True, False], n_pairs // 2)
    images = random_images(2 * n_pairs, seed).clone()
    noise = torch.as_tensor(rng.integers(-noise_level, noise_level + 1, size=(n_pairs, 3, H, W)), dtype=torch.int16)
    for i in np.flatnonzero(issame):
        images[2 * i + 1] = (images[2 * i].to(torch.int16) + noise[i]).clamp(0, 255).to(torch.uint8)
    return images, issame


def test_evaluator_matches_a_manual_computation():
    net = tiny_backbone(1)
    sets = {"lfw": pair_set(40, 0), "cfp_fp": pair_set(60, 1)}
    evaluator = Evaluator(sets, batch_size=16, fars=(0.1,))
    scores_fv, held = evaluator.score(net), evaluator.evaluate(net)
    for name, (images, issame) in sets.items():
        scores = pair_scores(manual_embeddings(net, images).numpy())
        assert scores_fv[name] == pytest.approx(fv_accuracy(scores, issame, "first")["mean"])
        heldout = heldout_accuracy(scores, issame, "first")
        assert held[name]["accuracy"] == pytest.approx(heldout["mean"])
        assert held[name]["accuracy_std"] == pytest.approx(heldout["std"])
        half = len(issame) // 2  # the held-out folds 5-9 are the second half of the pairs
        expected_tar = tar_at_far(scores[half:], issame[half:], (0.1,))[0.1]["tar"]
        assert held[name]["tar@far=0.1"] == pytest.approx(expected_tar)
    assert set(held["lfw"]) == {"accuracy", "accuracy_std", "tar@far=0.1"}


def test_copies_against_negatives_are_verified_perfectly():
    # a linear backbone without bias maps the negative image 255 - x to minus the embedding: cosine 1 vs -1
    torch.manual_seed(0)
    net = nn.Sequential(nn.Flatten(), nn.Linear(3 * H * W, 6, bias=False))
    images, issame = pair_set(40, noise_level=0)
    for i in np.flatnonzero(~issame):
        images[2 * i + 1] = 255 - images[2 * i]
    evaluator = Evaluator({"lfw": (images, issame)}, fv_folds="second")
    assert evaluator.score(net) == {"lfw": 1.0}
    assert evaluator.evaluate(net)["lfw"] == {"accuracy": 1.0, "accuracy_std": 0.0, "tar@far=0.001": 1.0,
                                              "tar@far=0.01": 1.0}


def test_evaluator_rejects_malformed_sets():
    images, issame = pair_set(40)
    with pytest.raises(ValueError, match="'lfw': 80 images for 39 pairs"):
        Evaluator({"lfw": (images, issame[:39])})
    with pytest.raises(ValueError, match="'lfw': images must be a uint8 tensor"):
        Evaluator({"lfw": (images.float(), issame)})
    with pytest.raises(ValueError, match="'lfw': issame must be a 1-D bool array"):
        Evaluator({"lfw": (images, issame.astype(int))})
    with pytest.raises(ValueError, match="fv_folds must be one of"):
        Evaluator({"lfw": (images, issame)}, fv_folds="last")
    with pytest.raises(ValueError, match="cannot split 4 pairs into 10 folds"):
        Evaluator({"lfw": (images[:8], issame[:4])})


def test_a_diverged_model_is_a_result_with_nan_metrics_and_its_line_says_so():
    """Embeddings that are not finite (here a BatchNorm running variance below zero: NaN in eval mode) give NaN
    held-out metrics instead of an error; the evaluation line names the sets."""
    from fedmpi.metrics.evaluator import diverged
    from fedmpi.evaluation.held_out import accuracy_line

    net = tiny_backbone(2)
    with torch.no_grad():
        net[1].running_var[0] = -1.0
    evaluator = Evaluator({"lfw": pair_set(40, 0), "cfp_fp": pair_set(40, 1)}, fars=(0.1,))
    held = evaluator.evaluate(net)
    assert set(held) == {"lfw", "cfp_fp"} and set(held["lfw"]) == {"accuracy", "accuracy_std", "tar@far=0.1"}
    assert all(np.isnan(v) for metrics in held.values() for v in metrics.values())
    assert diverged(held["lfw"]) and not diverged({"accuracy": 0.5})
    assert accuracy_line(11, held) == ("eval after round 12: held-out accuracy % lfw nan  cfp_fp nan; diverged: the "
                                       "global model's embeddings are not finite on lfw, cfp_fp (NaN logged)")
