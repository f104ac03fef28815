"""The privacy-audit study's report (jobs/privacy_audit_study.py), read back from its files: each setting's audits
(tools.audit's audit.json, the attack's numbers under its name) and its run's log (the accuracy the run reached,
the ε it accounted), as one table attack × setting, the pictures first (a reader looks at these first)."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from fedmpi.store.log_reader import LogReader

# tools.audit's attack -> the report's columns: (heading, how to read it from the attack's result, format)
COLUMNS = {
    "inversion": [
        ("images behind what was attacked", lambda r: r["reconstruction"]["count"], "{:d}"),
        ("PSNR (dB)", lambda r: r["reconstruction"]["psnr_mean"], "{:.2f}"),
        ("identity recovered (chance)", lambda r: (r["identity"]["recovered"], r["identity"]["chance"]),
         "{0:.3f} ({1:.3f})"),
        ("identity top-1 among the round's clients (chance)",
         lambda r: (r["identity"]["top1"], r["identity"]["top1_chance"]), "{0:.3f} ({1:.3f})"),
    ],
    "templates": [
        ("class rows re-identified top-1 (chance)", lambda r: (r["top1"], r["chance"]), "{0:.3f} ({1:.3f})"),
        ("identities inside a relayed cone, of the gallery", lambda r: (r["inside_mean"], r["gallery"]),
         "{0:.1f} of {1:d}"),
    ],
    "membership": [
        ("membership AUC (the most (ε, δ) permits)",
         lambda r: f"{r['auc']:.3f} ({r['dp']['auc_bound']:.3f})" if r["dp"] else f"{r['auc']:.3f} (no DP)", "{}"),
    ],
}


# what the attacks that read no upload take from what the server held
RECEIVED = {"templates": "the class payloads beside θ, in the clear", "membership": "the model Θ it made"}


def attacked(name: str, result: dict, round_number: int) -> str:
    if name == "templates":
        return f"class rows: {result['rows']}" if "rows" in result else f"DP clusters: {result.get('clusters', 0)}"
    return f"Θ after round {round_number}" if name == "membership" else ""


def utility(run: Path) -> dict:
    """The run's mean held-out accuracy at its last evaluation and its ε at the end (None without DP)."""
    with LogReader(run / "log.h5") as log:
        ev = log.table("eval")
        privacy = log.table("privacy") if "privacy" in log.f else None
    sets = sorted({k.split("/")[0] for k in ev if k.endswith("/accuracy")})
    accuracy = float(np.mean([ev[f"{name}/accuracy"][-1] for name in sets])) if sets else None
    epsilon = float(privacy["epsilon"][-1]) if privacy is not None and len(privacy["epsilon"]) else None
    return {"accuracy": accuracy, "epsilon": epsilon}


def cells(results: dict) -> dict:
    """{heading: formatted value} over every attack the setting's audits ran."""
    out = {}
    for attack, result in results.items():
        for heading, read, form in COLUMNS.get(attack, []):
            try:
                value = read(result)
            except (KeyError, TypeError):
                continue
            out[heading] = form.format(*value) if isinstance(value, tuple) else form.format(value)
    return out


# an audit the tool refused for what the method sends: its line, never a number that would read as a defence
REFUSED = "why the attack does not apply (the audit's refusal)"


def read_refusal(run: Path, out: Path) -> dict:
    """One row of an audit the tool refused (the study's refused.json): what the server received, the refusal."""
    refused = json.loads((out / "refused.json").read_text())
    return {"cells": {REFUSED: refused["refused"]}, **utility(run), "received": refused["received"],
            "attacked": f"{refused['attack']}: not applicable", "pictures": []}


def read_audit(run: Path, out: Path) -> dict:
    """One row: an audit's headline numbers, what the server received and what was attacked, the run's utility."""
    if (out / "refused.json").is_file():
        return read_refusal(run, out)
    whole = json.loads((out / "audit.json").read_text())
    report = {k: v for k, v in whole.items() if isinstance(v, dict)}
    name, first = next(iter(report.items()), ("", {}))
    received = first.get("received") or ("the DP clusters beside θ" if "clusters" in first else RECEIVED.get(name, ""))
    return {"cells": cells(report), **utility(run), "received": received,
            "attacked": first.get("upload") or attacked(name, first, whole.get("round")),
            "pictures": [p for p in (out / "reconstructions.png",) if p.is_file()]}


def table(rows: dict) -> list[str]:
    headings = list(dict.fromkeys(h for row in rows.values() for h in row["cells"]))
    lines = ["| setting | what the server received | attacked | " + " | ".join(headings)
             + " | held-out accuracy (%) | ε |", "|---" * (len(headings) + 5) + "|"]
    for label, row in rows.items():
        accuracy = "—" if row["accuracy"] is None else f"{100 * row['accuracy']:.2f}"
        epsilon = "—" if row["epsilon"] is None else f"{row['epsilon']:.3g}"
        lines.append(f"| {label} | {row['received']} | {row['attacked']} | " + " | ".join(row["cells"].get(h, "—") for h in headings)
                     + f" | {accuracy} | {epsilon} |")
    return lines


def write_report(folder: Path, settings: dict, scale: dict, path: Path) -> None:
    """The report (at `path`; its pictures named relative to `folder`) from {key: (Setting, run, [audits])}."""
    rows = {(f"{setting.label}" + (f" ({n + 1})" if len(audits) > 1 else "")): read_audit(run, out)
            for setting, run, audits in settings.values() for n, out in enumerate(audits)}
    lines = [f"# What the server learns, measured (`make privacy-audit-cpu`: {len(rows)} settings, the audited "
             f"round the first, the attack's {scale['iterations']} optimisation steps)", "",
             "## The reconstructions beside their originals", ""]
    for label, row in rows.items():
        lines += [f"**{label}**", ""] + [f"![{label}]({p.relative_to(folder)})" for p in row["pictures"]] + [""]
    lines += ["## Attack × setting", "", *table(rows), ""]
    path.write_text("\n".join(lines))
