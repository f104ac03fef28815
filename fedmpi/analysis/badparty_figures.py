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
