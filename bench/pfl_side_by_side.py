"""Benchmark: launch to end of fedmpi beside pfl-research 0.6's simulator on Hsu et al.'s CIFAR workload
(configs/hsu_cifar10.yaml with FedAvg: 100 clients of 500 images, 10 a round, McMahan's CNN, one epoch of batch 64,
ROUNDS rounds, the test set's 10,000 images evaluated after rounds 1, 10, 20 and 30; 2 threads each):

    python -m bench.pfl_side_by_side fedmpi --out DIR     # mpirun -n 3 python -m fedmpi.run (server + 2 trainer
                                                           # ranks of one thread; writes the synthetic set first)
    PYTHONPATH=. /tmp/pfl-venv/bin/python -m bench.pfl_side_by_side pfl --out DIR   # pfl's SimulatedBackend in one
                                                           # process of 2 threads (after `fedmpi`: the same images)

pfl is not a dependency: `python3 -m venv /tmp/pfl-venv && /tmp/pfl-venv/bin/pip install "pfl[pytorch]==0.6.*"`
with torch and fedmpi's requirements importable there (docs/PERFORMANCE.md). pfl gets fedmpi's images (the
synthetic set in CIFAR's layout, standardised the same way), its partition, its cohorts (the sampler's draws, in
order) and its initial weights; it evaluates before round 1 where fedmpi evaluates after it, then after
rounds 11 and 21 (pfl's schedule) and after the last (added here: fedmpi's fourth). Each command times
its run from outside (launch to exit) and splits it into start-up (launch to the first round's start), the
rounds, the evaluations and teardown (the last round's or evaluation's end to exit); prints figures, asserts
nothing.
"""
from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

CONFIG = Path(__file__).resolve().parents[1] / "configs" / "hsu_cifar10.yaml"
ROUNDS, EVERY, THREADS = 30, 10, 2


def overrides(args) -> list[str]:
    out = Path(args.out)
    return ["fed.algorithm=fedavg", f"clients.rounds={args.rounds}", f"eval.every={EVERY}", "run.device=cpu",
            f"data.root={out / 'data'}", f"log.dir={out}", *args.overrides]


def report(name: str, wall: float, start: float, rounds: list[float], evals: list[float], end: float) -> dict:
    other = wall - start - sum(rounds) - sum(evals) - end
    figures = {"wall": wall, "start_up": start, "rounds": rounds, "median_round": float(np.median(rounds)),
               "evaluations": evals, "teardown": end, "other": other}
    print(f"{name}: launch to end {wall:.1f} s = start-up {start:.1f} + {len(rounds)} rounds {sum(rounds):.1f} "
          f"(median {figures['median_round']:.2f}) + {len(evals)} evaluations {sum(evals):.1f} "
          f"({', '.join(f'{e:.1f}' for e in evals)}) + teardown {end:.1f} + other {other:.1f} s")
    return figures


def run_fedmpi(args, rounds: int, name: str) -> dict:
    """The workload under mpirun; each stdout line stamped as it arrives, the rounds' seconds from the log."""
    from fedmpi.store.h5log import LogReader
    from jobs.mpirun import mpi_env, mpirun_binary

    cmd = [mpirun_binary(), "--oversubscribe", "--bind-to", "none", "-n", "3", sys.executable, "-m", "fedmpi.run",
           "--config", str(CONFIG), *overrides(args), f"clients.rounds={rounds}", f"log.name={name}"]
    launched = time.perf_counter()
    stamps: list[tuple[float, str]] = []
    with subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=mpi_env()) as p:
        for line in p.stdout:
            stamps.append((time.perf_counter() - launched, line.rstrip()))
    wall = time.perf_counter() - launched
    if p.returncode:
        raise SystemExit("fedmpi failed:\n" + "\n".join(line for _, line in stamps[-30:]))
    with LogReader(Path(args.out) / name / "log.h5") as log:
        round_time = np.asarray(log.table("rounds")["round_time"], dtype=float).tolist()
    ends = {int(m[1]): t for t, line in stamps if (m := re.match(r"round (\d+)/", line))}
    evals = {int(m[1]): t for t, line in stamps if (m := re.match(r"eval after round (\d+):", line))}
    eval_seconds = [evals[k] - ends[k] for k in sorted(evals)]
    last = max(evals.get(rounds, 0.0), ends[rounds])
    return report("fedmpi", wall, ends[1] - round_time[0], round_time, eval_seconds, wall - last)


def fedmpi_main(args) -> None:
    out = Path(args.out)
    if not (out / "data").exists():      # the synthetic set is written by a first, untimed run
        run_fedmpi(args, 1, "prepare")
    figures = run_fedmpi(args, args.rounds, "side_by_side")
    (out / "fedmpi.json").write_text(json.dumps(figures))


def pfl_main(args) -> None:
    """pfl's run in a child process, timed from here; the child writes its events' times."""
    out = Path(args.out)
    events = out / "pfl_events.json"
    launched = time.time()
    subprocess.run([sys.executable, "-m", "bench.pfl_side_by_side", "pfl-child", "--out", str(out),
                    "--rounds", str(args.rounds), *(["--fused-lrn"] if args.fused_lrn else []), *args.overrides],
                   check=True)
    wall = time.time() - launched
    e = json.loads(events.read_text())
    rounds = [end - start for start, end in e["rounds"]]
    evals = [end - start for start, end in e["evaluations"]]
    before = sum(end - start for start, end in e["evaluations"] if end <= e["rounds"][0][0])
    start = e["rounds"][0][0] - launched - before
    last = max(e["rounds"][-1][1], *(end for _, end in e["evaluations"]))
    figures = report("pfl", wall, start, rounds, evals, launched + wall - last)
    (out / "pfl.json").write_text(json.dumps(figures))


