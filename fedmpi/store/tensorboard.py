"""TensorBoard scalars from the run log: one mapping from a log row to scalars, used by the server as it logs
(`log.tensorboard`, RunLog.mirror) and by `fedmpi-tensorboard` over finished logs (fedmpi/analysis/tensorboard.py).

Tags are `<table>/<column>` for a scalar column and `<table>/<column>/<party>` for a column with one value per
party: `rounds/loss/ms1m`, `rounds/lr`, `rounds/images_per_s`, `rounds/bytes_up`, `rounds/round_time`,
`fv/w/ga`, `eval/lfw/accuracy`, `privacy/epsilon`, `influence/weights/vgg`. The step is the round, counted from 1
(what the progress line shows), and for the `fv` table the FV iteration, counted from 1 over the run. Matrices
(FV's candidates and scores) and id lists (the sampled clients) are not curves and are left out.
TensorBoard stores scalars as float32.

The writer is tensorboard's own event-file writer (no torch), imported only when a writer is made: the server
rank makes one, no other rank imports tensorboard.
"""
from __future__ import annotations

import time
from pathlib import Path

import numpy as np

STEP_COLUMNS = ("round", "step", "iteration")   # the x axis or bookkeeping, not curves
FILE_SUFFIX = ".fedmpi"                          # event files end so: the converter replaces only its own


def row_step(table: str, index: int, row: dict) -> int:
    """The TensorBoard step of a log row: its round + 1, or for FV iterations the row's index + 1."""
    return index + 1 if table == "fv" else int(row["round"]) + 1


def row_scalars(table: str, row: dict, parties: list[str]) -> list[tuple[str, float]]:
    """(tag, value) for each curve a row of `table` holds, in column order."""
    out = []
    for column, value in row.items():
        if column in STEP_COLUMNS:
            continue
        array = np.asarray(value)
        if array.ndim == 0:
            out.append((f"{table}/{column}", float(array)))
        elif array.shape == (len(parties),) and table != "clients":
            out.extend((f"{table}/{column}/{party}", float(v)) for party, v in zip(parties, array))
    return out


class EventWriter:
    """Scalars into one TensorBoard event file in `folder`; flushed after every row, so that TensorBoard shows a
    run as it goes. The file is made with the first row, as the log takes its name at its first row: a start that
    fails before it leaves nothing behind in the run folder (which is then removed)."""

    def __init__(self, folder: str | Path, parties: list[str]):
        from tensorboard.compat.proto import event_pb2, summary_pb2

        self._event, self._summary = event_pb2.Event, summary_pb2.Summary
        self.folder = Path(folder)
        self.parties = list(parties)
        self.writer = None

    def _file(self):
        if self.writer is None:
            from tensorboard.summary.writer.event_file_writer import EventFileWriter

            self.writer = EventFileWriter(str(self.folder), filename_suffix=FILE_SUFFIX)
        return self.writer

    def row(self, table: str, index: int, row: dict, wall_time: float | None = None) -> None:
        """Write one log row (index: its row number in its table)."""
        scalars = row_scalars(table, row, self.parties)
        if not scalars:
            return
        summary = self._summary(value=[self._summary.Value(tag=tag, simple_value=value)
                                       for tag, value in scalars])
        writer = self._file()
        writer.add_event(self._event(wall_time=time.time() if wall_time is None else wall_time,
                                     step=row_step(table, index, row), summary=summary))
        writer.flush()

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()

