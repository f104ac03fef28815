"""A phone per person at CPU scale, from one command (`make faces-devices-cpu`; docs/results/faces-devices-cpu/):
a public pretraining (configs/public_pretrain.yaml, the synthetic public identities, shrunk to the device model),
exported as the start (tools.export), then the face clients of configs/faces_devices.yaml from that start (SCALES: a
client's local epochs and lr), two seeds paired (the same start and data; a seed draws the clients of each round
and their batches):
  - one identity a client, BatchNorm by Θ's running statistics (clients.batch_norm=frozen, the default):
    positive-only FedAvg and FedAwS in FedFR's form (20 momentum steps);
  - PrivacyFace on albums of ALBUM identities (the same identities, M / ALBUM clients);
  - one identity a client, BatchNorm by the client's own batch (clients.batch_norm=batch), where the rows collapse:
    positive-only FedAvg, FedAwS's one paper step at a λ where it acts (PAPER_LAMBDA), FedAwS in FedFR's form on
    every row and on the round's rows alone (fed.options.rows=cohort, FedFR's code).
The paper's one step at the config's λ = 1 is not an arm: at λη = 0.1 over the mean of C(C − 1) pairs it moved W too
little to tell from positive-only FedAvg (with BatchNorm frozen: the same accuracy and IJB-C, W's cosine within 4e-5,
in both seeds).
Each run's log gives the verification of Θ on the held-out pair sets and the synthetic IJB-C after its first and
last round, W's mean pairwise cosine per round (the collapse curve) and the bytes a round moves per sampled client;
the start itself is evaluated on the same folds and IJB-C by tools.evaluate. The report is report.md beside the
runs. With --lock FILE each run holds FILE only while it runs.

    python -m jobs.faces_devices_study --folder docs/results/faces-devices-cpu [--scale cpu|tiny] [--lock FILE]
    python -m jobs.faces_devices_study --folder docs/results/faces-devices-cpu --report-only OUT
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

from fedmpi.protocols.fixtures import IJB_FOLDERS
from fedmpi.analysis.faces_devices_results import IJB, IJB_FAR, start_summary, summary
from jobs.local import LockHolder
from jobs.mpirun import mpirun
from jobs.one_launch import last_run

MODEL = ["model.backbone=ir18", "model.width=0.25", "model.embedding_size=128", "data.image_size=32",
         "data.workers=0", "run.device=cpu"]
# public identities x images, pretraining steps; clients, images each, rounds, fraction; a client's local epochs
# and lr. At the cpu scale a client's 6 images are one batch, so E = 10 epochs are 10 local steps at lr 0.1: with
# one step at lr 0.01 (Aggarwal's E = 1 on these few images) W's mean cosine stayed at 0.10 for 30 rounds, no pair
# above τ = 0.4, and FedAwS equalled FedAvg; with 10 steps at 0.1 and BatchNorm by the client's batch positive-only
# FedAvg collapses (0.10 -> 0.69 over 30 rounds; with BatchNorm frozen, the default, it drifts to 0.13:
# docs/results/faces-devices-cpu/report.md), the whole study about 25 minutes on 2 cores; pairs: held-out pairs a fold
SCALES = {
    "cpu": {"public": (200, 10), "steps": 600, "clients": 500, "images": 6, "rounds": 30, "fraction": 0.1,
            "epochs": 10, "lr": 0.1, "seeds": (0, 1), "pairs": 40},
    "tiny": {"public": (20, 4), "steps": 4, "clients": 8, "images": 2, "rounds": 2, "fraction": 0.5,
             "epochs": 1, "lr": 0.01, "seeds": (0,), "pairs": 10},
}
ALBUM = 4               # identities of a PrivacyFace client (a personal album)
BATCH_BN = "clients.batch_norm=batch"
# one plain step as long as FedFR's 20 momentum steps of 10η would go under a constant gradient:
# 10 · Σ_{t ≤ 20} (1 − 0.9^t) / (1 − 0.9) ≈ 1,210 η
PAPER_LAMBDA = 1210
METHODS = {    # name: (label, overrides, identities a client)
    "fedavg": ("Positive-only FedAvg", ["fed.algorithm=fedavg", "fed.options={}"], 1),
    "fedaws-fedfr": ("FedAwS (FedFR's 20 momentum steps)", ["fed.algorithm=fedaws", "fed.options.mode=fedfr"], 1),
    # its margin softmax at s = 64 takes Aggarwal's lr 0.01 and one epoch (the config's): 10 steps at 0.1 cost it
    # 9 points of verification in round 1
    "privacyface": (f"PrivacyFace on albums of {ALBUM} (E = 1, lr 0.01)",
                    ["fed.algorithm=privacyface", "fed.options={}", f"clients.identities_per_client={ALBUM}",
                     "clients.epochs=1", "optim.lr=0.01"], ALBUM),
    "fedavg-batchbn": ("Positive-only FedAvg, BatchNorm by batch", ["fed.algorithm=fedavg", "fed.options={}",
                                                                   BATCH_BN], 1),
    "fedaws-paper-batchbn": (f"FedAwS (one paper step, λ = {PAPER_LAMBDA:,}), BatchNorm by batch",
                             ["fed.algorithm=fedaws", "fed.options.mode=paper",
                              f"fed.options.lr_scale={PAPER_LAMBDA}", BATCH_BN], 1),
    "fedaws-fedfr-batchbn": ("FedAwS (FedFR's form), BatchNorm by batch", ["fed.algorithm=fedaws",
                                                                          "fed.options.mode=fedfr", BATCH_BN], 1),
    "fedaws-cohort-batchbn": ("FedAwS (FedFR's form, the round's rows alone), BatchNorm by batch",
                              ["fed.algorithm=fedaws", "fed.options.mode=fedfr", "fed.options.rows=cohort",
                               BATCH_BN], 1),
}


def launch(n: int, args: list[str], lock: str | None, what: str) -> None:
    with LockHolder(lock):          # held for this run only
        out = mpirun(n, ["-m", "fedmpi.run", *args], timeout=3600)
    if out.returncode != 0:
        sys.exit(f"{what} failed (exit {out.returncode}):\n{out.stdout[-1500:]}{out.stderr[-1500:]}")


def pretrain(folder: Path, s: dict, lock: str | None) -> Path:
    """The public model, exported as folder/start/init.pth (reused when there)."""
    start = folder / "start" / "init.pth"
    if start.is_file():
        return start
    ids, per = s["public"]
    launch(2, ["--config", "configs/public_pretrain.yaml", *MODEL, f"parties.public.data.identities={ids}",
               f"parties.public.data.images_per_identity={per}", f"optim.steps_per_epoch={s['steps']}",
               "optim.epochs=1", "optim.milestones=[]", "fed.K=" + str(max(s["steps"] // 4, 1)), "eval.every=0",
               f"data.root={folder / 'data'}", f"log.dir={folder / 'runs'}", "log.name=pretrain"], lock, "pretraining")
    start.parent.mkdir(parents=True, exist_ok=True)
    subprocess.run([sys.executable, "-m", "tools.export", str(folder / "runs" / "pretrain"), "--out", str(start)],
                   check=True, capture_output=True)
    return start


def run_log(folder: Path, name: str, seed: int) -> Path:
    return folder / "runs" / f"{name}-seed{seed}" / "log.h5"


def device_args(folder: Path, s: dict, start: Path, name: str, seed: int) -> list[str]:
    """fedmpi.run's arguments for method `name` at `seed`."""
    M, album = s["clients"], METHODS[name][2]
    return ["--config", "configs/faces_devices.yaml", *MODEL, f"model.init={start}",
            f"clients.population={M // album}", f"clients.faces.identities={M}",
            f"clients.faces.images_per_identity={s['images']}", f"clients.rounds={s['rounds']}",
            f"clients.fraction={s['fraction']}", f"clients.epochs={s['epochs']}", f"optim.lr={s['lr']}",
            f"eval.every={s['rounds']}", f"eval.sets.{IJB}=synthetic", f"run.seed={seed}",
            f"data.val_pairs_per_fold={s['pairs']}", f"clients.sampler_seed={seed}", f"data.root={folder / 'data'}", f"log.dir={folder / 'runs'}", f"log.name={name}-seed{seed}",
            *METHODS[name][1]]     # the method's overrides last: they win


