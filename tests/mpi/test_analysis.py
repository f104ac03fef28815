"""The analysis tools (fedmpi/analysis/summary, table1, relative, weights, curves) on a sweep of run logs.

The logs are written with the project's RunLog writer (the format the server writes), with the shapes a
3-party CPU run produces: per-round losses per party, throughput, FV iterations (candidates, scores, chosen,
w) and evaluations on five validation sets. Every number a tool prints is checked against values computed
here directly from the HDF5 datasets with h5py.
"""
from __future__ import annotations

import csv
import io
import json
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import h5py
import numpy as np
import pytest

from fedmpi.config import load_config, to_yaml
from fedmpi.store.h5log import RunLog
from shared_runs import declare

ROOT = Path(__file__).resolve().parents[2]
PARTIES = ["ms1m", "ga", "vgg"]
VAL_SETS = ["lfw", "cfp_fp", "agedb_30", "calfw", "cplfw"]
ROUNDS = 24
K_BY_SETTING = {"K=10": 10, "K=20": 20}


# ------------------------------------------------------------------ logs written with RunLog


def write_log(path: Path, *, algorithm: str, overrides: list[str], seed: int, rounds: int = ROUNDS,
              fv_iterations: int = 0, log_parties: list[str] | None = None, nan_parties=()) -> Path:
    """A run log as the server writes it: config, rounds, FV iterations (when fv_iterations > 0), an
    evaluation every 4 rounds and at the end."""
    cfg = load_config(ROOT / "configs" / "demo_cpu.yaml", [f"fed.algorithm={algorithm}", "fv.enabled=false", *overrides])
    parties = log_parties or [p.name for p in cfg.parties]
    rng = np.random.default_rng(seed)
    P, T, V = len(parties), cfg.fv.T, len(VAL_SETS)
    log = RunLog(path, config_yaml=to_yaml(cfg), algorithm=algorithm, run_name=path.parent.name, parties=parties,
                 val_sets=VAL_SETS, fv_candidates=T if fv_iterations else 0)
    start = rng.uniform(14, 18, P)
    floor = rng.uniform(3, 6, P)
    w = np.full(P, 1.0 / P)
    wall = 0.0
    for r in range(rounds):
        if fv_iterations:
            for it in range(fv_iterations):
                candidates = np.vstack([w, rng.dirichlet(np.ones(P), T - 1)])
                raw = rng.uniform(0.6, 0.9, (T, V))
                norm = raw - raw.mean(axis=0)
                chosen = int(np.argmax(norm.sum(axis=1)))
                w = 0.9 * w + 0.1 * candidates[chosen]
                log.append("fv", round=r, iteration=it, candidates=candidates, raw_scores=raw,
                           norm_scores=norm, chosen=chosen, w=w)
        loss = floor + (start - floor) * np.exp(-r / 6) + rng.normal(0, 0.3, P)
        loss[[parties.index(p) for p in nan_parties]] = np.nan
        round_time = float(rng.uniform(1.5, 2.5))
        wall += round_time
        step = (r + 1) * cfg.fed.K
        ips, moved = float(rng.uniform(150, 250)), int(rng.integers(1e6, 2e6))
        log.append("rounds", round=r, step=step, lr=cfg.lr_at_round(r), wall_time=wall, round_time=round_time,
                   images_per_s=ips, bytes_moved=moved, bytes_up=moved // 2, bytes_down=moved // 4,
                   bytes_intra=moved - moved // 2 - moved // 4, fv_iterations=fv_iterations,
                   loss=loss, party_images_per_s=rng.uniform(40, 90, P), update_norm=rng.uniform(1, 2, P),
                   uploads_excluded=np.zeros(P, np.int64))
        if (r + 1) % 4 == 0 or r == rounds - 1:
            row = {"round": r, "step": step}
            for s in VAL_SETS:
                acc = 0.6 + 0.3 * (1 - np.exp(-r / 8)) + rng.normal(0, 0.01)
                row.update({f"{s}/accuracy": acc, f"{s}/accuracy_std": rng.uniform(0.01, 0.03),
                            f"{s}/tar_far_1e-3": acc - 0.3, f"{s}/tar_far_1e-2": acc - 0.15})
            log.append("eval", **row)
    log.close()
    return path


SWEEP_RUNS = [  # (folder, setting, algorithm, overrides, fv iterations per round)
    ("k10_centralized", "K=10", "centralized", [], 0),
    ("k10_fedavg", "K=10", "fedavg", [], 0),
    ("k10_fedavg_fv", "K=10", "fedavg", ["fv.enabled=true"], 2),
    ("k10_pfm", "K=10", "pfm", [], 0),
    ("k10_pfm_fv", "K=10", "pfm", ["fv.enabled=true"], 2),
    ("k10_pfm_fv_seed1", "K=10", "pfm", ["fv.enabled=true", "run.seed=1"], 2),
    ("k10_pfm_fv_moving", "K=10", "pfm", ["fv.enabled=true", "fv.norm=moving"], 2),
    ("k10_fedavg_fv_moving", "K=10", "fedavg", ["fv.enabled=true", "fv.norm=moving"], 2),
    ("k10_solo_ms1m", "K=10", "solo", ["fed.solo_party=ms1m"], 0),
    ("k10_solo_ga", "K=10", "solo", ["fed.solo_party=ga"], 0),
    ("k10_solo_vgg", "K=10", "solo", ["fed.solo_party=vgg"], 0),
    ("k20_centralized", "K=20", "centralized", ["fed.K=20"], 0),
    ("k20_fedavg", "K=20", "fedavg", ["fed.K=20"], 0),
    ("k20_pfm", "K=20", "pfm", ["fed.K=20"], 0),
    ("k20_pfm_fv", "K=20", "pfm", ["fed.K=20", "fv.enabled=true"], 1),
]


def make_sweep(root: Path) -> Path:
    entries = []
    for seed, (folder, setting, algorithm, overrides, fv_iterations) in enumerate(SWEEP_RUNS):
        kwargs = {}
        if algorithm == "centralized":
            kwargs["log_parties"] = ["centralized"]
        if folder == "k10_solo_vgg":         # a solo log that keeps every party, the others never trained
            kwargs["nan_parties"] = ["ms1m", "ga"]
        elif algorithm == "solo":
            kwargs["log_parties"] = [overrides[0].split("=")[1]]
        overrides = ["optim.steps_per_epoch=40", "fed.K=10", *overrides]   # the settings' K on 6 x 40 steps
        if folder.startswith("k20"):
            overrides = [*overrides, "optim.epochs=12"]   # 12 x 40 steps = 24 rounds of K = 20
        log = write_log(root / "runs" / folder / "log.h5", algorithm=algorithm, overrides=overrides, seed=seed,
                        fv_iterations=fv_iterations, **kwargs)
        # the index jobs.sweep writes (fedmpi/analysis/sweep_index.py); its paths absolute, or relative to the sweep folder
        where = {"log_dir": str(log.parent), "log": str(log)} if seed % 2 else {"log_dir": f"runs/{folder}"}
        entries.append({"name": folder, **where, "labels": {"setting": setting, "method": algorithm},
                        "state": "COMPLETED", "exit_status": 0})
    (root / "index.json").write_text(json.dumps({"sweep": "test", "runs": entries}, indent=1))
    return root


@pytest.fixture(scope="session")
def sweep(tmp_path_factory) -> Path:
    return make_sweep(tmp_path_factory.mktemp("sweep"))


# ------------------------------------------------------------------ helpers


def read_h5(path: Path) -> dict:
    """Every dataset of a log, read with h5py alone (independent of the tools' reader)."""
    out = {}
    with h5py.File(path, "r") as f:
        f.visititems(lambda name, item: out.__setitem__(name, item[()]) if isinstance(item, h5py.Dataset) else None)
        out["parties"] = json.loads(f.attrs["parties"])
    return out


def ema_reference(values, factor):
    state = None
    for x in values:
        if np.isnan(x):
            continue
        state = x if state is None else factor * state + (1 - factor) * x
    return state


def run_csv(main, args, tmp_path, name="out.csv") -> list[list[str]]:
    out = tmp_path / name
    main([*map(str, args), "--format", "csv", "--out", str(out)])
    return [row for row in csv.reader(io.StringIO(out.read_text())) if row and not row[0].startswith("#")]


def as_dict(rows) -> dict:
    """Summary CSV (one column per run) -> {quantity: {run: cell}}."""
    header = rows[0]
    return {row[0]: dict(zip(header[1:], row[1:])) for row in rows[1:]}


def assert_png(path: Path) -> None:
    assert path.is_file() and path.stat().st_size > 10_000, path
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def close(a, b, tol=1e-8):
    return abs(float(a) - float(b)) <= tol * max(1.0, abs(float(b)))


# ------------------------------------------------------------------ summary


def test_summary_numbers_match_the_datasets(sweep, tmp_path):
    from fedmpi.analysis.summary import main
    names = ["k10_pfm_fv", "k10_centralized", "k10_solo_vgg"]
    table = as_dict(run_csv(main, [sweep / "runs" / n for n in names] + ["--metrics", "all"], tmp_path))
    for name in names:
        d = read_h5(sweep / "runs" / name / "log.h5")
        col = {q: v[name] for q, v in table.items()}
        assert int(col["rounds logged"]) == len(d["rounds/round"]) == ROUNDS
        assert int(col["last step"]) == d["rounds/step"][-1] == ROUNDS * 10
        wall = d["rounds/wall_time"][-1] - d["rounds/wall_time"][0] + d["rounds/round_time"][0]
        assert close(col["wall time (s)"], wall)
        ips = (d["rounds/images_per_s"] * d["rounds/round_time"]).sum() / d["rounds/round_time"].sum()
        assert close(col["images/s"], ips)
        assert close(col["data moved (GB)"], d["rounds/bytes_moved"].sum() / 1e9)
        for i, party in enumerate(d["parties"]):
            row = "union\u2020" if party == "centralized" else party
            losses = d["rounds/loss"][:, i]
            if np.all(np.isnan(losses)):
                assert col[f"loss {row} (last round)"] == ""
                continue
            assert close(col[f"loss {row} (last round)"], losses[~np.isnan(losses)][-1])
            assert close(col[f"loss {row} (EMA 0.99)"], ema_reference(losses, 0.99))
        for s in VAL_SETS:
            for metric in ("accuracy", "tar_far_1e-3", "tar_far_1e-2"):
                values = d[f"eval/{s}/{metric}"]
                assert close(col[f"{s} {metric} (final)"], values[-1])
                assert close(col[f"{s} {metric} (best)"], values.max())
                assert int(col[f"{s} {metric} best at step"]) == d["eval/step"][np.argmax(values)]
            assert close(col[f"{s} accuracy_std (final)"], d[f"eval/{s}/accuracy_std"][-1])
    assert table["method"] == {"k10_pfm_fv": "PFM+FV", "k10_centralized": "Centralized", "k10_solo_vgg": "Solo"}
    assert table["setting"]["k10_pfm_fv"] == "K=10"            # from the sweep's index.json
    assert table["state (sweep index)"]["k10_solo_vgg"] == "COMPLETED"
    assert table["loss ms1m (last round)"]["k10_centralized"] == ""


def test_summary_text_and_markdown(sweep, capsys):
    from fedmpi.analysis.summary import main
    main([str(sweep / "runs" / "k10_centralized"), "--format", "md"])
    md = capsys.readouterr().out
    assert md.splitlines()[0] == "|  | k10_centralized |"
    assert "centralized: union loss" in md
    main([str(sweep / "runs" / "k10_pfm"), str(sweep / "runs" / "k20_pfm"), "--factor", "0.5"])
    text = capsys.readouterr().out
    assert text.splitlines()[0].split() == ["k10_pfm", "k20_pfm"]
    d = read_h5(sweep / "runs" / "k20_pfm" / "log.h5")
    line = next(l for l in text.splitlines() if l.startswith("loss ga (EMA 0.5)"))
    assert line.split()[-1] == f"{ema_reference(d['rounds/loss'][:, 1], 0.5):.4f}"


# ------------------------------------------------------------------ table1


