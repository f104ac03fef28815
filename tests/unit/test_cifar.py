"""The CIFAR-10 folder reader (torchvision's cifar-10-batches-py layout) and the synthetic set written in it."""
from __future__ import annotations

import pickle

import numpy as np
import pytest

from fedmpi.crossdevice import client_data
from fedmpi.data import DataError
from fedmpi.data.cifar import ImageSet, load_cifar10, read_batch, write_cifar10
from fedmpi.data.synthetic_cifar import generate, synthetic_cifar_folder


def tiny_set(n, seed):
    rng = np.random.default_rng(seed)
    return ImageSet(rng.integers(0, 256, (n, 3, 32, 32), dtype=np.uint8), rng.integers(0, 10, n))


@pytest.fixture
def folder(tmp_path):
    train, test = tiny_set(25, 0), tiny_set(7, 1)
    path = write_cifar10(tmp_path / "cifar-10-batches-py", train, test, [f"c{i}" for i in range(10)])
    return path, train, test


def test_reads_the_layout_torchvision_reads(folder):
    path, train, test = folder
    for where in (path, path.parent):     # the batches folder or its parent
        got_train, got_test, names = load_cifar10(where)
        assert np.array_equal(got_train.images, train.images) and np.array_equal(got_train.labels, train.labels)
        assert np.array_equal(got_test.images, test.images) and np.array_equal(got_test.labels, test.labels)
        assert names == [f"c{i}" for i in range(10)]
    with open(path / "data_batch_2", "rb") as f:  # what torchvision.datasets.CIFAR10 does with each file
        entry = pickle.load(f, encoding="latin1")
    assert entry["data"].shape == (5, 3072) and len(entry["labels"]) == 5


def test_a_python2_style_repacked_batch_loads(tmp_path):
    """bytes keys, labels as a numpy array, images as (N, 3, 32, 32): a re-packed copy loads (no md5 check)."""
    images = np.arange(2 * 3072, dtype=np.uint8).reshape(2, 3, 32, 32)
    path = tmp_path / "data_batch_1"
    path.write_bytes(pickle.dumps({b"data": images, b"labels": np.array([3, 9])}, protocol=2))
    batch = read_batch(path)
    assert np.array_equal(batch.images, images) and batch.labels.tolist() == [3, 9]


def one_line_error(path, match):
    with pytest.raises(DataError) as info:
        load_cifar10(path.parent)
    message = str(info.value)
    assert "\n" not in message and str(path) in message, message
    assert match in message, message


def test_truncated_batch(folder):
    path, _, _ = folder
    target = path / "data_batch_3"
    target.write_bytes(target.read_bytes()[:-100])
    one_line_error(target, "not a readable pickle")


def test_missing_file(folder):
    path, _, _ = folder
    (path / "test_batch").unlink()
    one_line_error(path / "test_batch", "missing: a cifar-10-batches-py folder holds")


def test_foreign_global_is_refused_and_not_run(folder, tmp_path):
    path, _, _ = folder
    marker = tmp_path / "ran"

    class Evil:
        def __reduce__(self):
            return (__import__("os").system, (f"touch {marker}",))

    (path / "data_batch_1").write_bytes(pickle.dumps({"data": Evil(), "labels": []}, protocol=2))
    one_line_error(path / "data_batch_1", "refused pickle global")
    assert not marker.exists()


@pytest.mark.parametrize("entry, match", [
    ({"data": np.zeros((2, 3000), np.uint8), "labels": [0, 1]}, "'data' must be a uint8 array of shape (N, 3072)"),
    ({"data": np.zeros((2, 3072), np.float32), "labels": [0, 1]}, "'data' must be a uint8 array"),
    ({"data": np.zeros((2, 3072), np.uint8), "labels": [0]}, "2 images but 'labels' has shape (1,)"),
    ({"data": np.zeros((2, 3072), np.uint8), "labels": [0, 10]}, "labels must lie in 0..9"),
    ({"labels": [0]}, "no 'data' entry"),
    ([1, 2], "expected a pickled dict, got list"),
])
def test_bad_shapes_and_dtypes(folder, entry, match):
    path, _, _ = folder
    (path / "data_batch_4").write_bytes(pickle.dumps(entry, protocol=2))
    one_line_error(path / "data_batch_4", match)


def test_synthetic_set_is_balanced_deterministic_and_written_in_the_layout(tmp_path):
    a_train, a_test = generate(200, 50, seed=3)
    b_train, _ = generate(200, 50, seed=3)
    c_train, _ = generate(200, 50, seed=4)
    assert a_train.images.shape == (200, 3, 32, 32) and a_test.images.shape == (50, 3, 32, 32)
    assert np.bincount(a_train.labels).tolist() == [20] * 10 and np.bincount(a_test.labels).tolist() == [5] * 10
    assert np.array_equal(a_train.images, b_train.images) and not np.array_equal(a_train.images, c_train.images)
    assert 40 < a_train.images.std() < 90     # spread over the byte range, not saturated
    path = synthetic_cifar_folder(tmp_path, 200, 50, seed=3)
    assert path.name == "cifar-10-batches-py" and synthetic_cifar_folder(tmp_path, 200, 50, seed=3) == path
    train, test, _ = load_cifar10(path)
    assert np.array_equal(train.images, a_train.images) and np.array_equal(test.labels, a_test.labels)


def test_mcmahan_cnn_layers_and_parameter_count():
    import torch

    from fedmpi.models.cifar_cnn import CifarCNN

    model = CifarCNN()
    assert sum(p.numel() for p in model.parameters()) == 1_756_426
    assert [tuple(p.shape) for p in model.parameters()] == [
        (64, 3, 5, 5), (64,), (64, 64, 5, 5), (64,), (384, 4096), (384,), (192, 384), (192,), (10, 192), (10,)]
    assert sum(p.numel() for p in CifarCNN(input_size=24).parameters()) == 1_068_298  # McMahan's "about 10^6"
    assert model(torch.zeros(2, 3, 32, 32)).shape == (2, 10)


def test_augmentation_is_off_by_default_and_keeps_shapes():
    import torch

    from fedmpi.config import load_config
    from fedmpi.crossdevice.client_data import augment

    assert load_config("configs/hsu_cifar10.yaml").clients.augment is False
    x = torch.arange(2 * 3 * 32 * 32, dtype=torch.float32).reshape(2, 3, 32, 32)
    a = augment(x, torch.Generator().manual_seed(0))
    b = augment(x, torch.Generator().manual_seed(0))
    assert a.shape == x.shape and torch.equal(a, b) and not torch.equal(a, x)


def test_channel_stats_are_numpys_mean_to_the_bit_and_its_std_to_the_last_bit():
    images = np.random.default_rng(1).integers(0, 256, (3000, 3, 32, 32), dtype=np.uint8)
    images[:, 2] //= 3      # channels of different spread
    mean, std = client_data.channel_stats(images, chunk=700)
    scaled = images.reshape(len(images), 3, -1)
    assert np.array_equal(mean, np.array([scaled[:, ch].mean() for ch in range(3)]) / 255)
    np.testing.assert_allclose(std, np.array([scaled[:, ch].std() for ch in range(3)]) / 255, rtol=4e-16, atol=0)
