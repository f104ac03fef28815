"""IJB and MegaFace as insightface computes them: the protocols against plain re-implementations, written here, of
insightface's evaluation steps (recognition/_evaluation_/ijb/ijb_11.py; megaface/remove_noises.py followed by the
MegaFace devkit's identification), on small releases in the official layouts written here with Pillow, independently
of fedmpi.protocols.fixtures: sparse template ids, media ids shared between templates, pair scores tied within and
across labels, noisy probes and distractors, the devkit's (non-nested) subset lists.

Both sides start from the same image pixels (the protocol's decoding and alignment) and the same backbone; from
there on the reference follows insightface: flip features added, the norm kept (use_norm_score), times the detector
score (use_detector_score), media means summed per template, scikit-learn's roc_curve and the ROC point of nearest
FPR. insightface jitters a noisy probe's replacement by U(-0.001, 0.001) noise; the reference leaves that out."""
import json

import numpy as np
import pytest
import torch
from PIL import Image
from sklearn.metrics import roc_curve as sklearn_roc_curve
from sklearn.preprocessing import normalize as sklearn_normalize

from fedmpi.metrics.roc import nearest_points, roc_points, tar_at_far
from fedmpi.protocols.align import template
from fedmpi.protocols.ijb import IJBProtocol
from fedmpi.protocols.megaface import MegaFaceProtocol

SIZE = 32
FARS = (1e-6, 1e-5, 1e-4, 1e-3, 1e-2, 1e-1)


def tiny_backbone(seed=0):
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Conv2d(3, 6, 5, stride=3), torch.nn.ReLU(), torch.nn.Flatten(),
                               torch.nn.Linear(6 * 10 * 10, 12)).eval()


def person_image(rng, face, canvas):
    """A subject's face (a fixed random pattern) with noise, pasted into a canvas of noise."""
    image = rng.integers(0, 256, (canvas, canvas, 3))
    offset = (canvas - SIZE) // 2
    image[offset:offset + SIZE, offset:offset + SIZE] = np.clip(face + rng.normal(0, 40, face.shape), 0, 255)
    return Image.fromarray(image.astype(np.uint8))


# ------------------------------------------------------------------------------------------------- IJB

def write_ijb_release(root, seed=0, subjects=12, templates=60):
    """IJBC/meta/*.txt + IJBC/loose_crop/*.jpg; all template pairs (1770 for 60 templates) plus repeated and
    reversed pairs (ties within a label) and reversed pairs with the other label (ties across labels)."""
    rng = np.random.default_rng(seed)
    (root / "meta").mkdir(parents=True)
    (root / "loose_crop").mkdir()
    faces = rng.integers(0, 256, (subjects, SIZE, SIZE, 3))
    template_ids = np.sort(rng.choice(10 ** 6, templates, replace=False)) + 1    # sparse, large ids
    subject_of = rng.integers(subjects, size=templates)
    canvas = 48
    landmarks = template(SIZE) + (canvas - SIZE) // 2
    tid_mid, points = [], []
    for tid, subject in zip(template_ids, subject_of):
        for media in rng.choice(30, rng.integers(1, 4), replace=False):   # media ids recur across templates
            for _ in range(rng.integers(1, 4)):
                name = f"{len(tid_mid) + 1}.jpg"
                person_image(rng, faces[subject], canvas).save(root / "loose_crop" / name, quality=95)
                tid_mid.append(f"{name} {tid} {media + 1}")
                jitter = landmarks + rng.normal(0, 0.7, landmarks.shape)
                points.append(" ".join([name, *(f"{v:.2f}" for v in jitter.reshape(-1)),
                                        f"{rng.uniform(0.3, 1.0):.4f}"]))
    pairs = [(a, b) for a in range(templates) for b in range(a + 1, templates)]
    rng.shuffle(pairs)
    lines = [f"{template_ids[a]} {template_ids[b]} {int(subject_of[a] == subject_of[b])}" for a, b in pairs]
    for a, b in pairs[:20]:
        same = int(subject_of[a] == subject_of[b])
        lines.append(f"{template_ids[b]} {template_ids[a]} {same}")
        lines.append(f"{template_ids[a]} {template_ids[b]} {same}")
    for a, b in [p for p in pairs if subject_of[p[0]] == subject_of[p[1]]][:5]:
        lines.append(f"{template_ids[b]} {template_ids[a]} 0")
    (root / "meta" / "ijbc_face_tid_mid.txt").write_text("\n".join(tid_mid) + "\n")
    (root / "meta" / "ijbc_name_5pts_score.txt").write_text("\n".join(points) + "\n")
    (root / "meta" / "ijbc_template_pair_label.txt").write_text("\n".join(lines) + "\n")
    return root


