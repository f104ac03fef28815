"""`python -m tools.export CHECKPOINT --out model.pth [--onnx model.onnx]`

The global backbone Θ of a checkpoint as an insightface-compatible model: `model.pth` is the backbone's
state_dict (insightface's IResNet key names, float32), loadable with `fedmpi.models.iresnet(...)` or
insightface's own `iresnet*`; `model.onnx` takes input `data` [batch, 3, H, W] (batch dynamic) and returns
`embedding` [batch, d]. The architecture comes from the config saved in the checkpoint.

`--classifier PARTY --classifier-out FILE` also writes that party's whole classifier, its ranks' shards merged
(class centres in class order), as one PartialFC state_dict of arcface_torch (`{"weight": [classes, d]}`,
float32, what `PartialFC_V2.load_state_dict` takes on one GPU); the momentum stays in the checkpoint
(`python -m tools.reshard` moves it to another rank count).

CHECKPOINT is a checkpoint folder (ckpt/round_000012), or a run or ckpt folder (its newest complete one).
ONNX needs the `onnx` package; without it the .pth is still written and the ONNX export is skipped.
"""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import torch

from fedmpi.config import ConfigError
from fedmpi.protocols.backbone_file import BackboneFileError, load_global_backbone
from fedmpi.store.checkpoint import ResumeError


class ExportError(RuntimeError):
    pass


def _replace_atomically(out: Path, write) -> None:
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.name}.tmp-{os.getpid()}")
    try:
        write(tmp)
        os.replace(tmp, out)
    finally:
        tmp.unlink(missing_ok=True)


def export_state_dict(backbone: torch.nn.Module, out: Path) -> None:
    _replace_atomically(Path(out), lambda tmp: torch.save(backbone.state_dict(), tmp))


def export_onnx(backbone: torch.nn.Module, image_size: int, out: Path) -> None:
    try:
        import onnx
    except ImportError:
        raise ExportError("the onnx package is not installed (pip install onnx)") from None
    example = torch.zeros(1, 3, image_size, image_size)

    def write(tmp):
        torch.onnx.export(backbone, (example,), str(tmp), input_names=["data"], output_names=["embedding"],
                          dynamic_axes={"data": {0: "batch"}, "embedding": {0: "batch"}}, dynamo=False)
        onnx.checker.check_model(str(tmp))

    _replace_atomically(Path(out), write)


def export_classifier(folder: Path, party: str, classifier_mode: str, out: Path) -> tuple[int, int, int]:
    """Write party `party`'s merged classifier to `out`; (classes, embedding size, shards merged)."""
    from fedmpi.relayout.party_state import read_party_parts, saved_rank_count
    from fedmpi.relayout.shards import is_replicated, merge_parts
    from fedmpi.store.manifest import read_manifest

    ranks = saved_rank_count(read_manifest(folder), party)
    if ranks is None:
        raise ExportError(f"{folder}: no party {party} in this checkpoint")
    merged = merge_parts(read_party_parts(folder, party, ranks), is_replicated(classifier_mode, ranks))
    weight = merged["classifier"]["weight"].to(torch.float32).contiguous()
    _replace_atomically(Path(out), lambda tmp: torch.save({"weight": weight}, tmp))
    return weight.shape[0], weight.shape[1], ranks


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.export", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("checkpoint", help="checkpoint folder, or a run/ckpt folder (its newest complete one)")
    parser.add_argument("--out", required=True, help="where to write the state_dict (.pth)")
    parser.add_argument("--onnx", default=None, help="also write an ONNX model here")
    parser.add_argument("--classifier", default=None, metavar="PARTY", help="also write this party's classifier")
    parser.add_argument("--classifier-out", default=None, help="where to write it (default: PARTY_fc.pt beside --out)")
    args = parser.parse_args(argv)
    try:
        backbone, cfg, folder = load_global_backbone(args.checkpoint)
        export_state_dict(backbone, Path(args.out))
    except (ResumeError, ConfigError, BackboneFileError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    m = cfg.model
    print(f"{args.out}: {m.backbone} (width {m.width}, embedding {m.embedding_size}, input {cfg.data.image_size}) "
          f"from {folder}")
    if args.classifier:
        out = Path(args.classifier_out or Path(args.out).with_name(f"{args.classifier}_fc.pt"))
        try:
            classes, width, shards = export_classifier(folder, args.classifier, m.classifier, out)
        except (ExportError, ResumeError) as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 1
        print(f"{out}: party {args.classifier}'s classifier, {classes} classes x {width}, merged from {shards} "
              f"shard{'s' if shards > 1 else ''}")
    if args.onnx:
        try:
            export_onnx(backbone, cfg.data.image_size, Path(args.onnx))
        except ExportError as exc:
            print(f"--onnx skipped: {exc}", file=sys.stderr)
            return 0
        print(f"{args.onnx}: input data [batch, 3, {cfg.data.image_size}, {cfg.data.image_size}], "
              f"output embedding [batch, {m.embedding_size}]")
    return 0


if __name__ == "__main__":
    sys.exit(main())
