"""The launch's memory check (`run.memory_check`, on by default): before any rank imports torch, every rank's peak
is estimated (model.py) and added up per node (and, on GPUs, per GPU); a layout that does not fit is refused in
one line that says the estimate, what the node has and the override that would fit, e.g. optim.batch_size=8.

Fits: the estimate is at most FIT_SHARE of what the node (or GPU) has, room for the estimate's error (within 25 %
of bench/memory.py's measured peaks) and for what else the node runs. Whether a launch needs the tuned malloc
(short_under_glibc_defaults) keeps the whole of that error as margin: it is decided before anything runs, and a
layout it leaves on glibc's defaults must not reach the OOM killer when the estimate is 25 % low. `run.memory_check=false` skips the check;
a cross-device run (McMahan's CNN on CIFAR, a few hundred MB a rank) is checked for its server's store of the
clients' states only."""
from __future__ import annotations

import copy
import os

from fedmpi.core.malloc import running_tuned
from fedmpi.errors import ConfigError
from fedmpi.memory.available import gpu_present, node_available, own_gpu_free, torch_build
from fedmpi.config.clients import clients_per_round
from fedmpi.memory.model import MB, RUNTIME_MB, TORCH_MB, client_states, estimate, place_shared

GB = 1024 ** 3
FIT_SHARE = 0.9
ESTIMATE_ERROR = 0.25    # the most the estimate has fallen below a measured peak (docs/PERFORMANCE.md)
SERVER_BASE = (TORCH_MB["cuda"] + RUNTIME_MB["server"] + 150.0) * MB   # torch, runtime, the data and Θ
SMALLEST_BATCH = 1


def run_device(cfg) -> str:
    """Where the ranks' tensors will live: cuda when asked, or (auto) when this node has a GPU and torch's CUDA build."""
    if cfg.run.device in ("cpu", "cuda"):
        return cfg.run.device
    return "cuda" if gpu_present() and torch_build() == "cuda" else "cpu"


def _places(cfg, layout, nodes, gpus_of, available, gpu_room, device, build,
            tuned_malloc: bool = True) -> tuple[dict, dict, object]:
    """({place: estimated bytes}, {place: bytes it has}, the LayoutNeed) for every node, and every GPU on cuda;
    a place is 'node N (k ranks)' or 'GPU g of node N (k ranks)'."""
    need = place_shared(estimate(cfg, layout, device, build, tuned_malloc=tuned_malloc), layout, nodes)
    totals, rooms = {}, {}
    for node, total in sorted(need.node_host(nodes).items()):
        place = f"node {node} ({nodes.count(node)} ranks)"
        totals[place], rooms[place] = total, available.get(node)
    if device == "cuda" and gpu_room:
        per_gpu: dict[tuple[str, int], float] = {}
        for rank_need in need.ranks:
            key = gpus_of[rank_need.rank]
            per_gpu[key] = per_gpu.get(key, 0.0) + rank_need.gpu_total
        for (node, gpu), total in sorted(per_gpu.items()):
            free = gpu_room.get(node) or []
            place = f"GPU {gpu} of node {node} ({gpus_of.count((node, gpu))} ranks)"
            totals[place], rooms[place] = total, (free[gpu] if gpu < len(free) else None)
    return totals, rooms, need


def _first_misfit(totals: dict, rooms: dict, share: float = FIT_SHARE) -> str | None:
    return next((place for place, total in totals.items()
                 if rooms.get(place) is not None and total > share * rooms[place]), None)


