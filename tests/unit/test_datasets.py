"""The trainer-facing data API: open_training_set for every kind, splits, unions, subsets, the batch stream."""
from __future__ import annotations

import itertools
import types

import numpy as np
import pytest
import torch

from fedmpi.data import (ConcatFaceDataset, DataError, ShardBatchSampler, dirichlet_partition, open_training_set,
                         prepare_training_set, prepare_validation_sets)
from image_files import encode_png
from tools import pack_rec


def data_cfg(root, **kw):
    base = dict(root=str(root), image_size=16, workers=0, seed=0, skip_bad=False,
                val_sets=["lfw", "cfp_fp"], val_kind="synthetic", val_path="", val_pairs_per_fold=2)
    return types.SimpleNamespace(**{**base, **kw})


def spec(**kw):
    base = dict(kind="synthetic", path="", style="ms1m", identities=10, images_per_identity=3, split_index=0,
                split_count=1)
    return types.SimpleNamespace(**{**base, **kw})


def test_items_are_normalised_images_and_local_labels(tmp_path):
    ds = open_training_set(spec(), data_cfg(tmp_path))
    assert (ds.num_classes, len(ds)) == (10, 30)
    x, label = ds[4]
    assert x.dtype == torch.float32 and x.shape == (3, 16, 16) and isinstance(label, int) and label == 1
    assert -1.0 <= x.min() and x.max() <= 1.0
    assert torch.equal(ds[(4, True)][0], x.flip(-1))
    raw = ds.load(4)
    assert torch.allclose(x, raw.float() / 255 * 2 - 1, atol=1e-6)  # (x / 255 - 0.5) / 0.5
    d = ds.describe()
    assert d["kind"] == "synthetic" and d["identities"] == 10 and d["images"] == 30 and d["split"] == "0/1"
    assert len(d["partition_hash"]) == 16
    with pytest.raises(IndexError):
        ds[30]


def test_parts_share_one_written_set_and_are_disjoint(tmp_path):
    cfg = data_cfg(tmp_path)
    parts = [open_training_set(spec(split_index=i, split_count=4), cfg) for i in range(4)]
    assert len({prepare_training_set(spec(split_index=i, split_count=4), cfg) for i in range(4)}) == 1
    assert [p.num_classes for p in parts] == [2, 3, 2, 3]
    keys = [set(p.keys.tolist()) for p in parts]
    assert sum(len(k) for k in keys) == 30 and len(set.union(*keys)) == 30
    assert all(p.labels.min() == 0 and p.labels.max() == p.num_classes - 1 for p in parts)
    assert len({p.describe()["partition_hash"] for p in parts}) == 4


def test_rec_and_folder_kinds_read_the_same_images(tmp_path):
    g = torch.Generator().manual_seed(0)
    for name in ("x", "y"):
        (tmp_path / "faces" / name).mkdir(parents=True)
        for j in range(2):
            img = torch.randint(0, 256, (3, 16, 16), generator=g, dtype=torch.uint8)
            (tmp_path / "faces" / name / f"{j}.png").write_bytes(encode_png(img))
    pack_rec.main([str(tmp_path / "faces"), str(tmp_path / "rec" / "train")])
    cfg = data_cfg(tmp_path)
    folder = open_training_set(spec(kind="folder", path=str(tmp_path / "faces")), cfg)
    rec = open_training_set(spec(kind="rec", path=str(tmp_path / "rec")), cfg)
    assert folder.num_classes == rec.num_classes == 2 and len(folder) == len(rec) == 4
    for i in range(4):
        assert torch.equal(folder[i][0], rec[i][0]) and folder[i][1] == rec[i][1]
    resized = open_training_set(spec(kind="rec", path=str(tmp_path / "rec")), data_cfg(tmp_path, image_size=8))
    assert resized[0][0].shape == (3, 8, 8)


def test_missing_paths_are_named(tmp_path):
    cfg = data_cfg(tmp_path)
    with pytest.raises(FileNotFoundError, match=r"data.kind=rec: .*nothing/train.rec not found"):
        open_training_set(spec(kind="rec", path=str(tmp_path / "nothing")), cfg)
    with pytest.raises(FileNotFoundError, match=r"data.kind=folder: .*nothing is not a folder"):
        open_training_set(spec(kind="folder", path=str(tmp_path / "nothing")), cfg)
    with pytest.raises(FileNotFoundError, match=r"data.val_kind=bin: validation set not found: .*/lfw.bin"):
        prepare_validation_sets(data_cfg(tmp_path, val_kind="bin", val_path=str(tmp_path)))


