"""Backbones (IResNet) and margin classifiers (ArcFace/CosFace; plain, replicated or sharded in a party)."""
from .classifier import build_classifier
from .heads import ArcFaceMargin, CosFaceMargin, make_margin
from .iresnet import IResNet, iresnet

__all__ = ["ArcFaceMargin", "CosFaceMargin", "IResNet", "build_classifier", "iresnet", "make_margin"]