def image_features(backbone, faces):
    """[N, D] f(x) and f(flip x) of every aligned image, as two float32 arrays (the embedding network's outputs)."""
    images = torch.stack([faces[i][0] for i in range(len(faces))]).float() / 255 * 2 - 1
    with torch.no_grad():
        return backbone(images).numpy(), backbone(images.flip(3)).numpy()


def insightface_ijb(features, flipped, faceness, meta_dir, use_norm_score=True, use_detector_score=True):
    """ijb_11.py's steps from image features to TAR@FAR: (scores, labels, {far: tar})."""
    table = np.loadtxt(meta_dir / "ijbc_face_tid_mid.txt", dtype=str)
    templates, medias = table[:, 1].astype(int), table[:, 2].astype(int)
    pairs = np.loadtxt(meta_dir / "ijbc_template_pair_label.txt", dtype=int)
    p1, p2, label = pairs[:, 0], pairs[:, 1], pairs[:, 2]
    feats = features + flipped
    if not use_norm_score:
        feats = feats / np.sqrt(np.sum(feats ** 2, -1, keepdims=True))
    if use_detector_score:
        feats = feats * faceness[:, np.newaxis]
    unique_templates = np.unique(templates)
    template_feats = np.zeros((len(unique_templates), feats.shape[1]))
    for count, uqt in enumerate(unique_templates):
        (ind_t,) = np.where(templates == uqt)
        face_feats, face_medias = feats[ind_t], medias[ind_t]
        media_feats = []
        for u, ct in zip(*np.unique(face_medias, return_counts=True)):
            (ind_m,) = np.where(face_medias == u)
            media_feats.append(face_feats[ind_m] if ct == 1 else np.mean(face_feats[ind_m], axis=0, keepdims=True))
        template_feats[count] = np.sum(np.array(media_feats), axis=0)
    template_norm_feats = sklearn_normalize(template_feats)
    template2id = np.zeros((max(unique_templates) + 1, 1), dtype=int)
    for count, uqt in enumerate(unique_templates):
        template2id[uqt] = count
    score = np.sum(template_norm_feats[template2id[p1]] * template_norm_feats[template2id[p2]], -1).flatten()
    fpr, tpr, _ = sklearn_roc_curve(label, score)
    fpr, tpr = np.flipud(fpr), np.flipud(tpr)
    tar = {}
    for far in FARS:
        _, index = min(zip(abs(fpr - far), range(len(fpr))))
        tar[far] = tpr[index]
    return score, label.astype(bool), tar


@pytest.fixture(scope="module")
def ijb_release(tmp_path_factory):
    root = write_ijb_release(tmp_path_factory.mktemp("ijb") / "IJBC")
    backbone = tiny_backbone()
    protocol = IJBProtocol(root, "ijbc", SIZE, batch_size=7)
    return root, backbone, protocol, image_features(backbone, protocol.faces)


def test_ijb_scores_and_tar_match_insightface(ijb_release):
    root, backbone, protocol, (features, flipped) = ijb_release
    scores, labels, tar = insightface_ijb(features, flipped, protocol.meta.detection.astype(np.float32),
                                          root / "meta")
    assert len(scores) == 1770 + 45
    values, counts = np.unique(scores, return_counts=True)
    assert (counts > 1).sum() >= 20                                             # ties within a label
    assert any(labels[scores == v].any() and not labels[scores == v].all() for v in values[counts > 1])  # across
    np.testing.assert_allclose(protocol.pair_scores(backbone), scores, atol=1e-6)
    metrics = protocol.evaluate(backbone)
    assert metrics == {f"tar_far_1e{round(np.log10(f))}": pytest.approx(tar[f], abs=1e-12) for f in FARS}
    strict = tar_at_far(scores, labels, FARS)
    assert any(strict[f]["tar"] != tar[f] for f in FARS)     # the readings differ on this release
    assert protocol.last["settings"]["tar_reading"].startswith("insightface")
    assert "tar_reading: insightface (nearest ROC point)" in protocol.describe()


