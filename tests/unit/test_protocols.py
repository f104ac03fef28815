"""Large-scale protocols as plain functions: alignment, template pooling, pair scoring, TAR@FAR, rank-1
identification, against loop references written here; and the one-line errors on bad release files."""
import math

import numpy as np
import pytest
import torch

from fedmpi.data.errors import DataError
from fedmpi.metrics.identification import rank1_at_sizes, scan_distractors
from fedmpi.metrics.roc import far_column, tar_at_far, threshold_at_far
from fedmpi.protocols.align import ARCFACE_TEMPLATE_112, template, umeyama, warp
from fedmpi.protocols.ijb import pool_templates, score_pairs
from fedmpi.protocols.ijb_meta import read_ijb_meta


def test_umeyama_recovers_a_known_similarity():
    rng = np.random.default_rng(0)
    angle, scale, shift = 0.7, 1.7, np.array([12.5, -3.25])
    rotation = np.array([[np.cos(angle), -np.sin(angle)], [np.sin(angle), np.cos(angle)]])
    src = rng.uniform(0, 200, (5, 2))
    dst = scale * src @ rotation.T + shift
    matrix = umeyama(src, dst)
    np.testing.assert_allclose(matrix, np.concatenate([scale * rotation, shift[:, None]], 1), atol=1e-6)
    mirrored = umeyama(src * [-1, 1], dst)           # no reflection: the best proper similarity, not exact
    assert np.linalg.det(mirrored[:, :2]) > 0


def test_warp_identity_and_integer_shift_and_template_scaling():
    image = torch.randint(0, 256, (3, 20, 20), dtype=torch.uint8)
    assert torch.equal(warp(image, [[1, 0, 0], [0, 1, 0]], 20), image)
    shifted = warp(image, [[1, 0, 3], [0, 1, -2]], 20)    # out(x, y) = in(x - 3, y + 2)
    assert torch.equal(shifted[:, 0:18, 3:], image[:, 2:20, 0:17])
    assert (shifted[:, :, :3] == 0).all()                 # outside the source: zeros
    np.testing.assert_allclose(template(56), ARCFACE_TEMPLATE_112 / 2)


def loop_template_features(features, templates, media):
    out = {}
    for t in sorted(set(templates)):
        media_means = []
        for m in sorted({m for tt, m in zip(templates, media) if tt == t}):
            rows = [f for f, tt, mm in zip(features, templates, media) if tt == t and mm == m]
            media_means.append(np.mean(rows, axis=0))
        v = np.mean(media_means, axis=0)
        out[t] = v / np.linalg.norm(v)
    return out


def test_template_pooling_and_pair_scores_match_loops():
    rng = np.random.default_rng(1)
    templates = np.array([5, 5, 5, 9, 9, 2, 5, 2])
    media = np.array([1, 1, 2, 1, 3, 7, 2, 7])     # media 1 appears in templates 5 and 9: pooled apart
    features = rng.standard_normal((8, 4))
    pooled = pool_templates(torch.from_numpy(features), templates, media).numpy()
    expected = loop_template_features(features, templates, media)
    for row, t in enumerate([2, 5, 9]):
        np.testing.assert_allclose(pooled[row], expected[t], atol=1e-12)
    first, second = np.array([0, 1, 2, 0]), np.array([1, 2, 0, 0])
    scores = score_pairs(torch.from_numpy(pooled), first, second, batch_bytes=1)  # one pair per batch
    loop = [float(pooled[a] @ pooled[b]) for a, b in zip(first, second)]
    np.testing.assert_allclose(scores, loop, rtol=1e-6)


def loop_tar_at_far(scores, same, far):
    negatives = sorted((s for s, y in zip(scores, same) if not y), reverse=True)
    positives = [s for s, y in zip(scores, same) if y]
    best = None
    for threshold in sorted(set(negatives) | {-math.inf}, reverse=True):   # lowest threshold with FAR <= far
        if sum(n > threshold for n in negatives) <= far * len(negatives) + 1e-9:
            best = threshold
    return sum(p > best for p in positives) / len(positives), best


