"""fedmpi-tensorboard: TensorBoard event files from finished run logs, the same scalars the server writes as a
run goes (`log.tensorboard`; fedmpi/store/tensorboard.py maps a log row to them). Each run's events go next to
its log.h5 (or under --out/<run folder>), replacing the event files fedmpi wrote there before; then
`tensorboard --logdir DIR` shows them."""
from __future__ import annotations

import argparse
import datetime
from pathlib import Path

import h5py
import numpy as np

from fedmpi.analysis.find_runs import find_logs
from fedmpi.analysis.run_log import add_run_args, cli
from fedmpi.store.h5log import LogReader
from fedmpi.store.tensorboard import FILE_SUFFIX, EventWriter


def tables(log: LogReader) -> dict[str, dict[str, np.ndarray]]:
    """Every row table of the log (those with a `round` column), whole rows only."""
    out = {}
    for name, item in log.f.items():
        columns = log.table(name) if isinstance(item, h5py.Group) else {}
        if columns:
            out[name] = columns
    return out


def convert(path: Path, folder: Path) -> int:
    """Write the events of the log at `path` into `folder`; returns the number of rows written."""
    folder.mkdir(parents=True, exist_ok=True)
    for old in folder.glob(f"events.out.tfevents.*{FILE_SUFFIX}"):
        old.unlink()
    with LogReader(path) as log:
        created = datetime.datetime.fromisoformat(str(log.f.attrs["created"])).timestamp()
        logged = tables(log)
        round_wall = dict(zip(logged.get("rounds", {}).get("round", []).tolist(),
                              logged.get("rounds", {}).get("wall_time", []).tolist()))
        writer = EventWriter(folder, log.parties)
        rows = 0
        try:
            for table, columns in logged.items():
                for index in range(len(columns["round"])):
                    row = {column: values[index] for column, values in columns.items()}
                    wall = created + round_wall.get(int(row["round"]), 0.0)
                    writer.row(table, index, row, wall_time=wall)
                    rows += 1
        finally:
            writer.close()
    return rows


def parse_args(argv=None):
    parser = argparse.ArgumentParser(prog="fedmpi-tensorboard", description=__doc__)
    add_run_args(parser, settings=False)
    parser.add_argument("--out", metavar="DIR",
                        help="write each run's events under DIR/<run folder> instead of next to its log")
    return parser.parse_args(argv)


def main(argv=None) -> None:
    args = parse_args(argv)
    logs = [log for run in args.runs for log, _ in find_logs(run)]
    for log in logs:
        folder = Path(args.out) / log.parent.name if args.out else log.parent
        rows = convert(log, folder)
        print(f"{log}: {rows} rows -> {folder}")


def entry() -> int:
    return cli(main)


if __name__ == "__main__":
    raise SystemExit(entry())
