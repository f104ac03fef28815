"""dmlc RecordIO (the `.rec` files of mxnet/insightface) and its `.idx` index, without mxnet.

A record on disk is: magic 0xced7230a (uint32 LE), a length word whose low 29 bits are the payload length
and whose top 3 bits are the continuation flag (0 whole, 1 first part, 2 middle part, 3 last part), the
payload, zero padding to a multiple of 4 bytes. dmlc splits a payload wherever the magic word sits at a
4-byte aligned position: the magic itself is dropped from the file and put back by the reader between parts.

The `.idx` file is text, one `key<TAB>byte offset` line per record, as mxnet's MXIndexedRecordIO writes it.
Records carry mxnet's IRHeader (`IfQQ`: flag, label, id, id2; 24 bytes); when flag > 0, `flag` float32
labels follow the header and the header's own label field is unused.
"""
from __future__ import annotations

import os
import struct
from pathlib import Path
from typing import NamedTuple

import numpy as np

from .errors import DataError
from .recordio_index import read_index

MAGIC = 0xCED7230A
MAGIC_BYTES = struct.pack("<I", MAGIC)
LENGTH_MASK = (1 << 29) - 1
_WORDS = struct.Struct("<II")
_IR_HEADER = struct.Struct("<IfQQ")
IR_HEADER_SIZE = _IR_HEADER.size  # 24


def _padded(n: int) -> int:
    return (n + 3) & ~3


def encode_record(payload: bytes) -> bytes:
    """The bytes dmlc's RecordIOWriter writes for one payload, split where the magic word is aligned."""
    if len(payload) >= 1 << 29:
        raise ValueError(f"RecordIO payloads must be under 2^29 bytes, got {len(payload)}")
    view = memoryview(payload)
    cuts = []
    i = payload.find(MAGIC_BYTES)
    while i >= 0:
        if i % 4 == 0:  # dmlc only looks at aligned words
            cuts.append(i)
        i = payload.find(MAGIC_BYTES, i + (4 if i % 4 == 0 else 1))
    out = bytearray()
    start = 0
    for i in cuts:
        out += _WORDS.pack(MAGIC, ((1 if start == 0 else 2) << 29) | (i - start))
        out += view[start:i]  # aligned cut: length is a multiple of 4, no padding
        start = i + 4
    tail = len(payload) - start
    out += _WORDS.pack(MAGIC, ((3 if cuts else 0) << 29) | tail)
    out += view[start:]
    out += bytes(_padded(tail) - tail)
    return bytes(out)


def decode_record(buf, path, key, offset: int = 0) -> memoryview:
    """The payload of the record starting at `buf[offset]`, its parts joined; DataError when malformed.

    A record in one part comes back as a view into `buf` (no copy)."""
    view = memoryview(buf)
    parts = []
    pos = offset
    expect_more = False
    while True:
        if pos + 8 > len(view):
            raise DataError(path, f"truncated: record header at byte {pos - offset} needs 8 bytes, "
                                  f"{len(view) - pos} left", key)
        magic, word = _WORDS.unpack_from(view, pos)
        if magic != MAGIC:
            raise DataError(path, f"bad magic 0x{magic:08x} (expected 0x{MAGIC:08x})", key)
        cflag, length = word >> 29, word & LENGTH_MASK
        if cflag > 3 or (cflag in (0, 1)) == expect_more:
            raise DataError(path, f"continuation flag {cflag} out of sequence", key)
        body = pos + 8
        if body + length > len(view):
            raise DataError(path, f"truncated: payload needs {length} bytes, {len(view) - body} left", key)
        parts.append(view[body:body + length])
        pos = body + _padded(length)
        if cflag == 0:
            return parts[0]
        if cflag == 3:
            return memoryview(MAGIC_BYTES.join(parts))
        expect_more = True


class IRHeader(NamedTuple):
    flag: int
    label: float | np.ndarray
    id: int
    id2: int


def pack_ir(label, record_id: int, id2: int, payload: bytes) -> bytes:
    """mxnet.recordio.pack: a scalar label goes in the header; a vector label (flag = its size) follows it."""
    if np.ndim(label) == 0:
        return _IR_HEADER.pack(0, float(label), record_id, id2) + payload
    labels = np.asarray(label, dtype=np.float32).ravel()
    return _IR_HEADER.pack(labels.size, 0.0, record_id, id2) + labels.tobytes() + payload


def unpack_ir(record: bytes, path, key) -> tuple[IRHeader, memoryview]:
    """mxnet.recordio.unpack: (header with label a float or a float32 array, the rest of the payload)."""
    if len(record) < IR_HEADER_SIZE:
        raise DataError(path, f"record of {len(record)} bytes is shorter than the 24-byte IRHeader", key)
    flag, label, rid, id2 = _IR_HEADER.unpack_from(record)
    rest = memoryview(record)[IR_HEADER_SIZE:]
    if flag > 0:
        if len(rest) < 4 * flag:
            raise DataError(path, f"IRHeader announces {flag} labels but only {len(rest)} bytes follow", key)
        label = np.frombuffer(rest[:4 * flag], dtype=np.float32).copy()
        rest = rest[4 * flag:]
    return IRHeader(flag, label, rid, id2), rest


