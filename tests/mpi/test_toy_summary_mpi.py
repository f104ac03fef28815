"""A second summary part, defined in this file only, runs in both settings with no change outside it: the class-part
contract (algorithms/class_parts.py, SummaryPart) is all the silo and the devices call. Each participant's summary
is one cone [p | α | valid]: the direction of the mean of its unit class embeddings, of a fixed angular radius; the
silo relays each party the other's, the devices' server pools the round's for the next cohort. One launch of 4
ranks (this file is its worker) registers the rule and runs it on the silo's two parties (party a of 2 ranks), then
on 8 face clients with albums (3 trainer ranks, 4 clients a round)."""
from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from fedmpi.algorithms.class_parts import SummaryPart
from fedmpi.algorithms.class_rules import ClassRuleOptions
from fedmpi.algorithms.fedavg import FedAvg
from fedmpi.algorithms.method import Method

NAME = "meancone"
ROUNDS = 2
SILO = ["parties=[{name: a, ranks: 2, data: {style: ms1m, identities: 7, images_per_identity: 4}},"
        " {name: b, ranks: 1, data: {style: ga, identities: 5, images_per_identity: 4}}]",
        "data.image_size=16", "data.workers=0", "data.val_pairs_per_fold=4", "model.width=0.125",
        "model.embedding_size=16", "model.scale=16.0", "optim.batch_size=8", "optim.epochs=1",
        f"optim.steps_per_epoch={2 * ROUNDS}", "optim.milestones=[]", "fed.K=2", "eval.every=0"]
DEVICES = ["--config", "configs/faces_albums.yaml", "fed.options={}", "clients.population=8", "clients.ranks=3",
           "clients.faces.identities=32", "clients.faces.images_per_identity=4", "clients.fraction=0.5",
           f"clients.rounds={ROUNDS}", "eval.every=0", "model.embedding_size=16", "run.device=cpu"]


@dataclass
class MeanConeOptions(ClassRuleOptions):
    radius: float = 0.3         # α, the cone's angular radius (radians)


class MeanCone(SummaryPart):
    """The cone of the mean direction of a participant's unit class embeddings."""
    leaves = "the mean direction of the class embeddings"

    def summary_shape(self, d):
        return 1, d + 2

    def summarise(self, W, out, r, who, state, *, device=False):
        import torch

        mean = torch.nn.functional.normalize(W.detach().to(out.dtype), dim=1).sum(0)
        out[0, :-2] = torch.nn.functional.normalize(mean, dim=0)
        out[0, -2], out[0, -1] = self.options.radius, 1.0

    def relay(self, uploads, replies, r, state):
        import torch

        for k in range(uploads.shape[0]):
            replies[k].copy_(torch.cat([uploads[j] for j in range(uploads.shape[0]) if j != k]))
        return {"released": int((uploads[:, :, -1] > 0).sum())}


MEAN_CONE = Method(NAME, "Mean cone", "#808080", MeanConeOptions, FedAvg, classes=MeanCone)


def worker(folder: str) -> int:
    """Under mpirun: the rule registered, then its silo run and its devices run, one after the other."""
    from fedmpi.algorithms.registry import RULES
    from fedmpi.run import main

    RULES[NAME] = f"{Path(__file__).stem}:MEAN_CONE"
    common = [f"fed.algorithm={NAME}", f"log.dir={folder}", f"data.root={folder}/data"]
    for name, args in (("silo", SILO), ("devices", DEVICES)):
        code = main([*args, *common, f"log.name={name}", f"run.save_final={folder}/{name}.pt"])
        if code:
            return code
    return 0


def test_a_summary_part_defined_in_a_test_runs_in_the_silo_and_across_devices(tmp_path):
    import torch

    from fedmpi.store.h5log import LogReader
    from jobs.mpirun import mpirun

    out = mpirun(4, [__file__, str(tmp_path)], timeout=500)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-3000:]
    assert "what leaves each party: backbone, the mean direction of the class embeddings" in out.stdout
    assert "what leaves each client: backbone and its summary (1 x 18 values a round it is sampled)" in out.stdout
    with LogReader(tmp_path / "silo" / "log.h5") as log:
        silo = log.table("classes")
    assert silo["round"].tolist() == [0, 1] and silo["released"].tolist() == [2, 2]      # a cone from each party
    with LogReader(tmp_path / "devices" / "log.h5") as log:
        devices, rounds = log.table("classes"), log.table("rounds")
    # every sampled client's cone is relayed: 4 a round, into a pool of one round's; the bytes a device sends are
    # θ and its 18 float32 values
    assert devices["released"].tolist() == [4, 4] and devices["pool"].tolist() == [4, 4]
    assert (devices["left_out"] == 0).all() and np.isfinite(rounds["loss"]).all()
    assert (np.diff(devices["device_bytes_up"]) == 0).all()
    assert (devices["device_bytes_down"] - devices["device_bytes_up"] == 3 * 18 * 4).all()
    for name in ("silo", "devices"):
        assert torch.isfinite(torch.load(tmp_path / f"{name}.pt")["theta"]).all()


if __name__ == "__main__":
    sys.exit(worker(sys.argv[1]))
