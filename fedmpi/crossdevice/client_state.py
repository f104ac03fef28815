"""Per-client trainer state in the cross-device simulation (the keys a rule lists in `client_state`, e.g.
SCAFFOLD's c_i). The sampler spreads a round's clients over the trainer ranks anew each round, so a client's
state cannot stay on a rank: the server keeps every client's state (`ClientStore`, CPU memory, in its
checkpoint part), sends each sampled client's state with the round's assignment and takes the updated state
back (point-to-point, `crossdevice/exchange.py`). A state travels as one flat tensor (`StateLayout`): the rule's
keys, then the client's class-embedding rows where the clients hold faces (w_c, identities_per_client x d values:
the server keeps W for all M clients in one dense table, `ClientStore.rows`, and returns w_c when c is next
sampled; a row of zeros is one not yet initialised, which the device fills from its images)."""
from __future__ import annotations

import numpy as np
import torch

from fedmpi.aggregation.class_payload_check import out_of_range
from fedmpi.comm.message_end import reached_end
from fedmpi.core.flat import unflatten_into


def _leaves(state: dict, keys: tuple[str, ...]) -> list[torch.Tensor]:
    out = []
    for key in keys:
        value = state[key]
        out.extend(value if isinstance(value, (list, tuple)) else [value])
    return out


class StateLayout:
    """Where the rule's per-client keys lie in one flat tensor, then `rows` values of class embeddings; `initial` is
    a client's state before its first round (the rule's init_trainer_state, rows of zeros)."""

    def __init__(self, algorithm, params: list[torch.Tensor], rows: int = 0):
        self.keys = tuple(algorithm.client_state)
        template = algorithm.init_trainer_state(params)
        missing = [k for k in self.keys if k not in template]
        if missing:
            raise ValueError(f"{algorithm.name}: client_state names {missing}, which init_trainer_state lacks")
        rule = self.pack(template)
        self.rule_numel, self.rows_numel = rule.numel(), rows
        self.initial = torch.cat([rule, torch.zeros(rows, dtype=params[0].dtype, device=rule.device)])
        self.numel = self.initial.numel()

    def pack(self, state: dict, out: torch.Tensor | None = None) -> torch.Tensor:
        leaves = [t.reshape(-1) for t in _leaves(state, self.keys)]
        if out is None:
            return torch.cat(leaves) if leaves else torch.zeros(0)
        if leaves:
            torch.cat(leaves, out=out[:self.rule_numel])
        return out

    def unpack(self, flat: torch.Tensor, state: dict) -> None:
        unflatten_into(flat[:self.rule_numel], _leaves(state, self.keys))

    def rows(self, flat: torch.Tensor) -> torch.Tensor:
        """The class-embedding values of a client's flat state (a view)."""
        return flat[self.rule_numel:]


