"""dmlc RecordIO + insightface faces_emore layout: byte format, round trips, identity ranges, bad files."""
from __future__ import annotations

import struct
from pathlib import Path

import numpy as np
import pytest
import torch

from fedmpi.data import DataError, RecFaceDataset
from fedmpi.data.faces_emore import read_layout, write_faces_emore
from fedmpi.data.recordio import (MAGIC, MAGIC_BYTES, RecordReader, RecordWriter, decode_record, encode_record,
                                  pack_ir, unpack_ir)
from image_files import encode_jpeg, encode_png, read_image
from tools import pack_rec

M = MAGIC_BYTES


def words(*values) -> bytes:
    return struct.pack(f"<{len(values)}I", *values)


def test_encoding_is_dmlc_layout():
    # whole record: magic, length word with cflag 0, payload, zero padding to 4 bytes
    assert encode_record(b"abcde") == words(MAGIC, 5) + b"abcde\0\0\0"
    # an aligned magic word splits the payload: start part (cflag 1), end part (cflag 3), magic dropped
    assert encode_record(b"abcd" + M + b"xy") == (words(MAGIC, (1 << 29) | 4) + b"abcd"
                                                  + words(MAGIC, (3 << 29) | 2) + b"xy\0\0")
    # two magics: start, middle (cflag 2, empty), end
    assert encode_record(M + M + b"z") == (words(MAGIC, 1 << 29) + words(MAGIC, 2 << 29)
                                           + words(MAGIC, (3 << 29) | 1) + b"z\0\0\0")
    # dmlc only looks at aligned words: an unaligned magic stays inside the payload
    assert encode_record(b"ab" + M + b"cd") == words(MAGIC, 8) + b"ab" + M + b"cd"


@pytest.mark.parametrize("payload", [b"", b"a", M, M + M, b"abcd" + M + b"xy", M + b"abc" + M,
                                     b"12345678" + M + M + b"9" + M])
def test_payloads_with_magic_come_back_whole(payload):
    assert decode_record(encode_record(payload), "f.rec", 0) == payload


def test_ir_header_matches_mxnet_pack():
    scalar = pack_ir(7.0, 3, 9, b"img")
    assert scalar == struct.pack("<IfQQ", 0, 7.0, 3, 9) + b"img"
    header, rest = unpack_ir(scalar, "f.rec", 3)
    assert (header.flag, header.label, header.id, header.id2, bytes(rest)) == (0, 7.0, 3, 9, b"img")
    vector = pack_ir([1, 5], 0, 0, b"")
    assert vector == struct.pack("<IfQQ", 2, 0.0, 0, 0) + np.float32([1, 5]).tobytes()
    header, rest = unpack_ir(vector, "f.rec", 0)
    assert header.flag == 2 and header.label.tolist() == [1.0, 5.0] and bytes(rest) == b""


def test_writer_and_indexed_reader(tmp_path):
    payloads = {0: b"zero", 5: b"x" * 4 + M + b"tail", 2: M * 3, 9: bytes(range(256)) * 3}
    with RecordWriter(tmp_path / "a.rec", tmp_path / "a.idx") as w:
        for key, payload in payloads.items():
            w.write(key, payload)
    lines = (tmp_path / "a.idx").read_text().splitlines()
    assert [line.split("\t")[0] for line in lines] == ["0", "5", "2", "9"]
    assert lines[0] == "0\t0" and lines[1] == "5\t12"  # key<TAB>byte offset
    reader = RecordReader(tmp_path / "a.rec", tmp_path / "a.idx")
    for key in (9, 2, 0, 5):  # random order
        assert reader.read(key) == payloads[key]
    assert 5 in reader and np.int64(9) in reader and 1 not in reader and 10 not in reader and -1 not in reader
    with pytest.raises(DataError, match=r"a.rec record 7: no such key in a.idx"):
        reader.read(7)
    # hand-edited index: blank lines and spaces are read like the writer's lines, a repeated key means its last line
    (tmp_path / "b.idx").write_text(f"{lines[2]}\n\n 0\t0\n{lines[3]} \n2\t0\n")
    edited = RecordReader(tmp_path / "a.rec", tmp_path / "b.idx")
    assert edited.keys.tolist() == [2, 0, 9, 2] and edited.read(2) == payloads[0] and edited.read(9) == payloads[9]


def make_identity_folder(root: Path) -> dict[str, list[torch.Tensor]]:
    """Three identities of 16x16 images, PNG and JPEG files mixed."""
    g = torch.Generator().manual_seed(0)
    images = {}
    for k, name in enumerate(["anna", "bert", "carl"]):
        (root / name).mkdir(parents=True)
        images[name] = []
        for j in range(k + 2):
            img = torch.randint(0, 256, (3, 16, 16), generator=g, dtype=torch.uint8)
            if j % 2 == 0:
                (root / name / f"{j}.png").write_bytes(encode_png(img))
            else:
                (root / name / f"{j}.jpg").write_bytes(encode_jpeg(img, quality=90))
            images[name].append(img)
    return images


