"""Every `--print-config` of the configs/ files (and of the defaults under each rule), and the memory check's
estimates (fedmpi.memory) for those layouts, as one JSON: a refactor that must not change them diffs it before
and after. The print-configs run `python -m fedmpi.run --print-config` as a user does (a refused config: its
exit status and last line); the estimates are every rank's parts in bytes (floats as their hex) on CPU and on
GPUs, one node, and the server's store of the clients' states across devices (memory.model.client_states).

usage: python tests/support/config_digest.py OUT.json   (from the worktree under test, with PYTHONPATH=$PWD; no
MPI launch, under a minute)"""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE)]

from run_digest import exact, same_root  # noqa: E402

# the class rules over PFM's backbone, FedAwS in FedFR's form
VARIANTS = {"fedaws-pfm": ["fed.algorithm=fedaws", "fed.options.backbone=pfm"],
            "fedgc-pfm": ["fed.algorithm=fedgc", "fed.options.backbone=pfm"],
            "privacyface-pfm": ["fed.algorithm=privacyface", "fed.options.backbone=pfm"],
            "fedaws-fedfr": ["fed.algorithm=fedaws", "fed.options.mode=fedfr"]}


def settings(root: Path) -> dict[str, tuple[str | None, list[str]]]:
    """{name: (config file or None, overrides)}: every configs/ file, the defaults under every rule and variant,
    and the cross-device configs under every rule (their client states)."""
    from fedmpi.algorithms.registry import RULES

    out = {path.name: (f"configs/{path.name}", []) for path in sorted((root / "configs").glob("*.yaml"))}
    out |= {f"defaults fed.algorithm={rule}": (None, [f"fed.algorithm={rule}"]) for rule in RULES}
    out |= {f"defaults {name}": (None, overrides) for name, overrides in VARIANTS.items()}
    for config in ("hsu_cifar10.yaml", "faces_devices.yaml"):
        out |= {f"{config} fed.algorithm={rule}": (f"configs/{config}", [f"fed.algorithm={rule}", "fed.options={}"])
                for rule in RULES}
    return out


def printed(root: Path, config: str | None, overrides: list[str]) -> dict:
    args = [sys.executable, "-m", "fedmpi.run", *(["--config", config] if config else []), "--print-config",
            *overrides]
    done = subprocess.run(args, cwd=root, capture_output=True, text=True, timeout=120)
    if done.returncode:
        return {"exit": done.returncode, "said": (done.stderr.strip().splitlines() or [""])[-1]}
    return {"exit": 0, "config": done.stdout}


def memory(config: str | None, overrides: list[str]) -> dict:
    """Each rank's estimated parts on cpu (CPU build) and cuda, every rank on one node; across devices the
    server's client states (held, bytes)."""
    from fedmpi.config import load_config
    from fedmpi.errors import ConfigError
    from fedmpi.layout import build_layout
    from fedmpi.memory.model import client_states, estimate, place_shared
    from fedmpi.party_sizes import party_sizes

    try:
        cfg = load_config(config, overrides, sizes=party_sizes)
    except ConfigError as exc:
        return {"refused": str(exc)}
    if cfg.cross_device:
        held, need = client_states(cfg)
        return {"client_states": [held, float(need).hex()]}
    layout = build_layout(cfg)
    out = {}
    for device, build in (("cpu", "cpu"), ("cuda", "cuda")):
        need = estimate(cfg, layout, device, build)
        world = 1 + sum(len(p.ranks) for p in layout.parties) + len(layout.validators)
        place_shared(need, layout, ["node"] * world)
        out[device] = {"ranks": [{"rank": r.rank, "role": r.role, "host": {k: exact([v])[0] for k, v in r.host.items()},
                                  "gpu": {k: exact([v])[0] for k, v in r.gpu.items()}} for r in need.ranks],
                       "shared": {f"{p} on {n}": exact([v])[0] for (p, n), v in sorted(need.shared.items())}}
    return out


def main(out: str) -> int:
    root = same_root()
    print(f"fedmpi from {root}", flush=True)
    digest = {name: {"print_config": printed(root, config, overrides), "memory": memory(config, overrides)}
              for name, (config, overrides) in settings(root).items()}
    Path(out).write_text(json.dumps(digest, indent=1, sort_keys=True))
    print(f"{len(digest)} settings digested in {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
