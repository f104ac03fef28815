"""`python -m tools.audit RUN --round R [--party NAME] [--out DIR]`: a privacy audit that plays the server.

It takes what the server of RUN received in round R (recorded by the run: log.record_received=[R], the file
RUN/received/round-R.h5, fedmpi/core/received.py) and attacks one upload: the images behind a silo party's
FedAvg upload θ_k − Θ are reconstructed by Inverting Gradients' FedAvg variant (fedmpi/audit/party_update.py),
scored against the party's own images (read from the run's data to score only) by PSNR / SSIM after the
assignment by PSNR, and by identity: the reconstruction's embedding under the evaluation model (Θ before the
round) against its identity's template, at the threshold of --far on pairs of the party's real images, beside
the same rate for other identities' real images (chance). Writes audit.json, audit.md and reconstructions.png
into DIR (default RUN/audit-rR) and nothing else. docs/PRIVACY_AUDIT.md says what is attacked and what not.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import h5py
import numpy as np
import torch

from fedmpi.audit.party_update import invert_party_update
from fedmpi.audit.report import write_png, write_report
from fedmpi.audit.scoring import identity_recovery, score_reconstructions, templates, threshold_at_far, unit
from fedmpi.core.received import FOLDER, round_file

ATTACKED_RULES = ("fedavg",)    # whose local step the audit simulates: SGD with the party's local momentum


class Refused(Exception):
    """The audit cannot run: one line naming what is missing."""


def parse_args(argv=None):
    parser = argparse.ArgumentParser(prog="python -m tools.audit", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("run", type=Path, help="the run folder (holds log.h5 and received/)")
    parser.add_argument("--round", type=int, required=True, help="the round to audit, from 1")
    parser.add_argument("--party", help="whose upload to attack (default: the round's first upload)")
    parser.add_argument("--out", type=Path, help="the report's folder (default RUN/audit-rR)")
    parser.add_argument("--iterations", type=int, default=500, help="optimisation steps per restart")
    parser.add_argument("--restarts", type=int, default=1)
    parser.add_argument("--far", type=float, default=0.01, help="the FAR of the identity threshold")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--data-root", help="where the run's data is now (default: the run's data.root)")
    return parser.parse_args(argv)


def recorded_rounds(run: Path) -> list[int]:
    return sorted(int(p.stem.split("-")[1]) for p in (run / FOLDER).glob("round-*.h5"))


def read_received(run: Path, round_number: int) -> dict:
    if not (run / "log.h5").is_file():
        raise Refused(f"{run} is not a run folder: {run / 'log.h5'} is missing")
    path = round_file(run, round_number)
    if not path.is_file():
        held = recorded_rounds(run)
        raise Refused(f"round {round_number} was not recorded: {run / FOLDER} holds rounds {held or 'none'} "
                      f"(record it with log.record_received=[{round_number}])")
    with h5py.File(path, "r") as f:
        received = {key: torch.from_numpy(f[key][:]) for key in f}
        received.update({key: f.attrs[key] for key in f.attrs})
    received["upload_names"] = [str(n) for n in received["upload_names"]]
    return received


def run_config(run: Path):
    from fedmpi.config import config_from_yaml

    with h5py.File(run / "log.h5", "r") as f:
        text = f["config"][()]
    return config_from_yaml(text.decode() if isinstance(text, bytes) else text, where=str(run / "log.h5"))


def check_attackable(cfg, received: dict, party: str | None) -> str:
    """The upload to attack, or Refused naming the setting and why."""
    if cfg.cross_device:
        raise Refused("device clients are not attacked yet: the recording holds each client's upload, but the "
                      "simulation of a client's local epochs (and its class row's re-identification) is not built")
    if received["secure"]:
        raise Refused("under secure aggregation the server holds only the sum (theta_after - theta_before): the "
                      "attack of a sum over parties is not built; the recording has no single upload")
    if received["algorithm"] not in ATTACKED_RULES:
        raise Refused(f"fed.algorithm={received['algorithm']}: the audit simulates the local SGD steps of "
                      f"{', '.join(ATTACKED_RULES)} only, and this rule's local step differs")
    names = received["upload_names"]
    if party is None:
        return names[0]
    if party not in names:
        raise Refused(f"--party {party}: round {received['round']} holds the uploads of {', '.join(names)}")
    return party


def ground_truth(cfg, party_name: str) -> tuple[torch.Tensor, np.ndarray]:
    """The party's images (in [-1, 1]) and identities, read from the run's data to score the attack only; a
    synthetic set is read where the run wrote it, never generated here."""
    from fedmpi.data.sets import synthetic_folder
    from fedmpi.layout import build_layout
    from fedmpi.silo.party_data import open_party_dataset

    party = next(p for p in build_layout(cfg).parties if p.name == party_name)
    missing = f"the ground truth of party {party_name} is missing (data.root={cfg.data.root})"
    for spec in party.specs:
        if spec.kind == "synthetic" and not synthetic_folder(spec, cfg.data).is_dir():
            raise Refused(f"{missing}: {synthetic_folder(spec, cfg.data)} not found")
    try:
        dataset = open_party_dataset(party, cfg.data)
    except (OSError, ValueError) as error:
        raise Refused(f"{missing}: {str(error).splitlines()[0]}") from None
    items = [dataset[i] for i in range(len(dataset))]
    return torch.stack([x for x, _ in items]), np.array([int(y) for _, y in items])


def model_at(cfg, theta: torch.Tensor):
    from fedmpi.core.state import BackboneState
    from fedmpi.models.backbone import build_backbone

    model = build_backbone(cfg, torch.device("cpu"), theta.dtype)
    state = BackboneState(model)
    state.write(theta)
    return model, state


def embed(model, images: torch.Tensor) -> torch.Tensor:
    model.eval()
    with torch.no_grad():
        return model(images)


def audit(args) -> dict:
    run = args.run
    received = read_received(run, args.round)
    cfg = run_config(run)
    if args.data_root:
        import dataclasses

        cfg = dataclasses.replace(cfg, data=dataclasses.replace(cfg.data, root=args.data_root))
    party = check_attackable(cfg, received, args.party)
    images, identities = ground_truth(cfg, party)
    from fedmpi.config.epochs import rank_batch

    model, state = model_at(cfg, received["theta_before"])
    k = received["upload_names"].index(party)
    n = state.n_trainable
    delta = received["uploads"][k, :n] - received["theta_before"][:n]
    shapes = [p.shape for p in model.parameters() if p.requires_grad]   # BackboneState's order
    observed = list(torch.split(delta, [int(np.prod(s)) for s in shapes]))
    observed = [o.reshape(s) for o, s in zip(observed, shapes)]
    ranks = next(p.ranks for p in cfg.parties if p.name == party)
    batch = rank_batch(cfg, party) * ranks
    found = invert_party_update(model, observed, batch, tuple(images.shape[1:]), steps=cfg.fed.K,
                                lr=cfg.lr_at_round(args.round - 1), momentum=cfg.fed.local_momentum,
                                scale=cfg.model.scale, margin=cfg.margin, iterations=args.iterations,
                                restarts=args.restarts, data_range=(-1.0, 1.0), seed=args.seed)
    as_unit = lambda x: (x + 1) / 2     # [-1, 1] -> [0, 1] for PSNR / SSIM and the picture
    scores = score_reconstructions(as_unit(found.images), as_unit(images.to(found.images.dtype)))
    evaluation, _ = model_at(cfg, received["theta_before"])
    real = embed(evaluation, images.to(received["theta_before"].dtype))
    rebuilt = embed(evaluation, found.images)
    cos = (unit(real) @ unit(real).T).numpy()
    upper = np.triu_indices(len(real), 1)
    threshold = threshold_at_far(cos[upper], (identities[:, None] == identities[None])[upper], args.far)
    template = templates(real, identities)
    per_image = [identity_recovery(rebuilt[i:i + 1], real[identities != identities[j]],
                                   template[identities[j]], threshold)
                 for i, j in enumerate(scores["assigned"])]
    out = args.out or run / f"audit-r{args.round}"
    out.mkdir(parents=True, exist_ok=True)
    write_png(out / "reconstructions.png", as_unit(found.images),
              as_unit(images[torch.as_tensor(scores["assigned"])]), f"{run.name}, round {args.round}, {party}")
    return {"run": str(run), "round": args.round, "upload": party,
            "setting": f"silo party, {received['algorithm']}, K={cfg.fed.K}" + (", central DP" if received["dp"]
                                                                                 else ""),
            "received": "each party's upload in the clear" + (" (central DP noises only the server's result)"
                                                              if received["dp"] else ""),
            "attack": f"Inverting Gradients' FedAvg variant on {batch} images, the party's classifier unknown",
            "inversion": {"count": batch, "iterations": args.iterations, "restarts": args.restarts,
                          "objective": found.objective, "assigned": scores["assigned"], "psnr": scores["psnr"],
                          "psnr_mean": float(np.mean(scores["psnr"])), "psnr_best": float(np.max(scores["psnr"])),
                          "ssim": scores.get("ssim"),
                          "ssim_mean": float(np.mean(scores["ssim"])) if "ssim" in scores else None},
            "identity": {"far": args.far, "threshold": threshold,
                         "recovered": float(np.mean([p["recovered"] for p in per_image])),
                         "chance": float(np.mean([p["chance"] for p in per_image])),
                         "model": "Θ before the round" + (" (the run's start)" if args.round == 1 else
                                                          " (it saw the party's data in earlier rounds)"),
                         "pairs": f"every pair of the party's {len(real)} real images under it"},
            "out": str(out)}


def main(argv=None) -> int:
    args = parse_args(argv)
    try:
        result = audit(args)
    except Refused as refusal:
        print(f"audit: {refusal}", file=sys.stderr)
        return 2
    write_report(Path(result["out"]), result)
    print(f"audit of {result['run']} round {result['round']} ({result['upload']}): PSNR "
          f"{result['inversion']['psnr_mean']:.2f} dB, identity recovered {result['identity']['recovered']:.3f} "
          f"(chance {result['identity']['chance']:.3f}); report in {result['out']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
