"""End to end under mpirun: the 17-rank paper layout with no config file (shrunk by overrides) and the CPU demo
layout each write a readable HDF5 log whose losses fall; in the demo layout the server's upload check raises
nothing."""
import numpy as np

from fedmpi.store.h5log import LogReader
from jobs.mpirun import mpirun

TINY = ["data.image_size=16", "data.workers=0", "data.val_pairs_per_fold=4", "model.width=0.125",
        "model.embedding_size=32", "model.scale=16.0", "optim.batch_size=8", "optim.epochs=1",
        "optim.steps_per_epoch=24", "optim.milestones=[]", "fed.K=4", "eval.every=0"]


def run_and_read(tmp_path, n, args):
    out = mpirun(n, ["-m", "fedmpi.run", *args, f"log.dir={tmp_path}", "log.name=run",
                     f"data.root={tmp_path / 'data'}"], timeout=400)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-3000:]
    assert f"log: {tmp_path / 'run' / 'log.h5'}" in out.stdout
    with LogReader(tmp_path / "run" / "log.h5") as log:
        return out, log.parties, log.table("rounds")


def test_17_rank_paper_layout_with_no_config(tmp_path):
    ids = [f"parties.{p}.data.identities=16" for p in ("ms1m", "ga", "vgg")]
    imgs = [f"parties.{p}.data.images_per_identity=8" for p in ("ms1m", "ga", "vgg")]
    out, parties, rounds = run_and_read(tmp_path, 17, [*TINY, *ids, *imgs])
    assert parties == ["ms1m", "ga", "vgg"]
    assert list(rounds["round"]) == list(range(6)) and list(rounds["step"]) == [4, 8, 12, 16, 20, 24]
    assert "round 6/6" in out.stdout
    loss = rounds["loss"]
    assert np.isfinite(loss).all()
    assert (loss[-2:].mean(axis=0) < loss[:2].mean(axis=0)).all(), loss
    assert (rounds["bytes_moved"] > 0).all() and (rounds["images_per_s"] > 0).all()


def test_demo_layout_loss_falls_and_the_upload_check_raises_nothing(tmp_path):
    args = ["--config", "configs/demo_cpu.yaml", "optim.epochs=1", "optim.milestones=[]", "fv.enabled=false",
            "eval.every=0"]
    out, parties, rounds = run_and_read(tmp_path, 5, args)
    assert parties == ["ms1m", "ga", "vgg"]
    loss = rounds["loss"]
    assert (loss[-1] < 0.9 * loss[0]).all(), loss
    # honest parties: every update norm measured, none out of range (the default fed.upload_check)
    assert np.isfinite(rounds["update_norm"]).all() and not rounds["uploads_excluded"].any()
    assert "out of range" not in out.stdout
    assert out.stdout.count("plan:") == 1, out.stdout        # `make demo`'s rank count states none (test_own_parties)