def test_ijb_options_compute_the_choices_they_name(ijb_release):
    root, backbone, _, (features, flipped) = ijb_release
    protocol = IJBProtocol(root, "ijbc", SIZE, detection_weighting=False, keep_feature_norm=False,
                           tar_reading="strict")
    scores, labels, _ = insightface_ijb(features, flipped, None, root / "meta", use_norm_score=False,
                                        use_detector_score=False)
    np.testing.assert_allclose(protocol.pair_scores(backbone), scores, atol=1e-6)
    metrics = protocol.evaluate(backbone)
    strict = tar_at_far(scores, labels, FARS)
    for far in FARS:
        assert metrics[f"tar_far_1e{round(np.log10(far))}"] == pytest.approx(strict[far]["tar"], abs=1e-12)
    assert protocol.last["settings"] == {"protocol": "custom", "image_features": "f(x)+f(flip x), L2-normalised",
                                         "detection_score": "ignored",
                                         "tar_reading": "strict (at most floor(FAR*n) false accepts)"}
    with pytest.raises(ValueError, match="unknown TAR reading 'nearest': expected one of insightface, strict"):
        IJBProtocol(root, "ijbc", SIZE, tar_reading="nearest")


@pytest.mark.parametrize("seed", range(4))
def test_roc_points_equal_scikit_learn_with_ties(seed):
    rng = np.random.default_rng(seed)
    scores = rng.integers(0, 40, 500) / 40.0          # many ties
    labels = rng.random(500) < 0.3
    fpr, tpr, thresholds = sklearn_roc_curve(labels, scores)
    ours = roc_points(scores, labels)
    for a, b in zip(ours, (fpr, tpr, thresholds)):
        np.testing.assert_array_equal(a, b)
    flipped_fpr, flipped_tpr = fpr[::-1], tpr[::-1]
    for far, point in nearest_points(scores, labels, (1e-3, 0.01, 0.05, 0.1, 0.5)).items():
        _, index = min(zip(abs(flipped_fpr - far), range(len(flipped_fpr))))
        assert (point["tar"], point["far"]) == (flipped_tpr[index], flipped_fpr[index])


# -------------------------------------------------------------------------------------------- MegaFace

def write_megaface_release(root, seed=1, identities=6, per_identity=4, distractors=150, devkit=True):
    """facescrub_lst, megaface_lst, both noise lists, the images and (devkit) templatelists for sizes 10 and 100:
    random, non-nested subsets of the distractors that include noisy ones. Returns the noisy distractor keys."""
    rng = np.random.default_rng(seed)
    faces = rng.integers(0, 256, (identities + distractors, SIZE, SIZE, 3))
    probes = []
    for i in range(identities):
        for k in range(per_identity):
            name = f"Person_{i}/Person_{i}_{k}.png"
            (root / "facescrub_images" / f"Person_{i}").mkdir(parents=True, exist_ok=True)
            person_image(rng, faces[i], SIZE).save(root / "facescrub_images" / name)
            probes.append(name)
    names = []
    noisy = set(rng.choice(distractors, 12, replace=False).tolist())
    for k in range(distractors):
        name = f"{k % 7}/{k // 7}@N00/{k}_0.png"
        (root / "megaface_images" / name).parent.mkdir(parents=True, exist_ok=True)
        face = faces[rng.integers(identities)] if k in noisy else faces[identities + k]   # noisy: a probe identity
        person_image(rng, face, SIZE).save(root / "megaface_images" / name)
        names.append(name)
    (root / "facescrub_lst").write_text("".join(f"{p}\n" for p in probes))
    (root / "megaface_lst").write_text("".join(f"{n}\n" for n in names))
    noisy_probes = [probes[1], probes[per_identity + 2]]
    (root / "facescrub_noises.txt").write_text("# noisy probes\n" + "".join(f"{p.split('/')[1]}\n"
                                                                             for p in noisy_probes))
    (root / "megaface_noises.txt").write_text("# noisy distractors\n" + "".join(
        f"{k}\t{names[k]}\n" if k % 2 else f"{names[k]}\n" for k in sorted(noisy)))
    if devkit:
        lists = root / "devkit" / "templatelists"
        lists.mkdir(parents=True)
        for size in (10, 100):
            chosen = rng.choice(distractors, size, replace=False)
            chosen[0] = sorted(noisy)[0]
            paths = [f"FlickrFinal2/{names[k].replace('.png', '.jpg')}" for k in chosen]
            (lists / f"megaface_features_list.json_{size}_1").write_text(json.dumps({"path": paths, "id": []}))
    return root