def test_table1_is_the_papers_layout_with_smoothed_final_losses(sweep, tmp_path):
    from fedmpi.analysis.table1 import main
    rows = run_csv(main, [sweep], tmp_path)
    assert rows[0] == ["Setting", "Party", "Solo", "Centralized", "FedAvg", "PFM"]
    cells = {(r[0], r[1]): dict(zip(rows[0][2:], r[2:])) for r in rows[1:]}
    assert list(cells) == [(s, p) for s in ("K=10", "K=20") for p in (*PARTIES, "union\u2020")]

    def smoothed(folder, party):
        d = read_h5(sweep / "runs" / folder / "log.h5")
        return ema_reference(d["rounds/loss"][:, d["parties"].index(party)], 0.99)

    for setting, prefix in (("K=10", "k10"), ("K=20", "k20")):
        for party in PARTIES:
            assert close(cells[(setting, party)]["FedAvg"], smoothed(f"{prefix}_fedavg", party))
            assert close(cells[(setting, party)]["PFM"], smoothed(f"{prefix}_pfm", party))
            assert cells[(setting, party)]["Centralized"] == ""
        assert close(cells[(setting, "union\u2020")]["Centralized"], smoothed(f"{prefix}_centralized", "centralized"))
    for party in PARTIES:   # each solo run fills the cell of the party it trained
        assert close(cells[("K=10", party)]["Solo"], smoothed(f"k10_solo_{party}", party))
        assert cells[("K=20", party)]["Solo"] == ""


def test_table1_footnotes_and_averaged_cells(sweep, capsys):
    from fedmpi.analysis.table1 import main
    main([str(sweep), "--methods", "PFM+FV,Centralized", "--format", "md"])
    md = capsys.readouterr().out
    lines = md.splitlines()
    assert lines[0] == "| Setting | Party | Centralized | PFM+FV |"
    assert "\u2020 centralized: union loss" in md
    assert "K=10 / ms1m / PFM+FV: mean of 2 runs" in md
    a = read_h5(sweep / "runs" / "k10_pfm_fv" / "log.h5")["rounds/loss"][:, 0]
    b = read_h5(sweep / "runs" / "k10_pfm_fv_seed1" / "log.h5")["rounds/loss"][:, 0]
    row = next(l for l in lines if l.startswith("| K=10 | ms1m |"))
    assert row.split("|")[4].strip() == f"{(ema_reference(a, 0.99) + ema_reference(b, 0.99)) / 2:.2f}"


# ------------------------------------------------------------------ relative (Fig. 4)


def final(folder_path: Path, val_set: str, metric: str = "accuracy") -> float:
    return float(read_h5(folder_path / "log.h5")[f"eval/{val_set}/{metric}"][-1])


def test_relative_subtracts_the_centralized_baseline_per_setting(sweep, tmp_path):
    from fedmpi.analysis.relative import main
    fig = tmp_path / "fig4.png"
    rows = run_csv(main, [sweep, "--fig", fig, "--pdf"], tmp_path)
    assert rows[0] == ["Setting", "Method", "runs", *VAL_SETS, "mean"]
    got = {(r[0], r[1]): r for r in rows[1:]}
    assert list(got) == [("K=10", m) for m in ("FedAvg", "FedAvg+FV", "FedAvg+FV moving-norm", "PFM", "PFM+FV",
                                               "PFM+FV moving-norm")] + [("K=20", m) for m in ("FedAvg", "PFM",
                                                                                                "PFM+FV")]
    for i, s in enumerate(VAL_SETS):
        base = final(sweep / "runs" / "k10_centralized", s)
        assert close(got[("K=10", "PFM")][3 + i], 100 * (final(sweep / "runs" / "k10_pfm", s) - base))
        fv_mean = (final(sweep / "runs" / "k10_pfm_fv", s) + final(sweep / "runs" / "k10_pfm_fv_seed1", s)) / 2
        assert close(got[("K=10", "PFM+FV")][3 + i], 100 * (fv_mean - base))
        assert close(got[("K=20", "FedAvg")][3 + i],
                     100 * (final(sweep / "runs" / "k20_fedavg", s) - final(sweep / "runs" / "k20_centralized", s)))
    assert got[("K=10", "PFM+FV")][2] == "2"
    assert_png(fig)
    assert fig.with_suffix(".pdf").stat().st_size > 1000