def device_runs(folder: Path, s: dict, start: Path, names: list[tuple[str, int]], lock: str | None) -> None:
    """The runs of `names` (method, seed) not already in the folder, one after the other in one launch of 3 ranks
    (jobs/one_launch.py: one start-up of torch and MPI for all; each run holds `lock` only while it runs)."""
    plan = [device_args(folder, s, start, n, seed) for n, seed in names if not run_log(folder, n, seed).is_file()]
    if not plan:
        return
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "plan.json").write_text(json.dumps(plan))
        out = mpirun(3, ["-m", "jobs.one_launch", str(Path(tmp) / "plan.json"), *(["--lock", lock] if lock else [])],
                     timeout=3600 * len(plan))
    if out.returncode != 0:
        run = last_run(out.stdout).rpartition("log.name=")[2].partition(" ")[0] or "the device runs' launch"
        sys.exit(f"{run} failed (exit {out.returncode}):\n{out.stdout[-1500:]}{out.stderr[-1500:]}")


def evaluate_start(folder: Path, start: Path) -> Path:
    """The start itself on the runs' held-out folds and synthetic IJB-C (written under data/ by the first run), by
    tools.evaluate into start/eval (kept: the report is rewritten from it): the runs' round-1 numbers are already one
    round of training away from the start."""
    data, out = folder / "data", folder / "start" / "eval"
    if not (out / f"{IJB}.h5").is_file():
        pairs = sorted(next(data.glob("val-*")).glob("*.bin"))
        ijb = next(data.glob(f"{IJB}-*")) / IJB_FOLDERS[IJB]
        subprocess.run([sys.executable, "-m", "tools.evaluate", str(start), "--pairs", *map(str, pairs), "--folds",
                        "held-out", "--fv-folds", "first", f"--{IJB}", str(ijb), "--out", str(out)],
                       check=True, capture_output=True)
    return out