class RecordWriter:
    """Writes `<prefix>.rec` and `<prefix>.idx` (or explicit paths); use as a context manager."""

    def __init__(self, rec_path, idx_path):
        self.rec_path, self.idx_path = Path(rec_path), Path(idx_path)
        self._rec = open(self.rec_path, "wb")
        self._idx = open(self.idx_path, "w")

    def write(self, key: int, payload: bytes) -> None:
        self._idx.write(f"{int(key)}\t{self._rec.tell()}\n")
        self._rec.write(encode_record(payload))

    def close(self) -> None:
        self._rec.close()
        self._idx.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


class RecordReader:
    """Random access to the records of an indexed `.rec` file.

    The file is opened lazily in each process (and reopened after a fork), so one reader can be handed to
    DataLoader workers. Each read is one `pread` of the record's span, known from the sorted index offsets,
    into a buffer the process reuses: `read_view`/`read_ir` results are valid until the next read (one
    reader per thread), `read` returns a copy.
    """

    def __init__(self, rec_path, idx_path, skip_bad: bool = False):
        self.rec_path, self.idx_path = Path(rec_path), Path(idx_path)
        for p in (self.rec_path, self.idx_path):
            if not p.is_file():
                raise FileNotFoundError(f"RecordIO file not found: {p}")
        self.file_size = self.rec_path.stat().st_size
        keys, offsets = read_index(self.idx_path)
        beyond = offsets + 8 > self.file_size
        self.dropped_keys = [int(k) for k in keys[beyond]]
        self._past_end = dict(zip(self.dropped_keys, offsets[beyond].tolist()))
        if beyond.any() and not skip_bad:
            k, o = keys[beyond][0], offsets[beyond][0]
            raise DataError(self.rec_path, f"index offset {o} is past the end of the file "
                                           f"({self.file_size} bytes; from {self.idx_path.name})", int(k))
        keys, offsets = keys[~beyond], offsets[~beyond]
        order = np.argsort(offsets, kind="stable")
        ends = np.empty_like(offsets)
        ends[order[:-1]] = offsets[order[1:]]
        if len(order):
            ends[order[-1]] = self.file_size
        # A record may continue past the next indexed offset only if the index skips records; read to EOF then.
        ends[ends <= offsets] = self.file_size
        # lookups by key: a binary search over the keys in order (numpy arrays, not a dict of 6 M tuples,
        # over 1 GB per rank for MS1M); equal keys resolve to the last one in the file
        by_key = np.argsort(keys, kind="stable")
        self._sorted_keys, self._offsets, self._spans = keys[by_key], offsets[by_key], (ends - offsets)[by_key]
        self.keys = keys
        self._fd = self._pid = None
        self._buf = bytearray()

    def _find(self, key: int) -> int:
        """Position of `key` in the key-sorted arrays, -1 if absent."""
        i = int(np.searchsorted(self._sorted_keys, key, side="right")) - 1
        return i if i >= 0 and self._sorted_keys[i] == key else -1

    def __contains__(self, key) -> bool:
        return self._find(int(key)) >= 0

    def __len__(self) -> int:
        return len(self.keys)

    def _file(self) -> int:
        if self._pid != os.getpid():
            self._fd = os.open(self.rec_path, os.O_RDONLY)
            self._pid = os.getpid()
            self._buf = bytearray()
        return self._fd

    def location(self, key) -> tuple[int, int]:
        """(byte offset, byte length) of record `key` in the .rec file."""
        i = self._find(int(key))
        if i < 0:
            if int(key) in self._past_end:
                raise DataError(self.rec_path, f"index offset {self._past_end[int(key)]} (from {self.idx_path.name}) "
                                               f"is past the end of the file ({self.file_size} bytes): the .rec is "
                                               "truncated", key)
            raise DataError(self.rec_path, f"no such key in {self.idx_path.name}", key)
        return int(self._offsets[i]), int(self._spans[i])

    def read_view(self, key) -> memoryview:
        """The joined payload of record `key`, valid until this reader's next read."""
        offset, span = self.location(key)
        fd = self._file()
        if len(self._buf) < span:
            self._buf = bytearray(max(span, 2 * len(self._buf)))
        view = memoryview(self._buf)[:span]
        got = os.preadv(fd, [view], offset)
        if got < span:
            raise DataError(self.rec_path, f"truncated: file ended {got} bytes into the record", key)
        return decode_record(view, self.rec_path, key)

    def read(self, key) -> bytes:
        """The joined payload of record `key`."""
        return bytes(self.read_view(key))

    def read_ir(self, key) -> tuple[IRHeader, memoryview]:
        """(IRHeader, the rest of the payload), the latter valid until this reader's next read."""
        return unpack_ir(self.read_view(key), self.rec_path, key)

    def close(self) -> None:
        if self._fd is not None and self._pid == os.getpid():
            os.close(self._fd)
        self._fd = self._pid = None

    def __getstate__(self):
        state = dict(self.__dict__)
        state["_fd"] = state["_pid"] = None
        state["_buf"] = bytearray()
        return state

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass
