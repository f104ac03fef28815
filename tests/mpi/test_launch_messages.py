"""What a launch says under mpirun: a missing data file named by its setting in one line before any rank loads
torch; a resume of a finished run says so and how to extend it; the summary after such an extension names the
rounds it compares."""
from __future__ import annotations

import re

import pytest

from mpi_scripts.ckpt_common import ROUNDS, copy_run, error_lines, reference_run


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    return reference_run(tmp_path_factory)


def test_a_missing_rec_folder_is_one_line_naming_its_setting(reference, tmp_path):
    run = copy_run(reference, tmp_path, "missing")
    out = run.launch("parties.b.data.kind=rec", f"parties.b.data.path={tmp_path}/orgX", "--resume", "none")
    assert out.returncode == 2
    assert error_lines(out.stderr) == [f"error: parties.b.data.path: {tmp_path}/orgX/train.rec not found (a rec set "
                                       f"is a folder holding train.rec and train.idx, as `python -m tools.pack_rec "
                                       f"FOLDER {tmp_path}/orgX/train` writes them)"]
    text = out.stdout + out.stderr
    assert "MPI_ABORT" not in text and "\x00" not in text and "Traceback" not in text


def test_a_finished_run_says_so_and_how_to_make_it_longer_then_the_summary_names_the_new_rounds(reference,
                                                                                                   tmp_path):
    run = copy_run(reference, tmp_path, "done")
    out = run.launch("--resume", "auto")
    assert out.returncode == 0, out.stderr
    said = [line for line in out.stdout.splitlines() if "finished" in line]
    assert len(said) == 1 and f"finished: all {ROUNDS} rounds are done" in said[0]
    command = re.search(r"`mpirun -n 4 python -m (fedmpi\.run .*)`", said[0]).group(1).split()
    assert command[-2:] == ["optim.epochs=2", "--allow-config-changes"] and "round " not in out.stdout
    longer = run.launch(*command[-2:], "--resume", "auto")
    assert longer.returncode == 0, longer.stderr
    lines = longer.stdout.splitlines()
    assert [line.split()[1] for line in lines if line.startswith("round ")] == [f"{r}/12" for r in range(7, 13)]
    assert any(re.fullmatch(r"  a: loss \d+\.\d+ \(round 7\) -> \d+\.\d+ \(round 12\)", line) for line in lines)
    header = next(line for line in lines if line.strip().startswith("set "))
    assert header.split() == ["set", "round", "1", "round", "12", "change"]
