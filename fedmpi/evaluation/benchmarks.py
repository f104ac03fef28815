"""Large-scale benchmarks inside a run (`eval.sets.ijbb|ijbc|megaface = ROOT | synthetic`): the global model Θ
is evaluated on them on the server, whenever the held-out evaluation runs (eval.every), and the metrics go to
the run log's /eval table as <set>/<metric> columns beside the pair sets'.

The benchmarks are public, so the server evaluates them itself (no validator needed); it blocks the server
while it runs. `synthetic` writes the synthetic releases (fedmpi.protocols.fixtures) once under data.root.
"""
from __future__ import annotations

from pathlib import Path

import torch

from fedmpi.protocols import BENCHMARKS, build_protocol, metric_names
from fedmpi.protocols.report import HEADLINE

SYNTHETIC = "synthetic"
CACHE_BYTES = 1 << 30  # aligned images kept in memory between evaluations, per benchmark


def configured_sets(cfg) -> dict[str, str]:
    """{benchmark: root or 'synthetic'} of the benchmarks the config names."""
    sets = getattr(cfg.eval, "sets", None)
    return {} if sets is None else {n: getattr(sets, n) for n in BENCHMARKS if getattr(sets, n, "")}


def log_columns(cfg) -> dict[str, list[str]]:
    """{benchmark: its metrics}: the run log's extra /eval columns, known before any file is read."""
    return {name: metric_names(name) for name in configured_sets(cfg)}


def synthetic_root(cfg, name: str) -> Path:
    from fedmpi.data.sets import GENERATOR_VERSION, _digest, _write_atomically
    from fedmpi.protocols.fixtures import IJB_FOLDERS, write_ijb, write_megaface

    size, seed = int(cfg.data.image_size), int(cfg.data.seed)
    params = {"generator": GENERATOR_VERSION, "benchmark": name, "image_size": size, "seed": seed}
    folder = Path(cfg.data.root) / f"{name}-{_digest(params)}"
    if name == "megaface":
        _write_atomically(folder, lambda tmp: write_megaface(tmp, size, seed))
        return folder
    _write_atomically(folder, lambda tmp: write_ijb(tmp / IJB_FOLDERS[name], name, size, seed))
    return folder / IJB_FOLDERS[name]


class Benchmarks:
    """Evaluates Θ on every configured benchmark: {benchmark: {metric: value}}."""

    def __init__(self, protocols: list, backbone: torch.nn.Module):
        self.protocols, self.backbone = protocols, backbone

    @classmethod
    def build(cls, cfg, parts, backbone: torch.nn.Module | None = None) -> "Benchmarks | None":
        """eval.sets' protocols, evaluated on `backbone` (default: a new model of the run's parts; None: no
        benchmark configured)."""
        sets = configured_sets(cfg)
        if not sets:
            return None
        check_roots(cfg)
        device = parts.device
        options = dict(batch_size=cfg.eval.batch_size, device=device, workers=cfg.data.loader_workers(device),
                       cache_bytes=CACHE_BYTES)
        protocols = [build_protocol(name, synthetic_root(cfg, name) if root == SYNTHETIC else Path(root),
                                    cfg.data.image_size, **options) for name, root in sets.items()]
        return cls(protocols, parts.new_model() if backbone is None else backbone)

    @property
    def names(self) -> list[str]:
        return [p.name for p in self.protocols]

    def evaluate(self, theta: torch.Tensor) -> dict[str, dict[str, float]]:
        from fedmpi.core.state import BackboneState

        BackboneState(self.backbone).write(theta)
        return self.evaluate_backbone()

    def evaluate_backbone(self) -> dict[str, dict[str, float]]:
        """The benchmarks of the model the backbone holds now."""
        return {p.name: p.evaluate(self.backbone) for p in self.protocols}


def headline_line(results: dict[str, dict[str, float]]) -> str:
    """'ijbc tar_far_1e-5 12.34  megaface rank1 56.78' (%), for the benchmarks among the results."""
    parts = [f"{n} {HEADLINE[n]} {100 * m[HEADLINE[n]]:.2f}" for n, m in results.items() if n in HEADLINE]
    return "  ".join(parts)


def check_roots(cfg) -> None:
    """Refuse a benchmark root that does not exist before the run starts (names the config key)."""
    for name, root in configured_sets(cfg).items():
        if root != SYNTHETIC and not Path(root).is_dir():
            raise FileNotFoundError(f"eval.sets.{name}: {root} is not a folder (a release root, or 'synthetic')")