def test_packer_round_trip(tmp_path):
    images = make_identity_folder(tmp_path / "faces")
    assert pack_rec.main([str(tmp_path / "faces"), str(tmp_path / "out" / "train")]) == 0
    ds = RecFaceDataset(tmp_path / "out", image_size=16)
    assert (ds.num_classes, len(ds)) == (3, 9)
    files = sorted((tmp_path / "faces").glob("*/*"))
    for i, path in enumerate(files):
        header, payload = ds.reader.read_ir(int(ds.keys[i]))
        assert bytes(payload) == path.read_bytes()  # stored unchanged
        x, label = ds[i]
        assert label == ["anna", "bert", "carl"].index(path.parent.name) == header.label
        expected = read_image(path)
        assert torch.equal(((x + 1) * 127.5).round().to(torch.uint8), expected)
        if path.suffix == ".png":  # lossless: the very pixels that were packed
            assert torch.equal(expected, images[path.parent.name][int(path.stem)])
    flipped, _ = ds[(1, True)]
    assert torch.equal(flipped, ds[1][0].flip(-1))


def test_faces_emore_header_and_identity_ranges(tmp_path):
    groups = [[b"\xff\xd8a"] * 3, [b"\xff\xd8b"] * 1, [b"\xff\xd8c"] * 2]
    written = write_faces_emore(tmp_path / "train.rec", tmp_path / "train.idx", groups, identity_ids=[11, 12, 13])
    assert written == (6, 3)
    reader = RecordReader(tmp_path / "train.rec", tmp_path / "train.idx")
    header, _ = reader.read_ir(0)
    assert header.flag == 2 and header.label.tolist() == [7, 10]  # [first identity record, end]
    assert [reader.read_ir(k)[0].label.tolist() for k in (7, 8, 9)] == [[1, 4], [4, 5], [5, 7]]
    layout = read_layout(reader)
    assert layout.num_identities == 3
    assert layout.ranges.tolist() == [[1, 4], [4, 5], [5, 7]]
    assert layout.image_keys.tolist() == [1, 2, 3, 4, 5, 6]
    assert layout.labels.tolist() == [0, 0, 0, 1, 2, 2]
    assert layout.identity_ids.tolist() == [11, 12, 13]


def test_split_by_identity_parts_and_remapped_labels(tmp_path):
    jpeg = encode_jpeg(torch.zeros(3, 8, 8, dtype=torch.uint8))
    groups = [[jpeg] * (k + 1) for k in range(10)]
    write_faces_emore(tmp_path / "train.rec", tmp_path / "train.idx", groups)
    parts = [RecFaceDataset(tmp_path, 8, split_index=i, split_count=4) for i in range(4)]
    assert [p.identities.tolist() for p in parts] == [[0, 1], [2, 3, 4], [5, 6], [7, 8, 9]]
    assert [p.num_classes for p in parts] == [2, 3, 2, 3]
    assert parts[1].labels.tolist() == [0] * 3 + [1] * 4 + [2] * 5
    assert sum(len(p) for p in parts) == 55
    d = parts[2].describe()
    assert d["split"] == "2/4" and d["source_identities"] == [5, 7] and d["identities"] == 2
    assert parts[3][len(parts[3]) - 1][1] == 2


def test_file_without_header_record_reads_labels_from_every_record(tmp_path):
    jpeg = encode_jpeg(torch.zeros(3, 8, 8, dtype=torch.uint8))
    with RecordWriter(tmp_path / "train.rec", tmp_path / "train.idx") as w:
        for key, label in enumerate([1, 0, 1, 2, 0]):
            w.write(key, pack_ir(float(label), key, 0, jpeg))
    ds = RecFaceDataset(tmp_path, 8)
    assert ds.num_classes == 3 and sorted(ds.labels.tolist()) == [0, 0, 1, 1, 2]
    assert [ds[i][1] for i in range(5)] == ds.labels.tolist()


# ------------------------------------------------------------------------------------------------- bad files

def good_set(folder: Path, n_ids: int = 3, per: int = 2) -> list[bytes]:
    jpeg = encode_jpeg(torch.full((3, 8, 8), 99, dtype=torch.uint8))
    folder.mkdir(parents=True, exist_ok=True)
    write_faces_emore(folder / "train.rec", folder / "train.idx", [[jpeg] * per for _ in range(n_ids)])
    return (folder / "train.rec").read_bytes()


