"""A trainer rank's work in a round: its clients one after another, each from the global model (Hsu et al.,
Algorithm 1: E epochs of batches of B over the client's n_k images, plain SGD with weight decay), summed as
sum_k n_k theta_k and sum_k n_k in float64, which the ranks then reduce to the server."""
from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F

from fedmpi.algorithms import LocalRound, views
from fedmpi.crossdevice.client_data import ClientData, augment, to_tensor


def client_seed(seed: int, r: int, k: int) -> int:
    """The seed of client k's batch order in round r: independent of which rank trains it, so the global model
    does not depend on the number of trainer ranks."""
    return int(np.random.SeedSequence([seed, r, k]).generate_state(1, np.uint64)[0] >> 1)


class LocalTrainer:
    def __init__(self, model: torch.nn.Module, state, algorithm, data: ClientData, *, epochs: int, batch_size: int,
                 seed: int, augment: bool, device, dtype):
        self.model, self.state, self.algorithm, self.data = model, state, algorithm, data
        self.epochs, self.batch_size, self.seed, self.augment = epochs, batch_size, seed, augment
        self.device, self.dtype = device, dtype
        self.numel = state.numel

    def payload(self) -> torch.Tensor:
        """float64 [numel + 1]: sum_k n_k theta_k, then sum_k n_k (zero when the rank trains no client)."""
        return torch.zeros(self.numel + 1, dtype=torch.float64, device=self.device)

    def train_round(self, theta: torch.Tensor, clients: list[int], r: int, lr: float) -> tuple[torch.Tensor, dict]:
        """(payload, statistics) after training `clients` from the global `theta` in round r."""
        out = self.payload()
        loss_sum, images = 0.0, 0
        for k in clients:
            loss, n = self.train_client(theta, k, r, lr)
            out[:-1].add_(self.state.read().to(torch.float64), alpha=n)
            out[-1] += n
            loss_sum += loss * n
            images += n * self.epochs
        return out, {"clients": len(clients), "weight": float(out[-1]), "loss_sum": loss_sum, "images": images}

    def train_client(self, theta: torch.Tensor, k: int, r: int, lr: float) -> tuple[float, int]:
        """Client k's E local epochs from theta; its model is left in the module. Returns (mean loss, n_k)."""
        self.state.write(theta)
        params = self.state.trainable
        self._algo_state = self.algorithm.init_trainer_state(params)  # clients are stateless
        index = self.data.parts[k]
        n = len(index)
        steps = self.epochs * -(-n // self.batch_size)
        self._round = LocalRound(lr=lr, K=steps, global_params=views(theta[:self.state.n_trainable], params))
        generator = torch.Generator().manual_seed(client_seed(self.seed, r, k))
        images, labels = self.data.train.images, self.data.train.labels
        losses = []
        for _ in range(self.epochs):
            order = index[torch.randperm(n, generator=generator).numpy()]
            for start in range(0, n, self.batch_size):
                batch = order[start:start + self.batch_size]
                x = to_tensor(images[batch], self.data.mean, self.data.std, self.dtype)
                if self.augment:
                    x = augment(x, generator)
                y = torch.from_numpy(labels[batch]).to(self.device)
                losses.append(self.step(x.to(self.device), y))
                self._round.step += 1
        with torch.no_grad():
            self.algorithm.end_round(params, self._round, self._algo_state)
        return float(torch.stack(losses).mean()), n

    def step(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        loss = F.cross_entropy(self.model(x), y)
        loss.backward()
        params = self.state.trainable
        with torch.no_grad():
            self.algorithm.local_step(params, [p.grad for p in params], self._round, self._algo_state)
        for p in params:
            p.grad = None
        return loss.detach().to(torch.float64)