def test_relative_groups_by_setting_globs_and_by_config(sweep, tmp_path):
    from fedmpi.analysis.relative import main
    rows = run_csv(main, [sweep, "--setting", "short=*k10_*", "--metric", "tar_far_1e-3", "--at", "best",
                          "--fig", tmp_path / "a.png"], tmp_path)
    assert {r[0] for r in rows[1:]} == {"short"}
    best = lambda f, s: read_h5(sweep / "runs" / f / "log.h5")[f"eval/{s}/tar_far_1e-3"].max()
    row = next(r for r in rows if r[1] == "FedAvg")
    assert close(row[3], 100 * (best("k10_fedavg", "lfw") - best("k10_centralized", "lfw")))
    # no index, no --setting: settings implied by the configs; the centralized run serves both K
    for f in ("k10_centralized", "k10_pfm", "k20_pfm"):
        (tmp_path / "loose" / f).mkdir(parents=True)
        (tmp_path / "loose" / f / "log.h5").write_bytes((sweep / "runs" / f / "log.h5").read_bytes())
    rows = run_csv(main, [tmp_path / "loose", "--fig", tmp_path / "b.png"], tmp_path)
    assert [(r[0], r[1]) for r in rows[1:]] == [("IR-18-AF, 3-party, K=10", "PFM"),
                                                 ("IR-18-AF, 3-party, K=20", "PFM")]
    base = final(sweep / "runs" / "k10_centralized", "lfw")
    assert close(rows[2][3], 100 * (final(sweep / "runs" / "k20_pfm", "lfw") - base))


# ------------------------------------------------------------------ weights (Fig. 6 and Fig. 5)


def test_weights_trace_and_norm_comparison(sweep, tmp_path):
    from fedmpi.analysis.weights import main
    fig6, fig5 = tmp_path / "w.png", tmp_path / "n.png"
    out = tmp_path / "weights.csv"
    main([str(sweep), "--fig", str(fig6), "--norm-fig", str(fig5), "--format", "csv", "--out", str(out)])
    first, second = out.read_text().split("\n\n")
    rows = [r for r in csv.reader(io.StringIO(first)) if r and not r[0].startswith("#")]
    assert rows[0] == ["Run", "Method", "Party", "w start", "w last", "at step", "w max", "max at step"]
    fv_runs = [f for f, *_, it in SWEEP_RUNS if it]
    assert sorted({r[0] for r in rows[1:]}) == sorted(fv_runs)
    for r in rows[1:]:
        d = read_h5(sweep / "runs" / r[0] / "log.h5")
        i = d["parties"].index(r[2])
        last_row = np.flatnonzero(d["fv/round"] == d["fv/round"].max())[-1]
        assert close(r[3], d["fv/candidates"][0, 0, i]) and close(r[3], 1 / 3)
        assert close(r[4], d["fv/w"][last_row, i])
        assert int(r[5]) == d["rounds/step"][d["fv/round"][last_row]]
    norms = [r for r in csv.reader(io.StringIO(second)) if r and not r[0].startswith("#")]
    assert norms[0] == ["Setting", "Method", "FV norm", "runs", *VAL_SETS]
    got = {(r[0], r[1], r[2]): r for r in norms[1:]}
    assert set(got) == {("K=10", "FedAvg+FV", "Local Norm"), ("K=10", "FedAvg+FV", "Moving Norm"),
                        ("K=10", "PFM+FV", "Local Norm"), ("K=10", "PFM+FV", "Moving Norm"),
                        ("K=20", "PFM+FV", "Local Norm")}
    for i, s in enumerate(VAL_SETS):
        moving = final(sweep / "runs" / "k10_pfm_fv_moving", s)
        assert close(got[("K=10", "PFM+FV", "Moving Norm")][4 + i], 100 * moving)
        local = (final(sweep / "runs" / "k10_pfm_fv", s) + final(sweep / "runs" / "k10_pfm_fv_seed1", s)) / 2
        assert close(got[("K=10", "PFM+FV", "Local Norm")][4 + i], 100 * local)
    assert_png(fig6)
    assert_png(fig5)


def test_weights_needs_fv_runs(sweep, capsys):
    from fedmpi.analysis.run_log import cli
    from fedmpi.analysis.weights import main
    assert cli(main, [str(sweep / "runs" / "k10_pfm")]) == 2
    assert capsys.readouterr().err == ("error: no run has FV iterations in its log (only runs with "
                                       "fv.enabled=true have them)\n")


# ------------------------------------------------------------------ curves


