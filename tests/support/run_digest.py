"""What a run logged, exactly, for the harness scripts (rule_losses.py, device_losses.py): every table of its log
(floats as their hex), the log's descriptive attributes (what leaves a party, the data), the final Θ's sha256 and
the lines the run printed (rates and clocks masked); and the one mpirun launch that makes a plan of runs
(tests/support/mpi_scripts/harness_runs.py). A refactor that must not change behaviour diffs these digests
before and after (harness_diff.py).

The launch imports the fedmpi beside the jobs package this process imported (jobs/mpirun.py puts its root first
on the ranks' PYTHONPATH); `same_root` refuses a mix (e.g. the installed fedmpi in-process and a worktree's on the
ranks): run from the root of the worktree under test with PYTHONPATH=$PWD; these scripts may lie in another."""
from __future__ import annotations

import hashlib
import json
import re
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
# columns that measure the machine, not the computation: seconds, rates, clocks
TIMED = ("wall_time", "round_time", "images_per_s", "party_images_per_s")
ROOT_ATTRS_KEPT = ("algorithm", "parties", "leaves_party", "run_name")
DATA_ATTRS_DROPPED = ("first_step_s",)


def exact(values) -> list:
    """Every value of an array, floats as float.hex (bit-exact, NaN included), integers and bools as int."""
    import numpy as np

    array = np.asarray(values)
    if array.dtype.kind in "SUO":
        return [str(v) for v in array.reshape(-1)]
    return [float(v).hex() if np.issubdtype(array.dtype, np.floating) else int(v) for v in array.reshape(-1)]


def timed(column: str) -> bool:
    return column.split("/")[-1] in TIMED or column.endswith("_s")


def text(value) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def digest(run: Path) -> dict:
    """{tables: {table: {column: values}}, attrs, data, theta_sha256} of the run folder `run` (its log.h5 and the
    run.save_final file `run`.pt)."""
    import h5py
    import torch

    from fedmpi.store.log_reader import LogReader

    out = {"tables": {}}
    with LogReader(run / "log.h5") as log:
        for name in sorted(k for k in log.f if isinstance(log.f[k], h5py.Group) and "round" in log.f[k]):
            out["tables"][name] = {k: exact(v) for k, v in sorted(log.table(name).items()) if not timed(k)}
        out["attrs"] = {k: text(log.f.attrs[k]) for k in ROOT_ATTRS_KEPT if k in log.f.attrs}
        if "data" in log.f:
            out["data"] = {k: text(v).replace(str(run.parent), "<WORKDIR>")
                           for k, v in sorted(log.f["data"].attrs.items()) if k not in DATA_ATTRS_DROPPED}
        out["config"] = log.config_yaml.replace(str(run.parent), "<WORKDIR>")
    theta = torch.load(f"{run}.pt")["theta"]
    out["theta_sha256"] = hashlib.sha256(theta.numpy().tobytes()).hexdigest()
    return out


def same_root() -> Path:
    """The worktree whose fedmpi both this process and the launched ranks import; refuses a mix."""
    import fedmpi
    from jobs.mpirun import ROOT

    mine = Path(fedmpi.__file__).resolve().parents[1]
    if not mine == ROOT.resolve() == Path.cwd().resolve():
        raise SystemExit(f"fedmpi is imported from {mine}, jobs/mpirun.py from {ROOT}, and this runs in {Path.cwd()}: "
                         f"run from the root of the worktree under test with PYTHONPATH=$PWD")
    return mine


def launch(world: int, runs: dict[str, list[str]], base: Path, timeout: float = 1800) -> int:
    """Every run of `runs` ({name: fedmpi.run arguments, without log.dir, log.name, data.root, run.save_final})
    one after the other in one launch of `world` ranks, into base/<name>; 0 when all succeeded."""
    from jobs.mpirun import mpirun

    root = same_root()
    print(f"fedmpi from {root}", flush=True)
    plan = [[*args, f"log.dir={base}", f"log.name={name}", f"data.root={base / 'data'}",
             f"run.save_final={base / name}.pt"] for name, args in runs.items()]
    (base / "plan.json").write_text(json.dumps(plan, indent=1))
    done = mpirun(world, [str(HERE / "mpi_scripts" / "harness_runs.py"), str(base / "plan.json")],
                  timeout=timeout)
    (base / "stdout.txt").write_text(done.stdout)
    if done.returncode:
        print(done.stdout[-3000:], done.stderr[-3000:])
    return done.returncode


# what a printed line says of the machine, not of the computation: rates, clocks, the run folder
MACHINE = [(re.compile(r"[0-9.]+ img/s"), "N img/s"), (re.compile(r"(elapsed|eta|wall time) [0-9:]+"), r"\1 T")]


def said(stdout: str, base: Path) -> dict[str, list[str]]:
    """{run name: the lines it printed} of the launch's stdout (each run starts at its '=== fedmpi.run' line),
    rates and clocks masked, the run folder written <WORKDIR>."""
    out, lines = {}, None
    for line in stdout.splitlines():
        if line.startswith("=== fedmpi.run "):
            name = re.search(r" log\.name=(\S+)", line).group(1)
            lines = out[name] = []
            continue
        if lines is not None:
            for pattern, mask in MACHINE:
                line = pattern.sub(mask, line)
            lines.append(line.replace(str(base), "<WORKDIR>"))
    return out


def write(out: str, runs: dict, base: Path) -> None:
    printed = said((base / "stdout.txt").read_text(), base)
    digests = {name: {**digest(base / name), "said": printed.get(name, [])} for name in runs}
    Path(out).write_text(json.dumps(digests, indent=1, sort_keys=True))
    print(f"{len(runs)} runs digested in {out}")


def launch_and_digest(world: int, runs: dict[str, list[str]], out: str, workdir: str | None = None) -> int:
    """The runs in one launch of `world` ranks into `workdir` (default a temporary folder), their digests written
    to `out`; the launch's exit status."""
    base = Path(workdir or tempfile.mkdtemp(prefix="harness-runs-"))
    base.mkdir(parents=True, exist_ok=True)
    code = launch(world, runs, base)
    if not code:
        write(out, runs, base)
    return code
