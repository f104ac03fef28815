"""The audit's measures on known answers: PSNR / SSIM and the assignment by PSNR, identity recovery at a FAR
threshold, template re-identification (a planted template found, chance on random rows), membership AUC (0.5 on
a null split, 1 on a separable case, exact on small lists) and the (ε, δ)-DP bound on TPR."""
import math

import numpy as np
import pytest
import torch
from sklearn.metrics import roc_auc_score

from fedmpi.audit.membership import compactness, dp_tpr_bound, membership_attack, roc_auc
from fedmpi.audit.scoring import (assign_by_psnr, identity_recovery, psnr, score_reconstructions, ssim,
                                  templates, threshold_at_far)
from fedmpi.audit.templates import cone_members, reidentify


def test_psnr_of_a_uniform_error_of_a_tenth_is_20_db():
    originals = torch.rand(2, 3, 8, 8, generator=torch.Generator().manual_seed(0)) * 0.8
    assert psnr(originals + 0.1, originals) == pytest.approx([20.0, 20.0])
    assert psnr(originals, originals)[0] == math.inf


def test_ssim_of_constant_images_is_the_luminance_term():
    # Constant images: every window has σ = 0, so SSIM = (2ab + C1) / (a² + b² + C1), C1 = (0.01 L)² [Wang 2004]
    a, b, c1 = 0.3, 0.6, 0.01 ** 2
    value = ssim(torch.full((1, 1, 16, 16), a), torch.full((1, 1, 16, 16), b))
    assert value[0] == pytest.approx((2 * a * b + c1) / (a * a + b * b + c1), rel=1e-6)
    image = torch.rand(1, 3, 16, 16, generator=torch.Generator().manual_seed(1))
    assert ssim(image, image)[0] == pytest.approx(1.0)


def test_reconstructions_are_scored_against_their_best_matching_original():
    originals = torch.rand(3, 1, 12, 12, generator=torch.Generator().manual_seed(2))
    reconstructions = originals[[2, 0, 1]] + 0.01
    assert assign_by_psnr(reconstructions, originals).tolist() == [2, 0, 1]
    scores = score_reconstructions(reconstructions, originals)
    assert scores["psnr"] == pytest.approx([40.0] * 3) and (scores["ssim"] > 0.99).all()


def test_identity_recovery_at_the_threshold_of_a_far():
    generator = torch.Generator().manual_seed(3)
    scores = np.r_[np.linspace(0.0, 0.5, 1000), np.linspace(0.4, 0.9, 100)]
    issame = np.r_[np.zeros(1000, bool), np.ones(100, bool)]
    threshold = threshold_at_far(scores, issame, 0.01)
    assert 0.49 < threshold < 0.5                     # the 11th highest of 1000 negatives
    template = torch.nn.functional.normalize(torch.randn(64, generator=generator), dim=0)
    near = template + 0.05 * torch.randn(10, 64, generator=generator)
    others = torch.randn(500, 64, generator=generator)
    result = identity_recovery(near, others, template, threshold)
    assert result["recovered"] == 1.0 and result["chance"] < 0.01
    found = templates(torch.cat([near, -near]), [7] * 10 + [9] * 10)
    assert sorted(found) == [7, 9] and float(found[7] @ found[9]) == pytest.approx(-1.0)


def test_a_planted_template_is_reidentified_and_random_rows_score_chance():
    generator = torch.Generator().manual_seed(4)
    gallery = torch.randn(50, 32, generator=generator)
    planted = gallery[[7, 21]] + 0.1 * torch.randn(2, 32, generator=generator)
    found = reidentify(planted, gallery, [7, 21], threshold=0.5)
    assert found["top1"] == 1.0 and found["at_threshold"] == 1.0 and found["chance"] == 0.02
    random_rows = torch.randn(2000, 32, generator=generator)
    owners = torch.randint(0, 50, (2000,), generator=generator).numpy()
    assert abs(reidentify(random_rows, gallery, owners)["top1"] - 0.02) < 0.01
    with pytest.raises(ValueError, match="owners must index the gallery of 50 templates, got 0..50"):
        reidentify(planted, gallery, [0, 50])


def test_a_cone_holds_the_templates_within_its_angle():
    gallery = torch.tensor([[1.0, 0.0], [0.8, 0.6], [0.0, 1.0], [-1.0, 0.0]])
    assert cone_members(torch.tensor([2.0, 0.0]), 0.75, gallery).tolist() == [0, 1]
    with pytest.raises(ValueError, match=r"a cone's κ is a cosine in \[-1, 1\], got 1.5"):
        cone_members(torch.tensor([1.0, 0.0]), 1.5, gallery)


def test_auc_matches_its_definition_on_small_lists():
    members, others = [0.9, 0.4, 0.4, 0.7], [0.1, 0.4, 0.8]
    expected = roc_auc_score([1] * 4 + [0] * 3, members + others)
    assert roc_auc(members, others) == pytest.approx(expected) == pytest.approx(8 / 12)
    assert roc_auc([2, 3], [0, 1]) == 1.0 and roc_auc([1, 1], [1]) == 0.5


def identity_embeddings(n_identities, per_identity, spread, seed):
    generator = torch.Generator().manual_seed(seed)
    centres = torch.randn(n_identities, 1, 64, generator=generator)
    noise = torch.randn(n_identities, per_identity, 64, generator=generator)
    rows = (centres + torch.as_tensor(spread).reshape(-1, 1, 1) * noise).reshape(-1, 64)
    return rows, np.repeat(np.arange(n_identities), per_identity)


def test_membership_auc_is_one_half_for_identities_no_model_saw():
    rows, identities = identity_embeddings(400, 5, torch.ones(400), seed=5)
    found = membership_attack(rows, identities, members=range(200))
    assert found["members"] == found["nonmembers"] == 200 and abs(found["auc"] - 0.5) < 0.08


def test_membership_auc_is_one_when_members_are_compact():
    spread = torch.cat([torch.full((20,), 0.2), torch.full((20,), 2.0)])
    rows, identities = identity_embeddings(40, 4, spread, seed=6)
    assert membership_attack(rows, identities, members=range(20))["auc"] == 1.0
    assert compactness(torch.tensor([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]])) == pytest.approx(2 * math.sqrt(0.5) / 3)


def test_the_dp_bound_on_tpr_at_known_points():
    # e^ε = 2, δ = 0.1: TPR <= min(2 FPR + 0.1, 1 - (1 - 0.1 - FPR) / 2)
    assert dp_tpr_bound([0.0, 0.2, 0.5, 1.0], math.log(2), 0.1) == pytest.approx([0.1, 0.5, 0.8, 1.0])
    assert dp_tpr_bound([0.3], 0.0, 0.0) == pytest.approx([0.3])   # ε = 0: no test beats chance
    with pytest.raises(ValueError, match=r"must have ε >= 0 and 0 <= δ < 1, got \(1.0, 1.0\)"):
        dp_tpr_bound([0.1], 1.0, 1.0)