@pytest.mark.parametrize("far", [0.1, 0.25, 0.3, 1e-6, 0.99])
def test_tar_at_far_matches_a_loop_with_ties_and_fractional_allowances(far):
    # 7 negatives: FAR 0.1 allows 0.7 false accepts (floor 0), 0.25 allows 1.75, 0.3 allows 2.1
    scores = np.array([0.9, 0.8, 0.8, 0.8, 0.5, 0.2, 0.1, 0.8, 0.85, 0.5, 0.3, 0.95])
    same = np.array([0, 0, 0, 1, 0, 0, 0, 0, 1, 1, 1, 1], bool)
    point = tar_at_far(scores, same, [far])[far]
    tar, threshold = loop_tar_at_far(scores, same, far)
    assert point["threshold"] == threshold and point["tar"] == pytest.approx(tar)
    assert point["far"] <= far


def test_threshold_needs_enough_kept_negatives():
    assert threshold_at_far(np.array([0.9, 0.7]), 1000, 1e-3) == 0.7
    with pytest.raises(ValueError, match="needs the 3 highest"):
        threshold_at_far(np.array([0.9, 0.7]), 1000, 2e-3)
    assert far_column(1e-4) == "tar_far_1e-4" and far_column(0.1) == "tar_far_1e-1"


def test_rank1_matches_a_brute_force_loop():
    gen = torch.Generator().manual_seed(3)
    probes = torch.nn.functional.normalize(torch.randn(9, 6, dtype=torch.float64, generator=gen), dim=1)
    labels = np.array([0, 0, 0, 1, 1, 2, 2, 2, 3])        # identity 3 has one image: never a probe pair
    probes[labels == 0] += 0.8 * probes[0]
    probes = torch.nn.functional.normalize(probes, dim=1)
    distractors = torch.nn.functional.normalize(torch.randn(40, 6, dtype=torch.float64, generator=gen), dim=1)
    result = rank1_at_sizes(probes, labels, distractors, [3, 10, 40], chunk=7)
    for n in (3, 10, 40):
        hits = []
        for p in range(9):
            for q in range(9):
                if p != q and labels[p] == labels[q]:
                    genuine = float(probes[p] @ probes[q])
                    hits.append(all(genuine > float(probes[p] @ d) for d in distractors[:n]))
        assert result[n] == pytest.approx(np.mean(hits))
    _, top = scan_distractors(probes, distractors, [40], keep_top=5, chunk=7)
    brute = torch.sort((probes @ distractors.T).reshape(-1), descending=True).values[:5]
    torch.testing.assert_close(top, brute)


# ---------------------------------------------------------------------------------------- bad input

def write_release(root, tid_mid="1.jpg 1 10\n2.jpg 2 11\n", pairs="1 2 0\n1 1 1\n", points=None):
    meta = root / "meta"
    meta.mkdir(parents=True, exist_ok=True)
    (meta / "ijbc_face_tid_mid.txt").write_text(tid_mid)
    line = " ".join(["10"] * 10) + " 0.9"
    (meta / "ijbc_name_5pts_score.txt").write_text(points if points is not None else f"1.jpg {line}\n2.jpg {line}\n")
    (meta / "ijbc_template_pair_label.txt").write_text(pairs)
    return root


def one_line_error(root) -> str:
    with pytest.raises(DataError) as info:
        read_ijb_meta(root, "ijbc")
    message = str(info.value)
    assert "\n" not in message
    return message


def test_bad_ijb_meta_files_name_file_and_line(tmp_path):
    assert len(read_ijb_meta(write_release(tmp_path / "ok"), "ijbc").same) == 2
    root = write_release(tmp_path / "a")
    (root / "meta" / "ijbc_template_pair_label.txt").unlink()
    assert one_line_error(root) == (f"{root}/meta/ijbc_template_pair_label.txt: not found "
                                    "(IJB meta file: template pairs)")
    root = write_release(tmp_path / "b", pairs="1 2 0\n\n2 7 1\n")
    assert one_line_error(root) == (f"{root}/meta/ijbc_template_pair_label.txt line 3: template 7 is not in the "
                                    "face_tid_mid file")
    root = write_release(tmp_path / "c", points="1.jpg 1 2 3\n")
    assert one_line_error(root).startswith(f"{root}/meta/ijbc_name_5pts_score.txt line 1: expected 12 fields")
    root = write_release(tmp_path / "d", pairs="1 2 0\n1 2\n")
    assert one_line_error(root).startswith(f"{root}/meta/ijbc_template_pair_label.txt line 2: expected 3 fields")
    root = write_release(tmp_path / "e", tid_mid="1.jpg 1 10\n2.jpg x 11\n")
    assert one_line_error(root) == f"{root}/meta/ijbc_face_tid_mid.txt line 2: 'x' is not an integer"


