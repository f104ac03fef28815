"""The large-scale benchmarks end to end on the synthetic releases: a short run under mpirun evaluates IJB-C
and MegaFace (eval.sets) after round 1 and at the end and logs them in /eval; `tools.evaluate` on its
checkpoint, spread over 2 ranks, reproduces the logged numbers and writes its reports; an untrained backbone
scores clearly lower than the trained one (not at chance: random convolutions already pick up the skin tone
and hair colour that tell synthetic people apart)."""
import re

import h5py
import numpy as np
import pytest
import torch
import yaml

from jobs.mpirun import mpirun

CONFIG = {
    "parties": [{"name": "ms1m", "ranks": 1,
                 "data": {"kind": "synthetic", "style": "ms1m", "identities": 48, "images_per_identity": 12}}],
    "data": {"image_size": 32, "workers": 0, "val_pairs_per_fold": 4, "val_sets": ["lfw"]},
    "model": {"backbone": "ir18", "width": 0.25, "embedding_size": 64, "scale": 16.0, "margin": 0.2,
              "head": "cosface"},
    "optim": {"lr": 0.1, "batch_size": 64, "epochs": 1, "steps_per_epoch": 64, "milestones": []},
    "fed": {"algorithm": "fedavg", "K": 8},
    "eval": {"every": 8, "sets": {"ijbc": "synthetic", "megaface": "synthetic"}},
    "checkpoint": {"every": 8},
}


@pytest.fixture(scope="module")
def trained_run(tmp_path_factory):
    folder = tmp_path_factory.mktemp("bench")
    (folder / "cfg.yaml").write_text(yaml.safe_dump(CONFIG))
    out = mpirun(2, ["-m", "fedmpi.run", "--config", str(folder / "cfg.yaml"), f"log.dir={folder}", "log.name=run",
                     f"data.root={folder / 'data'}"], timeout=600)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-3000:]
    with h5py.File(folder / "run" / "log.h5", "r") as f:
        table = {k: f["eval"][k][:] for k in ("ijbc/tar_far_1e-2", "ijbc/tar_far_1e-5", "megaface/rank1",
                                               "megaface/rank1_1e3", "megaface/rank1_1e4", "megaface/tar_far_1e-6")}
        sets = f["eval"].attrs["sets"]
    data = folder / "data"
    roots = {"ijbc": next(data.glob("ijbc-*")) / "IJBC", "megaface": next(data.glob("megaface-*"))}
    return folder, out.stdout, table, sets, roots


def parse_table(text: str) -> dict:
    ijbc = re.search(r"^IJB-C\s+(.*)$", text, re.M).group(1).split()
    rank1 = re.search(r"^rank-1\s+(.*)$", text, re.M).group(1).split()
    return {"ijbc/tar_far_1e-2": float(ijbc[4]) / 100, "ijbc/tar_far_1e-5": float(ijbc[1]) / 100,
            "megaface/rank1_1e3": float(rank1[2]) / 100}


def test_run_logs_the_benchmarks_and_training_lifts_them(trained_run, capsys):
    from fedmpi.analysis.summary import main as summary

    folder, stdout, table, sets, _ = trained_run
    assert '["lfw", "ijbc", "megaface"]' == sets
    assert re.search(r"eval after round 8: .*; ijbc tar_far_1e-5 \d+\.\d\d  megaface rank1 \d+\.\d\d", stdout)
    assert np.isnan(table["megaface/rank1_1e4"]).all()           # 1000 distractors: no 10^4 gallery
    np.testing.assert_array_equal(table["megaface/rank1"], table["megaface/rank1_1e3"])
    first, last = {k: v[0] for k, v in table.items()}, {k: v[-1] for k, v in table.items()}
    assert last["ijbc/tar_far_1e-2"] > first["ijbc/tar_far_1e-2"] + 0.2, table
    assert last["megaface/rank1"] > first["megaface/rank1"] + 0.1, table
    summary([str(folder / "run" / "log.h5")])
    final = re.search(r"^ijbc tar_far_1e-5 \(final\)\s+(\S+)$", capsys.readouterr().out, re.M)
    assert float(final.group(1)) == pytest.approx(last["ijbc/tar_far_1e-5"], abs=1e-4)


def test_evaluate_spreads_over_ranks_and_reproduces_the_run(trained_run, tmp_path):
    folder, _, table, _, roots = trained_run
    out = mpirun(2, ["-m", "tools.evaluate", str(folder / "run"), "--ijbc", str(roots["ijbc"]),
                     "--megaface", str(roots["megaface"]), "--out", str(tmp_path / "reports")], timeout=300)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-3000:]
    assert "rank 0: ijbc: 606 images, 200 templates, 3000 pairs (300 genuine)" in out.stdout
    assert re.search(r"rank 1: megaface: 120 probes of 20 identities \(5 refined\), 1000 distractors \(\d+ noisy\); "
                     r"noisy_distractors: kept, never win \(insightface\), gallery: seeded prefixes \(no devkit "
                     r"subset lists\)", out.stdout)
    for key, value in parse_table(out.stdout).items():
        assert value == pytest.approx(table[key][-1], abs=0.005), key   # the table prints 2 decimals of %
    with h5py.File(tmp_path / "reports" / "ijbc.h5", "r") as f:
        tar, far = f["roc/tar"][:], f["roc/far"][:]
        assert np.all(np.diff(tar) >= 0) and far[-1] == 1.0 and tar[-1] == 1.0
    assert (tmp_path / "reports" / "ijbc_roc.png").read_bytes()[:4] == b"\x89PNG"
    assert (tmp_path / "reports" / "megaface.h5").is_file()


def test_untrained_backbone_scores_clearly_lower(trained_run, tmp_path, capsys):
    from fedmpi.models.iresnet import iresnet
    from tools.evaluate import main

    _, _, table, _, roots = trained_run
    torch.manual_seed(0)
    torch.save(iresnet("ir18", 64, 32, 0.25).state_dict(), tmp_path / "untrained.pth")
    assert main([str(tmp_path / "untrained.pth"), "--ijbc", str(roots["ijbc"]), "--out", str(tmp_path / "r")]) == 0
    untrained = capsys.readouterr().out
    tar = float(re.search(r"^IJB-C\s+(.*)$", untrained, re.M).group(1).split()[4]) / 100
    assert tar < table["ijbc/tar_far_1e-2"][-1] - 0.2


def test_evaluate_refuses_bad_input_with_one_line(tmp_path, capsys):
    from tools.evaluate import main

    assert main([str(tmp_path / "missing.pth"), "--ijbc", str(tmp_path)]) == 1
    expected = f"error: {tmp_path / 'missing.pth'}: no such checkpoint, run folder or .pth file\n"
    assert capsys.readouterr().err == expected
    torch.save({"conv1.weight": torch.zeros(1)}, tmp_path / "bad.pth")
    assert main([str(tmp_path / "bad.pth"), "--ijbc", str(tmp_path)]) == 1
    assert "not an IResNet state_dict" in capsys.readouterr().err
