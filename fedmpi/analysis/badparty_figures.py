"""The bad-party and privacy study's figures: FedFace's FV weight of the bad party against its clean twin, held-out
accuracy per rule and kind of bad party, and held-out accuracy against ε for DP-FedAvg. Each returns False where
the study has no runs for it."""
from __future__ import annotations

from pathlib import Path

import numpy as np

from fedmpi.analysis.badparty_outcomes import KINDS, METHOD_LABELS, dp_points, pick
from fedmpi.analysis.plots import panel_grid, save_figure


def weights_figure(outcomes: dict, path: Path) -> bool:
    kinds = [k for k in KINDS[1:] if pick(outcomes, part="bad", layout="3", method="fedface", bad=k)]
    if not kinds:
        return False
    fig, axes = panel_grid(len(kinds), max_cols=2)
    for ax, kind in zip(axes, kinds):
        for style, k in (("-", kind), (":", "clean")):
            for o in sorted(pick(outcomes, part="bad", layout="3", method="fedface", bad=k),
                            key=lambda o: o.labels["seed"]):
                ax.plot(np.arange(1, o.fv_w.size + 1), o.fv_w, style, color=f"C{o.labels['seed']}",
                        label=f"{k} seed {o.labels['seed']}")
        ax.axhline(1 / 3, color="grey", lw=0.8)
        ax.set_title(f"FedFace, w_ga: {kind} (solid), clean twin (dotted)", fontsize=9)
        ax.set_xlabel("FV iteration")
        ax.set_ylabel("w_ga")
        ax.legend(fontsize=7)
    save_figure(fig, path)
    return True


def accuracy_figure(outcomes: dict, path: Path) -> bool:
    layouts = [lay for lay in ("3", "12") if pick(outcomes, part="bad", layout=lay)]
    if not layouts:
        return False
    fig, axes = panel_grid(len(layouts), max_cols=2, size=(6.4, 3.8))
    for ax, layout in zip(axes, layouts):
        methods = [m for m in METHOD_LABELS if pick(outcomes, part="bad", layout=layout, method=m)]
        for j, kind in enumerate(KINDS):
            for i, m in enumerate(methods):
                values = [o.accuracy for o in pick(outcomes, part="bad", layout=layout, method=m, bad=kind)
                          if o.diverged_round is None]
                if values:
                    ax.bar(i + (j - 1) * 0.27, np.mean(values), 0.27, color=f"C{j}", label=kind if i == 0 else None,
                           yerr=(max(values) - min(values)) / 2)
                    ax.plot([i + (j - 1) * 0.27] * len(values), values, "k.", ms=3)
        ax.set_xticks(range(len(methods)), [METHOD_LABELS[m] for m in methods], rotation=20, fontsize=8)
        ax.set_ylim(45, None)
        sets = sorted({", ".join(o.sets) for o in pick(outcomes, part="bad", layout=layout)})
        ax.set_ylabel(f"held-out accuracy % (mean of {' / '.join(sets)})", fontsize=8)
        ax.set_title(f"{layout} parties, one bad party")
        ax.legend(fontsize=7)
    save_figure(fig, path)
    return True


def privacy_figure(outcomes: dict, path: Path) -> bool:
    groups = {}
    for point in dp_points(outcomes):
        groups.setdefault(point["setting"], []).append(point)
    if not any(len(g) > 1 for g in groups.values()):
        return False
    fig, axes = panel_grid(len(groups), max_cols=2)
    for ax, (setting, points) in zip(axes, groups.items()):
        private = [p for p in points if p["z"] > 0 and p["accuracies"]]     # a diverged run has no accuracy
        ax.semilogx([p["epsilon"] for p in private], [p["accuracy"] for p in private], "o-", label="DP-FedAvg")
        for p in private:
            ax.plot([p["epsilon"]] * len(p["accuracies"]), p["accuracies"], "k.", ms=3)
            ax.annotate(f"z={p['z']:g}", (p["epsilon"], p["accuracy"]), fontsize=7)
        for p in points:
            if not p["accuracies"]:
                ax.annotate(f"z={p['z']:g}: {p['runs'][0].shown_accuracy}", (p["epsilon"], ax.get_ylim()[0]),
                            fontsize=7)
            if p["z"] == 0:
                ax.axhline(p["accuracy"], color="grey", ls="--", label=f"no DP (mean of {len(p['accuracies'])})")
                for a in p["accuracies"]:
                    ax.axhline(a, color="grey", ls=":", lw=0.6)
        ax.set_xlabel("ε at δ = 1e-5 (RDP accountant)")
        ax.set_ylabel("held-out accuracy %")
        ax.set_title(f"{setting}")
        ax.legend(fontsize=7)
    save_figure(fig, path)
    return True


def scaled_figure(outcomes: dict, path: Path) -> bool:
    """The 10^6-scaled attack: per defence, the held-out accuracy of each seed (a stopped run marked at the bottom,
    with its round) beside the same rule's clean twins; and the bad party's update norm over the others' median,
    round by round, with the check's norm_ratio."""
    runs = pick(outcomes, part="scaled")
    if not runs:
        return False
    defences = list(dict.fromkeys(o.labels["defence"] for o in runs))
    names = {o.labels["defence"]: o.labels.get("defence_label") or o.labels["defence"] for o in runs}
    fig, (acc, norm) = panel_grid(2, max_cols=2, size=(6.4, 4.2))
    floor = 45.0
    for i, defence in enumerate(defences):
        for o in pick(outcomes, part="scaled", defence=defence):
            seed = o.labels["seed"]
            twin = pick(outcomes, part="bad", layout="3", method=o.labels["method"], bad="clean", seed=seed)
            if twin:
                acc.plot(i + 0.12 * seed, twin[0].accuracy, "_", color="grey", ms=12)
            if o.stopped is not None or o.diverged_round is not None:
                acc.plot(i + 0.12 * seed, floor + 1, "x", color="C3", ms=7)
                acc.annotate(f"r{o.stopped_round or o.diverged_round}", (i + 0.12 * seed, floor + 2), fontsize=6,
                             color="C3", ha="center")
            else:
                acc.plot(i + 0.12 * seed, o.accuracy, "o", color=f"C{seed}", ms=4)
            ratios = o.ratios_per_round
            if ratios.size and np.isfinite(ratios).any():
                norm.semilogy(np.arange(1, ratios.size + 1), ratios, ".-", color=f"C{i}", lw=0.8,
                              label=names[defence] if seed == 0 else None)
    acc.set_xticks(range(len(defences)), [names[d] for d in defences], rotation=30, ha="right", fontsize=7)
    acc.set_ylim(floor, None)
    acc.set_ylabel("held-out accuracy % (x: stopped, its round)", fontsize=8)
    acc.set_title("ga sends Θ − 10^6 (θ_ga − Θ); grey: clean twin", fontsize=9)
    norm.axhline(10, color="grey", ls="--", lw=0.8, label="fed.upload_check.norm_ratio (10)")
    norm.set_xlabel("round")
    norm.set_ylabel("‖θ_ga − Θ‖ / the others' median", fontsize=8)
    norm.set_title("the bad party's update norm, as the check measures it", fontsize=9)
    norm.legend(fontsize=6)
    save_figure(fig, path)
    return True
