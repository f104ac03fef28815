"""Benchmark: the per-round overhead of fedmpi against Flower's simulation engine on one small FedAvg workload (3
parties as the demo's: 96 x 16, 64 x 16 and 48 x 24 synthetic images; IR-18 of width 0.25 at 32 px; K = 10 local
steps of batch 32; 6 rounds; one thread a process):

    python -m bench.overhead step       # a plain PyTorch step of the workload: the compute floor's unit
    python -m bench.overhead fedmpi     # mpirun -n 4 python -m fedmpi.run (server + one rank a party)
    PYTHONPATH=. /tmp/flwr-venv/bin/python -m bench.overhead flower    # Flower's run_simulation, 2 Ray actors

Flower is not a dependency: `python3 -m venv /tmp/flwr-venv && /tmp/flwr-venv/bin/pip install
"flwr[simulation]==1.42.*"`, with torch importable there (docs/PERFORMANCE.md); only the `flower` command imports
it. Each command prints the seconds of rounds 2-6 (round 1 includes the start) and the overhead above its compute
floor on CORES cores: fedmpi's 3 trainer ranks share them (3 K steps / CORES a round), Flower's 2 actors run the 3
clients in two waves (2 K steps). Prints figures, asserts nothing.
"""
from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path

import numpy as np

PARTIES = {"ms1m": (96, 16), "ga": (64, 16), "vgg": (48, 24)}     # identities, images each (configs/demo_cpu.yaml)
K, BATCH, ROUNDS, SIZE, WIDTH, EMBEDDING = 10, 32, 6, 32, 0.25, 128
CORES, ACTORS = 2, 2


def model(classes: int):
    import torch

    from fedmpi.models.iresnet import iresnet

    torch.manual_seed(0)
    return torch.nn.Sequential(iresnet("ir18", embedding_size=EMBEDDING, input_size=SIZE, width=WIDTH),
                               torch.nn.Linear(EMBEDDING, classes))


def local_steps(net, images, labels, steps: int, start: int = 0) -> int:
    """`steps` SGD steps of BATCH over (images, labels), from batch index `start`; returns the next index."""
    import torch

    opt = torch.optim.SGD(net.parameters(), lr=0.1)
    net.train()
    for i in range(start, start + steps):
        j = (i * BATCH) % (len(images) - BATCH + 1)
        opt.zero_grad(set_to_none=True)
        torch.nn.functional.cross_entropy(net(images[j:j + BATCH]), labels[j:j + BATCH]).backward()
        opt.step()
    return start + steps


def party_data(name: str):
    import torch

    identities, each = PARTIES[name]
    g = torch.Generator().manual_seed(len(name))
    images = torch.randn(identities * each, 3, SIZE, SIZE, generator=g)
    return images, torch.arange(identities).repeat_interleave(each)


def step_seconds(repeats: int = 30) -> float:
    """The median seconds of one plain step of the workload (the ms1m party's classifier), one thread."""
    import torch

    torch.set_num_threads(1)
    images, labels = party_data("ms1m")
    net = model(PARTIES["ms1m"][0])
    local_steps(net, images, labels, 3)
    times = []
    for i in range(repeats):
        t = time.perf_counter()
        local_steps(net, images, labels, 1, i)
        times.append(time.perf_counter() - t)
    return float(np.median(times))


def report(name: str, rounds: list[float], floor_steps: float, step: float) -> None:
    mean, floor = float(np.mean(rounds)), floor_steps * step
    print(f"{name}: rounds 2-{ROUNDS} {', '.join(f'{r:.3f}' for r in rounds)} s, mean {mean:.3f} s; compute floor "
          f"{floor:.3f} s ({floor_steps:g} steps of {step * 1000:.1f} ms); overhead {mean - floor:.3f} s a round")