def test_curves_figure_and_plotted_data(sweep, tmp_path):
    from fedmpi.analysis.curves import main
    fig, data = tmp_path / "curves.png", tmp_path / "curves.csv"
    runs = [sweep / "runs" / "k10_pfm", sweep / "runs" / "k10_centralized", sweep / "runs" / "k10_solo_vgg"]
    main([*map(str, runs), "--fig", str(fig), "--pdf", "--data", str(data), "--smooth", "0.9", "--sets", "lfw,calfw"])
    assert_png(fig)
    assert fig.with_suffix(".pdf").stat().st_size > 1000
    rows = list(csv.DictReader(data.open()))
    pfm = read_h5(sweep / "runs" / "k10_pfm" / "log.h5")
    ga = [r for r in rows if (r["run"], r["panel"], r["series"]) == ("k10_pfm", "loss", "ga")]
    assert [int(r["step"]) for r in ga] == list(pfm["rounds/step"])
    assert all(close(r["value"], v) for r, v in zip(ga, pfm["rounds/loss"][:, 1]))
    assert close(ga[-1]["smoothed"], ema_reference(pfm["rounds/loss"][:, 1], 0.9))
    lfw = [r for r in rows if (r["run"], r["panel"]) == ("k10_pfm", "lfw")]
    assert [int(r["step"]) for r in lfw] == list(pfm["eval/step"])
    assert all(close(r["value"], 100 * v) for r, v in zip(lfw, pfm["eval/lfw/accuracy"]))
    series = {(r["run"], r["series"]) for r in rows if r["panel"] == "loss"}
    assert ("k10_centralized", "union") in series
    assert {s for run, s in series if run == "k10_solo_vgg"} == {"vgg"}   # parties it never trained are left out
    assert {r["panel"] for r in rows} == {"loss", "update_norm", "lfw", "calfw"}
    drift = [r for r in rows if (r["run"], r["panel"], r["series"]) == ("k10_pfm", "update_norm", "ga")]
    assert all(close(r["value"], v) for r, v in zip(drift, pfm["rounds/update_norm"][:, 1])) and len(drift) == len(ga)


# ------------------------------------------------------------------ the tools on a real run


# 3 parties of one rank each, 3 rounds of K=5 (server + 3 trainer ranks): FedFace (PFM + FV, one FV iteration
# per round) and its centralized baseline, made in the session's one launch of shared runs (tests/support/shared_runs.py).
# The FedFace run also serves the single-run tools (summary, table1, curves).
REAL_RUN = ["--config", "configs/demo_cpu.yaml", "optim.epochs=1", "optim.steps_per_epoch=15", "fed.K=5",
            "optim.milestones=[]", "parties.ms1m.ranks=1", "parties.ms1m.data.identities=16",
            "parties.ga.data.identities=16", "parties.vgg.data.identities=16", "data.val_sets=[lfw,cfp_fp]",
            "data.val_pairs_per_fold=10"]
declare("fedface", [*REAL_RUN, "fv.enabled=true", "fv.iterations_per_round=1"])
declare("central", [*REAL_RUN, "fed.algorithm=centralized", "fv.enabled=false"])


@pytest.fixture(scope="session")
def real_fv_runs(shared_runs, tmp_path_factory) -> Path:
    """The two real runs, copied into a folder of their own (the tools are given that folder)."""
    root = tmp_path_factory.mktemp("real_fv")
    for name in ("fedface", "central"):
        shutil.copytree(shared_runs[name], root / name)
    return root


def test_tools_on_a_real_run(real_fv_runs, tmp_path):
    from fedmpi.analysis import curves, summary, table1
    real_run = real_fv_runs / "fedface"
    d = read_h5(real_run / "log.h5")
    assert d["parties"] == PARTIES and len(d["rounds/round"]) == 3
    col = {q: v["fedface"] for q, v in as_dict(run_csv(summary.main, [real_run], tmp_path)).items()}
    assert col["method"] == "PFM+FV" and int(col["rounds logged"]) == 3 and int(col["last step"]) == 15
    assert int(col["rounds planned"]) == 3
    assert close(col["images/s"], (d["rounds/images_per_s"] * d["rounds/round_time"]).sum()
                 / d["rounds/round_time"].sum())
    rows = run_csv(table1.main, [real_run, "--methods", "PFM+FV"], tmp_path, "t1.csv")
    assert rows[0] == ["Setting", "Party", "PFM+FV"]
    assert len(rows) == 4
    for row, i in zip(rows[1:], range(3)):
        assert row[:2] == ["IR-18-AF, 3-party, K=5", PARTIES[i]]
        assert close(row[2], ema_reference(d["rounds/loss"][:, i], 0.99))
    curves.main([str(real_run), "--fig", str(tmp_path / "real.png")])
    assert_png(tmp_path / "real.png")


