"""The update-inversion attack of a recorded round, in every setting the recording allows: a silo party's upload
θ_k − Θ, the round's aggregate Θ_after − Θ_before (under secure aggregation the only view; under central or
distributed DP the noised result; `--upload aggregate` on any averaging run), inverted by Inverting Gradients'
FedAvg variant with the rule's local step (silo_targets.py, local_rules.py); or device clients' uploads, each
client's local training simulated as it ran (client_audit.py). Scored against the participants' own images by
PSNR / SSIM after the assignment by PSNR, and by identity: the reconstruction's embedding under an evaluation
model that did not train on the participants' data (evaluation.py) against its identity's template, at the
threshold of --far on pairs of the participants' real images, beside the same rate for other identities' real
images (chance)."""
from __future__ import annotations

import numpy as np
import torch

from .client_audit import attack_clients, attack_cohort
from .evaluation import evaluation_model
from .identity import identity_scores
from .report import write_png
from .run_view import Refused, RunView
from .scoring import as_unit, score_reconstructions
from .silo_targets import invert_silo, silo_target

NAME = "inversion"


def check_attackable(view, options) -> str:
    """What the attack inverts: "party" (one silo upload), "aggregate" (Θ_after − Θ_before), "clients" (device
    clients' uploads) or "cohort" (the device cohort's aggregate); Refused naming why where the recording cannot
    give it."""
    received, upload = view.received, getattr(options, "upload", None)
    if view.cfg.cross_device and getattr(options, "party", None):
        raise Refused(f"--party {options.party}: the run's participants are device clients (name them by --client)")
    if not view.cfg.cross_device and getattr(options, "client", None):
        raise Refused(f"--client {options.client[0]}: the run's participants are silo parties (name them by --party)")
    if upload == "one" and received["secure"]:
        raise Refused(f"--upload one: under secure aggregation the server holds only the sum of the round's "
                      f"{len(received['upload_names'])} uploads (theta_after - theta_before): use --upload aggregate")
    if view.cfg.cross_device:
        if upload == "aggregate" or received["secure"]:
            return "cohort"
        if "uploads" not in received:
            raise Refused(f"round {view.round}'s recording holds no client's upload")
        return "clients"
    return "aggregate" if upload == "aggregate" or received["secure"] else "party"


def dp_of(view) -> dict:
    """The DP the aggregate went through: its kind and the run's noise multiplier z (None without DP)."""
    received, dp = view.received, view.cfg.fed.dp
    if not received["dp"]:
        return {"dp": None, "noise_multiplier": None}
    return {"dp": "distributed" if received["secure"] else "central", "noise_multiplier": float(dp.noise_multiplier)}


def reconstruction(found_objective: float, count: int, psnr, ssim, options) -> dict:
    return {"count": count, "iterations": options.iterations, "restarts": options.restarts,
            "objective": found_objective, "psnr": list(psnr), "psnr_mean": float(np.mean(psnr)),
            "psnr_best": float(np.max(psnr)), "ssim": None if ssim is None else list(ssim),
            "ssim_mean": None if ssim is None else float(np.mean(ssim))}


def run_silo(view: RunView, options, aggregate: bool) -> tuple[dict, tuple]:
    target = silo_target(view, getattr(options, "party", None), aggregate)
    evaluation = evaluation_model(view, options)      # refused before the attack's optimisation, not after
    found, words = invert_silo(view, target, options)
    scores = score_reconstructions(as_unit(found.images), as_unit(target.images.to(found.images.dtype)))
    identity = identity_scores(evaluation, target.images, target.identities, found.images, scores["assigned"],
                               options.far)
    summed = ", ".join(target.names)
    what = (f"the aggregate Θ_after − Θ_before of {len(target.names)} parties ({summed})" if aggregate
            else f"the upload of {summed}")
    result = {"upload": "aggregate" if aggregate else summed, "participants": len(target.names),
              "setting": f"silo, {view.received['algorithm']}, K={view.cfg.fed.K}", "attacked": what,
              "attack": f"Inverting Gradients' FedAvg variant on {target.batch} images ({words}), "
                        f"the parties' classifiers unknown",
              "reconstruction": reconstruction(found.objective, target.batch, scores["psnr"], scores.get("ssim"),
                                               options), "identity": identity}
    return result, (found.images, target.images[torch.as_tensor(scores["assigned"])], summed)


