"""RecordIO reader + JPEG decode throughput on one core, against decoding the same JPEG bytes from memory.

    python -m bench.reader [--images 2000] [--repeats 3] [--index-records 5908396]

Writes 112x112 synthetic faces as a faces_emore-style train.rec/train.idx in a temporary folder (page cache
warm, as after the first epoch), then times, in a shuffled order and with torch.set_num_threads(1):
  memory       decode (Pillow) of the bytes already in memory (the floor)
  reader       RecordReader.read_ir + decode (what the reader adds: pread, framing, header)
  memory+norm  decode from memory, then flip half and normalise to [-1, 1] (the dataset's floor)
  dataset      RecFaceDataset[(i, flip)]: reader + label checks + flip + normalisation
Then what opening a RecordReader costs each rank for an index the size of MS1M's (--index-records lines,
a sparse .rec): CPU time and memory added.
"""
from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

from fedmpi.data.face_dataset import RecFaceDataset
from fedmpi.data.faces_emore import write_faces_emore
from fedmpi.data.recordio import RecordReader
from fedmpi.data.images import decode, encode, normalize
from fedmpi.data.synthetic import generate_party


def best_rates(runs: dict, repeats: int) -> dict:
    """images/s of CPU time (user + system, so a loaded shared machine skews less), best of `repeats`;
    the runs are interleaved so that whatever else runs on the machine hits all of them alike."""
    best = {name: float("inf") for name in runs}
    for _ in range(repeats):
        for name, (fn, items) in runs.items():
            t0 = time.process_time()
            for item in items:
                fn(item)
            best[name] = min(best[name], time.process_time() - t0)
    return {name: len(runs[name][1]) / t for name, t in best.items()}


def index_open_cost(records: int) -> str:
    """CPU seconds and MB of memory a RecordReader adds when it opens an index of `records` lines."""
    with tempfile.TemporaryDirectory() as tmp:
        offsets = np.arange(records, dtype=np.int64) * 7000
        idx, rec = Path(tmp) / "train.idx", Path(tmp) / "train.rec"
        with open(idx, "w") as f:
            for start in range(0, records, 1 << 20):
                f.write("".join(f"{k}\t{o}\n" for k, o in enumerate(offsets[start:start + (1 << 20)].tolist(),
                                                                  start)))
        with open(rec, "wb") as f:
            f.truncate(int(offsets[-1]) + 7000)

        def rss_mb() -> float:
            return int(Path("/proc/self/statm").read_text().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20

        before, t0 = rss_mb(), time.process_time()
        reader = RecordReader(rec, idx)
        seconds, grown = time.process_time() - t0, rss_mb() - before
        del reader
    return f"open an index of {records} records: {seconds:.2f} s CPU, +{grown:.0f} MB resident"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.reader", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--images", type=int, default=2000)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--quality", type=int, default=95)
    ap.add_argument("--index-records", type=int, default=5908396, help="MS1M (faces_emore): 5,822,653 images, "
                                                                        "85,742 identities, 1 header record")
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    per = 20
    ids = max(1, args.images // per)
    images, _, _ = generate_party("ms1m", ids, per, 112, seed=0)
    jpegs = encode([torch.from_numpy(im) for im in images], quality=args.quality)
    with tempfile.TemporaryDirectory() as tmp:
        write_faces_emore(Path(tmp) / "train.rec", Path(tmp) / "train.idx",
                          [jpegs[i * per:(i + 1) * per] for i in range(ids)])
        ds = RecFaceDataset(tmp, image_size=112)
        reader = ds.reader
        order = np.random.default_rng(0).permutation(len(ds))
        blobs = [jpegs[i] for i in order]
        keys = [int(ds.keys[i]) for i in order]
        rates = best_rates({
            "memory": (lambda b: decode(b, "memory"), blobs),
            "reader": (lambda k: decode(reader.read_ir(k)[1], reader.rec_path, k), keys),
            "memory+norm": (lambda i: normalize(decode(blobs[i], "memory"), bool(i & 1)), range(len(blobs))),
            "dataset": (lambda i: ds[(int(i), bool(i & 1))], order),
        }, args.repeats)
    size = np.mean([len(j) for j in jpegs])
    print(f"{len(jpegs)} JPEGs 112x112, quality {args.quality}, mean {size / 1024:.1f} KiB, one thread, CPU time")
    floors = {"reader": "memory", "dataset": "memory+norm"}
    for name, rate in rates.items():
        floor = floors.get(name)
        extra = f"   cost over {floor}: {100 * (rates[floor] / rate - 1):+.1f} %" if floor else ""
        print(f"  {name:11s} {rate:8.0f} images/s  ({1e6 / rate:6.1f} us/image){extra}")
    print(index_open_cost(args.index_records))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
