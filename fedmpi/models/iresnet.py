"""IResNet backbones (IR-18/34/50/100) with insightface's arcface_torch layer layout and state_dict names.

Keys match insightface (`conv1`, `bn1`, `prelu`, `layer1.0.bn1` ... `layer1.0.downsample.0/1`, `bn2`, `fc`,
`features`), so its checkpoints load at width 1 and input 112. Two knobs keep CPU runs small: `input_size`
(a multiple of 16: four stride-2 stages) and `width` (scales the 64/128/256/512 stage channels).
"""
from __future__ import annotations

import torch
from torch import nn

STAGE_BLOCKS = {
    "ir18": (2, 2, 2, 2),
    "ir34": (3, 4, 6, 3),
    "ir50": (3, 4, 14, 3),
    "ir100": (3, 13, 30, 3),
}
STAGE_CHANNELS = (64, 128, 256, 512)
BN_EPS = 1e-05


def _conv3x3(in_channels: int, out_channels: int, stride: int = 1) -> nn.Conv2d:
    return nn.Conv2d(in_channels, out_channels, kernel_size=3, stride=stride, padding=1, bias=False)


class IBasicBlock(nn.Module):
    """Pre-activation-style residual block: BN, conv3x3, BN, PReLU, conv3x3 (stride), BN, + shortcut."""

    def __init__(self, in_channels: int, channels: int, stride: int = 1, downsample: nn.Module | None = None):
        super().__init__()
        self.bn1 = nn.BatchNorm2d(in_channels, eps=BN_EPS)
        self.conv1 = _conv3x3(in_channels, channels)
        self.bn2 = nn.BatchNorm2d(channels, eps=BN_EPS)
        self.prelu = nn.PReLU(channels)
        self.conv2 = _conv3x3(channels, channels, stride)
        self.bn3 = nn.BatchNorm2d(channels, eps=BN_EPS)
        self.downsample = downsample

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.bn3(self.conv2(self.prelu(self.bn2(self.conv1(self.bn1(x))))))
        shortcut = x if self.downsample is None else self.downsample(x)
        return out + shortcut


class IResNet(nn.Module):
    def __init__(self, blocks_per_stage, embedding_size: int = 512, input_size: int = 112,
                 width: float = 1.0, dropout: float = 0.0):
        super().__init__()
        channels = [max(1, int(round(c * width))) for c in STAGE_CHANNELS]
        self.input_size = input_size
        self.embedding_size = embedding_size
        self.conv1 = _conv3x3(3, channels[0])
        self.bn1 = nn.BatchNorm2d(channels[0], eps=BN_EPS)
        self.prelu = nn.PReLU(channels[0])
        in_channels = channels[0]
        for index, (stage_channels, blocks) in enumerate(zip(channels, blocks_per_stage), start=1):
            setattr(self, f"layer{index}", _make_stage(in_channels, stage_channels, blocks))
            in_channels = stage_channels
        self.bn2 = nn.BatchNorm2d(in_channels, eps=BN_EPS)
        self.dropout = nn.Dropout(p=dropout, inplace=True)
        spatial = input_size // 16
        self.fc = nn.Linear(in_channels * spatial * spatial, embedding_size)
        self.features = nn.BatchNorm1d(embedding_size, eps=BN_EPS)
        # insightface freezes the scale of the embedding BN at 1 (only its shift is learned)
        nn.init.constant_(self.features.weight, 1.0)
        self.features.weight.requires_grad = False
        for module in self.modules():
            if isinstance(module, nn.Conv2d):
                nn.init.normal_(module.weight, 0.0, 0.1)
            elif isinstance(module, nn.BatchNorm2d):
                nn.init.constant_(module.weight, 1.0)
                nn.init.constant_(module.bias, 0.0)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.shape[-2:] != (self.input_size, self.input_size):
            raise ValueError(f"IResNet built for {self.input_size}x{self.input_size} input, "
                             f"got {tuple(x.shape[-2:])}")
        x = self.prelu(self.bn1(self.conv1(x)))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        x = torch.flatten(self.bn2(x), 1)
        x = self.fc(self.dropout(x))
        return self.features(x)


def _make_stage(in_channels: int, channels: int, blocks: int) -> nn.Sequential:
    """One stage: a stride-2 block with a 1x1-conv + BN shortcut, then blocks-1 identity blocks."""
    downsample = nn.Sequential(
        nn.Conv2d(in_channels, channels, kernel_size=1, stride=2, bias=False),
        nn.BatchNorm2d(channels, eps=BN_EPS),
    )
    layers = [IBasicBlock(in_channels, channels, stride=2, downsample=downsample)]
    layers += [IBasicBlock(channels, channels) for _ in range(1, blocks)]
    return nn.Sequential(*layers)


def iresnet(name: str, embedding_size: int = 512, input_size: int = 112, width: float = 1.0,
            dropout: float = 0.0) -> IResNet:
    """Build IR-18/34/50/100 by name ('ir18', 'ir34', 'ir50', 'ir100')."""
    if name not in STAGE_BLOCKS:
        raise ValueError(f"unknown backbone {name!r}: expected one of {', '.join(STAGE_BLOCKS)}")
    if not isinstance(input_size, int) or input_size <= 0 or input_size % 16:
        raise ValueError(f"input_size {input_size!r} must be a positive multiple of 16 "
                         f"(four stride-2 stages)")
    if not width > 0:
        raise ValueError(f"width {width!r} must be > 0")
    if not isinstance(embedding_size, int) or embedding_size <= 0:
        raise ValueError(f"embedding_size {embedding_size!r} must be a positive integer")
    if not 0.0 <= dropout < 1.0:
        raise ValueError(f"dropout {dropout!r} must be in [0, 1)")
    return IResNet(STAGE_BLOCKS[name], embedding_size, input_size, width, dropout)
