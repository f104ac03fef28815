"""Synthetic faces: determinism, identity-disjoint parties and validation sets, the sets' layout, atomic writes."""
from __future__ import annotations

import json
import multiprocessing
import types
from pathlib import Path

import numpy as np
import pytest

from fedmpi.data import load_bin, open_training_set, prepare_training_set, prepare_validation_sets
from fedmpi.data.synthetic import STYLES, generate_party, view_params
from fedmpi.data.synthetic_pairs import PAIR_SETS, _set_character, generate_pairs

pytestmark = pytest.mark.filterwarnings("ignore:The image decoding and encoding capabilities of TorchVision")


def data_cfg(root, **kw):
    base = dict(root=str(root), image_size=16, workers=0, seed=0, skip_bad=False, val_sets=list(PAIR_SETS),
                val_kind="synthetic", val_path="", val_pairs_per_fold=4)
    return types.SimpleNamespace(**{**base, **kw})


def spec(style, identities=6, per=3, **kw):
    base = dict(kind="synthetic", path="", style=style, identities=identities, images_per_identity=per,
                split_index=0, split_count=1)
    return types.SimpleNamespace(**{**base, **kw})


def test_same_seed_same_bytes():
    a, la, ka = generate_party("ga", 3, 2, 24, seed=5)
    b, lb, kb = generate_party("ga", 3, 2, 24, seed=5)
    c, _, kc = generate_party("ga", 3, 2, 24, seed=6)
    assert a.dtype == np.uint8 and a.shape == (6, 3, 24, 24)
    assert np.array_equal(a, b) and np.array_equal(ka, kb) and la.tolist() == [0, 0, 1, 1, 2, 2]
    assert not np.array_equal(a, c) and not set(ka) & set(kc)
    # an identity is a function of its own seed: a bigger set starts with the same people
    d, _, kd = generate_party("ga", 5, 2, 24, seed=5)
    assert np.array_equal(kd[:3], ka) and np.array_equal(d[:6], a)


def test_written_sets_are_identical_bytes(tmp_path):
    first = prepare_training_set(spec("vgg"), data_cfg(tmp_path / "one"))
    second = prepare_training_set(spec("vgg"), data_cfg(tmp_path / "two"))
    assert first.name == second.name  # the folder is named by the generator parameters
    for name in ("train.rec", "train.idx"):
        assert (first / name).read_bytes() == (second / name).read_bytes()
    other = prepare_training_set(spec("vgg", identities=7), data_cfg(tmp_path / "one"))
    assert other != first


def test_identities_are_disjoint_across_parties_and_validation_sets(tmp_path):
    cfg = data_cfg(tmp_path)
    keys = {}
    for style in ("ms1m", "ga", "vgg"):
        ds = open_training_set(spec(style), cfg)
        keys[style] = {int(k) for k in ds.identity_ids}
        assert len(keys[style]) == ds.num_classes == 6
    paths = prepare_validation_sets(cfg)
    meta = json.loads((paths["lfw"].parent / "meta.json").read_text())
    for name in PAIR_SETS:
        keys[name] = {int(k, 16) for k in meta["identity_keys"][name]}
    names = list(keys)
    for i, a in enumerate(names):
        for b in names[i + 1:]:
            assert not keys[a] & keys[b], f"{a} and {b} share identities"


def test_validation_sets_are_laid_out_like_the_real_files(tmp_path):
    paths = prepare_validation_sets(data_cfg(tmp_path, val_pairs_per_fold=6))
    assert list(paths) == list(PAIR_SETS)
    for name, path in paths.items():
        images, same = load_bin(path, 16)
        assert images.shape == (120, 3, 16, 16) and same.shape == (60,)
        assert same.reshape(10, 6).tolist() == [[True] * 3 + [False] * 3] * 10  # contiguous folds


def test_set_characters():
    rng = np.random.default_rng(0)
    view = view_params(rng.random((200, 36)).astype(np.float32), STYLES["val"])
    _set_character("cfp_fp", view, np.random.default_rng(1))
    frontal, profile = np.degrees(np.abs(view["yaw"][0::2])), np.degrees(np.abs(view["yaw"][1::2]))
    assert frontal.max() < 20 and profile.min() >= 60 and profile.max() <= 80
    _set_character("agedb_30", view, np.random.default_rng(1))
    assert np.abs(view["age"][0::2] - view["age"][1::2]).min() >= 0.6
    _, _, lfw_keys = generate_pairs("lfw", 4, 16, folds=2)
    _, _, calfw_keys = generate_pairs("calfw", 4, 16, folds=2)
    assert len(lfw_keys) == 4 and len(calfw_keys) == 4 + 4  # look-alike negatives are people of their own


def test_identities_are_recognisable_under_variation():
    """Raw-pixel nearest neighbour finds the identity well above chance (1/16), yet far from always."""
    for style in ("ms1m", "ga", "vgg"):
        images, labels, _ = generate_party(style, 16, 8, 32, seed=0)
        x = images.reshape(len(images), -1).astype(np.float32)
        d = (x * x).sum(1)[:, None] + (x * x).sum(1)[None] - 2 * x @ x.T
        np.fill_diagonal(d, np.inf)
        accuracy = (labels[d.argmin(1)] == labels).mean()
        assert 3 / 16 < accuracy < 0.9, (style, accuracy)


def test_unknown_names_are_refused(tmp_path):
    with pytest.raises(ValueError, match=r"unknown synthetic style 'celeb': expected one of ms1m, ga, vgg"):
        prepare_training_set(spec("celeb"), data_cfg(tmp_path))
    with pytest.raises(ValueError, match=r"data.val_sets: no synthetic set named 'ijbc'"):
        prepare_validation_sets(data_cfg(tmp_path, val_sets=["lfw", "ijbc"]))
    with pytest.raises(ValueError, match=r"data kind 'hdf5': expected one of synthetic, rec, folder"):
        prepare_training_set(spec("ms1m", kind="hdf5"), data_cfg(tmp_path))


def _prepare_after(barrier, root, queue):
    barrier.wait()
    queue.put(str(prepare_training_set(spec("ms1m", identities=12, per=4), data_cfg(root))))


def test_prepare_is_idempotent_and_safe_when_processes_race(tmp_path):
    ctx = multiprocessing.get_context("fork")
    barrier, queue = ctx.Barrier(3), ctx.Queue()
    procs = [ctx.Process(target=_prepare_after, args=(barrier, tmp_path, queue)) for _ in range(3)]
    for p in procs:
        p.start()
    outputs = [queue.get(timeout=120) for _ in procs]
    for p in procs:
        p.join(timeout=30)
    assert all(p.exitcode == 0 for p in procs)
    assert len(set(outputs)) == 1
    assert [p.name for p in tmp_path.iterdir()] == [Path(outputs[0]).name]  # no temporary folders left
    folder = Path(outputs[0])
    stamp = (folder / "train.rec").stat().st_mtime_ns
    assert prepare_training_set(spec("ms1m", identities=12, per=4), data_cfg(tmp_path)) == folder
    assert (folder / "train.rec").stat().st_mtime_ns == stamp
    assert len(open_training_set(spec("ms1m", identities=12, per=4), data_cfg(tmp_path))) == 48
