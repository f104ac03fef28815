"""Whether a point-to-point message filled its receive buffer. A receive names only its buffer: the sender's
message carries its own length, which torch.distributed does not report. gloo writes a shorter message into the
front of the buffer and completes without a word (the rest keeps what it held), and refuses a longer one by
aborting the receiving process (`op.preamble.length <= op.nbytes`, gloo/transport/tcp/pair.cc: the job ends, no
rank waits); NCCL asks both sides for the same count (a mismatch is undefined). So before a receive the buffer's
last element is set to a mark, a NaN with a payload no arithmetic makes; a message of the full length overwrites
it, a shorter one cannot reach it (tests/mpi/test_message_end.py sends both through gloo). A CUDA tensor received
on a gloo group goes through a host buffer that p2p.irecv gives the mark too."""
from __future__ import annotations

import torch

# quiet NaNs with a payload (arithmetic gives the canonical NaN, payload 0): by element size; 0x7FFD is a NaN both
# as float16 and as bfloat16
MARKS = {2: (torch.int16, 0x7FFD), 4: (torch.int32, 0x7FC05E7D), 8: (torch.int64, 0x7FF8000000005E7D)}


def _last_bits(buffer: torch.Tensor) -> torch.Tensor:
    bits, _ = MARKS[buffer.element_size()]
    return buffer.reshape(-1)[-1:].view(bits)


def mark_end(buffer: torch.Tensor) -> None:
    """Set the (contiguous, non-empty, floating) buffer's last element to the mark, before the receive is posted."""
    if buffer.numel():
        _last_bits(buffer).fill_(MARKS[buffer.element_size()][1])


def reached_end(buffer: torch.Tensor) -> bool:
    """Whether the message received into the marked buffer reached its last element (False: it was shorter)."""
    return not buffer.numel() or int(_last_bits(buffer).item()) != MARKS[buffer.element_size()][1]
