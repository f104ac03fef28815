"""What the server learns, measured in every setting fedmpi offers, from one command (`make privacy-audit-cpu`;
docs/results/privacy-audit-cpu/): small runs from one pretrained start, each recording what its server received
(log.record_received), each audited by `python -m tools.audit` as the honest-but-curious server, one table
attack × setting and the reconstructions beside their originals (fedmpi/analysis/privacy_audit_results.py).

The start is the faces-devices study's public pretraining (jobs/faces_devices_study.py, the synthetic public
identities, none of them a participant's): the audit's evaluation model (model.init) that scores identity has not
seen the participants' data. Settings (SETTINGS): silo parties (FedAvg, PFM, FedAwS, FedFR; secure aggregation over
2, 3 and 6 parties; central DP and distributed DP at several z) and one identity per phone (positive-only FedAvg with
cohorts of 2, 4 and 8, FedAwS, PrivacyFace on albums). Membership in the silo is scored against held-out identities
of each party's style that the study writes with the parties' synthetic generator (nonmember_folders). An audit the
tool refuses for what the method sends (FedFR's: Setting.refused) is a finding: its one-line refusal is kept in
the audit's folder (refused.json) and shown in the table. With --lock FILE each run and each audit holds FILE only
while it runs; runs and audits already in the folder are reused.

    python -m jobs.privacy_audit_study --folder docs/results/privacy-audit-cpu [--scale cpu|tiny] [--lock FILE]
    python -m jobs.privacy_audit_study --folder docs/results/privacy-audit-cpu --only fedavg-phone-4
    python -m jobs.privacy_audit_study --folder docs/results/privacy-audit-cpu --report-only OUT
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from fedmpi.analysis.privacy_audit_results import write_report
from jobs.faces_devices_study import ALBUM
from jobs.faces_devices_study import METHODS as DEVICE_METHODS
from jobs.faces_devices_study import MODEL, launch, pretrain
from jobs.local import LockHolder

STYLES = ("ms1m", "ga", "vgg")
# public identities x images and pretraining steps (the start); a silo party's identities x images, its batch and
# K; the device population, images a client, a client's epochs and lr; rounds; the attack's optimisation steps
SCALES = {
    "cpu": {"public": (200, 10), "steps": 600, "party": (16, 8), "batch": 4, "K": 2, "rounds": 4,
            "clients": 16, "images": 4, "epochs": 2, "lr": 0.05, "iterations": 200, "tv": 0.01, "pairs": 20},
    "tiny": {"public": (20, 4), "steps": 4, "party": (4, 2), "batch": 2, "K": 1, "rounds": 2,
             "clients": 8, "images": 2, "epochs": 1, "lr": 0.01, "iterations": 2, "tv": 0.01, "pairs": 4},
}


@dataclass(frozen=True)
class Setting:
    label: str                              # what the table calls it
    place: str                              # "silo" | "phone"
    overrides: tuple[str, ...]              # the method's, applied last
    audits: tuple[tuple[str, ...], ...]     # each: tools.audit's arguments after RUN and --round
    parties: int = 3                        # silo parties
    cohort: int = 4                         # clients a round (phone)
    album: int = 1                          # identities a client (phone)
    refused: tuple[int, ...] = ()           # the audits whose refusal is the finding (the method sends nothing
                                            # the attack reads), kept as the table's row
    received: str = ""                      # what its server receives, for those rows


INVERT = ("--attack", "inversion")
ONE = (*INVERT, "--party", "p0")                      # one silo party's upload
SUM = (*INVERT, "--upload", "aggregate")              # Θ_after − Θ_before: under secure aggregation all there is
CLIENTS = (*INVERT, "--client", "all")                # each device client's upload of the round, apart
ROWS = ("--attack", "templates")                      # the class rows or clusters re-identified
MEMBERS = ("--attack", "membership", "--round", "LAST")   # on Θ after the run's last round (recorded too)
SILO_MEMBERS = (*MEMBERS, "--nonmembers", "HELDOUT")     # against held-out identities of the parties' styles
DP = ("fed.dp.enabled=true", "fed.dp.clip=1.0")
SECURE = ("fed.secure_aggregation.mode=secagg",)
# DP's noise multipliers: at clip C = 1 over 3 parties the mean's noise has norm about z/3 · sqrt(D) = 290 z
# (D = 767,872), against an update of norm at most 1; at z = 3 the model was destroyed in one round
Z = (0.01, 0.1, 1.0)
# FedFR (docs/BASELINES.md): the public set the start was trained on at every party, CosFace s = 30, m = 0.4; one
# local epoch a round over the party's images and its hard negatives (the authors' 10, 8, 6, 4, ... would make a
# round of these 4-image batches hundreds of steps)
FEDFR = ("fed.algorithm=fedfr", "model.head=cosface", "model.scale=30", "model.margin=0.4",
         "data.public.kind=synthetic", "fed.options.first_epochs=1", "fed.options.epoch_step=0",
         "fed.options.min_epochs=1")
SETTINGS = {
    "fedavg-silo": Setting("FedAvg, silo", "silo", ("fed.algorithm=fedavg",), (ONE, SILO_MEMBERS)),
    "secagg-2": Setting("FedAvg, secure aggregation over 2 parties", "silo", ("fed.algorithm=fedavg", *SECURE),
                        (SUM,), parties=2),
    "secagg-3": Setting("FedAvg, secure aggregation over 3 parties", "silo", ("fed.algorithm=fedavg", *SECURE),
                        (SUM,)),
    "secagg-6": Setting("FedAvg, secure aggregation over 6 parties", "silo", ("fed.algorithm=fedavg", *SECURE),
                        (SUM,), parties=6),
    **{f"cdp-z{z:g}": Setting(f"FedAvg, central DP z = {z:g}", "silo",
                              ("fed.algorithm=fedavg", *DP, f"fed.dp.noise_multiplier={z}"),
                              (SUM, SILO_MEMBERS) if z == 1 else (SUM,))
       for z in Z},
    **{f"ddp-z{z:g}": Setting(f"FedAvg, secure aggregation + distributed DP z = {z:g}", "silo",
                              ("fed.algorithm=fedavg", *SECURE, *DP, f"fed.dp.noise_multiplier={z}"), (SUM,))
       for z in Z},
    **{f"fedavg-phone-{c}": Setting(f"Positive-only FedAvg, a phone per person, cohort {c}", "phone",
                                    tuple(DEVICE_METHODS["fedavg"][1]),
                                    (CLIENTS, SUM, ROWS, MEMBERS) if c == 4 else (SUM,), cohort=c)
       for c in (2, 4, 8)},
    **{f"phone-cdp-z{z:g}": Setting(f"Positive-only FedAvg, a phone per person, cohort 4, central DP z = {z:g}",
                                    "phone", (*DEVICE_METHODS["fedavg"][1], *DP, f"fed.dp.noise_multiplier={z}"),
                                    (SUM, ROWS, MEMBERS) if z == 1 else (SUM,)) for z in Z},
    "pfm-silo": Setting("PFM, silo", "silo", ("fed.algorithm=pfm",), (ONE,)),
    "fedaws-silo": Setting("FedAwS, silo", "silo", ("fed.algorithm=fedaws",), (ROWS,)),
    "fedfr-silo": Setting("FedFR, silo", "silo", FEDFR, (ONE, ROWS, SILO_MEMBERS), refused=(0, 1),
                          received="each party's θ_k beside its weight (its images and hard negatives), in the clear"),
    "fedaws-phone": Setting("FedAwS (FedFR's form), a phone per person", "phone",
                            tuple(DEVICE_METHODS["fedaws-fedfr"][1]), (CLIENTS, ROWS, MEMBERS)),
    "privacyface-albums": Setting(f"PrivacyFace, albums of {ALBUM}", "phone", tuple(DEVICE_METHODS["privacyface"][1]),
                                  (ROWS,), album=ALBUM),       # its 4 albums all sampled: no non-member is left
}


def party_layout(s: dict, parties: int) -> str:
    """Parties p0, p1, ... of the styles in turn, each with s["party"]'s identities x images; past three, parties
    of one style split that style's identities between them (data.split_*), so that no two hold the same people."""
    identities, images = s["party"]
    sharing = -(-parties // len(STYLES))        # parties a style

    def held(i: int) -> str:
        if sharing == 1:
            return f"identities: {identities}"
        return f"identities: {identities * sharing}, split_index: {i // len(STYLES)}, split_count: {sharing}"

    return "parties=[" + ", ".join(
        f"{{name: p{i}, ranks: 1, data: {{style: {STYLES[i % 3]}, {held(i)}, "
        f"images_per_identity: {images}}}}}" for i in range(parties)) + "]"


def run_args(setting: Setting, s: dict, start: Path, folder: Path, name: str) -> tuple[int, list[str]]:
    """(ranks, fedmpi.run's arguments) of one setting's run; the method's overrides come last: they win."""
    common = [*MODEL, f"model.init={start}", f"data.root={folder / 'data'}", f"log.dir={folder / 'runs'}",
              f"log.name={name}", f"data.val_pairs_per_fold={s['pairs']}", f"log.record_received=[1,{s['rounds']}]",
              "run.seed=0"]
    if setting.place == "silo":
        public = [f"data.public.identities={s['public'][0]}", f"data.public.images_per_identity={s['public'][1]}"]
        common += public if "fed.algorithm=fedfr" in setting.overrides else []     # the start's own public set
        return setting.parties + 1, ["--config", "configs/demo_cpu.yaml", party_layout(s, setting.parties),
                                     *common, "fv.enabled=false", f"optim.batch_size={s['batch']}",
                                     f"fed.K={s['K']}", f"optim.steps_per_epoch={s['K']}",
                                     f"optim.epochs={s['rounds']}", "optim.milestones=[]", "fed.local_momentum=0.9",
                                     f"eval.every={s['rounds']}", *setting.overrides]
    return 3, ["--config", "configs/faces_devices.yaml", *common, f"clients.population={s['clients'] // setting.album}",
               f"clients.faces.identities={s['clients']}", f"clients.faces.images_per_identity={s['images']}",
               f"clients.rounds={s['rounds']}", f"clients.fraction={setting.cohort * setting.album / s['clients']}",
               f"clients.epochs={s['epochs']}", f"optim.lr={s['lr']}", f"eval.every={s['rounds']}",
               "clients.sampler_seed=0", *setting.overrides]


def run_setting(folder: Path, s: dict, start: Path, key: str, lock: str | None) -> Path:
    run = folder / "runs" / key
    if not (run / "log.h5").is_file():
        ranks, args = run_args(SETTINGS[key], s, start, folder, key)
        launch(ranks, args, lock, key)
    return run


def nonmember_folders(run: Path) -> list[str]:
    """Held-out identities of each party's style, as many as the party holds, drawn by the parties' generator at
    the indices after the party's (other people: an identity's key is a function of its index), written once
    under the run's data.root."""
    from fedmpi.audit.run_view import run_config
    from fedmpi.data.sets import prepare_heldout_identities
    from fedmpi.layout import build_layout

    cfg = run_config(run)
    return list(dict.fromkeys(str(prepare_heldout_identities(spec, cfg.data, first=spec.identities))
                              for party in build_layout(cfg).parties for spec in party.specs))


def audit_arguments(arguments: tuple, s: dict, run: Path) -> list[str]:
    last = [str(s["rounds"]) if a == "LAST" else a for a in arguments]
    return [b for a in last for b in (nonmember_folders(run) if a == "HELDOUT" else [a])]


def audit_setting(folder: Path, s: dict, key: str, run: Path, lock: str | None) -> None:
    """Each audit of the setting's first recorded round, into folder/audits/KEY-N (reused when there); an
    expected refusal (Setting.refused) kept as KEY-N/refused.json."""
    for n, (arguments, out) in enumerate(zip(SETTINGS[key].audits, audit_folders(folder, key))):
        if not audited(out):
            arguments = audit_arguments(arguments, s, run)
            with LockHolder(lock):
                done = subprocess.run([sys.executable, "-m", "tools.audit", str(run), "--round", "1", *arguments,
                                       "--iterations", str(s["iterations"]), "--tv", str(s["tv"]), "--out", str(out)],
                                      capture_output=True, text=True)
            if done.returncode == 2 and n in SETTINGS[key].refused:
                out.mkdir(parents=True, exist_ok=True)
                refusal = done.stderr.strip().splitlines()[-1].removeprefix("audit: ")
                (out / "refused.json").write_text(json.dumps({"attack": arguments[1], "refused": refusal,
                                                              "received": SETTINGS[key].received}, indent=1) + "\n")
            elif done.returncode != 0:
                sys.exit(f"the audit of {key} ({' '.join(arguments)}) failed: {done.stderr.strip()[-1500:]}")


def audit_folders(folder: Path, key: str) -> list[Path]:
    return [folder / "audits" / f"{key}-{n}" for n in range(len(SETTINGS[key].audits))]


def report_rows(folder: Path, keys) -> dict:     # what write_report reads: {key: (Setting, run, audit folders)}
    return {key: (SETTINGS[key], folder / "runs" / key, audit_folders(folder, key)) for key in keys}


def audited(out: Path) -> bool:
    """The audit in `out` ran: its results, or the refusal the setting expects."""
    return (out / "audit.json").is_file() or (out / "refused.json").is_file()


def lacking(folder: Path, key: str) -> list[str]:
    """What of setting `key` the folder lacks: its audits' results (or expected refusals), its run's log."""
    lacks = [str(a) for a in audit_folders(folder, key) if not audited(a)]
    return lacks + ([key] if not (folder / "runs" / key / "log.h5").is_file() else [])


def report_only(folder: Path, s: dict, keys: list[str], out: Path) -> int:
    missing = [m for key in keys for m in lacking(folder, key)]
    if missing:
        more = f" and {len(missing) - 1} more" if len(missing) > 1 else ""
        sys.exit(f"--report-only: {folder} lacks {missing[0]}{more}: run the study first")
    out.mkdir(parents=True, exist_ok=True)
    write_report(folder, report_rows(folder, keys), s, out / "report.md")
    return 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--folder", required=True)
    parser.add_argument("--scale", choices=sorted(SCALES), default="cpu")
    parser.add_argument("--lock", default=None, help="a file each run and audit holds (flock) only while it runs")
    parser.add_argument("--only", nargs="+", choices=sorted(SETTINGS), help="run only these; report keeps the rest")
    parser.add_argument("--runs-only", action="store_true", help="the runs alone: no audit, no report")
    parser.add_argument("--report-only", metavar="OUT", default=None,
                        help="write OUT/report.md from the folder's audits and run logs alone (nothing runs)")
    args = parser.parse_args(argv)
    folder, s = Path(args.folder), SCALES[args.scale]
    if args.report_only:
        return report_only(folder, s, args.only or list(SETTINGS), Path(args.report_only))
    start = pretrain(folder, s, args.lock)
    for key in args.only or SETTINGS:
        run = run_setting(folder, s, start, key, args.lock)
        if not args.runs_only:
            audit_setting(folder, s, key, run, args.lock)
    if args.runs_only:
        return 0
    # every setting whose run and audits the folder holds: --only adds its settings to the report, never drops others
    done = [key for key in SETTINGS if not lacking(folder, key)]
    write_report(folder, report_rows(folder, done), s, folder / "report.md")
    (folder / "settings.json").write_text(json.dumps({k: SETTINGS[k].label for k in done}, indent=1) + "\n")
    print((folder / "report.md").read_text())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
