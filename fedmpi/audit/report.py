"""An audit's report, written into its own folder: audit.json (every number), audit.md (each attack's table)
and the attacks' pictures (reconstructions.png: each reconstruction above the original it was assigned to)."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import torch


def write_png(path: Path, reconstructions: torch.Tensor, originals: torch.Tensor, title: str) -> None:
    """Two rows: reconstructions, their assigned originals; images [N, C, H, W] in [0, 1]."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    n = len(reconstructions)
    fig, axes = plt.subplots(2, n, figsize=(1.2 * n + 0.6, 2.8), squeeze=False)
    for row, (images, label) in enumerate(((reconstructions, "reconstructed"), (originals, "original"))):
        for i in range(n):
            picture = images[i].detach().cpu().float().clamp(0, 1).permute(1, 2, 0).numpy()
            axes[row, i].imshow(picture.squeeze(-1) if picture.shape[-1] == 1 else picture,
                                cmap="gray" if picture.shape[-1] == 1 else None)
            axes[row, i].set_xticks([])
            axes[row, i].set_yticks([])
        axes[row, 0].set_ylabel(label, fontsize=8)
    fig.suptitle(title, fontsize=9)
    fig.savefig(path, dpi=120, bbox_inches="tight")
    plt.close(fig)


def _plain(value):
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, np.ndarray)):
        return [_plain(v) for v in np.asarray(value).tolist()] if isinstance(value, np.ndarray) else \
            [_plain(v) for v in value]
    if isinstance(value, (np.floating, np.integer, np.bool_)):
        return value.item()
    return value


def write_report(out: Path, head: dict, results: dict, attacks: dict) -> None:
    """audit.json ({run, round, attack name: its result}) and audit.md (each attack's section, in order)."""
    (out / "audit.json").write_text(json.dumps(_plain({**head, **results}), indent=1) + "\n")
    lines = [f"# Privacy audit of {head['run']}, round {head['round']}", ""]
    for name, result in results.items():
        lines += [f"## {name}", "", *attacks[name].lines(result)]
    (out / "audit.md").write_text("\n".join(lines))
