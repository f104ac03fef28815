"""The server's round line and closing summary (core/progress.py): a loss printed with the digits it has."""
from __future__ import annotations

import io

import numpy as np

from fedmpi.core.progress import Progress, loss_text


def test_a_loss_keeps_three_decimals_from_0_1_and_three_significant_digits_below():
    assert [loss_text(x) for x in (14.3951, 0.1, 0.0123, 3.1234e-4, 0.0, float("nan"))] == \
        ["14.395", "0.100", "1.23e-02", "3.12e-04", "0.000", "nan"]


def test_the_round_line_and_the_summary_print_a_small_loss_with_its_digits():
    out = io.StringIO()
    progress = Progress(20, ["clients"], stream=out)
    progress.line(0, np.array([3.1234e-4]), 100.0, 1.0)
    progress.line(1, np.array([2.5e-4]), 100.0, 2.0)
    progress.summary("log.h5")
    lines = out.getvalue().splitlines()
    assert lines[0].startswith("round 1/20  loss clients 3.12e-04  100 img/s")
    assert "  clients: loss 3.12e-04 (round 1) -> 2.50e-04 (round 2)" in lines
