"""Damaged data files end in one DataError that names the file and says what is wrong: a binary or negative
`.idx`, a `.rec` cut short (also with skip_bad), a `.bin` whose issame list is not booleans or is empty."""
from __future__ import annotations

import pickle

import pytest

from fedmpi.data import DataError
from fedmpi.data.recordio import RecordReader, RecordWriter
from fedmpi.data.verification_bin import read_pairs


def small_rec(tmp_path, n=4):
    rec, idx = tmp_path / "train.rec", tmp_path / "train.idx"
    with RecordWriter(rec, idx) as writer:
        for key in range(n):
            writer.write(key, bytes([key]) * 100)
    return rec, idx


def test_an_idx_holding_binary_bytes_names_the_file_and_line(tmp_path):
    rec, idx = small_rec(tmp_path)
    idx.write_bytes(b"0\t0\n\xff\xfe\x00\x01\n")
    with pytest.raises(DataError, match=r"train\.idx: line 2 is not text \(binary bytes .*\); an \.idx holds "):
        RecordReader(rec, idx)


def test_an_idx_line_with_a_negative_offset_is_named(tmp_path):
    rec, idx = small_rec(tmp_path)
    idx.write_text("0\t0\n1\t-8\n")
    with pytest.raises(DataError, match=r"train\.idx: line 2: offset -8 of key 1 is negative"):
        RecordReader(rec, idx)


def test_a_truncated_rec_read_with_skip_bad_says_the_record_is_past_the_end(tmp_path):
    rec, idx = small_rec(tmp_path)
    size = rec.stat().st_size
    with open(rec, "r+b") as f:
        f.truncate(size // 2)
    reader = RecordReader(rec, idx, skip_bad=True)
    assert reader.dropped_keys == [2, 3]
    with pytest.raises(DataError, match=r"train\.rec record 3: index offset \d+ \(from train\.idx\) is past the end "
                                        rf"of the file \({size // 2} bytes\): the \.rec is truncated"):
        reader.read(3)
    with pytest.raises(DataError, match=r"record 9: no such key in train\.idx"):
        reader.read(9)


@pytest.mark.parametrize("issame, error", [
    (["0", "1"], r"issame holds '0', not a boolean"),
    ("x", r"issame holds 'x', not a boolean"),
    ([], r"holds no pairs \(issame is empty\)"),
])
def test_a_bin_whose_issame_is_not_booleans_or_empty_is_refused(tmp_path, issame, error):
    path = tmp_path / "lfw.bin"
    path.write_bytes(pickle.dumps(([b"a", b"b"] * len(issame), issame), protocol=2))
    with pytest.raises(DataError, match=r"lfw\.bin: .*" + error):
        read_pairs(path)


def test_a_bin_with_integer_flags_still_reads(tmp_path):
    path = tmp_path / "lfw.bin"
    path.write_bytes(pickle.dumps(([b"a", b"b", b"c", b"d"], [1, 0]), protocol=2))
    assert read_pairs(path)[1].tolist() == [True, False]
