"""Backbones (IResNet) and margin classifiers (ArcFace/CosFace; plain, replicated or sharded in a party)."""
from .heads import ArcFaceMargin, CosFaceMargin, build_classifier, make_margin
from .iresnet import IResNet, iresnet

__all__ = ["ArcFaceMargin", "CosFaceMargin", "IResNet", "build_classifier", "iresnet", "make_margin"]
