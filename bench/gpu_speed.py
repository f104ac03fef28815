"""The trainer's step against the eager plain loop, option by option (for `make gpu-check`: the speed table;
docs/GPU.md, "The trainer's step"): IR-50 or IR-100 at 112 px, one GPU, batch 128, images resident on the GPU.

Rows, each a fresh trainer of a one-rank party (silo/trainer.Trainer, bench/gpu_throughput.py) from the plain
loop's starting weights, run with the settings named: the eager plain loop (bf16 autocast, NCHW,
torch.optim.SGD), the trainer as configured by default, then each option alone and the compiled ones. Per row:
images/s, ms a step, the ratio to the plain loop, peak GPU memory beyond the resident model, the fraction of
the GPU's dense bf16 peak it reaches (training FLOPs = 3 x 2 x the forward's multiply-adds, counted on the
model), and the first step's seconds (compiling, capturing CUDA graphs). Rows run in the order listed until
the time budget is spent; the rest are listed as not run (`--full` runs them all, max-autotune included).

Then, with --loss-steps: the trainer's default and the plain loop trained 200 steps from the same weights on the
same batches, the loss of the last 10 steps of each (goal: within 1 %); and, with --end-to-end, the trainer's
step fed through its real loader from the synthetic RecordIO on local disk (data.decoder cpu with its
DataLoader workers, and gpu) against the same step on resident images (goal: >= 0.95x).

    python -m bench.gpu_speed [--backbone ir50] [--budget-s 200] [--full] [--loss-steps 200] [--end-to-end]
"""
from __future__ import annotations

import argparse
import json
import time
from dataclasses import dataclass, field
from pathlib import Path

# dense bf16 (= fp16) tensor-core peak, TFLOP/s, by a name torch.cuda.get_device_name contains (SXM parts)
PEAK_TFLOPS = {"H200": 989.0, "H100": 989.0, "GH200": 989.0, "B200": 2250.0, "A100": 312.0, "L40S": 362.0,
               "L4": 121.0, "A10": 125.0, "V100": 125.0, "RTX 4090": 165.0}


@dataclass
class Variant:
    name: str
    overrides: list[str] = field(default_factory=list)
    cuda_only: bool = False      # meaningless on CPU (autocast, CUDA graphs)
    full_only: bool = False      # long to compile: with --full only


VARIANTS = [
    Variant("trainer default"),
    Variant("NCHW", ["run.channels_last=false"]),
    Variant("channels_last", ["run.channels_last=true"]),
    Variant("fp16 + loss scaling (cuDNN BatchNorm)", ["optim.amp=fp16"], cuda_only=True),
    Variant("bf16, BatchNorm fp32", ["optim.amp_batchnorm=fp32"], cuda_only=True),
    Variant("classifier step unfused", ["optim.fused=false"]),
    Variant("CUDA graphs", ["run.cuda_graphs=true"], cuda_only=True),
    Variant("compile", ["run.compile=default"]),
    Variant("compile + CUDA graphs", ["run.compile=default", "run.cuda_graphs=true"], cuda_only=True),
    Variant("compile max-autotune", ["run.compile=max-autotune"], full_only=True),
]


def forward_macs(model, input_size: int) -> int:
    """Multiply-adds of one image's forward pass: every Conv2d and Linear (BatchNorm, PReLU and the additions
    are a fraction of a per cent of an IResNet's)."""
    import torch

    total = 0

    def count(module, inputs, output):
        nonlocal total
        if isinstance(module, torch.nn.Conv2d):
            kernel = module.in_channels // module.groups * module.kernel_size[0] * module.kernel_size[1]
            total += output[0].numel() * kernel
        elif isinstance(module, torch.nn.Linear):
            total += module.in_features * module.out_features

    hooks = [m.register_forward_hook(count) for m in model.modules()
             if isinstance(m, (torch.nn.Conv2d, torch.nn.Linear))]
    training = model.training
    model.eval()
    with torch.no_grad():
        model(torch.zeros(1, 3, input_size, input_size, device=next(model.parameters()).device))
    model.train(training)
    for h in hooks:
        h.remove()
    return total


def peak_tflops(device_name: str, given: float | None) -> float | None:
    if given:
        return given
    for name, tflops in sorted(PEAK_TFLOPS.items(), key=lambda kv: -len(kv[0])):
        if name in device_name:
            return tflops
    return None


def timed_row(name: str, step, batch: int, steps: int, repeats: int, cuda: bool) -> dict:
    """{name, first_step_s, first_loss, img_s, ms_step, peak_gb} of `step` (its first call timed on its own; its
    loss, from the starting weights every row shares, tells a row that computes another model)."""
    from bench.gpu_throughput import _sync, peak_gb, rate

    _sync(cuda)
    t = time.perf_counter()
    loss = step()
    _sync(cuda)
    first = time.perf_counter() - t
    peak = peak_gb(step, cuda)
    best = max(rate(step, steps, batch, cuda) for _ in range(repeats))
    return {"name": name, "first_step_s": first, "first_loss": float(loss), "img_s": best,
            "ms_step": 1000.0 * batch / best, "peak_gb": peak}


