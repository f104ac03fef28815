"""`python -m jobs.reproduce fedface`: the study's plan at CPU scale, and the whole command at its tiny
scale (3 runs of 4 ranks under mpirun: centralized, FedFace, FedFace with one party's labels shuffled), whose
results file must hold every table with the numbers of the HDF5 logs it was made from."""
from __future__ import annotations

import json
import re
import subprocess
import sys

import numpy as np
import pytest

from fedmpi.config import load_config
from fedmpi.store.h5log import LogReader
from jobs.executor import layout_of
from jobs.fedface_study import SCALES, study
from jobs.site import ROOT
from jobs.mpirun import mpi_env

SECTIONS = ("## The study", "## Table 1", "## Fig. 4", "## Fig. 5", "## Fig. 6", "## Bad party",
            "## The paper's claims")


def test_the_cpu_study_runs_every_setting_at_k_4k_16k_with_two_seeds_at_k_and_16k_and_a_bad_party():
    runs = {r.name: r for r in study(SCALES["cpu"])}
    assert len(runs) == 39
    assert {"c-s1-fedavg", "c-s1-fedface"} <= set(runs) and "b-s1-fedavg" not in runs   # (a) and (c): 2 seeds
    ks = {name: load_config(ROOT / r.config, list(r.overrides)).fed.K for name, r in runs.items()}
    assert (ks["a-fedavg"], ks["b-fedavg"], ks["c-fedavg"], ks["f-fedface"]) == (4, 16, 64, 4)
    assert {"a-s1-centralized", "a-s1-fedface"} <= set(runs) and "b-centralized" not in runs
    assert runs["a-centralized"].labels["fig4"] == ["a", "b", "c", "f"]   # K does not change one party's run
    assert "parties.ga.data.shuffle_labels=true" in runs["a-fedface-shuffled-ga"].overrides
    assert runs["a-fedface-moving"].overrides[-1] == "fv.norm=moving"
    twelve = load_config(ROOT / runs["f-pfm"].config, list(runs["f-pfm"].overrides))
    assert twelve.optim.batch_size * 12 == 32 * 3   # the 3-party layout's images per step
    assert layout_of(str(ROOT / runs["f-pfm"].config), list(runs["f-pfm"].overrides))["world"] == 13
    assert load_config(ROOT / runs["d-pfm"].config, list(runs["d-pfm"].overrides)).model.margin == 0.14


def test_bad_arguments_are_refused_in_one_line(tmp_path):
    for args, message in ((["--scale", "huge", "--folder", str(tmp_path)], "--scale 'huge': known scales of "
                                                                           "fedface: cpu, tiny"),
                          (["--report-only"], "--report-only needs --folder"),
                          (["--only", "zz", "--folder", str(tmp_path)], "--only zz: no run of the study matches")):
        out = subprocess.run([sys.executable, "-m", "jobs.reproduce", "fedface", *args], capture_output=True,
                             text=True, timeout=60, cwd=str(ROOT))
        assert out.returncode == 2 and message in out.stderr, out.stderr
    assert not any(tmp_path.iterdir())


def md_rows(text: str, heading: str) -> list[list[str]]:
    """The cells of the first Markdown table after `heading` (its header and rule left out)."""
    lines = text.split(heading, 1)[1].splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("|"))
    end = next((i for i in range(start, len(lines)) if not lines[i].startswith("|")), len(lines))
    return [[c.strip() for c in line.strip("|").split(" | ")] for line in lines[start + 2:end]]


def ema_final(values, factor: float) -> float:
    state = values[0]
    for v in values[1:]:
        state = factor * state + (1 - factor) * v
    return float(state)