def pfl_child(args) -> None:
    """The same workload in pfl's simulator, the events' times written to DIR/pfl_events.json."""
    import torch
    import torch.nn.functional as F
    from pfl.algorithm import FederatedAveraging, NNAlgorithmParams
    from pfl.callback.central_evaluation import CentralEvaluationCallback
    from pfl.callback.base import TrainingProcessCallback
    from pfl.data.dataset import Dataset
    from pfl.data.federated_dataset import FederatedDataset
    from pfl.hyperparam import NNEvalHyperParams, NNTrainHyperParams
    from pfl.metrics import Metrics, Weighted
    from pfl.model.pytorch import PyTorchModel
    from pfl.aggregate.simulate import SimulatedBackend

    from fedmpi.config import load_config
    from fedmpi.core.build import build_parts
    from fedmpi.crossdevice.client_data import open_client_data, to_tensor
    from fedmpi.crossdevice.sampler import ClientSampler
    from fedmpi.models.cifar_cnn import CifarCNN

    torch.set_num_threads(THREADS)
    out = Path(args.out)
    cfg = load_config(str(CONFIG), overrides(args))
    data = open_client_data(cfg)
    c = cfg.clients
    events: dict[str, list] = {"rounds": [], "evaluations": []}

    class Net(CifarCNN):
        def loss(self, x, y, eval=False):
            self.train(not eval)
            return F.cross_entropy(self(x), y)

        @torch.no_grad()
        def metrics(self, x, y, eval=True):
            self.train(not eval)
            logits = self(x)
            return {"loss": Weighted(float(F.cross_entropy(logits, y, reduction="sum")), len(y)),
                    "accuracy": Weighted(float((logits.argmax(1) == y).sum()), len(y))}

    net = Net()
    if args.fused_lrn:     # the local response normalisations fedmpi's CPU clients run (models/lrn.py)
        from fedmpi.models.lrn import fuse_local_response_norms

        fuse_local_response_norms(net)
    net.load_state_dict(build_parts(cfg, torch.device("cpu"), torch.float32).model.state_dict())   # fedmpi's start
    sampler = ClientSampler(len(data.parts), c.fraction, c.sampler_seed)
    cohorts = iter(int(k) for _ in range(args.rounds) for k in sampler.sample())

    def client(k):
        index = data.parts[int(k)]
        return Dataset((to_tensor(data.train.images[index], data.mean, data.std, torch.float32),
                        torch.from_numpy(data.train.labels[index])), user_id=str(k), eval_kwargs={"eval": True})

    test = Dataset((to_tensor(data.test.images, data.mean, data.std, torch.float32),
                    torch.from_numpy(data.test.labels)), eval_kwargs={"eval": True})

    class TimedEvaluation(CentralEvaluationCallback):
        def _eval(self, model):
            started = time.time()
            result = super()._eval(model)
            events["evaluations"].append((started, time.time()))
            return result

        def on_train_end(self, *, model):    # the final model, as fedmpi evaluates after its last round
            self._eval(model)

    class RoundTimes(TrainingProcessCallback):     # before the evaluation: the round's end
        def after_central_iteration(self, aggregate_metrics, model, *, central_iteration):
            events["rounds"].append((self.started, time.time()))
            return False, Metrics()

    class NextRound(TrainingProcessCallback):     # after the evaluation: the next round starts here
        def on_train_begin(self, *, model):
            times.started = time.time()
            return Metrics()

        def after_central_iteration(self, aggregate_metrics, model, *, central_iteration):
            times.started = time.time()
            return False, Metrics()

    times = RoundTimes()
    model = PyTorchModel(net, local_optimizer_create=lambda params, lr: torch.optim.SGD(
        params, lr=lr, weight_decay=cfg.optim.weight_decay), central_optimizer=torch.optim.SGD(net.parameters(), 1.0))
    training = FederatedDataset(client, lambda: next(cohorts))
    eval_params = NNEvalHyperParams(local_batch_size=cfg.eval.batch_size)
    FederatedAveraging().run(
        algorithm_params=NNAlgorithmParams(central_num_iterations=args.rounds, evaluation_frequency=EVERY,
                                           train_cohort_size=sampler.count, val_cohort_size=None),
        backend=SimulatedBackend(training_data=training, val_data=training), model=model,
        model_train_params=NNTrainHyperParams(local_learning_rate=cfg.optim.lr, local_num_epochs=c.epochs,
                                              local_batch_size=cfg.optim.batch_size),
        model_eval_params=None,        # no evaluation on the cohort's own data: fedmpi's rounds have none
        callbacks=[times, TimedEvaluation(test, eval_params, frequency=EVERY), NextRound()])
    events_path = out / "pfl_events.json"
    events_path.write_text(json.dumps(events))
    print(f"pfl: {len(events['rounds'])} rounds, {len(events['evaluations'])} evaluations", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("which", choices=("fedmpi", "pfl", "pfl-child"))
    ap.add_argument("--out", default="/tmp/bench_pfl")
    ap.add_argument("--rounds", type=int, default=ROUNDS)
    ap.add_argument("--fused-lrn", action="store_true",
                    help="pfl: its model with fedmpi's fused LocalResponseNorm (fedmpi's kernels on pfl's side)")
    ap.add_argument("overrides", nargs="*", help="key=value settings for both (e.g. a smaller set to try it)")
    args = ap.parse_intermixed_args()
    Path(args.out).mkdir(parents=True, exist_ok=True)
    {"fedmpi": fedmpi_main, "pfl": pfl_main, "pfl-child": pfl_child}[args.which](args)


if __name__ == "__main__":
    main()
