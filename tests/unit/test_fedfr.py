"""FedFR's oracle checks (spec §5.2, F1-F6; docs/BASELINES.md) through the code's own functions, the personalised
evaluation's protocols on hand-made features, the held-out split and the combined label space."""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from fedmpi.algorithms.fedfr import FedFROptions
from fedmpi.algorithms.fedfr.objective import decay_epochs, local_epochs, round_lr
from fedmpi.algorithms.fedfr.hard_negatives import best_cosines, chosen
from fedmpi.config import ConfigError, load_config
from fedmpi.data.combined import CombinedFaceDataset, heldout_split
from fedmpi.data.errors import DataError
from fedmpi.data.face_dataset import FaceDataset
from fedmpi.metrics.personal import identification, personal_metrics, verification
from fedmpi.models.contrastive import model_contrastive
from fedmpi.models.personal_head import PersonalHead, bce_loss, dfc_logits
from jobs.site import ROOT

D = torch.float64


def unit(rows) -> torch.Tensor:
    t = torch.tensor(rows, dtype=D)
    return t / t.norm(dim=1, keepdim=True)


def test_f1_a_public_image_at_exactly_the_threshold_is_not_chosen():
    local = unit([[1, 0], [0, 1]])
    at = [0.4, math.sqrt(1 - 0.4 ** 2)]                       # cosine 0.4 with the first local image, 0.917 with the second
    public = torch.tensor([[0.4, -math.sqrt(1 - 0.16)], [0.41, -math.sqrt(1 - 0.41 ** 2)], [-1.0, 0.0], at], dtype=D)
    best = best_cosines(local, public)
    assert best[:3].tolist() == pytest.approx([0.4, 0.41, 0.0], abs=1e-15)
    assert chosen(best, 0.4).tolist() == [False, True, False, True]   # the max over every local image, strict >


def test_f2_the_personal_heads_bce_value():
    cos = torch.tensor([[0.5, 0.2]], dtype=D)
    z, positives = dfc_logits(cos, torch.tensor([0]), torch.zeros(2, dtype=D), 30.0, 0.4, 3.0)
    assert z.tolist()[0] == pytest.approx([-16.6875, -5.04], abs=1e-12)
    assert bce_loss(z, positives, 30.0, 0.7).item() == pytest.approx(0.3894395, abs=1e-7)


def test_f2_the_bce_gradient_is_exact_past_softplus_threshold():
    # d L_bce / d z_j = −(λ/r) σ(−z_j) for the own identity, ((1 − λ)/r) σ(z_j) otherwise (batch of one); torch's
    # softplus returns x itself past 20, whose gradient 1 is off by σ(−x) (1.4e-11 at 25)
    z = torch.tensor([[-60.0, -25.0, -3.0, 0.0, 3.0, 25.0, 60.0]], dtype=D, requires_grad=True)
    positives = torch.tensor([[True, True, True, False, False, False, False]])
    bce_loss(z, positives, 30.0, 0.7).backward()
    sigmoid = [1 / (1 + math.exp(-x)) for x in z.detach()[0].tolist()]
    expected = [-(0.7 / 30) * (1 - s) if pos else (0.3 / 30) * s for s, pos in zip(sigmoid, positives[0].tolist())]
    for got, want in zip(z.grad[0].tolist(), expected):
        assert got == pytest.approx(want, rel=1e-15, abs=0)


def test_f2_through_the_head_module_the_converter_starting_as_the_identity():
    rows = torch.tensor([[1.0, 0.0], [0.2, math.sqrt(1 - 0.04)]], dtype=D)      # cos with f = [0.5, 0.866]: 0.5, 0.2...
    f = torch.tensor([[0.5, math.sqrt(0.75)]], dtype=D)
    head = PersonalHead(rows)
    cos = torch.nn.functional.normalize(head.convert(f)) @ torch.nn.functional.normalize(rows).T
    z, positives = dfc_logits(cos, torch.tensor([0]), torch.zeros(2, dtype=D), 30.0, 0.4, 3.0)
    assert head(f, torch.tensor([0])).item() == pytest.approx(bce_loss(z, positives, 30.0, 0.7).item(), abs=1e-15)
    assert torch.equal(head.convert(f), f)