def run_clients(view: RunView, options, cohort: bool) -> tuple[dict, tuple]:
    evaluation = evaluation_model(view, options)
    done = attack_cohort(view, options, evaluation) if cohort else attack_clients(view, options, evaluation)
    clients = ", ".join(map(str, done["clients"]))
    what = (f"the aggregate Θ_after − Θ_before of {len(done['clients'])} clients ({clients})" if cohort
            else f"the upload of client {clients}" + (", each apart" if len(done["clients"]) > 1 else ""))
    result = {"upload": "aggregate" if cohort else f"client {clients}", "clients": done["clients"],
              "participants": len(done["clients"]) if cohort else 1,
              "setting": f"device clients, one identity each, {view.received['algorithm']}, "
                         f"E={view.cfg.clients.epochs}, B={view.cfg.optim.batch_size}",
              "attacked": what,
              "attack": f"each client's local steps ({'/'.join(map(str, done['steps']))}) simulated "
                        f"({done['words']}, its batch order and flips from its seed), w_c unknown (a surrogate)",
              "reconstruction": reconstruction(done["objective"], len(done["rebuilt"]), done["psnr"], done["ssim"],
                                               options), "identity": done["identity"]}
    return result, (done["rebuilt"], done["originals"], "aggregate" if cohort else f"client {clients}")


def run(view: RunView, options) -> tuple[dict, dict]:
    """The attack's result, and its picture ({file name: draw(path)}) for the report's folder."""
    what = check_attackable(view, options)
    result, (rebuilt, originals, who) = (run_clients(view, options, what == "cohort") if what in ("clients", "cohort")
                                         else run_silo(view, options, what == "aggregate"))
    dp = dp_of(view)
    held = ("only the sum of the uploads (secure aggregation)" if view.received["secure"]
            else "each upload in the clear")
    noise = f"; the aggregate noised by {dp['dp']} DP, z = {dp['noise_multiplier']:g}" if dp["dp"] else ""
    result.update({"target": what, "received": held + noise, **dp})
    picture = {"reconstructions.png": lambda path: write_png(path, as_unit(rebuilt), as_unit(originals),
                                                             f"{view.run.name}, round {view.round}, {who}")}
    return result, picture


def lines(result: dict) -> list[str]:
    """This attack's part of audit.md."""
    inv, ident = result["reconstruction"], result["identity"]
    return [f"What the server received: {result['received']}.", "",
            f"Attacked: {result['attacked']} ({result['setting']}); {result['attack']}.", "",
            "| measure | value |", "|---|---|",
            f"| reconstructions | {inv['count']} (iterations {inv['iterations']}, restarts {inv['restarts']}, "
            f"objective {inv['objective']:.4f}) |",
            f"| PSNR (dB), mean / best | {inv['psnr_mean']:.2f} / {inv['psnr_best']:.2f} |",
            f"| SSIM, mean | {inv['ssim_mean']:.3f} |" if inv.get("ssim_mean") is not None else "| SSIM | images "
            "under 11 pixels a side |",
            f"| identity recovered at FAR {ident['far']:g} | {ident['recovered']:.3f} |",
            f"| chance (other identities' real images) | {ident['chance']:.3f} |",
            *([f"| identity top-1 among the round's clients | {ident['top1']:.3f} (chance "
               f"{ident['top1_chance']:.3f}) |",
               f"| other clients' templates accepted against the reconstructions' | {ident['others_accepted']:.3f} |"]
              if "top1" in ident else []),
            f"| participants summed | {result['participants']} |",
            f"| DP noise multiplier z | {result['noise_multiplier']} |" if result["dp"] else "| DP | none |", "",
            f"Evaluation model: {ident['model']}. Threshold {ident['threshold']:.4f}: {ident['pairs']}.", "",
            "![reconstructions beside their assigned originals](reconstructions.png)", ""]


def summary(result: dict) -> str:
    """This attack's part of the one line the command prints."""
    return (f"PSNR {result['reconstruction']['psnr_mean']:.2f} dB, identity recovered "
            f"{result['identity']['recovered']:.3f} (chance {result['identity']['chance']:.3f})")