def mean_of(results: dict, name: str, key) -> float:
    """The mean over the seeds of `key(summary)` for method `name`."""
    return float(np.mean([key(r) for (n, _), r in results.items() if n == name]))


def findings(results: dict, start: dict) -> list[str]:
    """The report's first lines: what the runs show and what they do not, from their numbers (seed means)."""
    def cos(name, at):
        return mean_of(results, name, lambda r: r["cosine"][at])

    def gain(name):
        return 100 * (mean_of(results, name, lambda r: r["last"]) - start["accuracy"])

    spreads = {n: cos(n, -1) for n in ("fedaws-paper-batchbn", "fedaws-fedfr-batchbn", "fedaws-cohort-batchbn")}
    collapses = {bn: cos(name, -1) > 2 * cos(name, 0) for bn, name in (("batch", "fedavg-batchbn"), ("frozen", "fedavg"))}
    held = [n for n in spreads if spreads[n] < cos("fedavg-batchbn", -1) / 2]
    above = [n for n in spreads if gain(n) > gain("fedavg-batchbn")]
    return [
        "What the runs show (means over the seeds; a collapse: W's mean pairwise cosine more than doubles):", "",
        f"- With BatchNorm by the client's batch (`clients.batch_norm=batch`) positive-only FedAvg's W "
        f"{'collapses' if collapses['batch'] else 'does not collapse'}: its mean pairwise cosine goes from "
        f"{cos('fedavg-batchbn', 0):.3f} to {cos('fedavg-batchbn', -1):.3f} in "
        f"{len(results[('fedavg', 0)]['cosine'])} rounds; FedAwS ends at "
        + ", ".join(f"{spreads[n]:.3f} ({label(n)})" for n in spreads)
        + f": {len(held)} of its {len(spreads)} forms hold W below half of FedAvg's.",
        f"- With BatchNorm frozen (the default) positive-only FedAvg's W "
        f"{'collapses' if collapses['frozen'] else 'does not collapse'}: {cos('fedavg', 0):.3f} to "
        f"{cos('fedavg', -1):.3f} (FedAwS in FedFR's form: {cos('fedaws-fedfr', 0):.3f} to "
        f"{cos('fedaws-fedfr', -1):.3f}); a weaker start or longer runs were not tried.",
        f"- Held-out accuracy against the start (points): positive-only FedAvg {gain('fedavg'):+.2f} with BatchNorm "
        f"frozen, {gain('fedavg-batchbn'):+.2f} by batch; FedAwS by batch "
        + ", ".join(f"{gain(n):+.2f} ({label(n)})" for n in spreads)
        + f": {len(above)} of its forms above positive-only FedAvg by batch.",
        "- Not run: FedAwS's one paper step at the config's λ = 1 (at λη = 0.1 on the mean over C(C − 1) pairs it "
        f"equalled positive-only FedAvg; the arm here takes λ = {PAPER_LAMBDA:,}).", ""]