def release(cuda: bool) -> None:
    import gc

    import torch

    gc.collect()
    if cuda:
        torch.cuda.empty_cache()
    import torch._dynamo

    torch._dynamo.reset()


def speed_rows(backbone: str, batch: int, image_size: int, data_root: Path, device: str, steps: int, repeats: int,
               budget_s: float, full: bool, extra=(), only=None) -> list[dict]:
    """The table's rows: the plain loop, then each variant that fits the budget (a row with `not_run` says why);
    `only`: the names of the variants to run."""
    import torch

    from bench.gpu_throughput import build_trainer, one_rank_world, plain_step

    device = torch.device(device)
    cuda = device.type == "cuda"
    one_rank_world(device)
    started = time.perf_counter()
    trainer, cfg = build_trainer(backbone, batch, image_size, data_root, device, extra)
    g = torch.Generator().manual_seed(0)
    images = torch.randn(batch, 3, image_size, image_size, generator=g).to(device)
    labels = torch.randint(0, trainer.dataset.num_classes, (batch,), generator=g).to(device)
    classes = trainer.dataset.num_classes
    del trainer
    rows = [timed_row("eager plain loop", plain_step(cfg, classes, images, labels, device), batch, steps, repeats,
                      cuda)]
    release(cuda)
    for v in VARIANTS:
        if only and v.name not in only:
            continue
        if v.cuda_only and not cuda:
            rows.append({"name": v.name, "not_run": "needs CUDA"})
            continue
        if v.full_only and not full:
            rows.append({"name": v.name, "not_run": "--full only (long to compile)"})
            continue
        if time.perf_counter() - started > budget_s:
            rows.append({"name": v.name, "not_run": f"budget of {budget_s:.0f} s spent (--full runs it)"})
            continue
        trainer, _ = build_trainer(backbone, batch, image_size, data_root, device, [*extra, *v.overrides])
        rnd = trainer.local_round(cfg.optim.lr)
        rows.append({**timed_row(v.name, lambda: trainer.step(images, labels, rnd), batch, steps, repeats, cuda),
                     "settings": trainer.speed.describe()})
        del trainer, rnd
        release(cuda)
    return rows


def losses_after(backbone: str, batch: int, image_size: int, data_root: Path, device: str, steps: int,
                 extra=()) -> dict:
    """{'trainer', 'plain': mean loss of the last 10 of `steps` steps}: both from the same weights, on the same 8
    batches of random images cycled (labels of the trainer's classes), with the same optimizer (the trainer's rule
    FedAvg with local momentum: torch.optim.SGD's step, which the plain loop takes); the trainer with its
    default speed settings, the plain loop eager."""
    import torch

    from bench.gpu_throughput import build_trainer, one_rank_world

    device = torch.device(device)
    one_rank_world(device)
    trainer, cfg = build_trainer(backbone, batch, image_size, data_root, device,
                                 [*extra, "fed.algorithm=fedavg", "fed.local_momentum=0.9"])
    g = torch.Generator().manual_seed(1)
    data = [(torch.randn(batch, 3, image_size, image_size, generator=g).to(device),
             torch.randint(0, trainer.dataset.num_classes, (batch,), generator=g).to(device)) for _ in range(8)]
    rnd = trainer.local_round(cfg.optim.lr)
    trainer_losses = [float(trainer.step(x, y, rnd)) for x, y in (data[k % 8] for k in range(steps))]
    plain = plain_losses(cfg, trainer.dataset.num_classes, data, steps, device)
    return {"trainer": sum(trainer_losses[-10:]) / 10, "plain": sum(plain[-10:]) / 10}


def plain_losses(cfg, classes: int, data, steps: int, device) -> list[float]:
    import torch

    from bench.gpu_throughput import plain_step

    images, labels = data[0][0].clone(), data[0][1].clone()
    step = plain_step(cfg, classes, images, labels, device)
    losses = []
    for k in range(steps):   # the step reads these tensors: each batch copied into them
        images.copy_(data[k % len(data)][0])
        labels.copy_(data[k % len(data)][1])
        losses.append(step())
    return [float(v) for v in torch.stack(losses).cpu()]


