"""What a receive learns of the message it got (comm/message_end.py), through gloo itself: a message shorter than
the buffer fills its front and completes without a word, the buffer's marked last element left as it was (so the
class payloads' and client states' checks name it); one of the full length overwrites the mark; a longer one is
refused by gloo's transport, which aborts the receiving process with its own message (no rank waits: the job
ends). The mark is a NaN no arithmetic makes: a payload whose last value is an ordinary NaN reached its end."""
from __future__ import annotations

import socket
import subprocess
import sys

import pytest
import torch

from fedmpi.comm.message_end import mark_end, reached_end
from jobs.mpirun import ROOT, mpi_env

SCRIPT = ROOT / "tests" / "support" / "mpi_scripts" / "gloo_message_sizes.py"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def exchange(sent: int, expected: int) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), str(sent), str(expected), str(free_port())],
                          capture_output=True, text=True, timeout=120, env=mpi_env(), cwd=ROOT)


def test_a_short_message_leaves_the_mark_and_a_whole_one_overwrites_it():
    short, whole = exchange(3, 4), exchange(4, 4)
    assert short.returncode == 0 and whole.returncode == 0, short.stderr[-2000:] + whole.stderr[-2000:]
    assert "received [1.0, 2.0, 3.0] reached_end=False" in short.stdout
    assert "received [1.0, 2.0, 3.0] reached_end=True" in whole.stdout


def test_a_long_message_is_refused_by_gloo_and_ends_the_receiver():
    long = exchange(5, 4)
    assert long.returncode != 0
    assert "Received data size doesn't match expected size" in long.stderr


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32, torch.float64])
def test_the_mark_is_a_nan_no_arithmetic_makes(dtype):
    buffer = torch.ones(3, dtype=dtype)
    mark_end(buffer)
    assert torch.isnan(buffer[-1]) and torch.equal(buffer[:-1], torch.ones(2, dtype=dtype))
    assert not reached_end(buffer)
    buffer[-1] = torch.zeros((), dtype=dtype) / 0.0 * 0.0    # an arithmetic NaN arriving as the last value
    assert torch.isnan(buffer[-1]) and reached_end(buffer)
    assert reached_end(torch.zeros(0, dtype=dtype))