def test_relative_and_weights_on_real_fedface_and_centralized_runs(real_fv_runs, tmp_path):
    from fedmpi.analysis import relative, weights
    fedface, central = read_h5(real_fv_runs / "fedface" / "log.h5"), read_h5(real_fv_runs / "central" / "log.h5")
    assert len(fedface["fv/w"]) >= 1
    rows = run_csv(relative.main, [real_fv_runs], tmp_path, "rel.csv")
    header, row = rows[0], rows[1]
    assert row[1] == "PFM+FV"
    for name in ("lfw", "cfp_fp"):
        expected = 100 * (fedface[f"eval/{name}/accuracy"][-1] - central[f"eval/{name}/accuracy"][-1])
        assert close(row[header.index(name)], expected, tol=1e-6)
    rows = run_csv(weights.main, [real_fv_runs / "fedface"], tmp_path, "w.csv")
    header = rows[0]
    for i, party in enumerate(PARTIES):
        (row,) = [r for r in rows[1:] if r[:3] == ["fedface", "PFM+FV", party]]
        assert close(row[header.index("w last")], fedface["fv/w"][-1][i])
    relative.main([str(real_fv_runs), "--fig", str(tmp_path / "rel.png")])
    assert_png(tmp_path / "rel.png")


# ------------------------------------------------------------------ reading a log while it is written

WRITER = textwrap.dedent("""
    import sys
    import numpy as np
    from fedmpi.config import load_config, to_yaml
    from fedmpi.store.h5log import RunLog
    cfg = load_config("configs/demo_cpu.yaml")
    log = RunLog(sys.argv[1], config_yaml=to_yaml(cfg), algorithm="pfm", run_name="live",
                 parties=["ms1m", "ga", "vgg"], val_sets=["lfw"])
    print("ready", flush=True)
    for line in sys.stdin:
        cmd, *arg = line.split()
        n = log.f["rounds/round"].shape[0]
        if cmd == "round":
            log.append("rounds", round=n, step=(n + 1) * 10, lr=0.1, wall_time=n + 1.0, round_time=1.0,
                       images_per_s=100.0, bytes_moved=10, bytes_up=4, bytes_down=4, bytes_intra=2, fv_iterations=0,
                       loss=np.array([n + 1.0, n + 2.0, n + 3.0]),
                       party_images_per_s=np.ones(3), update_norm=np.ones(3), uploads_excluded=np.zeros(3, np.int64))
        elif cmd == "partial":   # what a reader can meet mid-append: some columns one row longer
            for name in ("round", "step", "loss"):
                ds = log.f["rounds/" + name]
                ds.resize(n + 1, axis=0)
                ds.flush()
        elif cmd == "close":
            log.close()
        print("ok", flush=True)
""")


def test_tools_read_a_log_while_the_run_writes_it(tmp_path, capsys):
    from fedmpi.analysis.run_log import AnalysisError
    from fedmpi.analysis.summary import main
    path = tmp_path / "live" / "log.h5"
    writer = subprocess.Popen([sys.executable, "-c", WRITER, str(path)], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True, cwd=ROOT,
                              env={**__import__("os").environ, "PYTHONPATH": str(ROOT)})
    try:
        assert writer.stdout.readline().strip() == "ready"

        def tell(cmd):
            writer.stdin.write(cmd + "\n")
            writer.stdin.flush()
            assert writer.stdout.readline().strip() == "ok"

        def summary() -> dict:
            main([str(path.parent), "--format", "csv"])
            rows = [r for r in csv.reader(io.StringIO(capsys.readouterr().out)) if r and not r[0].startswith("#")]
            return {q: v["live"] for q, v in as_dict(rows).items()}

        with pytest.raises(AnalysisError, match="no log.h5"):  # a new log takes its name at its first row
            summary()
        for n in (1, 2, 3):
            tell("round")
            s = summary()
            assert s["rounds logged"] == str(n) and s["loss vgg (last round)"] == f"{n + 2.0:.10g}"
            assert close(s["loss ms1m (EMA 0.99)"], ema_reference(np.arange(1.0, n + 1), 0.99))
        tell("partial")
        assert summary()["rounds logged"] == "3"      # the half-written row is not read
        tell("close")
    finally:
        writer.stdin.close()
        writer.wait(timeout=30)
    assert writer.returncode == 0


