"""The analysis tools' numbers (EMA smoothing, throughput) and tables (aligned text, Markdown, CSV)."""
from __future__ import annotations

import argparse
import csv
import io
import math
import sys
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from fedmpi.analysis.run_log import AnalysisError

# ------------------------------------------------------------------ numbers


def ema(values, factor: float) -> np.ndarray:
    """Exponential smoothing along the first axis: s_0 = x_0, s_t = factor * s_{t-1} + (1 - factor) * x_t.
    NaN entries (nothing logged) leave the running value unchanged."""
    x = np.asarray(values, dtype=np.float64)
    out = np.full_like(x, np.nan)
    state = np.full(x.shape[1:], np.nan)
    for t in range(x.shape[0]):
        value = x[t]
        fresh = np.isnan(state) & ~np.isnan(value)
        update = ~np.isnan(state) & ~np.isnan(value)
        state = np.where(fresh, value, state)
        state = np.where(update, factor * state + (1.0 - factor) * value, state)
        out[t] = state
    return out


def ema_final(values, factor: float) -> float:
    smoothed = ema(values, factor)
    return float(smoothed[-1]) if smoothed.size else math.nan


def nan_mean(values) -> float:
    values = [v for v in values if v is not None and not math.isnan(v)]
    return float(np.mean(values)) if values else math.nan


def throughput(rounds: dict) -> float:
    """Images per second over the whole run: sum(images_per_s * round_time) / sum(round_time)."""
    ips, t = rounds.get("images_per_s"), rounds.get("round_time")
    if ips is None or t is None or not t.size or t.sum() <= 0:
        return math.nan
    return float((ips * t).sum() / t.sum())


def elapsed(rounds: dict) -> float:
    """Wall time from the start of the first round to the end of the last logged one (seconds)."""
    wall, t = rounds.get("wall_time"), rounds.get("round_time")
    if wall is None or not wall.size:
        return math.nan
    return float(wall[-1] - wall[0] + t[0])


# ------------------------------------------------------------------ tables


@dataclass
class Table:
    header: list[str]
    rows: list[list]
    digits: int = 4                       # decimals of float cells in text and Markdown
    row_digits: list[int] | None = None   # per-row override
    footnotes: list[str] = field(default_factory=list)
    title: str = ""


def fixed(value: float, digits: int) -> str:
    """`value` with `digits` decimals; one that rounds to zero is written without a sign (not "-0.00")."""
    text = f"{float(value):.{digits}f}"
    return text[1:] if text.startswith("-") and float(text) == 0 else text


def _cell(value, digits: int, fmt: str) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "" if fmt == "csv" else "-"
    if isinstance(value, (bool, np.bool_)):
        return str(bool(value))
    if isinstance(value, (int, np.integer)):
        return str(int(value))
    if isinstance(value, (float, np.floating)):
        return f"{float(value):.10g}" if fmt == "csv" else fixed(value, digits)
    return str(value)


def render(table: Table, fmt: str) -> str:
    """The table as aligned text ('text'), a Markdown pipe table ('md') or CSV ('csv'); footnotes follow
    (in CSV as lines starting with '#')."""
    digits = table.row_digits or [table.digits] * len(table.rows)
    cells = [[_cell(v, d, fmt) for v in row] for row, d in zip(table.rows, digits)]
    if fmt == "csv":
        buf = io.StringIO()
        writer = csv.writer(buf, lineterminator="\n")
        writer.writerow(table.header)
        writer.writerows(cells)
        for note in table.footnotes:
            buf.write(f"# {note}\n")
        return buf.getvalue()
    numeric = [all(_is_number(row[i]) for row in table.rows if row[i] is not None) and i > 0
               for i in range(len(table.header))]
    if fmt == "md":
        lines = [f"**{table.title}**", ""] if table.title else []
        lines.append("| " + " | ".join(h.replace("|", "\\|") for h in table.header) + " |")
        lines.append("|" + "|".join("---:" if n else "---" for n in numeric) + "|")
        lines += ["| " + " | ".join(c.replace("|", "\\|") for c in row) + " |" for row in cells]
        for note in table.footnotes:
            lines += ["", note]
        return "\n".join(lines) + "\n"
    if fmt != "text":
        raise AnalysisError(f"--format {fmt!r}: expected text, md or csv")
    widths = [max(len(x) for x in col) for col in zip(table.header, *cells)]
    def line(row):
        return "  ".join(c.rjust(w) if n else c.ljust(w) for c, w, n in zip(row, widths, numeric)).rstrip()
    lines = [table.title] if table.title else []
    lines += [line(table.header), "  ".join("-" * w for w in widths)] + [line(row) for row in cells]
    lines += table.footnotes
    return "\n".join(lines) + "\n"


def _is_number(value) -> bool:
    return isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, bool)


def emit(text: str, out: str | None) -> None:
    """Write to the file --out names, or to stdout."""
    if out:
        Path(out).parent.mkdir(parents=True, exist_ok=True)
        Path(out).write_text(text)
        print(f"wrote {out}", file=sys.stderr)
    else:
        sys.stdout.write(text)



def add_table_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--format", choices=("text", "md", "csv"), default="text",
                        help="table format: aligned text, Markdown, or CSV (default: text)")
    parser.add_argument("--out", metavar="FILE", help="write the table to FILE instead of stdout")