def reproduce_tiny(root, out, *args):
    return subprocess.run([sys.executable, "-m", "jobs.reproduce", "fedface", "--scale", "tiny", "--folder",
                           str(root / "sweep"), "--out", str(out), "--timeout", "400", *args],
                          capture_output=True, text=True, timeout=900, env=mpi_env(), cwd=str(ROOT))


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    root = tmp_path_factory.mktemp("reproduce")
    out = root / "results" / "fedface_tiny.md"
    proc = reproduce_tiny(root, out)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    logs = {}
    for name in ("a-centralized", "a-fedface", "a-fedface-shuffled-ga"):
        with LogReader(root / "sweep" / "runs" / name / "log.h5") as log:
            logs[name] = {"parties": log.parties, "rounds": log.table("rounds"), "fv": log.table("fv"),
                          "eval": log.table("eval"), "sets": log.val_sets}
    return {"root": root, "text": out.read_text(), "out": out, "logs": logs, "index": json.loads((root / "sweep" / "index.json")
                                                                                  .read_text())}


def test_the_results_file_has_every_table_and_figure(tiny):
    text = tiny["text"]
    for section in SECTIONS:
        assert section in text, section
    for png in re.findall(r"!\[[^]]*\]\(([^)]+)\)", text):
        assert (tiny["out"].parent / png).stat().st_size > 0, png
    assert len(re.findall(r"!\[", text)) == 5     # Fig. 4, 5, 6, the bad party, the loss curves
    study = tiny["index"]["study"]
    assert study["wall_s"] > 0 and study["cpu_s"] > 0 and len(study["load_before"]) == 3
    assert f"**Wall time {study['wall_s'] / 60:.1f} min**" in text
    assert text.rstrip().endswith("<!-- hand-written below this line: kept when the file is regenerated -->")


def test_table1_is_the_smoothed_final_loss_of_each_log(tiny):
    rows = md_rows(tiny["text"], "## Table 1")
    fedface = tiny["logs"]["a-fedface"]
    for party in fedface["parties"]:
        row = next(r for r in rows if r[1] == party)
        loss = fedface["rounds"]["loss"][:, fedface["parties"].index(party)]
        assert float(row[3]) == round(ema_final(loss, 0.99 ** 2), 2), (row, loss)   # 0.99 per step, K = 2
    union = next(r for r in rows if r[1].startswith("union"))
    assert float(union[2]) == round(ema_final(tiny["logs"]["a-centralized"]["rounds"]["loss"][:, 0], 0.99 ** 2), 2)


def test_fig4_is_fedface_minus_centralized_per_set(tiny):
    row = md_rows(tiny["text"], "## Fig. 4")[0]
    fedface, central = tiny["logs"]["a-fedface"], tiny["logs"]["a-centralized"]
    assert row[:3] == ["a", "PFM+FV", "1"]
    for value, name in zip(row[3:], fedface["sets"]):
        expected = 100 * (fedface["eval"][f"{name}/accuracy"][-1] - central["eval"][f"{name}/accuracy"][-1])
        assert float(value) == pytest.approx(round(expected, 2), abs=0.006), name


def test_the_bad_party_weights_are_the_last_fv_weights(tiny):
    rows = md_rows(tiny["text"], "## Bad party")
    for name in ("a-fedface", "a-fedface-shuffled-ga"):
        log = tiny["logs"][name]
        for party, w in zip(log["parties"], log["fv"]["w"][-1]):
            row = next(r for r in rows if r[0] == name and r[2] == party)
            assert float(row[3]) == pytest.approx(1 / 3, abs=5e-5) and float(row[4]) == round(float(w), 4), row
    assert np.isclose(sum(float(r[4]) for r in rows if r[0] == "a-fedface-shuffled-ga"), 1.0, atol=2e-4)