def devkit_rank1(root, backbone, protocol):
    """remove_noises.py's features, then the devkit's rank-1 on L2 distance, for each size of the subset lists."""
    probe_names = (root / "facescrub_lst").read_text().split()
    names = (root / "megaface_lst").read_text().split()
    noisy_probes = {line for line in (root / "facescrub_noises.txt").read_text().splitlines()[1:]}
    noisy = {line.split("\t")[-1] for line in (root / "megaface_noises.txt").read_text().splitlines()[1:]}

    def feature(folder, name):
        image = torch.from_numpy(np.array(Image.open(root / folder / name).convert("RGB"))).permute(2, 0, 1)
        x = image[None].float() / 255 * 2 - 1
        with torch.no_grad():
            f = (backbone(x) + backbone(x.flip(3)))[0].double().numpy()
        return f / np.linalg.norm(f)

    probes = {p: np.r_[feature("facescrub_images", p), 0.0] for p in probe_names}
    identity = {p: p.split("/")[0] for p in probe_names}
    for p in probe_names:
        if p.split("/")[1] in noisy_probes:
            centre = sum(probes[q] for q in probe_names if identity[q] == identity[p]
                         and q.split("/")[1] not in noisy_probes)
            probes[p] = centre / np.linalg.norm(centre)
    gallery = {n: np.r_[feature("megaface_images", n), 100.0 if n in noisy else 0.0] for n in names}
    result = {}
    for size in (10, 100):
        listed = json.loads((root / "devkit" / "templatelists" / f"megaface_features_list.json_{size}_1")
                            .read_text())["path"]
        members = [gallery[p.split("/", 1)[1].replace(".jpg", ".png")] for p in listed]
        hits = []
        for p in probe_names:
            nearest = min(np.linalg.norm(probes[p] - g) for g in members)
            for q in probe_names:
                if q != p and identity[q] == identity[p]:
                    hits.append(np.linalg.norm(probes[p] - probes[q]) < nearest)
        result[size] = float(np.mean(hits))
    return result


def test_megaface_noisy_distractors_never_win_and_devkit_lists_set_the_galleries(tmp_path):
    root = write_megaface_release(tmp_path / "megaface")
    backbone = tiny_backbone(1)
    protocol = MegaFaceProtocol(root, SIZE, batch_size=16)
    metrics = protocol.evaluate(backbone)
    expected = devkit_rank1(root, backbone, protocol)
    assert metrics["rank1_1e1"] == pytest.approx(expected[10], abs=1e-12)
    assert metrics["rank1_1e2"] == pytest.approx(expected[100], abs=1e-12)
    assert metrics["rank1"] == metrics["rank1_1e2"] and np.isnan(metrics["rank1_1e3"])
    assert protocol.last["settings"]["gallery"] == "devkit subset lists"
    assert protocol.last["settings"]["noisy_distractors"] == "kept, never win (insightface)"
    assert protocol.last["counts"]["distractors"] == 100
    assert 0 < protocol.last["counts"]["noisy_distractors"] <= 12
    noisy_listed = protocol.last["counts"]["noisy_distractors"]
    dropped = MegaFaceProtocol(root, SIZE, noisy_distractors="drop")
    dropped.evaluate(backbone)
    assert dropped.last["counts"] == {**protocol.last["counts"], "distractors": 100 - noisy_listed,
                                      "noisy_distractors": 0, "impostor": 24 * (100 - noisy_listed)}
    assert dropped.last["settings"]["noisy_distractors"] == "dropped"


def test_megaface_without_devkit_lists_falls_back_to_seeded_prefixes(tmp_path):
    root = write_megaface_release(tmp_path / "megaface", devkit=False)
    protocol = MegaFaceProtocol(root, SIZE)
    assert protocol.sizes == [10, 100] and len(protocol.distractors) == 100
    assert protocol.settings["gallery"] == "seeded prefixes (no devkit subset lists)"
    assert "gallery: seeded prefixes (no devkit subset lists)" in protocol.describe()
    dropped = MegaFaceProtocol(root, SIZE, noisy_distractors="drop")
    assert dropped.never_win.sum() == 0 and protocol.never_win.sum() > 0