def test_f3_the_contrastive_value():
    f = torch.tensor([[1.0, 0.0]], dtype=D)
    global_f = torch.tensor([[0.9, math.sqrt(1 - 0.81)]], dtype=D) * 3.0      # raw features: norms do not matter
    previous_f = torch.tensor([[0.6, -0.8]], dtype=D)
    loss = model_contrastive(f, global_f, previous_f, 0.5)
    assert loss.item() == pytest.approx(math.log(1 + math.exp(-0.6)), abs=1e-12)
    assert loss.item() == pytest.approx(0.4374880, abs=1e-7)


def test_f4_the_local_epoch_schedule_and_the_step_lr_within_a_round():
    o = FedFROptions()
    assert [local_epochs(r, o) for r in range(6)] == [10, 8, 6, 4, 4, 4]
    assert [decay_epochs(r, o) for r in range(6)] == [8, 6, 4, 3, 3, 3]
    assert [round_lr(1e-3, e, 0, o) for e in range(10)] == pytest.approx([1e-3] * 8 + [1e-4] * 2)
    assert [round_lr(1e-3, e, 3, o) for e in range(4)] == pytest.approx([1e-3] * 3 + [1e-4])


def test_f5_the_server_weighs_the_parties_by_their_combined_sets(tmp_path):
    """The weights the leaders send are |D_k| + |H_k|, and the server's w is those normalised (not |D_k|)."""
    from fedmpi.aggregation.party_rows import PartyRows

    local = [tiny_set(4, 3), tiny_set(2, 3)]                # |D_k| = 12, 6
    public = tiny_set(5, 2)
    sets = [CombinedFaceDataset(local[0], public, np.array([0, 3])),
            CombinedFaceDataset(local[1], public, np.arange(10))]
    weights = np.array([len(s) for s in sets], dtype=np.float64)
    assert weights.tolist() == [14, 16]
    w = torch.as_tensor(weights / weights.sum())
    rows = PartyRows(2, 3, dtype=D)
    rows.rows.copy_(torch.tensor([[1.0, 0.0, 2.0], [0.0, 1.0, 4.0]], dtype=D))
    out = torch.empty(3, dtype=D)
    rows.weighted_sum(w, out)
    assert out.tolist() == pytest.approx([14 / 30, 16 / 30, (28 + 64) / 30])


def test_f6_public_labels_follow_the_partys_and_are_negatives_of_every_personal_class():
    local, public = tiny_set(3, 2), tiny_set(5, 2)
    combined = CombinedFaceDataset(local, public, np.array([1, 6, 9]))   # public images of identities 0, 3, 4
    assert combined.num_classes == 3 + 5
    assert combined.labels.tolist() == [0, 0, 1, 1, 2, 2, 3 + 0, 3 + 3, 3 + 4]
    cos = torch.full((3, 3), 0.3, dtype=D)
    _, positives = dfc_logits(cos, torch.as_tensor(combined.labels[-3:]), torch.zeros(3, dtype=D), 30.0, 0.4, 3.0)
    assert not positives.any()
    _, own = dfc_logits(cos, torch.tensor([0, 1, 2]), torch.zeros(3, dtype=D), 30.0, 0.4, 3.0)
    assert torch.equal(own, torch.eye(3, dtype=torch.bool))


class LabelsOnly(FaceDataset):
    """A face dataset whose items are their own index (labels only matter here)."""

    def read(self, i):
        return i


def tiny_set(identities: int, per: int) -> FaceDataset:
    return LabelsOnly(np.repeat(np.arange(identities), per), identities, 8, False)


def test_the_heldout_split_takes_the_first_images_of_each_identity_in_the_sets_order():
    data = LabelsOnly(np.array([0, 1, 0, 1, 0, 2, 2, 1, 2]), 3, 8, False)
    train, held = heldout_split(data, 1)
    assert held.indices.tolist() == [0, 1, 5] and held.labels.tolist() == [0, 1, 2]
    assert train.indices.tolist() == [2, 3, 4, 6, 7, 8] and train.labels.tolist() == [0, 1, 0, 2, 1, 2]
    with pytest.raises(DataError, match="identity 0 has 3 images, data.heldout=3 leaves it none to train on"):
        heldout_split(data, 3)