def test_resume_runs_again_what_an_earlier_session_did_not_complete(tiny):
    """A run cut short leaves its log behind; --resume continues it (fedmpi.run --resume auto) instead of
    failing on the existing log, and keeps the completed runs as they are (last: it rewrites the tiny study)."""
    root, index_path = tiny["root"], tiny["root"] / "sweep" / "index.json"
    index = json.loads(index_path.read_text())
    cut = next(r for r in index["runs"] if r["name"] == "a-fedface-shuffled-ga")
    cut["state"] = "FAILED"
    index_path.write_text(json.dumps(index))
    log = root / "sweep" / "runs" / cut["name"] / "log.h5"
    log.write_bytes(log.read_bytes()[:4096])      # a rank killed mid-write leaves an unreadable log
    kept = {r["name"]: r["wall_s"] for r in index["runs"] if r["name"] != cut["name"]}
    proc = reproduce_tiny(root, tiny["out"], "--resume", "--lock", str(root / "heavy.lock"))
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    after = json.loads(index_path.read_text())
    # the lock says how runs shared a machine (a machine path), not what they computed: left out of the record
    assert after["study"]["sessions"][1]["command"].endswith("--timeout 400 --resume"), after["study"]["sessions"]
    rows = {r["name"]: r for r in after["runs"]}
    assert rows[cut["name"]]["state"] == "COMPLETED" and rows[cut["name"]]["args"] == ["--resume", "auto"]
    assert {n: rows[n]["wall_s"] for n in kept} == kept
    assert (log.parent / "log.attempt-1.h5").stat().st_size == 4096
    with LogReader(log) as reader:
        assert len(reader.table("rounds")["loss"]) == 3
    assert len(after["study"]["sessions"]) == 2 and after["study"]["sessions"][1]["runs"] == [cut["name"]]


def test_claims_in_a_setting_run_with_several_seeds_are_paired_on_the_seed():
    from fedmpi.analysis.fedface_claims import claims_table, paired_gaps, seed_noise

    def entry(setting, method, values):
        return {"setting": setting, "method": method, "sets": ["lfw", "cplfw"], "values": values}
    seeds = [entry("c seed 0", "FedAvg", [-4.0, -3.0]), entry("c seed 0", "PFM", [-1.0, -2.0]),
             entry("c seed 1", "FedAvg", [-1.0, 0.0]), entry("c seed 1", "PFM", [1.0, 0.0]),
             entry("a seed 0", "FedAvg", [0.0, 1.0]), entry("a seed 1", "FedAvg", [-1.0, -2.0])]
    assert paired_gaps(seeds, ("c", "PFM"), ("c", "FedAvg")) == [2.0, 1.0]
    assert paired_gaps(seeds, ("c", "Centralized"), ("c", "FedAvg")) == [3.5, 0.5]
    assert paired_gaps(seeds, ("a", "FedAvg"), ("c", "FedAvg")) == [4.0, -1.0]
    assert seed_noise(seeds) == 3.0            # (c) FedAvg: -3.5 vs -0.5; the spread a pairing removes
    results = [entry("a", "FedAvg", [-0.5, -0.5]), entry("c", "FedAvg", [-2.5, -1.5]), entry("c", "PFM", [0.0, -1.0])]
    rows = {(r[0], r[1]): r[2:] for r in claims_table(None, results, seeds, [], [], []).rows}
    assert rows[("(3) PFM above FedAvg", "c")] == ["+1.50 (per seed +2.00, +1.00)", "yes, in all 2 seeds"]
    assert rows[("(1) FedAvg at K of (a) above FedAvg at K of (c)", "a/c")] == [
        "+1.50 (per seed +4.00, -1.00)", "within seed noise (the sign changes between seeds)"]


def test_values_that_round_to_zero_are_written_without_a_sign():
    """Krum's influence of a never-chosen party is -1e-9 or so in float arithmetic: "0.00", not "-0.00"."""
    from fedmpi.analysis.fedface_claims import mean_half_range
    from fedmpi.analysis.tables import Table, render

    assert mean_half_range([-1e-9, -3e-9]) == "0.00 ± 0.00" and mean_half_range([-2e-9]) == "0.00"
    assert mean_half_range([-0.5, -0.25]) == "-0.38 ± 0.12"
    text = render(Table(header=["a", "b"], rows=[[-4e-7, -0.0041]], digits=3), "md")
    assert "| 0.000 | -0.004 |" in text, text