def offsets(folder: Path) -> dict[int, int]:
    return {int(k): int(o) for k, o in (line.split("\t") for line in (folder / "train.idx").read_text().splitlines())}


def rewrite_record(folder: Path, key: int, payload: bytes) -> None:
    """Replace record `key` by `payload` (same encoded size required) in place."""
    data = bytearray((folder / "train.rec").read_bytes())
    new = encode_record(payload)
    at = offsets(folder)[key]
    data[at:at + len(new)] = new
    (folder / "train.rec").write_bytes(bytes(data))


def test_truncated_record(tmp_path):
    data = good_set(tmp_path)
    image_only = tmp_path / "cut"
    image_only.mkdir()
    cut = offsets(tmp_path)[3] + 20  # inside record 3's payload
    (image_only / "train.rec").write_bytes(data[:cut])
    idx = [f"{k}\t{o}" for k, o in offsets(tmp_path).items() if o < cut]
    (image_only / "train.idx").write_text("\n".join(idx) + "\n")
    reader = RecordReader(image_only / "train.rec", image_only / "train.idx")
    with pytest.raises(DataError, match=r"cut/train.rec record 3: truncated: payload needs \d+ bytes, 12 left"):
        reader.read(3)


def test_wrong_magic(tmp_path):
    good_set(tmp_path)
    data = bytearray((tmp_path / "train.rec").read_bytes())
    at = offsets(tmp_path)[2]
    data[at:at + 4] = b"\x00\x01\x02\x03"
    (tmp_path / "train.rec").write_bytes(bytes(data))
    ds = RecFaceDataset(tmp_path, 8)
    with pytest.raises(DataError, match=r"train.rec record 2: bad magic 0x03020100 \(expected 0xced7230a\)"):
        ds[1]


def test_index_offset_past_the_end(tmp_path):
    good_set(tmp_path)
    size = (tmp_path / "train.rec").stat().st_size
    lines = (tmp_path / "train.idx").read_text().splitlines()
    lines[4] = f"4\t{size + 100}"
    (tmp_path / "train.idx").write_text("\n".join(lines) + "\n")
    with pytest.raises(DataError, match=rf"train.rec record 4: index offset {size + 100} is past the end of "
                                        rf"the file \({size} bytes; from train.idx\)"):
        RecFaceDataset(tmp_path, 8)
    ds = RecFaceDataset(tmp_path, 8, skip_bad=True)  # dropped when opened, counted
    assert len(ds) == 5 and ds.bad_records == 1 and ds.describe()["bad_records"] == 1


def test_undecodable_jpeg(tmp_path):
    good_set(tmp_path)
    header, payload = RecordReader(tmp_path / "train.rec", tmp_path / "train.idx").read_ir(5)
    broken = pack_ir(float(header.label), 5, 0, b"\xff\xd8" + b"\x00" * (len(payload) - 2))
    rewrite_record(tmp_path, 5, broken)
    with pytest.raises(DataError, match=r"train.rec record 5: cannot decode image \(\d+ bytes\)"):
        RecFaceDataset(tmp_path, 8)[4]


def test_label_out_of_range(tmp_path):
    good_set(tmp_path)
    _, payload = RecordReader(tmp_path / "train.rec", tmp_path / "train.idx").read_ir(6)
    rewrite_record(tmp_path, 6, pack_ir(17.0, 6, 0, bytes(payload)))
    with pytest.raises(DataError, match=r"train.rec record 6: label 17 out of range 0..2"):
        RecFaceDataset(tmp_path, 8)[5]


def test_skip_mode_counts_and_substitutes(tmp_path):
    good_set(tmp_path)
    _, payload = RecordReader(tmp_path / "train.rec", tmp_path / "train.idx").read_ir(3)
    rewrite_record(tmp_path, 3, pack_ir(-4.0, 3, 0, bytes(payload)))
    ds = RecFaceDataset(tmp_path, 8, skip_bad=True)
    images = [ds[i] for i in range(len(ds))]
    assert ds.bad_records == 1
    assert images[2][1] == ds.labels[3] == 1  # item 2 (record 3) replaced by the next readable item
    loader = torch.utils.data.DataLoader(ds, batch_size=3, num_workers=2, multiprocessing_context="fork")
    assert sum(len(labels) for _, labels in loader) == 6
    assert ds.bad_records == 2  # the worker's skip is counted in the parent


def test_malformed_index_line(tmp_path):
    good_set(tmp_path)
    (tmp_path / "train.idx").write_text("0\t0\nnot a line\n")
    with pytest.raises(DataError, match=r"train.idx: line 2 is not 'key<TAB>offset'"):
        RecFaceDataset(tmp_path, 8)


def test_missing_files_are_named(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"RecordIO file not found: .*nowhere/train.rec"):
        RecFaceDataset(tmp_path / "nowhere", 8)