def end_to_end(backbone: str, batch: int, image_size: int, data_root: Path, device: str, steps: int, repeats: int,
               extra=()) -> list[dict]:
    """The default trainer's step fed by its real loader (RecordIO on disk -> read -> decode -> flip ->
    normalise -> device), decoder cpu and gpu, against the same step on one resident batch."""
    import torch

    from bench.gpu_throughput import build_trainer, one_rank_world

    device = torch.device(device)
    cuda = device.type == "cuda"
    one_rank_world(device)
    rows = []
    for decoder in ("resident", "cpu", "gpu") if cuda else ("resident", "cpu"):
        overrides = [] if decoder == "resident" else [f"data.decoder={decoder}"]
        trainer, cfg = build_trainer(backbone, batch, image_size, data_root, device, [*extra, *overrides])
        trainer.start(0)
        rnd = trainer.local_round(cfg.optim.lr)
        if decoder == "resident":
            x, y = next(trainer.batches)
            step = lambda: trainer.step(x, y, rnd)  # noqa: E731
        else:
            step = lambda: trainer.step(*next(trainer.batches), rnd)  # noqa: E731
        row = timed_row(f"{decoder} ({cfg.data.loader_workers(device)} workers)" if decoder != "resident"
                        else "resident batch", step, batch, steps, repeats, cuda)
        rows.append(row)
        del trainer, step
        release(cuda)
    return rows


def table(rows: list[dict], macs: int, peak: float | None) -> list[str]:
    plain = next(r["img_s"] for r in rows if r["name"] == "eager plain loop")
    width = max(len(r["name"]) for r in rows)
    lines = [f"{'step':<{width}}  {'img/s':>7}  {'ms':>6}  {'x plain':>7}  {'peak GB':>7}  {'% peak':>6}  first step"]
    for r in rows:
        if "not_run" in r:
            lines.append(f"{r['name']:<{width}}  not run: {r['not_run']}")
            continue
        flops = 6.0 * macs * r["img_s"]
        share = f"{100 * flops / (peak * 1e12):5.1f}%" if peak else "     ?"
        lines.append(f"{r['name']:<{width}}  {r['img_s']:7.0f}  {r['ms_step']:6.1f}  {r['img_s'] / plain:6.3f}x  "
                     f"{r['peak_gb']:7.2f}  {share}  {r['first_step_s']:.1f} s")
    return lines


def main(argv=None) -> int:
    import torch

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--backbone", default="ir50")
    parser.add_argument("--batch", type=int, default=128)
    parser.add_argument("--image-size", type=int, default=112)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--budget-s", type=float, default=200.0)
    parser.add_argument("--full", action="store_true")
    parser.add_argument("--loss-steps", type=int, default=0)
    parser.add_argument("--end-to-end", action="store_true")
    parser.add_argument("--peak-tflops", type=float, default=None, help="the GPU's dense bf16 peak, if not listed")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--data-root", type=Path, default=Path("/tmp/gpu_check/data"))
    parser.add_argument("--extra", nargs="*", default=[], help="config overrides for every trainer (tests)")
    parser.add_argument("--only", nargs="*", default=None, choices=[v.name for v in VARIANTS], metavar="ROW",
                        help="these rows only (quoted names)")
    parser.add_argument("--json", type=Path, default=None, help="also write the figures here")
    args = parser.parse_args(argv)
    from bench.gpu_throughput import starting_backbone
    from fedmpi.config import load_config

    cfg = load_config(None, [f"model.backbone={args.backbone}", *args.extra])
    macs = forward_macs(starting_backbone(cfg, args.image_size, torch.device("cpu")), args.image_size)
    name = torch.cuda.get_device_name() if args.device.startswith("cuda") else "CPU"
    peak = peak_tflops(name, args.peak_tflops)
    print(f"{args.backbone} at {args.image_size} px, batch {args.batch}, on {name}: {macs / 1e9:.2f} GMAC forward "
          f"per image, {6 * macs / 1e9:.1f} GFLOP per trained image; dense bf16 peak "
          + (f"{peak:.0f} TFLOP/s" if peak else "unknown (--peak-tflops)"), flush=True)
    result = {"backbone": args.backbone, "device": name, "macs": macs}
    result["rows"] = speed_rows(args.backbone, args.batch, args.image_size, args.data_root, args.device, args.steps,
                                args.repeats, args.budget_s, args.full, args.extra, args.only)
    for line in table(result["rows"], macs, peak):
        print(line, flush=True)
    if args.loss_steps:
        result["loss"] = losses_after(args.backbone, args.batch, args.image_size, args.data_root, args.device,
                                      args.loss_steps, args.extra)
        t, p = result["loss"]["trainer"], result["loss"]["plain"]
        print(f"loss of the last 10 of {args.loss_steps} steps: trainer {t:.4f}, plain {p:.4f} "
              f"({100 * abs(t - p) / p:.2f} % apart; goal within 1 %)", flush=True)
    if args.end_to_end:
        result["end_to_end"] = end_to_end(args.backbone, args.batch, args.image_size, args.data_root, args.device,
                                          args.steps, args.repeats, args.extra)
        resident = result["end_to_end"][0]["img_s"]
        for r in result["end_to_end"]:
            print(f"end to end, {r['name']}: {r['img_s']:.0f} img/s, {r['img_s'] / resident:.3f}x the resident "
                  f"batch (goal >= 0.95x)", flush=True)
    if args.json:
        args.json.write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
