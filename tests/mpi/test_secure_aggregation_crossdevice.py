"""Secure aggregation across devices under mpirun (core/secure_participant.py, core/secure_exchange.py):
each sampled client masks its own upload, its trainer rank sends the masked sum of its clients, and with
clients.dropout some clients miss a stage. Round 1's global model is exactly Θ0 + the decoded sum of the
surviving clients' encodings (the same encodings made here in one process from the one-process reference's
uploads): the unmasked sum equals the plain sum of the encodings bit for bit, the log's `secagg` table says who
missed which stage; and a dropout rate that leaves too few clients refuses the round, which is logged and leaves
the global model without an update."""
import numpy as np
import torch

from crossdevice_harness import CONFIG, CPU, simulate
from fedmpi.config import load_config
from fedmpi.core.build import build_parts
from fedmpi.core.payloads import Payloads
from fedmpi.crossdevice.client_data import open_client_data
from fedmpi.core.secure_uploads import deltas, encoding
from fedmpi.store.h5log import LogReader
from jobs.mpirun import mpirun

TINY = ["clients.population=20", "clients.images=12", "clients.train_images=300", "clients.test_images=40",
        "clients.fraction=0.5", "clients.rounds=1", "clients.alpha=0.5", "clients.ranks=2", "optim.batch_size=5",
        "optim.lr=0.05", "eval.every=0", "run.device=cpu", "run.deterministic=true", "run.dtype=float64",
        "fed.algorithm=fedavg", "fed.secure_aggregation.mode=secagg"]


def launch(tmp_path, name, extra):
    overrides = [*TINY, *extra, f"data.root={tmp_path / 'data'}"]
    args = ["-m", "fedmpi.run", "--config", CONFIG, *overrides, f"log.dir={tmp_path}", f"log.name={name}",
            f"run.save_final={tmp_path / name}.pt"]
    out = mpirun(3, args, timeout=300)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-3000:]
    with LogReader(tmp_path / name / "log.h5") as log:
        table = log.table("secagg")
    return overrides, torch.load(tmp_path / f"{name}.pt")["theta"], table, out.stdout


def initial_theta(cfg) -> torch.Tensor:
    parts = build_parts(cfg, CPU, torch.float64)
    down = Payloads(parts.state, parts.rule.down, CPU, torch.float64)
    parts.state.read(down.theta)
    return down.theta.clone()


def test_round_one_is_the_decoded_sum_of_the_survivors_encodings(tmp_path):
    overrides, theta, table, _ = launch(tmp_path, "dropouts", ["clients.dropout=0.15", "fed.secure_aggregation.seed=1"])
    cfg = load_config(CONFIG, overrides)
    reference = simulate(overrides)
    clients, missed = table["clients"][0].tolist(), table["missed"][0].tolist()
    assert clients == reference.sampled[0] and table["refused_at"].tolist() == [0]
    assert sorted(missed) == [0] * 6 + [1] + [3] * 3     # advertise once, masked input 3 times: masks cancelled
    enc, theta0 = encoding(cfg), initial_theta(cfg)
    sizes = open_client_data(cfg).sizes()
    total = np.zeros(reference.last_rows.shape[1] + 1, dtype=np.uint64)
    kept = [i for i, m in enumerate(missed) if m in (0, 4)]              # after R2 the input stays in the sum
    for i in kept:
        k = clients[i]
        total += enc.encode(deltas(reference.last_rows[i], theta0, theta0.numel()), sizes[k] / sizes.max(),
                            np.random.default_rng((cfg.fed.secure_aggregation.seed, k + 1, 0)))
    summed, weight = enc.decode((total % enc.modulus).astype(enc.dtype), len(kept))
    expected = theta0 + torch.from_numpy(summed / weight)[:theta0.numel()]
    assert (theta - expected).abs().max() < 1e-12


def test_too_few_clients_refuse_the_round_and_the_model_takes_no_update(tmp_path):
    overrides, theta, table, stdout = launch(tmp_path, "refused",
                                             ["clients.dropout=0.5", "fed.secure_aggregation.seed=1"])
    assert table["refused_at"].tolist() != [0]
    assert "fewer than the threshold 6: the round is not unmasked; the global model takes no update" in stdout
    assert torch.equal(theta, initial_theta(load_config(CONFIG, overrides)))
