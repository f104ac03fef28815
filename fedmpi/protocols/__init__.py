"""Large-scale benchmarks: IJB-B / IJB-C template verification and MegaFace identification.

Each protocol is built from a release folder and exposes `name`, `metric_names`, `describe()` and
`evaluate(backbone) -> {metric: value}` (every image embedded once per call), and `last` (what the call
measured beyond the metrics: ROC, counts) for reports.
"""
from __future__ import annotations

BENCHMARKS = ("ijbb", "ijbc", "megaface")


IJB_OPTIONS = ("detection_weighting", "keep_feature_norm", "tar_reading")
MEGAFACE_OPTIONS = ("refined", "noisy_distractors")


def build_protocol(name: str, root, image_size: int, **options):
    """The protocol of benchmark `name` ('ijbb', 'ijbc', 'megaface') over the release at `root`; options that
    belong to the other benchmarks are ignored."""
    if name in ("ijbb", "ijbc"):
        from fedmpi.protocols.ijb import IJBProtocol

        return IJBProtocol(root, name, image_size, **_without(options, MEGAFACE_OPTIONS))
    if name == "megaface":
        from fedmpi.protocols.megaface import MegaFaceProtocol

        return MegaFaceProtocol(root, image_size, **_without(options, IJB_OPTIONS))
    raise ValueError(f"unknown benchmark {name!r}: expected one of {', '.join(BENCHMARKS)}")


def _without(options: dict, names) -> dict:
    return {k: v for k, v in options.items() if k not in names}


def metric_names(name: str) -> list[str]:
    """The metrics a benchmark reports (run-log columns), without reading its files."""
    from fedmpi.metrics.roc import PAPER_FARS, far_column
    from fedmpi.protocols.megaface import METRICS

    if name in ("ijbb", "ijbc"):
        return [far_column(f) for f in PAPER_FARS]
    if name == "megaface":
        return list(METRICS)
    raise ValueError(f"unknown benchmark {name!r}: expected one of {', '.join(BENCHMARKS)}")