def fedmpi_rounds(out: Path, extra: list[str]) -> list[float]:
    """Seconds between consecutive rounds' ends (rounds 2-6) of the workload under mpirun."""
    from fedmpi.store.h5log import LogReader
    from jobs.mpirun import mpirun

    args = ["-m", "fedmpi.run", "--config", "configs/demo_cpu.yaml", "fed.algorithm=fedavg", f"fed.K={K}",
            "optim.epochs=1", f"optim.steps_per_epoch={K * ROUNDS}", "optim.milestones=[]", "fv.enabled=false",
            "eval.every=0", f"optim.batch_size={BATCH}", *[f"parties.{p}.ranks=1" for p in PARTIES],
            f"log.dir={out}", "log.name=fedavg", f"data.root={out / 'data'}", *extra]
    proc = mpirun(1 + len(PARTIES), args, timeout=900)
    if proc.returncode:
        raise SystemExit(f"fedmpi failed:\n{proc.stderr[-2000:]}")
    with LogReader(out / "fedavg" / "log.h5") as log:
        return np.diff(np.asarray(log.table("rounds")["wall_time"], dtype=float)).tolist()


def flower_rounds() -> list[float]:
    """Seconds between consecutive aggregations (rounds 2-6) of the workload under Flower's simulation engine."""
    import torch
    from flwr.client import ClientApp, NumPyClient
    from flwr.common import Context, ndarrays_to_parameters
    from flwr.server import ServerApp, ServerAppComponents, ServerConfig
    from flwr.server.strategy import FedAvg
    from flwr.simulation import run_simulation

    names = list(PARTIES)
    ends: list[float] = []

    class Party(NumPyClient):
        def __init__(self, name: str):
            torch.set_num_threads(1)
            self.images, self.labels = party_data(name)
            self.net = model(PARTIES[name][0])

        def fit(self, parameters, config):   # the backbone is averaged; each party keeps its classifier
            backbone = self.net[0]
            backbone.load_state_dict({k: torch.from_numpy(v) for k, v in zip(backbone.state_dict(), parameters)})
            local_steps(self.net, self.images, self.labels, K, K * (int(config.get("round", 1)) - 1))
            return [v.detach().numpy() for v in backbone.state_dict().values()], len(self.images), {}

    class Timed(FedAvg):
        def aggregate_fit(self, server_round, results, failures):
            out = super().aggregate_fit(server_round, results, failures)
            ends.append(time.perf_counter())
            return out

    def server_fn(context: Context):
        initial = [v.numpy() for v in model(PARTIES[names[0]][0])[0].state_dict().values()]
        strategy = Timed(fraction_fit=1.0, fraction_evaluate=0.0, min_fit_clients=3, min_available_clients=3,
                         initial_parameters=ndarrays_to_parameters(initial),
                         on_fit_config_fn=lambda r: {"round": r})
        return ServerAppComponents(strategy=strategy, config=ServerConfig(num_rounds=ROUNDS))

    client_app = ClientApp(client_fn=lambda context: Party(names[int(context.node_config["partition-id"])]).to_client())
    run_simulation(server_app=ServerApp(server_fn=server_fn), client_app=client_app, num_supernodes=len(PARTIES),
                   backend_config={"client_resources": {"num_cpus": CORES / ACTORS, "num_gpus": 0.0},
                                   "init_args": {"num_cpus": CORES}})
    return np.diff(ends).tolist()


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("what", choices=("step", "fedmpi", "flower"))
    parser.add_argument("--out", type=Path, default=Path("/tmp/bench_overhead"))
    parser.add_argument("--step-ms", type=float, default=None, help="the step's time (default: measured first)")
    parser.add_argument("overrides", nargs="*", help="fedmpi: extra key=value overrides")
    args = parser.parse_args(argv)
    step = args.step_ms / 1000 if args.step_ms else step_seconds()
    if args.what == "step":
        print(f"plain step: {step * 1000:.1f} ms (IR-18 width {WIDTH} at {SIZE} px, batch {BATCH}, one thread)")
    elif args.what == "fedmpi":
        report("fedmpi", fedmpi_rounds(args.out, args.overrides), len(PARTIES) * K / CORES, step)
    else:
        report("Flower", flower_rounds(), math.ceil(len(PARTIES) / ACTORS) * K, step)
    return 0


if __name__ == "__main__":
    sys.exit(main())
