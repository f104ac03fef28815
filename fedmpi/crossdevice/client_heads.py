"""A virtual client's head, the device's counterpart of a silo party's margin classifier: the loss of the
features f = model(x) the method's local objective (algorithms/objective.py) builds its step's loss from, and
what the client trains beside θ:

  ImageClasses   the CIFAR clients (Hsu et al.): cross-entropy of the model's logits; nothing of its own
  OwnClassRows   the face clients (Yu et al., Aggarwal et al.): the positive-only loss (models/positive_only.py)
                 against the client's own class embeddings w_c, trained beside θ by plain SGD at the client's lr and
                 sent back to the server with the client's state (crossdevice/client_state.py). A client's w_c
                 arrives as zeros before its first round: it starts as the normalised sum of the unit features of c's
                 images of that identity under the frozen start (Aggarwal et al.'s choice; the model the run started
                 from, model.init, kept frozen on every trainer rank)."""
from __future__ import annotations

import copy

import torch
import torch.nn.functional as F

from fedmpi.models.frozen_batch_norm import BatchNormMode
from fedmpi.models.positive_only import positive_loss


class ImageClasses:
    rows = 0                     # class-embedding values a client keeps

    def begin(self, k: int, rows: torch.Tensor | None) -> None:
        pass

    def loss(self, f: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return F.cross_entropy(f, y)

    def step(self, lr: float) -> None:
        pass

    def end(self, rows: torch.Tensor | None) -> None:
        pass


class OwnClassRows:
    def __init__(self, model: torch.nn.Module, data, embedding_size: int, nu: float, batch_size: int,
                 frozen_batch_norm: bool = True):
        self.start = copy.deepcopy(model).eval()       # the pretrained model, for w_c's first value
        self.batch_norm = BatchNormMode(model, frozen_batch_norm)
        for p in self.start.parameters():
            p.requires_grad_(False)
        self.data, self.d, self.nu, self.batch_size = data, embedding_size, nu, batch_size
        self.rows = data.per_client * embedding_size
        self.w: torch.Tensor | None = None

    def begin(self, k: int, rows: torch.Tensor) -> None:
        self.batch_norm.apply()
        w = rows.view(self.data.per_client, self.d)
        if not w.any():
            w = self.first_rows(k, w)
        self.w = w.detach().clone().requires_grad_(True)

    @torch.no_grad()
    def first_rows(self, k: int, like: torch.Tensor) -> torch.Tensor:
        """Each of client k's rows: the normalised sum of the unit features of its identity's images under the frozen
        start (the direction of their mean unit feature)."""
        index = self.data.parts[k]
        total = torch.zeros_like(like)
        for start in range(0, len(index), self.batch_size):
            x, y = self.data.batch(index[start:start + self.batch_size], None, False, like.dtype)
            total.index_add_(0, y.to(like.device), F.normalize(self.start(x.to(like.device)), dim=1))
        return F.normalize(total, dim=1)

    def loss(self, f: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return positive_loss(self.w, f, y, self.nu)

    @torch.no_grad()
    def step(self, lr: float) -> None:
        self.w.sub_(self.w.grad, alpha=lr)
        self.w.grad = None

    def end(self, rows: torch.Tensor) -> None:
        rows.copy_(self.w.detach().reshape(-1))


def client_head(cfg, model: torch.nn.Module, data):
    """The clients' head of a run (before the run's first step: `model` holds the starting model)."""
    if not cfg.clients.face_clients:
        return ImageClasses()
    return OwnClassRows(model, data, cfg.model.embedding_size, cfg.clients.positive_margin, cfg.optim.batch_size,
                        cfg.clients.batch_norm == "frozen")
