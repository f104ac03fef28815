"""ArcFace/CosFace margins and the single-rank classifier: hand-computed values, gradients, init, sampling."""
import math

import pytest
import torch
import torch.nn.functional as F

from fedmpi.models import build_classifier, make_margin
from fedmpi.models.class_centres import CHUNK_ROWS, init_class_centres, shard_bounds
from fedmpi.models.heads import margin_logits

DEG170 = math.radians(170)


def test_margin_logits_by_hand():
    cos = torch.tensor([[0.5, 0.0, -0.3], [math.cos(DEG170), 0.2, 0.9]], dtype=torch.float64)
    rows, cols = torch.tensor([0, 1]), torch.tensor([0, 0])
    arc = margin_logits(cos, rows, cols, make_margin("arcface"))
    # θ = 60°: cos(θ + 0.5); θ = 170°: θ + 0.5 > π, so insightface's linear continuation cos θ − m·sin m
    want = 64 * torch.tensor([[math.cos(math.pi / 3 + 0.5), 0.0, -0.3],
                              [math.cos(DEG170) - 0.5 * math.sin(0.5), 0.2, 0.9]], dtype=torch.float64)
    torch.testing.assert_close(arc, want, rtol=0, atol=1e-12)
    cosface = margin_logits(cos, rows, cols, make_margin("cosface"))
    want = 64 * torch.tensor([[0.5 - 0.35, 0.0, -0.3], [math.cos(DEG170) - 0.35, 0.2, 0.9]], dtype=torch.float64)
    torch.testing.assert_close(cosface, want, rtol=0, atol=1e-12)


def test_margin_defaults_and_errors():
    assert (make_margin("arcface").margin, make_margin("arcface").scale) == (0.5, 64.0)
    assert make_margin("cosface").margin == 0.35
    assert make_margin("cosface", scale=30, margin=0.4).margin == 0.4
    with pytest.raises(ValueError, match="unknown classifier kind 'sphereface'"):
        make_margin("sphereface")
    with pytest.raises(ValueError, match="scale 0 must be > 0"):
        make_margin("arcface", scale=0)


def _two_class(kind):
    classifier = build_classifier(2, 2, kind=kind, dtype=torch.float64)
    with torch.no_grad():  # centres deliberately not unit length: the heads normalise them
        classifier.weight.copy_(torch.tensor([[3 * math.cos(math.pi / 3), 3 * math.sin(math.pi / 3)],
                                              [0.0, 0.5]], dtype=torch.float64))
    embeddings = torch.tensor([[2.0, 0.0], [math.cos(DEG170 + math.pi / 3), math.sin(DEG170 + math.pi / 3)]],
                              dtype=torch.float64)
    return classifier, embeddings


@pytest.mark.parametrize("kind", ["arcface", "cosface"])
def test_two_class_loss_by_hand(kind):
    """Sample 0 at 60° from centre 0 (90° from centre 1); sample 1 at 170° from centre 0, label 0 for both."""
    classifier, embeddings = _two_class(kind)
    labels = torch.tensor([0, 0])
    if kind == "arcface":
        targets = [math.cos(math.pi / 3 + 0.5), math.cos(DEG170) - 0.5 * math.sin(0.5)]
    else:
        targets = [0.5 - 0.35, math.cos(DEG170) - 0.35]
    others = [0.0, math.cos(DEG170 + math.pi / 3 - math.pi / 2)]
    per_sample = [math.log(math.exp(64 * t) + math.exp(64 * o)) - 64 * t for t, o in zip(targets, others)]
    loss = classifier(embeddings, labels)
    assert loss.item() == pytest.approx(sum(per_sample) / 2, rel=1e-12)


@pytest.mark.parametrize("kind", ["arcface", "cosface"])
def test_plain_classifier_gradients(kind):
    """The custom softmax cross-entropy's backward against finite differences (float64)."""
    torch.manual_seed(0)
    classifier = build_classifier(7, 5, kind=kind, scale=4.0, dtype=torch.float64)
    labels = torch.tensor([0, 3, 6, 3])
    embeddings = torch.randn(4, 5, dtype=torch.float64, requires_grad=True)
    centres = classifier.weight.detach().clone().requires_grad_(True)
    loss = lambda e, w: torch.func.functional_call(classifier, {"weight": w}, (e, labels))  # noqa: E731
    assert torch.autograd.gradcheck(loss, (embeddings, centres))


@pytest.mark.parametrize("kind", ["arcface", "cosface"])
def test_plain_classifier_equals_cross_entropy_reference(kind):
    torch.manual_seed(1)
    classifier = build_classifier(9, 6, kind=kind, dtype=torch.float64, seed=4)
    embeddings = torch.randn(8, 6, dtype=torch.float64)
    labels = torch.randint(0, 9, (8,))
    cos = F.normalize(embeddings) @ F.normalize(classifier.weight.detach()).T
    target = cos[torch.arange(8), labels]
    moved = torch.cos(torch.acos(target) + 0.5) if kind == "arcface" else target - 0.35
    logits = 64 * cos.index_put((torch.arange(8), labels), moved)
    assert classifier(embeddings, labels).item() == pytest.approx(F.cross_entropy(logits, labels).item(),
                                                                  rel=1e-12)


def test_shard_bounds_uneven():
    assert [shard_bounds(10, 4, k) for k in range(4)] == [(0, 3), (3, 6), (6, 8), (8, 10)]
    assert [shard_bounds(11, 3, k) for k in range(3)] == [(0, 4), (4, 8), (8, 11)]
    assert shard_bounds(5, 1, 0) == (0, 5)