def test_undecodable_file_in_a_folder_is_named(tmp_path):
    (tmp_path / "faces" / "a").mkdir(parents=True)
    (tmp_path / "faces" / "a" / "0.jpg").write_bytes(b"\xff\xd8 not a jpeg")
    ds = open_training_set(spec(kind="folder", path=str(tmp_path / "faces")), data_cfg(tmp_path))
    with pytest.raises(DataError, match=r"faces/a/0.jpg: cannot decode image \(13 bytes\): not an image format Pillow reads"):
        ds[0]


def test_real_validation_sets_are_found_by_name(tmp_path):
    made = prepare_validation_sets(data_cfg(tmp_path))
    real = prepare_validation_sets(data_cfg(tmp_path, val_kind="bin", val_path=str(made["lfw"].parent)))
    assert real == made


def test_union_keeps_identities_distinct(tmp_path):
    cfg = data_cfg(tmp_path)
    a = open_training_set(spec(style="ga", identities=4), cfg)
    b = open_training_set(spec(style="vgg", identities=5), cfg)
    union = ConcatFaceDataset([a, b])
    assert (union.num_classes, len(union)) == (9, 27)
    assert union.labels.tolist() == a.labels.tolist() + (b.labels + 4).tolist()
    assert torch.equal(union[13][0], b[1][0]) and union[13][1] == b[1][1] + 4
    assert torch.equal(union[(2, True)][0], a[(2, True)][0])
    assert [p["kind"] for p in union.describe()["parts"]] == ["synthetic", "synthetic"]


def test_dirichlet_client_subset_has_local_labels(tmp_path):
    ds = open_training_set(spec(identities=4, images_per_identity=6), data_cfg(tmp_path))
    parts = dirichlet_partition(ds.labels, 4, 0.0, seed=0)
    client = ds.subset(parts[0])
    assert client.num_classes == 1 and client.labels.tolist() == [0] * 6
    assert torch.equal(client[2][0], ds[int(parts[0][2])][0])
    mixed = ds.subset([0, 6, 23])
    assert mixed.labels.tolist() == [0, 1, 2] and mixed.base_classes.tolist() == [0, 1, 3]


# -------------------------------------------------------------------------------------------- batch stream

def batches(sampler, count):
    return list(itertools.islice(iter(sampler), count))


def test_shards_of_a_pass_are_disjoint_and_equal():
    n, world, batch = 103, 4, 5
    per_pass = n // world  # 25: five batches of five per rank and pass
    streams = [batches(ShardBatchSampler(n, r, world, batch, seed=3), 5) for r in range(world)]
    shards = [{i for b in s for i, _ in b} for s in streams]
    assert all(len(s) == per_pass for s in shards)
    assert len(set.union(*shards)) == per_pass * world
    flips = [f for s in streams for b in s for _, f in b]
    assert 0.3 < np.mean(flips) < 0.7


def test_stream_is_deterministic_and_resumes_at_any_step():
    full = batches(ShardBatchSampler(50, 1, 3, 7, seed=9), 12)  # batches cross pass boundaries (16 per pass)
    assert full == batches(ShardBatchSampler(50, 1, 3, 7, seed=9), 12)
    assert full != batches(ShardBatchSampler(50, 1, 3, 7, seed=10), 12)
    for k in (1, 2, 5, 11):
        assert batches(ShardBatchSampler(50, 1, 3, 7, seed=9, start_step=k), 12 - k) == full[k:]
    assert all(len(b) == 7 for b in full)
    # pass 1 is a new permutation, not a repeat of pass 0
    sampler = ShardBatchSampler(50, 1, 3, 7, seed=9)
    assert sampler.pass_order(0)[0].tolist() != sampler.pass_order(1)[0].tolist()


def test_sampler_errors():
    with pytest.raises(ValueError, match=r"rank 3 must lie in 0..2"):
        ShardBatchSampler(10, 3, 3, 2, 0)
    with pytest.raises(ValueError, match=r"2 items cannot be sharded over 3 ranks"):
        ShardBatchSampler(2, 0, 3, 2, 0)


def test_dataloader_with_workers_gives_the_sampled_batches(tmp_path):
    ds = open_training_set(spec(), data_cfg(tmp_path))
    sampler = ShardBatchSampler(len(ds), 0, 2, 4, seed=1)
    loader = torch.utils.data.DataLoader(ds, batch_sampler=sampler, num_workers=2, multiprocessing_context="fork")
    got = list(itertools.islice(iter(loader), 5))
    for (images, labels), batch in zip(got, batches(sampler, 5)):
        expected = [ds[item] for item in batch]
        assert torch.equal(images, torch.stack([e[0] for e in expected]))
        assert labels.tolist() == [e[1] for e in expected]