# ------------------------------------------------------------------ errors and help


def run_tool(module: str, *args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", f"fedmpi.analysis.{module}", *map(str, args)], capture_output=True,
                          text=True, cwd=ROOT, timeout=120)


def test_a_log_of_another_schema_version_is_refused(sweep, tmp_path):
    log = tmp_path / "old" / "log.h5"
    log.parent.mkdir()
    log.write_bytes((sweep / "runs" / "k10_pfm" / "log.h5").read_bytes())
    with h5py.File(log, "r+") as f:
        f.attrs["schema_version"] = 2
    proc = run_tool("summary", log.parent)
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr == f"error: {log}: log schema version 2, this fedmpi reads version 1\n"


@pytest.mark.parametrize("args, message", [
    (["{tmp}/nothing"], "{tmp}/nothing: no such log file or folder"),
    (["{tmp}"], "{tmp}: no log.h5 in this folder or below it"),
    (["{tmp}/notes.txt"], "{tmp}/notes.txt: not a readable fedmpi log"),
    (["{sweep}", "--setting", "oops"], "--setting 'oops': expected NAME=GLOB"),
    (["{sweep}", "--setting", "x=*nomatch*"], "--setting: no run matches any of the globs (*nomatch*)"),
])
def test_bad_input_gives_one_line_and_status_2(sweep, tmp_path, capsys, args, message):
    from fedmpi.analysis.run_log import cli
    from fedmpi.analysis.table1 import main
    (tmp_path / "notes.txt").write_text("not hdf5")
    assert cli(main, [a.format(tmp=tmp_path, sweep=sweep) for a in args]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: " + message.format(tmp=tmp_path, sweep=sweep)) and err.count("\n") == 1


@pytest.mark.parametrize("module", ["summary", "table1", "relative", "weights", "curves"])
def test_every_command_has_help(module, capsys):
    main = __import__(f"fedmpi.analysis.{module}", fromlist=["main"]).main
    with pytest.raises(SystemExit) as exit_info:
        main(["--help"])
    assert exit_info.value.code == 0
    assert f"python -m fedmpi.analysis.{module}" in capsys.readouterr().out


def test_ema_is_initialised_with_the_first_value_and_skips_gaps():
    from fedmpi.analysis.tables import ema
    assert ema([4.0, 2.0, np.nan, 0.0], 0.5).tolist() == [4.0, 3.0, 3.0, 1.5]
    np.testing.assert_allclose(ema([[np.nan, 1.0], [2.0, 3.0]], 0.99), [[np.nan, 1.0], [2.0, 1.02]], rtol=1e-12)


def test_figures_go_beside_their_input_unless_told_otherwise(tmp_path):
    from fedmpi.analysis.plots import beside_input

    run = tmp_path / "sweep" / "run"
    run.mkdir(parents=True)
    (run / "log.h5").write_bytes(b"")
    assert beside_input(None, [str(tmp_path / "sweep")], "w.png") == tmp_path / "sweep" / "w.png"
    assert beside_input(None, [str(run / "log.h5")], "c.png") == run / "c.png"
    assert beside_input("x/y.png", [str(run)], "c.png") == Path("x/y.png")


def test_every_rule_and_baseline_has_a_label_and_a_colour():
    from fedmpi.algorithms.registry import RULES, SINGLE_PARTY_SETTINGS
    from fedmpi.analysis.methods import LABELS, method_color, method_label

    assert sorted(set(RULES) | set(SINGLE_PARTY_SETTINGS)) == sorted(LABELS)
    assert method_label("centralized pfm") == ("Centralized PFM", "#000000")
    assert method_label("solo") == ("Solo", "#7f7f7f")
    assert method_label("pfm") == ("PFM", "#ff7f0e")
    assert method_color("PFM+FV") == "#994c08"     # FV: the rule's colour, darker
    assert method_label("unknown-rule") == ("unknown-rule", "#7f7f7f")
