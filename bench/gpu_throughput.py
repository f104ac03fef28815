"""The trainer's step against a plain PyTorch loop of the same model, head and batch on one GPU (for
bench/gpu_check.py; needs CUDA).

The trainer is fedmpi's own (silo/trainer.Trainer, built for the first rank of a one-rank party in a one-rank
NCCL world, where no server sends it a model: `start_trainer` writes in the starting model the plain loop also
starts from); its step is `Trainer.step` (bf16 autocast, backward, the rule's backbone step, the classifier's
momentum SGD). The plain loop: the same backbone, from the same weights, and margin head, autocast,
backward, torch.optim.SGD (momentum, weight decay), zero_grad. Both see one batch of random images kept on the
GPU, so data loading is left out; each is timed over `steps` steps between two synchronisations, `repeats` times
alternating with the other, best of each.
"""
from __future__ import annotations

import os
import socket
import time
from pathlib import Path


def one_rank_world(device) -> None:
    import torch.distributed as dist

    if dist.is_initialized():
        return
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    dist.init_process_group("nccl" if device.type == "cuda" else "gloo", init_method=f"tcp://127.0.0.1:{port}",
                            world_size=1, rank=0)


def build_trainer(backbone: str, batch: int, image_size: int, data_root: Path, device, extra=()):
    import torch

    from fedmpi.config import load_config
    from fedmpi.core.build import build_parts
    from fedmpi.core.context import Context, Control, Groups
    from fedmpi.layout import build_layout
    from fedmpi.silo.trainer import Trainer

    cfg = load_config(None, [f"model.backbone={backbone}", "optim.amp=bf16", f"optim.batch_size={batch}",
                             f"data.image_size={image_size}", f"data.root={data_root}", f"run.device={device.type}",
                             "parties.ms1m.data.identities=1000", "parties.ms1m.data.images_per_identity=1", *extra])
    layout = build_layout(cfg)
    party = layout.parties[0]
    ctx = Context(layout, party.leader, Groups(party=None, leaders=None, validators=None), Control(None, 60.0),
                  device, torch.float32)
    trainer = Trainer(cfg, ctx, build_parts(cfg, device, torch.float32))
    start_trainer(trainer, cfg, image_size)
    return trainer, cfg


def starting_backbone(cfg, input_size: int, device):
    """The IResNet both loops start from, seeded with run.seed."""
    import torch

    from fedmpi.models.iresnet import iresnet

    m = cfg.model
    torch.manual_seed(cfg.run.seed)
    return iresnet(m.backbone, embedding_size=m.embedding_size, input_size=input_size, width=m.width,
                   dropout=m.dropout).to(device)


def start_trainer(trainer, cfg, input_size: int) -> None:
    """The trainer's model becomes starting_backbone, as a run's first global model reaches it (written into the
    received payload, then taken). Before that its backbone is the empty payload's zeros, and all-zero
    activations make BatchNorm's statistics kernel slower than a real model's do (13.1 against 10.1 ms a step for
    IR-50 on an H200, bench/gpu_step_profile.py): a cost of the weights, not of the trainer's step."""
    from fedmpi.core.state import BackboneState

    trainer.down.theta.copy_(BackboneState(starting_backbone(cfg, input_size, trainer.device)).read())
    trainer.take_global()


def plain_step(cfg, classes: int, images, labels, device):
    """One step of what one would write by hand: the same backbone (the same starting weights as the trainer's,
    start_trainer) and margin head, torch.optim.SGD, bf16 autocast on a GPU."""
    import torch

    from fedmpi.models import build_classifier

    m = cfg.model
    net = starting_backbone(cfg, images.shape[-1], device)
    head = build_classifier(classes, m.embedding_size, kind=m.head, scale=m.scale, margin=cfg.margin,
                            seed=cfg.run.seed + 1).to(device)
    opt = torch.optim.SGD([*net.parameters(), *head.parameters()], lr=cfg.optim.lr, momentum=cfg.optim.momentum,
                          weight_decay=cfg.optim.weight_decay)

    def step():
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=device.type == "cuda"):
            loss = head(net(images), labels)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss.detach()

    return step


def _sync(cuda: bool) -> None:
    import torch

    if cuda:
        torch.cuda.synchronize()


def peak_gb(step, cuda: bool) -> float:
    """GPU memory a loop adds at its peak beyond what was allocated before it (warm-up steps; 0 on CPU)."""
    import torch

    _sync(cuda)
    resident = torch.cuda.memory_allocated() if cuda else 0
    if cuda:
        torch.cuda.reset_peak_memory_stats()
    for _ in range(5):
        step()
    _sync(cuda)
    return (torch.cuda.max_memory_allocated() - resident) / 1024 ** 3 if cuda else 0.0


def rate(step, steps: int, batch: int, cuda: bool) -> float:
    """Images per second over `steps` steps."""
    _sync(cuda)
    t = time.perf_counter()
    for _ in range(steps):
        step()
    _sync(cuda)
    return steps * batch / (time.perf_counter() - t)


def both_steps(backbone: str, batch: int, image_size: int, data_root: Path, device: str = "cuda",
               extra=()) -> dict:
    """{'trainer', 'plain': one step of each} on the same batch of random images kept on `device`, both from the
    same starting model (start_trainer); the one-rank world set up first."""
    import torch

    device = torch.device(device)
    if device.type == "cuda":
        torch.cuda.set_device(device.index or 0)
        device = torch.device("cuda", torch.cuda.current_device())
    one_rank_world(device)
    trainer, cfg = build_trainer(backbone, batch, image_size, data_root, device, extra)
    classes = trainer.dataset.num_classes
    g = torch.Generator(device="cpu").manual_seed(0)
    images = torch.randn(batch, 3, image_size, image_size, generator=g).to(device)
    labels = torch.randint(0, classes, (batch,), generator=g).to(device)
    rnd = trainer.local_round(cfg.optim.lr)
    return {"trainer": lambda: trainer.step(images, labels, rnd),
            "plain": plain_step(cfg, classes, images, labels, device)}


def compare(backbone: str, batch: int = 128, image_size: int = 112, steps: int = 20, repeats: int = 3,
            data_root: Path = Path("/tmp/gpu_check/data"), device: str = "cuda", extra=()) -> dict:
    """{'trainer', 'plain': images/s; 'trainer_peak_gb', 'plain_peak_gb': GPU memory each adds beyond the
    resident models at its peak (0 on CPU)}. `extra`: config overrides (a CPU smoke test shrinks the model)."""
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    steps_of = both_steps(backbone, batch, image_size, data_root, device, extra)
    cuda = device.startswith("cuda")
    result = {f"{name}_peak_gb": peak_gb(steps_of[name], cuda) for name in ("trainer", "plain")}
    best = {"trainer": 0.0, "plain": 0.0}
    for _ in range(repeats):
        for name in ("plain", "trainer"):
            best[name] = max(best[name], rate(steps_of[name], steps, batch, cuda))
    return {**result, **best}