def judge(cfg, layout, nodes: list[str], local_ranks: list[int], available: dict[str, int | None],
          gpu_room: dict[str, list[int]] | None = None, device: str = "cpu", build: str = "cuda",
          tuned_malloc: bool = True) -> str | None:
    """The refusal line for `layout` under `cfg`, or None when it fits. nodes[r], local_ranks[r]: rank r's node
    and index on it; available: {node: bytes} (None: unknown, not checked); gpu_room: {node: free bytes per GPU};
    tuned_malloc: the ranks' malloc (core/malloc.py)."""
    available = {k: v for k, v in available.items() if v is not None}
    gpu_count = {node: len(free) for node, free in (gpu_room or {}).items()}
    gpus_of = [(node, local % gpu_count[node]) if gpu_count.get(node) else (node, 0)
               for node, local in zip(nodes, local_ranks)]
    totals, rooms, need = _places(cfg, layout, nodes, gpus_of, available, gpu_room, device, build, tuned_malloc)
    where = _first_misfit(totals, rooms)
    if where is None:
        return None
    batch = cfg.optim.batch_size
    trainer = next((r for r in need.ranks if r.role.startswith("trainer")), None)
    detail = ""
    if trainer is not None:
        parts = trainer.gpu if where.startswith("GPU") else trainer.host
        total = trainer.gpu_total if where.startswith("GPU") else trainer.host_total
        detail = f"; a trainer rank {total / GB:.2f} GB"
        if parts.get("activations"):
            detail += (f", of it activations {parts['activations'] / GB:.2f} GB at optim.batch_size={batch}, "
                       f"{cfg.data.image_size} px")
    line = (f"run.memory_check: this layout needs about {totals[where] / GB:.1f} GB on {where}{detail}; "
            f"it has {rooms[where] / GB:.1f} GB available")
    override = fitting_override(cfg, layout, nodes, gpus_of, available, gpu_room, device, build, tuned_malloc)
    line += (f"; {override[0]} fits (about {override[1][where] / GB:.1f} GB there)" if override
             else "; even optim.batch_size=1 does not fit: use more nodes or fewer ranks per node")
    return line + "; run.memory_check=false starts it anyway"


def fitting_override(cfg, layout, nodes, gpus_of, available, gpu_room, device, build,
                     tuned_malloc: bool = True) -> tuple[str, dict] | None:
    """(the first override, in this order, that makes the layout fit, and the estimates with it): data.workers=0
    (where workers are forked), then the batch halved until it fits (with workers 0 where a node was short)."""
    trial = copy.deepcopy(cfg)
    changes = []
    if cfg.data.loader_workers(device) > 0:
        totals, rooms, _ = _places(cfg, layout, nodes, gpus_of, available, gpu_room, device, build, tuned_malloc)
        node_short = _first_misfit({p: t for p, t in totals.items() if p.startswith("node")}, rooms)
        trial.data.workers = 0
        totals, rooms, _ = _places(trial, layout, nodes, gpus_of, available, gpu_room, device, build, tuned_malloc)
        if _first_misfit(totals, rooms) is None:
            return "data.workers=0", totals
        if node_short:
            changes.append("data.workers=0")
        else:   # only a GPU is short: the workers' host memory is not the trouble
            trial.data.workers = cfg.data.workers
    batch = cfg.optim.batch_size // 2
    while batch >= SMALLEST_BATCH:
        trial.optim.batch_size = batch
        totals, rooms, _ = _places(trial, layout, nodes, gpus_of, available, gpu_room, device, build, tuned_malloc)
        if _first_misfit(totals, rooms) is None:
            return " ".join([*changes, f"optim.batch_size={batch}"]), totals
        batch //= 2
    return None


def check_memory(cfg, layout, mpi, places) -> None:
    """Every rank: read its node's memory (the node's first rank) and its GPU's free memory (on cuda), gather them,
    and raise the same ConfigError on every rank when the layout does not fit (a collective of MPI_COMM_WORLD).
    places: comm.nodes.survey's."""
    if not cfg.run.memory_check:
        return
    if cfg.cross_device:   # the CNN on CIFAR is small; the server's store of the clients' states need not be
        problem = judge_client_states(cfg, node_available() if mpi.Get_rank() == 0 else None)
        problem = mpi.bcast(problem, root=0)
        if problem:
            raise ConfigError(problem)
        return
    device = run_device(cfg)
    place = places[mpi.Get_rank()]
    mine = (node_available() if place.local_rank == 0 else None,
            own_gpu_free(place.local_rank) if device == "cuda" else None)
    gathered = mpi.allgather(mine)
    nodes = [p.node for p in places]
    available = {nodes[r]: room for r, (room, _) in enumerate(gathered) if places[r].local_rank == 0}
    gpu_room: dict[str, list] = {}
    for r, (_, gpu) in enumerate(gathered):
        if gpu is not None:   # the least any rank on that GPU saw (the later ones see the others' contexts)
            count, index, free = gpu
            room = gpu_room.setdefault(nodes[r], [None] * count)
            room[index] = free if room[index] is None else min(room[index], free)
    problem = judge(cfg, layout, nodes, [p.local_rank for p in places], available, gpu_room, device, torch_build(),
                    tuned_malloc=running_tuned(os.environ))
    if problem:
        raise ConfigError(problem)


