"""How a party's trainer rank runs its step on its device, from the run's settings (run.channels_last,
run.compile, run.cuda_graphs, optim.amp_batchnorm, optim.fused; docs/GPU.md says what each measured): the
transforms of fedmpi/models/speed.py applied to the rank's backbone and classifier in the order they need
(layout and BatchNorm before the backbone's memory is shared or wrapped by DDP, CUDA graphs before DDP,
compiling last), and the first step's seconds where it compiles or captures."""
from __future__ import annotations

from fedmpi.errors import ConfigError
from fedmpi.models import speed


class StepSpeed:
    def __init__(self, cfg, device):
        run, optim = cfg.run, cfg.optim
        cuda = device.type == "cuda"
        if run.cuda_graphs and not cuda:
            raise ConfigError(f"run.cuda_graphs: CUDA graphs need a GPU; this rank runs on {device.type}")
        if cfg.data.decoder == "gpu" and not cuda:
            raise ConfigError(f"data.decoder: gpu decodes on the rank's GPU; this rank runs on {device.type}")
        self.device = device
        self.channels_last = cuda if run.channels_last is None else run.channels_last
        self.batchnorm_fp32 = optim.amp_batchnorm == "fp32" and cuda   # autocast runs on CUDA only
        self.compile_mode = speed.compile_mode(run.compile, run.cuda_graphs)
        self.graphs = run.cuda_graphs and self.compile_mode is None     # captured without compiling
        self.fused = cuda if optim.fused is None else optim.fused
        self.timer = speed.FirstCallTimer() if self.compile_mode or self.graphs else None

    def describe(self) -> str:
        parts = ["channels_last" if self.channels_last else "NCHW"]
        if self.batchnorm_fp32:
            parts.append("BatchNorm fp32")
        if self.compile_mode:
            parts.append(f"torch.compile mode={self.compile_mode}")
        if self.graphs:
            parts.append("CUDA graphs")
        return ", ".join(parts)

    def prepare(self, backbone) -> None:
        """Layout and BatchNorm precision of the backbone: before its tensors become views of a shared buffer
        and before DDP registers its parameters."""
        if self.channels_last:
            speed.to_channels_last(backbone)
        if self.batchnorm_fp32:
            speed.keep_batchnorm_fp32(backbone)

    def images(self, images):
        """A batch in the layout the backbone was prepared for."""
        if self.channels_last:
            import torch

            return images.contiguous(memory_format=torch.channels_last)
        return images

    def capture(self, backbone, state, batch: int, image_size: int, autocast) -> None:
        """CUDA graphs of the backbone's forward and backward (run.cuda_graphs without compiling), for batches of
        `batch` images; the warm-up and capture passes leave the model's state (BatchNorm's running statistics)
        as it was."""
        if not self.graphs:
            return
        import torch

        before = state.read().clone()
        sample = self.images(torch.zeros(batch, 3, image_size, image_size, device=self.device))
        with autocast():
            speed.graphed(backbone, sample)
        state.write(before)

    def compiled(self, module):
        return speed.compiled(module, self.compile_mode) if self.compile_mode else module
