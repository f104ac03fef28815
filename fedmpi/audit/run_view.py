"""What an audit reads from a run: the round the server recorded (RUN/received/round-R.h5, core/received.py),
the run's public configuration (its log.h5), and, to score an attack only, a party's own images. Every reader
raises `Refused` with one line naming what is missing; nothing here writes into the run's folder."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path

import h5py
import numpy as np
import torch

from fedmpi.core.received import FOLDER, round_file


class Refused(Exception):
    """The audit cannot run: one line naming what is missing."""


@dataclass(frozen=True)
class RunView:
    """The server's view of one recorded round (`received`: its datasets and attributes) and the run's config."""
    run: Path
    round: int
    cfg: object
    received: dict


def recorded_rounds(run: Path) -> list[int]:
    return sorted(int(p.stem.split("-")[1]) for p in (run / FOLDER).glob("round-*.h5"))


def read_received(run: Path, round_number: int) -> dict:
    if not (run / "log.h5").is_file():
        raise Refused(f"{run} is not a run folder: {run / 'log.h5'} is missing")
    path = round_file(run, round_number)
    if not path.is_file():
        held = recorded_rounds(run)
        raise Refused(f"round {round_number} was not recorded: {run / FOLDER} holds rounds {held or 'none'} "
                      f"(record it with log.record_received=[{round_number}])")
    with h5py.File(path, "r") as f:
        received = {key: torch.from_numpy(f[key][:]) for key in f}
        received.update({key: f.attrs[key] for key in f.attrs})
    received["upload_names"] = [str(n) for n in received["upload_names"]]
    return received


def run_config(run: Path, data_root: str | None = None):
    """The run's configuration as its log recorded it; `data_root` where the data has moved since."""
    from fedmpi.config import config_from_yaml

    with h5py.File(run / "log.h5", "r") as f:
        text = f["config"][()]
    cfg = config_from_yaml(text.decode() if isinstance(text, bytes) else text, where=str(run / "log.h5"))
    if data_root:
        cfg = dataclasses.replace(cfg, data=dataclasses.replace(cfg.data, root=data_root))
    return cfg


def open_round(run: Path, round_number: int, data_root: str | None = None) -> RunView:
    received = read_received(run, round_number)
    return RunView(run, round_number, run_config(run, data_root), received)


def opened(cfg, specs, what: str, open_data):
    """open_data(), or Refused naming `what` is missing: a synthetic set not where the run wrote it (never
    generated here), or data that cannot be read."""
    from fedmpi.data.sets import synthetic_folder

    missing = f"{what} is missing (data.root={cfg.data.root})"
    for spec in specs:
        if spec.kind == "synthetic" and not synthetic_folder(spec, cfg.data).is_dir():
            raise Refused(f"{missing}: {synthetic_folder(spec, cfg.data)} not found")
    try:
        return open_data()
    except (OSError, ValueError) as error:
        raise Refused(f"{missing}: {str(error).splitlines()[0]}") from None


def party_images(cfg, party_name: str) -> tuple[torch.Tensor, np.ndarray]:
    """The party's images (in [-1, 1]) and identities, read from the run's data to score an attack only; a
    synthetic set is read where the run wrote it, never generated here."""
    from fedmpi.layout import build_layout
    from fedmpi.silo.party_data import open_party_dataset

    party = next(p for p in build_layout(cfg).parties if p.name == party_name)
    dataset = opened(cfg, party.specs, f"the ground truth of party {party_name}",
                     lambda: open_party_dataset(party, cfg.data))
    items = [dataset[i] for i in range(len(dataset))]
    return torch.stack([x for x, _ in items]), np.array([int(y) for _, y in items])


def client_images(cfg, clients) -> list[tuple[torch.Tensor, np.ndarray]]:
    """Each device client's images (in [-1, 1], in the order of its part of the face set) and identities, read
    to score an attack only; a synthetic set is read where the run wrote it, never generated here."""
    from fedmpi.crossdevice.face_clients import open_face_clients

    faces = opened(cfg, [cfg.clients.faces], "the ground truth of the device clients", lambda: open_face_clients(cfg))
    out = []
    for k in clients:
        index = faces.parts[k]
        images = torch.stack([faces.dataset[(int(i), False)][0] for i in index])
        out.append((images, faces.dataset.labels[index].astype(np.int64)))
    return out


def model_at(cfg, theta: torch.Tensor):
    """The run's backbone holding Θ, and its BackboneState (the flat order of an upload)."""
    from fedmpi.core.state import BackboneState
    from fedmpi.models.backbone import build_backbone

    model = build_backbone(cfg, torch.device("cpu"), theta.dtype)
    state = BackboneState(model)
    state.write(theta)
    return model, state


def embed(model, images: torch.Tensor) -> torch.Tensor:
    model.eval()
    with torch.no_grad():
        return model(images)


def as_parameters(model, delta: torch.Tensor) -> list[torch.Tensor]:
    """A flat update over the trainable parameters, split and shaped as BackboneState orders them."""
    shapes = [p.shape for p in model.parameters() if p.requires_grad]
    pieces = torch.split(delta, [int(np.prod(s)) for s in shapes])
    return [piece.reshape(s) for piece, s in zip(pieces, shapes)]


def log_row(run: Path, table: str, round_number: int) -> dict:
    """Round R's (from 1) row of a table of the run's log, {} where the table has none."""
    from fedmpi.store.log_reader import LogReader

    with LogReader(run / "log.h5") as log:
        columns = log.table(table) if table in log.f else {}
        hit = np.flatnonzero(np.asarray(columns.get("round", [])) == round_number - 1)
        return {key: np.asarray(value)[hit[-1]].tolist() for key, value in columns.items()} if len(hit) else {}


def sampled_clients(run: Path, round_number: int) -> np.ndarray:
    """The clients a cross-device run sampled in rounds 1..R (the log's `clients` table)."""
    from fedmpi.store.log_reader import LogReader

    with LogReader(run / "log.h5") as log:
        columns = log.table("clients")
        rounds, ids = np.asarray(columns["round"]), np.asarray(columns["ids"])
    return np.unique(ids[rounds <= round_number - 1])
