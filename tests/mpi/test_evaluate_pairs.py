"""tools.evaluate --pairs: a run's model on a .bin pair set gives the numbers the run logged for it (/eval), from
the run folder and from its exported insightface .pth; the 10-fold default and --flip none as the Evaluator
computes them."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from jobs.mpirun import ROOT
from mpi_scripts.ckpt_common import reference_run

LOGGED = {"accuracy": "accuracy", "accuracy_std": "accuracy_std", "tar@far=0.001": "tar_far_1e-3",
          "tar@far=0.01": "tar_far_1e-2"}


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    return reference_run(tmp_path_factory)


def evaluate(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tools.evaluate", *args], capture_output=True, text=True,
                          timeout=300, cwd=str(ROOT))


def pair_set(reference):
    (path,) = (reference.base / "data").glob("val-*/lfw.bin")
    return path


def logged_last(reference) -> dict:
    from fedmpi.store.h5log import LogReader

    with LogReader(reference.folder / "log.h5") as log:
        table = log.table("eval")
    assert table["round"].tolist()[-1] == 5   # the evaluation after the last round, the newest checkpoint's model
    return {key: float(table[f"lfw/{column}"][-1]) for key, column in LOGGED.items()}


def scored(out, *args) -> dict:
    result = evaluate(*args, "--out", str(out))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "| lfw | 60 |" in result.stdout
    return json.loads((out / "pairs.json").read_text())["sets"]["lfw"]


def test_the_held_out_folds_give_the_run_s_own_evaluation_from_the_run_folder_and_the_export(reference, tmp_path):
    logged = logged_last(reference)
    from_run = scored(tmp_path / "run", str(reference.folder), "--pairs", str(pair_set(reference)),
                      "--folds", "held-out")
    assert {k: from_run[k] for k in LOGGED} == logged
    exported = tmp_path / "model.pth"
    done = subprocess.run([sys.executable, "-m", "tools.export", str(reference.folder), "--out", str(exported)],
                          capture_output=True, text=True, timeout=120, cwd=str(ROOT))
    assert done.returncode == 0, done.stderr
    from_pth = scored(tmp_path / "pth", str(exported), "--pairs", str(pair_set(reference)), "--folds", "held-out")
    assert {k: from_pth[k] for k in LOGGED} == logged


@pytest.mark.parametrize("flip", ["sum", "none"])
def test_all_ten_folds_are_scored_as_the_evaluator_scores_them(reference, tmp_path, flip):
    from fedmpi.data.verification_bin import load_bin
    from fedmpi.metrics.embed import embed_images, pair_scores
    from fedmpi.metrics.roc import tar_at_far
    from fedmpi.metrics.verification import kfold_accuracy
    from fedmpi.protocols.backbone_file import load_backbone

    got = scored(tmp_path, str(reference.folder), "--pairs", str(pair_set(reference)), "--flip", flip)
    backbone, size, _ = load_backbone(reference.folder)
    images, issame = load_bin(pair_set(reference), size)
    scores = pair_scores(embed_images(backbone, images, flip=flip == "sum"))
    accuracy = kfold_accuracy(scores, issame, 10)
    assert got["accuracy"] == accuracy["mean"] and got["accuracy_std"] == accuracy["std"]
    assert len(accuracy["per_fold"]) == 10
    tars = tar_at_far(scores, issame, (1e-3, 1e-2))
    assert [got["tar@far=0.001"], got["tar@far=0.01"]] == [tars[1e-3]["tar"], tars[1e-2]["tar"]]


def test_a_missing_pair_set_is_one_line_naming_it(reference, tmp_path):
    result = evaluate(str(reference.folder), "--pairs", str(tmp_path / "nope.bin"), "--out", str(tmp_path))
    assert result.returncode == 1
    assert result.stderr.strip().splitlines() == [f"error: verification set not found: {tmp_path / 'nope.bin'}"]



def test_a_benchmark_root_holding_pair_sets_points_to_pairs(reference, tmp_path):
    result = evaluate(str(reference.folder), "--ijbc", str(pair_set(reference).parent), "--out", str(tmp_path))
    assert result.returncode == 1
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith("error: ") and line.endswith(f"; the .bin pair sets there are scored with --pairs "
                                                       f"{pair_set(reference)}")