class ClientStore:
    """The server's copy of every client's state: the rule's part of clients never sampled is `initial` (not
    stored); the class embeddings of all `population` clients in `rows` [M, rows_numel] (zeros until a client's
    first round), `seen` [M] marking those a client has sent."""

    def __init__(self, layout: StateLayout, population: int = 0, norm_ratio: float = 10.0):
        self.layout, self.norm_ratio = layout, norm_ratio
        self.initial = layout.initial.to("cpu")
        self.states: dict[int, torch.Tensor] = {}
        self.rows = torch.zeros(population if layout.rows_numel else 0, layout.rows_numel, dtype=self.initial.dtype)
        self.seen = torch.zeros(len(self.rows), dtype=torch.bool)
        self.pool = None      # a summary part's relayed pool (crossdevice/cluster_pool.py), checkpointed here
        self.returned: list[int] = []     # the clients whose rows the latest round stored (the round's anchors)
        self.replaced = self.rows[:0]     # the rows they replaced
        self.were_seen = self.seen[:0]    # and whether those were rows a client had sent (else zeros, never seen)

    def get(self, k: int) -> torch.Tensor:
        rule = self.states.get(int(k), self.initial[:self.layout.rule_numel])
        return torch.cat([rule, self.rows[int(k)]]) if self.layout.rows_numel else rule

    def put(self, k: int, flat: torch.Tensor, rows_kept: bool = True) -> None:
        flat = flat.to("cpu")
        if self.layout.rule_numel:
            self.states[int(k)] = flat[:self.layout.rule_numel].clone()
        if self.layout.rows_numel and rows_kept:
            self.rows[int(k)] = self.layout.rows(flat)
            self.seen[int(k)] = True

    def put_round(self, r: int, returned: list[tuple[int, torch.Tensor]]) -> None:
        """The round's returned states; a state that did not fill its buffer (comm/message_end.py: the exchange
        marked it) is named and not stored at all; a client's class embeddings that are not finite or out of range
        among the round's (aggregation/class_payload_check.py) are named and left out: the store keeps its last good
        rows, which the client gets when it is next sampled."""
        whole = [(k, flat) for k, flat in returned if reached_end(flat)]
        for k, flat in returned:
            if not reached_end(flat):
                print(f"round {r + 1}: the state of client {k} is wrongly shaped (shorter than its "
                      f"{self.layout.numel} values): left out, its last good state and rows kept", flush=True)
        why = (out_of_range([self.layout.rows(flat) for _, flat in whole], self.norm_ratio)
               if self.layout.rows_numel else [None] * len(whole))
        if self.layout.rows_numel:     # whose rows this round stores, and the rows they replace (zeros: first seen)
            self.returned = [int(k) for (k, _), reason in zip(whole, why) if reason is None]
            self.replaced, self.were_seen = self.rows[self.returned], self.seen[self.returned]
        for (k, flat), reason in zip(whole, why):
            if reason:
                print(f"round {r + 1}: the class embeddings of client {k} are {reason}: left out, its last good "
                      f"rows kept", flush=True)
            self.put(k, flat, rows_kept=reason is None)

    def leave_out(self, clients: set[int]) -> None:
        """Take back the rows the latest round stored for `clients` (those whose upload the server's check left
        out, as the silo leaves a party out of its class step): each gets its last good rows back (zeros and not
        seen where it had none), so that the round's class step neither moves nor pushes against what it sent."""
        back = [i for i, k in enumerate(self.returned) if k in clients]
        if not back:
            return
        for i in back:
            k = self.returned[i]
            self.rows[k], self.seen[k] = self.replaced[i], self.were_seen[i]
        kept = [i for i in range(len(self.returned)) if i not in set(back)]
        self.returned = [self.returned[i] for i in kept]
        self.replaced, self.were_seen = self.replaced[kept], self.were_seen[kept]

    def state_dict(self) -> dict:
        ids = sorted(self.states)
        values = (torch.stack([self.states[k] for k in ids]) if ids
                  else torch.zeros(0, self.layout.rule_numel, dtype=self.initial.dtype))
        state = {"ids": torch.tensor(ids, dtype=torch.int64), "values": values}
        if self.pool is not None:
            state["pool"] = self.pool.state_dict()
        return {**state, "rows": self.rows, "seen": self.seen} if self.layout.rows_numel else state

    def load_state_dict(self, state: dict) -> None:
        values = state["values"]
        if values.shape[1:] != (self.layout.rule_numel,) or values.dtype != self.initial.dtype:
            raise ValueError(f"checkpoint: the client states are {values.dtype} {list(values.shape)}, this run "
                             f"keeps {self.initial.dtype} [clients, {self.layout.rule_numel}]")
        self.states = {int(k): v.clone() for k, v in zip(state["ids"].tolist(), values)}
        if "rows" in state:
            if state["rows"].shape != self.rows.shape:
                raise ValueError(f"checkpoint: the clients' class embeddings are {list(state['rows'].shape)}, this "
                                 f"run keeps {list(self.rows.shape)}")
            self.rows.copy_(state["rows"])
            self.seen.copy_(state["seen"])
        if self.pool is not None:
            if "pool" not in state:
                raise ValueError("checkpoint: it keeps no relayed clusters (a run of another method); this run "
                                 "relays its summary part's")
            self.pool.load_state_dict(state["pool"])


def excluded_clients(clients, excluded) -> set[int]:
    """The clients (of the round's sampled `clients`, in their order) whose upload the server's check left out:
    `excluded` [clients] bool (aggregation/upload_check.py), or None where it checked none."""
    if excluded is None or len(excluded) != len(clients):
        return set()
    return set(np.asarray(clients)[np.asarray(excluded, bool)].tolist())


def client_store(algorithm, params: list[torch.Tensor], population: int = 0, rows: int = 0,
                 norm_ratio: float = 10.0) -> ClientStore | None:
    """The store for a rule that keeps per-client state or for clients that keep class embeddings (`rows` values
    each, of `population` clients); None where the clients are stateless."""
    if not algorithm.client_state and not rows:
        return None
    return ClientStore(StateLayout(algorithm, params, rows), population, norm_ratio)
