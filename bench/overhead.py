"""Benchmark: the per-round overhead of fedmpi against Flower's simulation engine on one small FedAvg workload (3
parties as the demo's: 96 x 16, 64 x 16 and 48 x 24 synthetic images; IR-18 of width 0.25 at 32 px; K = 10 local
steps of batch 32; 6 rounds; one thread a process):

    python -m bench.overhead step       # a plain PyTorch step of the workload: the compute floor's unit
    python -m bench.overhead fedmpi     # mpirun -n 4 python -m fedmpi.run (server + one rank a party)
    PYTHONPATH=. /tmp/flwr-venv/bin/python -m bench.overhead flower    # Flower's run_simulation, 2 Ray actors
                                                                        # (after `fedmpi`: it reads the data it wrote)

Flower is not a dependency: `python3 -m venv /tmp/flwr-venv && /tmp/flwr-venv/bin/pip install
"flwr[simulation]==1.42.*"`, with torch and fedmpi's requirements importable there (docs/PERFORMANCE.md); only
the `flower` command imports it. Both read the same synthetic records through fedmpi's dataset (decode and
augmentation included). Each command prints the seconds of rounds 2-6 (round 1 includes the start) and the
overhead above its compute floor (a plain step on a batch in memory) on CORES cores: fedmpi's 3 trainer ranks
share them (3 K steps / CORES a round), Flower's 2 actors run the 3 clients in two waves (2 K steps). Prints
figures, asserts nothing.
"""
from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

PARTIES = {"ms1m": (96, 16), "ga": (64, 16), "vgg": (48, 24)}     # identities, images each (configs/demo_cpu.yaml)
K, BATCH, ROUNDS, SIZE, WIDTH, EMBEDDING = 10, 32, 6, 32, 0.25, 128
CORES, ACTORS = 2, 2
CONFIG = Path(__file__).resolve().parents[1] / "configs" / "demo_cpu.yaml"


def model(classes: int):
    import torch

    from fedmpi.models.iresnet import iresnet

    torch.manual_seed(0)
    return torch.nn.Sequential(iresnet("ir18", embedding_size=EMBEDDING, input_size=SIZE, width=WIDTH),
                               torch.nn.Linear(EMBEDDING, classes))


def local_steps(net, batches, steps: int) -> None:
    """`steps` SGD steps on the next batches of `batches`."""
    import torch

    opt = torch.optim.SGD(net.parameters(), lr=0.1)
    net.train()
    for _ in range(steps):
        images, labels = next(batches)
        opt.zero_grad(set_to_none=True)
        torch.nn.functional.cross_entropy(net(images), labels).backward()
        opt.step()


def party_batches(name: str, root: Path):
    """The party's batches without end, read and decoded from the synthetic set the fedmpi run wrote under `root`
    (fedmpi's own dataset: the same records, decode and augmentation as its trainer ranks)."""
    import torch

    from fedmpi.config import load_config
    from fedmpi.layout import build_layout
    from fedmpi.silo.party_data import open_party_dataset

    cfg = load_config(str(CONFIG), [f"data.root={root}", *[f"parties.{p}.ranks=1" for p in PARTIES]])
    party = next(p for p in build_layout(cfg).parties if p.name == name)
    loader = torch.utils.data.DataLoader(open_party_dataset(party, cfg.data), batch_size=BATCH, shuffle=True,
                                         drop_last=True, generator=torch.Generator().manual_seed(0))
    while True:
        yield from loader


def step_seconds(repeats: int = 30) -> float:
    """The median seconds of one plain step of the workload on a batch in memory (the ms1m party's classifier),
    one thread."""
    import torch

    torch.set_num_threads(1)
    batch = (torch.randn(BATCH, 3, SIZE, SIZE), torch.arange(BATCH) % PARTIES["ms1m"][0])
    net = model(PARTIES["ms1m"][0])
    batches = iter(lambda: batch, None)
    local_steps(net, batches, 3)
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        local_steps(net, batches, 1)
        times.append(time.perf_counter() - t)
    return float(np.median(times))


def report(name: str, runs: list[list[float]], floor_steps: float, step: float) -> None:
    """Each run's rounds, then the median round over every run's and its overhead above the compute floor."""
    floor = floor_steps * step
    for i, rounds in enumerate(runs):
        print(f"{name} run {i + 1}: rounds 2-{ROUNDS} {', '.join(f'{r:.3f}' for r in rounds)} s")
    median = float(np.median([r for rounds in runs for r in rounds]))
    print(f"{name}: median round {median:.3f} s over {len(runs)} runs; compute floor {floor:.3f} s ({floor_steps:g} "
          f"steps of {step * 1000:.1f} ms); overhead {median - floor:.3f} s a round")