def test_unreadable_image_names_its_file(tmp_path):
    from fedmpi.models.iresnet import iresnet
    from fedmpi.protocols.ijb import IJBProtocol

    root = write_release(tmp_path / "r")
    (root / "loose_crop").mkdir()
    (root / "loose_crop" / "1.jpg").write_bytes(b"\xff\xd8 not a jpeg")
    protocol = IJBProtocol(root, "ijbc", 16)
    with pytest.raises(DataError, match=rf"^{root}/loose_crop/1.jpg: cannot decode image"):
        protocol.evaluate(iresnet("ir18", 8, 16, 0.125))


def test_relative_draws_each_benchmark_by_its_paper_metric():
    from fedmpi.analysis.run_log import Run
    from fedmpi.analysis.relative import relative_results

    def run(algorithm, values):
        cfg = {"model": {"backbone": "ir18", "head": "arcface"}, "fed": {"K": 100}, "parties": [{}, {}, {}]}
        columns = {"lfw/accuracy": values[0], "lfw/tar_far_1e-2": 0.5, "ijbc/tar_far_1e-5": values[1],
                   "ijbc/tar_far_1e-4": 0.5, "megaface/rank1": values[2], "megaface/tar_far_1e-6": 0.5}
        return Run(path=f"{algorithm}.h5", algorithm=algorithm, parties=["a", "b", "c"],
                   val_sets=["lfw", "ijbc", "megaface"], config=cfg, rounds={}, fv={},
                   eval={k: np.array([0.0, v]) for k, v in columns.items()})

    (entry,) = relative_results([run("centralized", [0.9, 0.6, 0.7]), run("pfm", [0.95, 0.5, 0.8])])
    assert entry["sets"] == ["lfw", "ijbc", "megaface"] and entry["method"] == "PFM"
    np.testing.assert_allclose(entry["values"], [5.0, -10.0, 10.0])


def test_bad_megaface_lists_name_file_and_line(tmp_path):
    from fedmpi.protocols.megaface import MegaFaceProtocol

    (tmp_path / "facescrub_lst").write_text("A/A_1.jpg\nA/A_2.jpg\n")
    with pytest.raises(DataError) as info:
        MegaFaceProtocol(tmp_path, 16)
    assert str(info.value) == f"{tmp_path}/megaface_lst: not found (A/B/FILE (MegaFace distractor))"
    (tmp_path / "megaface_lst").write_text("0/1/2.jpg\nx.jpg\n")
    with pytest.raises(DataError) as info:
        MegaFaceProtocol(tmp_path, 16)
    assert str(info.value) == (f"{tmp_path}/megaface_lst line 2: 'x.jpg': expected a path ending in A/B/FILE "
                               "(MegaFace distractor)")


def test_integer_table_reader_counts_lines_across_blocks(tmp_path):
    from fedmpi.protocols.tables import read_int_columns

    path = tmp_path / "pairs.txt"
    path.write_text("1 2 1\n3 4 0\n\n5 6 1\n7 8\n9 10 0\n")
    with pytest.raises(DataError, match=rf"^{path} line 5: expected 3 fields \(what\), got 2$"):
        read_int_columns(path, 3, "what", block_bytes=7)
    path.write_text("1 2 1\n3 4 0\n\n5 6 1\n7 8 1.5\n")
    with pytest.raises(DataError, match=rf"^{path} line 5: '1.5' is not an integer$"):
        read_int_columns(path, 3, "what", block_bytes=7)
    path.write_text("1 2 1\n3 4 0\n\n5 6 1\n-7 8 1")
    np.testing.assert_array_equal(read_int_columns(path, 3, "what", block_bytes=7),
                                  [[1, 2, 1], [3, 4, 0], [5, 6, 1], [-7, 8, 1]])
