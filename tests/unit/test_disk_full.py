"""A checkpoint part that does not fit on its volume (store/disk_full.py): named as a full disk with its path, no
temporary file left, none of h5py's 'Exception ignored' reports of the file's failed close."""
from __future__ import annotations

import subprocess

import pytest
import torch

from fedmpi.store.disk_full import DiskFull, is_disk_full
from fedmpi.store.manifest import write_part


@pytest.fixture
def full_volume(tmp_path):
    """A 1 MiB tmpfs filled but for 6 KiB: room for an HDF5 file's creation, not for its data."""
    volume = tmp_path / "small"
    volume.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(volume)], capture_output=True,
                             text=True)
    if mounted.returncode != 0:
        pytest.skip(f"a small volume needs mount -t tmpfs: {mounted.stderr.strip()}")
    try:
        (volume / "filler").write_bytes(b"\1" * (2**20 - 6 * 1024))
        (volume / "ck").mkdir()
        yield volume / "ck"
    finally:
        subprocess.run(["umount", str(volume)], capture_output=True)


def test_a_part_that_does_not_fit_is_named_a_full_disk_and_leaves_nothing(full_volume, capfd):
    """The write fails at the file's close (HDF5's flush of its metadata): the form that left the most reports. One
    failure a process: a second HDF5 file failing in the same process after it crashes in h5py's close."""
    with pytest.raises(DiskFull) as caught:
        write_part(full_volume, "party-a-0.h5", {"theta": torch.ones(2000), "b": {"x": torch.ones(3)}}, {"round": 3}, 1)
    assert str(caught.value).startswith(f"{full_volume}/party-a-0.h5: no space left on the device (")
    assert list(full_volume.iterdir()) == []
    assert "Exception ignored" not in capfd.readouterr().err


def test_a_full_disk_is_told_from_other_write_errors():
    h5py_text = ("Can't close file (file write failed: time = ..., filename = 'x.h5', file descriptor = 3, "
                 "errno = 28, error message = 'No space left on device', buf = 0x1)")
    assert is_disk_full(RuntimeError(h5py_text)) and is_disk_full(OSError(28, "No space left on device"))
    assert not is_disk_full(OSError(13, "Permission denied")) and not is_disk_full(RuntimeError("errno = 2, x"))
