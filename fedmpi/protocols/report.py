"""What an evaluation leaves behind: the table papers print, and per benchmark an HDF5 file (metrics, counts,
ROC) and a PNG of the ROC."""
from __future__ import annotations

import json
import math
from pathlib import Path

import h5py
import numpy as np

from fedmpi.metrics.roc import PAPER_FARS, far_column

HEADLINE = {"ijbb": far_column(1e-4), "ijbc": far_column(1e-5), "megaface": "rank1"}  # FedFace Sec. 4.2
DISPLAY = {"ijbb": "IJB-B", "ijbc": "IJB-C", "megaface": "MegaFace"}


def _cell(value: float) -> str:
    return "-" if value is None or math.isnan(value) else f"{100 * value:.2f}"


def format_table(results: dict[str, dict[str, float]]) -> str:
    """IJB rows: TAR (%) at each FAR; MegaFace rows: rank-1 (%) at each gallery size and TAR at FAR=1e-6."""
    lines = []
    ijb = {n: m for n, m in results.items() if n in ("ijbb", "ijbc")}
    if ijb:
        fars = [f for f in PAPER_FARS if any(far_column(f) in m for m in ijb.values())]
        lines.append("TAR (%) at FAR  " + "".join(f"{f'{f:.0e}':>8}" for f in fars))
        for name, m in ijb.items():
            lines.append(f"{DISPLAY[name]:<16}" + "".join(f"{_cell(m.get(far_column(f), math.nan)):>8}" for f in fars))
    if "megaface" in results:
        m = results["megaface"]
        sizes = [k for k in range(1, 7)]
        lines.append("MegaFace (%)    " + "".join(f"{f'1e{k}':>8}" for k in sizes) + f"{'TAR@1e-6':>10}")
        lines.append(f"{'rank-1':<16}" + "".join(f"{_cell(m.get(f'rank1_1e{k}', math.nan)):>8}" for k in sizes)
                     + f"{_cell(m.get(far_column(1e-6), math.nan)):>10}")
    return "\n".join(lines)


def write_report(out_dir: Path, name: str, report: dict, source: str) -> list[Path]:
    """OUT/NAME.h5 (attrs: metrics, counts, settings (the protocol's choices: TAR reading, feature pooling,
    noisy distractors, gallery source), source; datasets roc/far, roc/tar, ...) and OUT/NAME_roc.png."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    h5_path = out_dir / f"{name}.h5"
    tmp = h5_path.with_suffix(".h5.tmp")
    with h5py.File(tmp, "w") as f:
        f.attrs.update({"benchmark": name, "source": source, "metrics": json.dumps(report["metrics"]),
                        "counts": json.dumps(report["counts"]), "settings": json.dumps(report.get("settings", {}))})
        for key, value in report.get("roc", {}).items():
            f.create_dataset(f"roc/{key}", data=np.asarray(value))
        for size, value in report.get("rank1", {}).items():
            f.attrs[f"rank1@{size}"] = value
    tmp.replace(h5_path)
    written = [h5_path]
    if "roc" in report:
        written.append(_plot_roc(out_dir / f"{name}_roc.png", name, report["roc"]))
    return written


def _plot_roc(path: Path, name: str, roc: dict) -> Path:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5, 4))
    ax.step(roc["far"], roc["tar"], where="post")
    ax.set_xscale("log")
    ax.set_xlabel("false accept rate")
    ax.set_ylabel("true accept rate")
    ax.set_ylim(0, 1)
    ax.grid(alpha=0.3)
    ax.set_title(f"{DISPLAY.get(name, name)} 1:1 verification ROC")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path