def test_1to1_pairs_are_the_partys_images_with_every_later_pool_image():
    # pool: own images of identities 0, 0, 1; then another party's identity 2. Scores chosen by hand.
    f = unit([[1, 0, 0], [0.8, 0.6, 0], [0, 1, 0], [0, 0.6, 0.8]])
    ids = np.array([0, 0, 1, 2])
    tar = verification(f, ids, own=3, fars=[0.2, 0.5])
    # pairs (0,1) genuine 0.8; negatives (0,2) 0, (0,3) 0, (1,2) 0.6, (1,3) 0.36, (2,3) 0.6: 5 negatives
    assert tar == {0.2: 1.0, 0.5: 1.0}
    f2 = unit([[1, 0, 0], [0.5, math.sqrt(0.75), 0], [0.7, math.sqrt(0.51), 0], [0, 0, 1]])
    # genuine 0.5; negatives 0.7, 0, 0.5*0.7+0.866*0.714=0.968.., 0, 0: strict FAR 0.2 -> one negative above
    assert verification(f2, ids, own=3, fars=[0.2])[0.2] == 0.0


def test_1toN_threshold_is_the_ceil_of_queries_times_far_highest_nonmated_score():
    queries = unit([[1, 0], [0, 1], [1, 1], [1, -1]])
    gallery = torch.tensor([[1.0, 0.0], [0.0, 1.0]], dtype=D).numpy()
    mates = np.array([0, 1, -1, -1])
    # genuine 1, 1; non-mated: 0, 0, .707, .707, .707, -.707; FAR 0.25: ceil(4 * .25) = 1st highest = .707
    assert identification(queries.numpy(), mates, gallery, [0.25, 0.5]) == {0.25: 1.0, 0.5: 1.0}
    # query 1 now scores 0.6 with its own entry and 0.8 with the other: the threshold rises to 0.8
    worse = unit([[1, 0], [0.8, 0.6], [1, 1], [1, -1]]).numpy()
    assert identification(worse, mates, gallery, [0.25])[0.25] == 0.5
    # both protocols by column: pool [own 0, own 0, other 7, other 8], the gallery the party's identity 0
    pool = unit([[1, 0], [0.8, 0.6], [0, 1], [-1, 0]]).numpy()
    metrics = personal_metrics(pool, np.array([0, 0, 7, 8]), 2, np.array([[1.0, 0.0]]), np.array([0]), [0.1])
    # 1:1: genuine (0,1) 0.8 over negatives 0, -1, 0.6, -0.8: none above; 1:N: genuine 1, 0.8 over non-mated 0, -1
    assert metrics == {"tar_far_1e-1": 1.0, "tpir_far_1e-1": 1.0}


def test_the_config_refuses_what_fedfr_cannot_run_in_one_line():
    with pytest.raises(ConfigError, match="^fv.enabled: fedfr weighs the parties"):
        load_config(None, ["fed.algorithm=fedfr", "fv.enabled=true"])
    with pytest.raises(ConfigError, match="^model.init_classifier: holds the public identities' rows: data.public"):
        load_config(None, ["fed.algorithm=fedfr", "model.init_classifier=x.pt"])
    with pytest.raises(ConfigError, match="^model.init_classifier: holds the public identities' rows, which only"):
        load_config(None, ["model.init_classifier=x.pt"])
    with pytest.raises(ConfigError, match="^fed.options.previous_start: 'x' is not one of random, global, none"):
        load_config(None, ["fed.algorithm=fedfr", "fed.options.previous_start=x"])
    with pytest.raises(ConfigError, match="^data.public.kind: the public set is read by a rule that trains over"):
        load_config(None, ["data.public.kind=synthetic"])
    with pytest.raises(ConfigError, match="^data.heldout: its images are read by the personalised evaluation"):
        load_config(None, ["data.heldout=2"])
    with pytest.raises(ConfigError, match=r"^data.heldout: must be 0 \(none\) or >= 2"):
        load_config(None, ["data.heldout=1", "eval.every=1"])
    with pytest.raises(ConfigError, match="^parties.public.data.style: public: the party would hold data.public's"):
        load_config(ROOT / "configs" / "public_pretrain.yaml", ["fed.algorithm=fedfr", "data.public.kind=synthetic"])


def test_the_synthetic_public_set_shares_no_identity_with_a_party_or_a_validation_set():
    from fedmpi.data.synthetic import identity_keys
    from fedmpi.data.synthetic_pairs import PAIR_SETS

    public = set(identity_keys("public", 2000).tolist())
    others = set()
    for style in ("ms1m", "ga", "vgg"):
        others |= set(identity_keys(style, 2000).tolist())
    for name in PAIR_SETS:
        others |= set(identity_keys(f"val:{name}", 2000).tolist())
    assert len(public) == 2000 and not public & others