def label(name: str) -> str:
    """A FedAwS arm's form: its label without the method's name and the BatchNorm setting."""
    return METHODS[name][0].split(", BatchNorm")[0].removeprefix("FedAwS (").removesuffix(")")


def report(results: dict, start: dict, s: dict) -> str:
    lines = [f"# A phone per person at CPU scale ({s['clients']} synthetic identities of {s['images']} images: "
             f"{s['clients']} one-identity clients, or {s['clients'] // ALBUM} albums of {ALBUM} for PrivacyFace; "
             f"{s['rounds']} rounds, fraction {s['fraction']}, {s['epochs']} local epochs at lr {s['lr']}; "
             f"`make faces-devices-cpu`)", "", *findings(results, start),
             f"Verification: mean held-out accuracy (%) over the pair sets, of the pretrained start (tools.evaluate, "
             f"the same folds) and of Θ after round 1 and after the last round; IJB-C: TAR (%) at FAR {IJB_FAR} on "
             f"the synthetic IJB-C, likewise. Collapse: W's mean pairwise cosine after round 1 and after the last "
             f"round (1: one point). The pretrained start: accuracy {100 * start['accuracy']:.2f}, IJB-C "
             f"{100 * start['ijb']:.2f}.", "",
             "| method | seed | accuracy round 1 | accuracy last | last − start | IJB-C round 1 | IJB-C last | "
             "last − start | cosine round 1 | cosine last | bytes per client and round |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for (name, seed), r in results.items():
        lines.append(f"| {METHODS[name][0]} | {seed} | {100 * r['first']:.2f} | {100 * r['last']:.2f} | "
                     f"{100 * (r['last'] - start['accuracy']):+.2f} | {100 * r['ijb_first']:.2f} | "
                     f"{100 * r['ijb_last']:.2f} | {100 * (r['ijb_last'] - start['ijb']):+.2f} | "
                     f"{r['cosine'][0]:.3f} | {r['cosine'][-1]:.3f} | {r['bytes_per_client']:,.0f} |")
    lines += ["", "Collapse curves (mean pairwise cosine per round):", ""]
    lines += [f"- {METHODS[n][0]}, seed {seed}: " + " ".join(f"{c:.3f}" for c in r["cosine"])
              for (n, seed), r in results.items()]
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--folder", required=True)
    parser.add_argument("--scale", choices=sorted(SCALES), default="cpu")
    parser.add_argument("--lock", default=None, help="a file each run holds (flock) only while it runs")
    parser.add_argument("--report-only", metavar="OUT", default=None,
                        help="write OUT/report.md from the folder's logs and start/eval alone (nothing runs)")
    args = parser.parse_args(argv)
    folder, s = Path(args.folder), SCALES[args.scale]
    names = [(name, seed) for seed in s["seeds"] for name in METHODS]
    if args.report_only:
        missing = [f"{n}-seed{seed}" for n, seed in names if not run_log(folder, n, seed).is_file()]
        if missing or not (folder / "start" / "eval" / f"{IJB}.h5").is_file():
            sys.exit(f"--report-only: {folder} lacks {', '.join(missing) or 'start/eval'}: run the study first")
        out = Path(args.report_only)
        out.mkdir(parents=True, exist_ok=True)
        results = {(n, seed): summary(run_log(folder, n, seed)) for n, seed in names}
        (out / "report.md").write_text(report(results, start_summary(folder / "start" / "eval"), s))
        return 0
    start = pretrain(folder, s, args.lock)
    device_runs(folder, s, start, names, args.lock)
    results = {(n, seed): summary(run_log(folder, n, seed)) for n, seed in names}
    start_numbers = start_summary(evaluate_start(folder, start))
    (folder / "report.md").write_text(report(results, start_numbers, s))
    (folder / "results.json").write_text(json.dumps({"start": start_numbers,
                                                     **{f"{n}/{seed}": r for (n, seed), r in results.items()}}))
    print((folder / "report.md").read_text())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