def test_init_is_the_same_rows_whatever_the_shard():
    full = init_class_centres(3, 0, CHUNK_ROWS + 100, 8, torch.float64)
    assert torch.equal(init_class_centres(3, CHUNK_ROWS - 10, CHUNK_ROWS + 5, 8, torch.float64),
                       full[CHUNK_ROWS - 10:CHUNK_ROWS + 5])
    assert torch.equal(init_class_centres(3, 7, 20, 8, torch.float32), full[7:20].float())
    assert not torch.equal(init_class_centres(4, 0, 20, 8, torch.float64), full[:20])
    assert full.std().item() == pytest.approx(0.01, rel=0.02)
    classifier = build_classifier(20, 8, seed=3, mode="sharded", dtype=torch.float64)
    assert torch.equal(classifier.weight.detach(), full[:20])
    assert (classifier.class_start, classifier.class_end, classifier.num_classes) == (0, 20, 20)


def test_float32_even_under_autocast():
    torch.manual_seed(2)
    classifier = build_classifier(10, 8)
    embeddings = torch.randn(4, 8)
    labels = torch.tensor([1, 2, 3, 9])
    plain = classifier(embeddings, labels)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        mixed = classifier(embeddings.bfloat16(), labels)
    assert mixed.dtype == torch.float32
    assert mixed.item() == pytest.approx(
        classifier(embeddings.bfloat16().float(), labels).item(), rel=1e-6)
    assert plain.dtype == torch.float32


def test_sampled_negatives_keep_positives_and_equal_softmax_over_sampled_columns():
    torch.manual_seed(3)
    num_classes, batch = 200, 6
    embeddings = torch.randn(batch, 8, dtype=torch.float64, requires_grad=True)
    labels = torch.tensor([5, 17, 17, 99, 150, 199])
    full = build_classifier(num_classes, 8, sample_rate=1.0, seed=9, dtype=torch.float64)
    sampled = build_classifier(num_classes, 8, sample_rate=0.1, seed=9, dtype=torch.float64)
    assert torch.equal(full.weight, sampled.weight)
    loss = sampled(embeddings, labels)
    loss.backward()
    columns = sampled.last_sampled
    assert columns.numel() == 20 and set(labels.tolist()) <= set(columns.tolist())
    assert torch.equal(columns, columns.sort().values)
    unsampled = torch.ones(num_classes, dtype=torch.bool)
    unsampled[columns] = False
    assert torch.count_nonzero(sampled.weight.grad[unsampled]) == 0
    assert torch.count_nonzero(sampled.weight.grad[columns]) > 0
    # the loss is the full head's softmax restricted to the sampled columns
    cos = F.normalize(embeddings.detach()) @ F.normalize(full.weight.detach()[columns]).T
    local = torch.searchsorted(columns, labels)
    target = cos[torch.arange(batch), local]
    logits = 64 * cos.index_put((torch.arange(batch), local), torch.cos(torch.acos(target) + 0.5))
    assert loss.item() == pytest.approx(F.cross_entropy(logits, local).item(), rel=1e-12)
    # reproducible per (seed, step); a new step draws other negatives; eval uses every class
    again = build_classifier(num_classes, 8, sample_rate=0.1, seed=9, dtype=torch.float64)
    again(embeddings, labels)
    assert torch.equal(again.last_sampled, columns)
    again(embeddings, labels)
    assert not torch.equal(again.last_sampled, columns) and int(again.sample_step) == 2
    again.eval()
    assert again(embeddings, labels).item() == pytest.approx(full(embeddings, labels).item(), rel=1e-12)


def test_sample_rate_one_is_the_full_classifier():
    embeddings = torch.randn(4, 8, dtype=torch.float64)
    labels = torch.tensor([0, 1, 2, 3])
    a = build_classifier(12, 8, kind="cosface", sample_rate=1.0, seed=1, dtype=torch.float64)
    b = build_classifier(12, 8, kind="cosface", seed=1, dtype=torch.float64, mode="replicated")
    assert a(embeddings, labels).item() == b(embeddings, labels).item()
    assert "sample_step" not in a.state_dict() and list(a.state_dict()) == ["weight"]


def test_classifier_input_errors():
    classifier = build_classifier(10, 8)
    with pytest.raises(ValueError, match="label 12 outside \\[0, 10\\)"):
        classifier(torch.randn(2, 8), torch.tensor([1, 12]))
    with pytest.raises(ValueError, match="embeddings of shape \\[batch, 8\\], got \\[2, 7\\]"):
        classifier(torch.randn(2, 7), torch.tensor([1, 2]))
    with pytest.raises(ValueError, match="labels must be torch.int64"):
        classifier(torch.randn(2, 8), torch.tensor([1, 2], dtype=torch.int32))
    with pytest.raises(ValueError, match="unknown classifier mode 'tensor'"):
        build_classifier(10, 8, mode="tensor")
    with pytest.raises(ValueError, match="sample_rate 0 must be in \\(0, 1\\]"):
        build_classifier(10, 8, sample_rate=0)
    with pytest.raises(ValueError, match="num_classes 0 must be a positive integer"):
        build_classifier(0, 8)
    with pytest.raises(ValueError, match="dtype torch.float16"):
        build_classifier(10, 8, dtype=torch.float16)
