"""Per-client trainer state in the cross-device simulation (the keys a rule lists in `client_state`, e.g.
SCAFFOLD's c_i). The sampler spreads a round's clients over the trainer ranks anew each round, so a client's
state cannot stay on a rank: the server keeps every client's state (`ClientStore`, CPU memory, in its
checkpoint part), sends each sampled client's state with the round's assignment and takes the updated state
back (point-to-point, `crossdevice/exchange.py`). A state travels as one flat tensor (`StateLayout`)."""
from __future__ import annotations

import torch

from fedmpi.core.flat import unflatten_into


def _leaves(state: dict, keys: tuple[str, ...]) -> list[torch.Tensor]:
    out = []
    for key in keys:
        value = state[key]
        out.extend(value if isinstance(value, (list, tuple)) else [value])
    return out


class StateLayout:
    """Where the rule's per-client keys lie in one flat tensor; `initial` is a client's state before its first
    round (from the rule's init_trainer_state)."""

    def __init__(self, algorithm, params: list[torch.Tensor]):
        self.keys = tuple(algorithm.client_state)
        template = algorithm.init_trainer_state(params)
        missing = [k for k in self.keys if k not in template]
        if missing:
            raise ValueError(f"{algorithm.name}: client_state names {missing}, which init_trainer_state lacks")
        self.initial = self.pack(template)
        self.numel = self.initial.numel()

    def pack(self, state: dict, out: torch.Tensor | None = None) -> torch.Tensor:
        leaves = [t.reshape(-1) for t in _leaves(state, self.keys)]
        if out is None:
            return torch.cat(leaves) if leaves else torch.zeros(0)
        return torch.cat(leaves, out=out) if leaves else out

    def unpack(self, flat: torch.Tensor, state: dict) -> None:
        unflatten_into(flat, _leaves(state, self.keys))


class ClientStore:
    """The server's copy of every client's state: clients never sampled hold `initial` (not stored)."""

    def __init__(self, layout: StateLayout):
        self.layout = layout
        self.initial = layout.initial.to("cpu")
        self.states: dict[int, torch.Tensor] = {}

    def get(self, k: int) -> torch.Tensor:
        return self.states.get(int(k), self.initial)

    def put(self, k: int, flat: torch.Tensor) -> None:
        self.states[int(k)] = flat.to("cpu", copy=True)

    def state_dict(self) -> dict:
        ids = sorted(self.states)
        values = (torch.stack([self.states[k] for k in ids]) if ids
                  else torch.zeros(0, self.layout.numel, dtype=self.initial.dtype))
        return {"ids": torch.tensor(ids, dtype=torch.int64), "values": values}

    def load_state_dict(self, state: dict) -> None:
        values = state["values"]
        if values.shape[1:] != (self.layout.numel,) or values.dtype != self.initial.dtype:
            raise ValueError(f"checkpoint: the client states are {values.dtype} {list(values.shape)}, this run "
                             f"keeps {self.initial.dtype} [clients, {self.layout.numel}]")
        self.states = {int(k): v.clone() for k, v in zip(state["ids"].tolist(), values)}


def client_store(algorithm, params: list[torch.Tensor]) -> ClientStore | None:
    """The store for a rule that keeps per-client state; None for a rule whose clients are stateless."""
    return ClientStore(StateLayout(algorithm, params)) if algorithm.client_state else None
