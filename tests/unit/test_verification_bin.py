"""insightface `.bin` pair sets: packer round trip, the formats real files use, and refusal of crafted pickles."""
from __future__ import annotations

import os
import pickle

import numpy as np
import pytest
import torch

from fedmpi.data import DataError, load_bin, read_pairs
from image_files import encode_jpeg, encode_png, read_image
from tools import pack_bin


def images(n: int, size: int = 12) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(1)
    return [torch.randint(0, 256, (3, size, size), generator=g, dtype=torch.uint8) for _ in range(n)]


def test_packer_round_trip(tmp_path):
    imgs = images(6)
    for i, img in enumerate(imgs):
        data = encode_png(img) if i % 2 else encode_jpeg(img, quality=90)
        (tmp_path / f"{i}.{'png' if i % 2 else 'jpg'}").write_bytes(data)
    names = [f"{i}.{'png' if i % 2 else 'jpg'}" for i in range(6)]
    (tmp_path / "pairs.txt").write_text(f"# a comment\n{names[0]} {names[1]} 1\n\n{names[2]} {names[3]} 1\n"
                                        f"{names[4]} {names[5]} 0\n")
    out = tmp_path / "sets" / "mine.bin"
    assert pack_bin.main([str(tmp_path / "pairs.txt"), str(out), "--root", str(tmp_path)]) == 0
    raw, same = read_pairs(out)
    assert same.tolist() == [True, True, False]
    assert raw == [(tmp_path / n).read_bytes() for n in names]
    tensor, same2 = load_bin(out, image_size=12)
    assert tensor.shape == (6, 3, 12, 12) and tensor.dtype == torch.uint8 and same2.dtype == bool
    for i, n in enumerate(names):
        assert torch.equal(tensor[i], read_image(tmp_path / n))
    assert torch.equal(tensor[1], imgs[1])  # PNG: exactly the packed pixels
    assert load_bin(out, image_size=24)[0].shape == (6, 3, 24, 24)  # resized like insightface does


def test_packer_rejects_bad_pair_lines(tmp_path):
    (tmp_path / "pairs.txt").write_text("a.jpg b.jpg yes\n")
    with pytest.raises(SystemExit, match=r"pairs.txt line 1: expected 'IMAGE_A IMAGE_B 0\|1'"):
        pack_bin.main([str(tmp_path / "pairs.txt"), str(tmp_path / "x.bin")])


@pytest.mark.parametrize("protocol", [0, 2, 4, 5])
def test_formats_of_real_files(tmp_path, protocol):
    """bytes or uint8 numpy arrays for the images; bools or numpy bools for issame; any pickle protocol."""
    jpegs = [np.frombuffer(encode_jpeg(img), dtype=np.uint8) for img in images(4)]
    obj = ([jpegs[0].tobytes(), jpegs[1], jpegs[2], jpegs[3].tobytes()], [np.bool_(True), False])
    path = tmp_path / "x.bin"
    path.write_bytes(pickle.dumps(obj, protocol=protocol))
    raw, same = read_pairs(path)
    assert raw == [j.tobytes() for j in jpegs] and same.tolist() == [True, False]


class _Touch:
    def __init__(self, target):
        self.target = target

    def __reduce__(self):
        return os.system, (f"touch {self.target}",)


class _Eval:
    def __reduce__(self):
        return eval, ("__import__('os').mkdir('/tmp/should_not_exist_fedmpi')",)


def test_malicious_pickle_is_refused_and_does_not_run(tmp_path):
    target = tmp_path / "pwned"
    path = tmp_path / "lfw.bin"
    path.write_bytes(pickle.dumps(([b"\xff\xd8", _Touch(target)], [True]), protocol=2))
    with pytest.raises(DataError, match=rf"{path}: refused pickle global (posix|os)\.system"):
        load_bin(path, 112)
    assert not target.exists()
    path.write_bytes(pickle.dumps(([_Eval(), b""], [True])))
    with pytest.raises(DataError, match=r"refused pickle global builtins\.eval"):
        read_pairs(path)
    assert not os.path.exists("/tmp/should_not_exist_fedmpi")


def test_object_arrays_are_refused(tmp_path):
    path = tmp_path / "o.bin"
    path.write_bytes(pickle.dumps(([np.array([b"a", None], dtype=object), b""], [True])))
    with pytest.raises(DataError, match=r"o.bin: not a readable pickle .*object dtype"):
        read_pairs(path)


def test_shape_and_content_errors(tmp_path):
    path = tmp_path / "s.bin"
    path.write_bytes(pickle.dumps(([b"a", b"b", b"c"], [True, False])))
    with pytest.raises(DataError, match=r"s.bin: 3 images for 2 pairs \(expected 4\)"):
        read_pairs(path)
    path.write_bytes(pickle.dumps({"not": "a pair"}))
    with pytest.raises(DataError, match=r"expected a pickled \(images, issame\) pair, got dict"):
        read_pairs(path)
    path.write_bytes(b"\x80\x04garbage")
    with pytest.raises(DataError, match=r"s.bin: not a readable pickle"):
        read_pairs(path)
    path.write_bytes(pickle.dumps(([b"\xff\xd8zz", b"\xff\xd8zz"], [True])))
    with pytest.raises(DataError, match=r"s.bin record 0: cannot decode image \(4 bytes\)"):
        load_bin(path, 112)
    with pytest.raises(FileNotFoundError, match=r"verification set not found: .*missing.bin"):
        read_pairs(tmp_path / "missing.bin")