def judge_client_states(cfg, available: int | None) -> str | None:
    """The refusal line for a cross-device run whose server cannot hold its clients' states (SCAFFOLD's c_i,
    FedDyn's lambda_k: the server keeps one per client sampled so far, in memory and in its checkpoint part), or
    None: it fits within FIT_SHARE of what the server's node has (None: unknown, not checked), beside the server's
    own ~0.5 GB. The override that fits: the population or the rounds that bound the clients held."""
    held, need = client_states(cfg)
    if available is None or not need or need + SERVER_BASE <= FIT_SHARE * available:
        return None
    c = cfg.clients
    room = FIT_SHARE * available - SERVER_BASE
    per_client = need / held
    fits = max(int(room // per_client), 0)
    per_round = clients_per_round(c.population, c.fraction)
    override = (f"clients.population={fits}" if held == c.population else
                f"clients.rounds={fits // per_round}") if fits >= per_round else None
    return (f"run.memory_check: {cfg.fed.algorithm} keeps each client's state on the server: up to {held:,} clients "
            f"x {size(per_client)} = {need / GB:.1f} GB; the server's node has {available / GB:.1f} GB "
            "available; " + (f"{override} fits" if override else "no population of a round's clients fits")
            + "; run.memory_check=false starts it anyway")


def size(nbytes: float) -> str:
    return f"{nbytes / 1024 ** 2:.1f} MB" if nbytes >= 1024 ** 2 else f"{nbytes / 1024:.1f} KB"


def ranks_per_node(env, world: int) -> int:
    """How many of a launch's `world` ranks share a node, from the launcher's environment before MPI starts (Open
    MPI's OMPI_COMM_WORLD_LOCAL_SIZE, Slurm's SLURM_NTASKS / SLURM_STEP_NUM_NODES); all of them where neither says."""
    for key in ("OMPI_COMM_WORLD_LOCAL_SIZE",):
        if env.get(key, "").isdigit() and int(env[key]) > 0:
            return int(env[key])
    tasks, nodes = env.get("SLURM_NTASKS", ""), env.get("SLURM_STEP_NUM_NODES", env.get("SLURM_NNODES", ""))
    if tasks.isdigit() and nodes.isdigit() and int(nodes) > 0:
        return -(-int(tasks) // int(nodes))
    return world


def short_under_glibc_defaults(cfg, env) -> bool:
    """Whether this launch's estimate with glibc's default malloc on its CPU ranks (whose heap keeps each step's
    freed activation buffers), raised by the estimate's error ESTIMATE_ERROR, is more than FIT_SHARE of a node's
    memory, so that `python -m fedmpi.run` starts its ranks under the tuned settings of core/malloc.py
    (FEDMPI_MALLOC unset or auto). Decided by each rank before MPI
    starts, from the config and the launcher's environment: nodes filled with ranks_per_node ranks in rank order,
    each with what this node has. Not short: a cross-device run (McMahan's CNN on 32 px images), a GPU run (the
    steps' buffers are the GPU's), run.memory_check=false; short where this node's memory is unknown."""
    from fedmpi.layout import build_layout

    device = run_device(cfg)
    if not cfg.run.memory_check or cfg.cross_device or device == "cuda":
        return False
    room = node_available()
    if room is None:
        return True
    layout = build_layout(cfg)
    per_node = min(ranks_per_node(env, layout.world_size), layout.world_size)
    nodes = [f"{r // per_node}" for r in range(layout.world_size)]
    totals, rooms, _ = _places(cfg, layout, nodes, [(node, 0) for node in nodes], {node: room for node in nodes},
                               None, device, torch_build(), tuned_malloc=False)
    return _first_misfit(totals, rooms, FIT_SHARE / (1 + ESTIMATE_ERROR)) is not None
