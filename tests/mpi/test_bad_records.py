"""Unreadable training records under mpirun: with data.skip_bad they are skipped and counted per party in the
run log and the summary; without it the failing rank's own error line comes first, before the echoes of
other ranks."""
from __future__ import annotations

import json
import re
import shutil

import pytest

from fedmpi.data.recordio import RecordReader
from fedmpi.store.h5log import LogReader
from mpi_scripts.ckpt_common import CONFIG, error_lines, reference_run, sibling_run

SHORT = ("optim.steps_per_epoch=4", "checkpoint.every=0")   # 2 rounds


@pytest.fixture(scope="module")
def broken_rec(tmp_path_factory):
    """A copy of party b's synthetic .rec with the image header of every even record wiped."""
    reference = reference_run(tmp_path_factory)
    source = next((reference.base / "data").glob("synthetic-ga-*"))
    folder = tmp_path_factory.mktemp("broken") / "ga"
    shutil.copytree(source, folder)
    reader = RecordReader(folder / "train.rec", folder / "train.idx")
    data = bytearray((folder / "train.rec").read_bytes())
    images = CONFIG["parties"][1]["data"]["identities"] * CONFIG["parties"][1]["data"]["images_per_identity"]
    for key in range(2, images + 1, 2):        # image records are keys 1..images (0: the header record)
        offset, _ = reader.location(key)
        image = offset + 8 + 24               # RecordIO header, then the 24-byte IRHeader, then the image
        data[image:image + 16] = bytes(16)
    (folder / "train.rec").write_bytes(bytes(data))
    return reference, folder


def test_skipped_records_are_counted_per_party_in_the_log_and_the_summary(broken_rec, tmp_path):
    reference, folder = broken_rec
    run = sibling_run(reference, tmp_path, "skips")
    result = run.launch(*SHORT, "parties.b.data.kind=rec", f"parties.b.data.path={folder}", "data.skip_bad=true")
    assert result.returncode == 0, result.stdout + result.stderr
    with LogReader(run.folder / "log.h5") as log:
        counts = json.loads(log.f["data"].attrs["bad_records"])
        described = json.loads(log.f["data"].attrs["b"])["bad_records"]
    assert counts["a"] == 0 and counts["b"] > 0 and described == counts["b"]
    assert f"bad records skipped: a 0, b {counts['b']}" in result.stdout


def test_without_skip_bad_the_failing_ranks_own_error_comes_first(broken_rec, tmp_path):
    reference, folder = broken_rec
    run = sibling_run(reference, tmp_path, "fails")
    result = run.launch(*SHORT, "parties.b.data.kind=rec", f"parties.b.data.path={folder}")
    assert result.returncode != 0
    lines = error_lines(result.stderr)
    assert re.fullmatch(r"rank 3 \(trainer:b\): DataError: .*train\.rec record \d+: cannot decode image .*",
                        lines[0]), result.stderr
    assert sum(line.startswith("rank 3 ") for line in lines) == 1