def fedmpi_rounds(out: Path, name: str, extra: list[str]) -> list[float]:
    """Seconds between consecutive rounds' ends (rounds 2-6) of the workload under mpirun."""
    from fedmpi.store.h5log import LogReader
    from jobs.mpirun import mpirun

    args = ["-m", "fedmpi.run", "--config", str(CONFIG), "fed.algorithm=fedavg", f"fed.K={K}",
            "optim.epochs=1", f"optim.steps_per_epoch={K * ROUNDS}", "optim.milestones=[]", "fv.enabled=false",
            "eval.every=0", f"optim.batch_size={BATCH}", *[f"parties.{p}.ranks=1" for p in PARTIES],
            f"log.dir={out}", f"log.name={name}", f"data.root={out / 'data'}", *extra]
    proc = mpirun(1 + len(PARTIES), args, timeout=900)
    if proc.returncode:
        raise SystemExit(f"fedmpi failed:\n{proc.stderr[-2000:]}")
    with LogReader(out / name / "log.h5") as log:
        return np.diff(np.asarray(log.table("rounds")["wall_time"], dtype=float)).tolist()


def flower_rounds(root: Path) -> list[float]:
    """Seconds between consecutive aggregations (rounds 2-6) of the workload under Flower's simulation engine, the
    parties' data read from `root` (a fedmpi run's data.root)."""
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
            self.batches = party_batches(name, root)
            self.net = model(PARTIES[name][0])
            self.images = PARTIES[name][0] * PARTIES[name][1]

        # Flower makes a client for each round's task (client_fn): its data opened and its model built anew, as
        # Flower's own examples do; the backbone is averaged, the classifier (the party's own) is not sent
        def fit(self, parameters, config):
            backbone = self.net[0]
            backbone.load_state_dict({k: torch.from_numpy(v) for k, v in zip(backbone.state_dict(), parameters)})
            local_steps(self.net, self.batches, K)
            return [v.detach().numpy() for v in backbone.state_dict().values()], self.images, {}

    class Timed(FedAvg):
        def aggregate_fit(self, server_round, results, failures):
            out = super().aggregate_fit(server_round, results, failures)
            ends.append(time.perf_counter())
            return out

    def server_fn(context: Context):
        initial = [v.numpy() for v in model(PARTIES[names[0]][0])[0].state_dict().values()]
        strategy = Timed(fraction_fit=1.0, fraction_evaluate=0.0, min_fit_clients=3, min_available_clients=3,
                         initial_parameters=ndarrays_to_parameters(initial))
        return ServerAppComponents(strategy=strategy, config=ServerConfig(num_rounds=ROUNDS))

    client_app = ClientApp(client_fn=lambda context: Party(names[int(context.node_config["partition-id"])]).to_client())
    run_simulation(server_app=ServerApp(server_fn=server_fn), client_app=client_app, num_supernodes=len(PARTIES),
                   backend_config={"client_resources": {"num_cpus": CORES / ACTORS, "num_gpus": 0.0},
                                   "init_args": {"num_cpus": CORES}})
    return np.diff(ends).tolist()


def flower_in_a_process(root: Path) -> list[float]:
    """flower_rounds in a fresh process: its JSON line (the last line it prints)."""
    proc = subprocess.run([sys.executable, "-m", "bench.overhead", "flower-once", "--out", str(root)],
                          capture_output=True, text=True, timeout=600)
    if proc.returncode:
        raise SystemExit(f"Flower failed:\n{proc.stderr[-2000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("what", choices=("step", "fedmpi", "flower", "flower-once"))
    parser.add_argument("--out", type=Path, default=Path("/tmp/bench_overhead"))
    parser.add_argument("--step-ms", type=float, default=None, help="the step's time (default: measured first)")
    parser.add_argument("--repeats", type=int, default=3, help="runs of the workload (a shared machine's noise)")
    parser.add_argument("overrides", nargs="*", help="fedmpi: extra key=value overrides")
    args = parser.parse_args(argv)
    if args.what == "flower-once":    # one simulation in a process of its own (Ray started and stopped with it)
        print(json.dumps(flower_rounds(args.out)))
        return 0
    step = args.step_ms / 1000 if args.step_ms else step_seconds()
    if args.what == "step":
        print(f"plain step: {step * 1000:.1f} ms (IR-18 width {WIDTH} at {SIZE} px, batch {BATCH}, one thread)")
    elif args.what == "fedmpi":
        stamp = time.strftime("%H%M%S")
        runs = [fedmpi_rounds(args.out, f"fedavg-{stamp}-{i}", args.overrides) for i in range(args.repeats)]
        report("fedmpi", runs, len(PARTIES) * K / CORES, step)
    else:
        runs = [flower_in_a_process(args.out.resolve() / "data") for _ in range(args.repeats)]
        report("Flower", runs, math.ceil(len(PARTIES) / ACTORS) * K, step)
    return 0


if __name__ == "__main__":
    sys.exit(main())
