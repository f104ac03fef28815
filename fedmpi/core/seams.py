"""The seams of the neutral core: what the round loop (`core/server.py`) takes from a setting. The silo
parties (`fedmpi/silo/setting.py`, SiloSetting) and the cross-device clients (`fedmpi/crossdevice/setting.py`,
CrossDeviceSetting) each provide them; the loop itself knows neither. docs/ARCHITECTURE.md, "The round loop and
its seams", says when each member is called."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Protocol

import numpy as np
import torch


@dataclass
class RoundStats:
    """A round's numbers per row of the log's per-party columns (silo: one row per party; cross-device: one row
    for the sampled clients)."""
    loss: np.ndarray          # [P] mean training loss
    images: np.ndarray        # [P] images trained
    seconds: np.ndarray       # [P] the slowest rank's seconds of local training
    bad_records: np.ndarray   # [P] records skipped (data.skip_bad), int64
    first_step_s: np.ndarray | None = None   # [P] the slowest rank's first step where it compiled, else None
    columns: dict | None = None   # {name: [P]} the leaders' numbers of their party's round (a local objective's,
                                  # the personalised evaluation's), NaN where a party sent none


def round_statistics(r: int) -> str:
    """What the server's per-round gather of the trainers' statistics is called in a timeout message."""
    return f"round {r + 1} statistics (gather over server + trainers)"


class Exchange(Protocol):
    """Where a round's uploads come from and where the global payload goes (server side)."""
    participation: float      # fraction of all clients that took part this round (SCAFFOLD's |S|/N)
    gives_uploads: bool       # `rows` holds every upload (else the exchange sums them on the way)
    rows: torch.Tensor | None  # [P, D_up] uploads of the last completed round, party by party
    upload_names: list[str]   # the round's uploads as messages name them (the parties; the sampled clients)

    def post(self, r: int) -> None: ...                           # start receiving round r's uploads
    def is_complete(self) -> bool: ...
    def wait(self) -> None: ...
    def weighted_mean(self, w, out: torch.Tensor) -> torch.Tensor: ...   # Σ w_i u_i into out [D_up]
    def weights(self, w: torch.Tensor | None) -> torch.Tensor | None: ...  # the round's w: the side work's, or
                                                                           # the parties' upload column `weight`
    def send(self, down: torch.Tensor) -> None: ...                # the global payload to every trainer
    def round_stats(self, r: int) -> RoundStats: ...
    def bytes_per_round(self) -> dict[str, int]: ...               # {"up", "down", "intra"}
    def state_dict(self) -> dict: ...                              # what a checkpoint keeps of it
    def load_state_dict(self, state: dict) -> None: ...


class Uploads(Protocol):
    """A carrier rank's uploads of a round (trainer side): a silo party's leader carries its party's upload, a
    cross-device trainer rank those of the clients it trains. The plain ones send them as they are
    (silo/exchange.py LeaderUpload, crossdevice/rank_uploads.py RankUploads); core/secure_participant.py masks them."""
    each: Callable[[torch.Tensor], None] | None   # takes each participant's upload as it is trained (None: the
                                                  # carrier sums them and `end` sends the sum)

    def begin(self, r: int, participants: list[int], down: torch.Tensor) -> None: ...   # before they train
    def end(self, total: torch.Tensor | None = None) -> None: ...                        # after the last


class Weighting(Protocol):
    def for_round(self, r: int, rows: torch.Tensor | None) -> torch.Tensor | None: ...   # the round's w


class SideWork(Protocol):
    """What the server does beside the exchange: evaluation, FV, ..."""
    weighting: Weighting
    uploads_kept: int         # earlier rounds' uploads it still reads while the next round's land

    def work_until(self, complete: Callable[[], bool], r: int) -> None: ...   # while the uploads travel
    def round_done(self, r: int, theta: torch.Tensor) -> None: ...            # after the new Θ went out
    def round_columns(self) -> dict: ...          # its columns of the round's /rounds row (fv_iterations)
    def progress_note(self) -> str: ...           # shown at the end of the round's progress line
    def flush_evaluations(self) -> None: ...      # run what is due before a checkpoint
    def finish(self) -> None: ...
    def summary(self) -> str: ...
    def state_dict(self) -> dict: ...
    def load_state_dict(self, state: dict) -> None: ...


class Setting(Protocol):
    """A federated setting as the round loop takes it (the model and the rule are the run's parts, core/build.py)."""
    parties: list[str]                  # the rows of the log's per-party columns
    data_description: dict              # the log's /data
    log_schema: dict                    # RunLog keyword arguments: val_sets, fv_candidates, eval_columns, extra_tables,
                                        # attrs
    party_tables: dict                  # {table: [column]}: the log tables (in extra_tables) of RoundStats.columns,
                                        # a row in each round where a party reported one of them

    def side_work(self, log) -> SideWork: ...
    # built after the side work: it keeps `kept` earlier rounds' uploads that the side work still reads
    def exchange(self, log, up_numel: int, down_numel: int, kept: int) -> Exchange: ...
    # the class part's payloads (algorithms/class_parts.py): post / is_complete / wait like the exchange,
    # step(r, lr, state, excluded) (the part's step, then the replies), row, bytes_per_round (silo/server_classes.py)
    def class_exchange(self, part): ...


class NoClasses:
    """The class exchange of a part that lets nothing leave a party (and of a setting without class payloads): the
    server's side of nothing in core/class_kit.py's kit."""
    row = None

    def __init__(self, part=None, kit=None):
        pass

    def post(self, r: int) -> None:
        pass

    def is_complete(self) -> bool:
        return True

    def wait(self) -> None:
        pass

    def step(self, r: int, lr: float, state: dict, excluded=None) -> None:
        pass

    def bytes_per_round(self) -> dict[str, int]:
        return {"up": 0, "down": 0, "intra": 0}

    def recorded(self) -> dict:
        """What of the class payloads the server holds before its class step, for log.record_received
        (core/received.py): nothing here."""
        return {}
