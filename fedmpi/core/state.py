"""The shared model's state as one flat buffer (the server's Θ, a trainer's θ_i), whatever the model."""
from __future__ import annotations

import torch

from fedmpi.core.flat import flatten, unflatten_into


class BackboneState:
    """The backbone's state as one flat buffer: [trainable params | frozen params | float buffers].

    Trainable parameters come first so that momentum-style state (PFM's M, FedAvgM's v) covers a prefix.
    `variances`: where the BatchNorm running variances lie in the flat buffer (values that must stay >= 0 for the
    model to evaluate; DP's noise is clamped there).
    """

    def __init__(self, backbone: torch.nn.Module):
        params = list(backbone.parameters())
        self.trainable = [p for p in params if p.requires_grad]
        frozen = [p for p in params if not p.requires_grad]
        buffers = [b for b in backbone.buffers() if b.is_floating_point()]
        self.tensors = self.trainable + frozen + buffers
        self.n_trainable = sum(p.numel() for p in self.trainable)
        self.numel = sum(t.numel() for t in self.tensors)
        self.home: torch.Tensor | None = None   # the flat buffer the tensors are views of (live_in), if any
        names = {id(b): name for name, b in backbone.named_buffers()}
        offsets = torch.tensor([0] + [t.numel() for t in self.tensors]).cumsum(0).tolist()
        self.variances = [slice(offsets[i], offsets[i + 1]) for i, t in enumerate(self.tensors)
                          if names.get(id(t), "").endswith("running_var")]

    def read(self, out: torch.Tensor | None = None) -> torch.Tensor:
        if out is not None and out is self.home:
            return out   # the tensors are its views already
        return flatten(self.tensors, out)

    def live_in(self, flat: torch.Tensor) -> None:
        """The state's tensors become views of `flat` (D values, theirs copied in), so that reading the state into
        it is no copy and holds no second model (a party leader's upload on CPU)."""
        offset = 0
        with torch.no_grad():
            for t in self.tensors:
                n = t.numel()
                view = flat[offset:offset + n].view_as(t)
                view.copy_(t)
                t.data = view
                offset += n
        self.home = flat

    def write(self, flat: torch.Tensor) -> None:
        unflatten_into(flat, self.tensors)

    def nbytes(self) -> int:
        return self.numel * self.tensors[0].element_size()
