"""Whitespace-separated text tables of the benchmark releases (IJB meta files, MegaFace lists), read with
errors that name the file and the line: `PATH line N: what is wrong` (a DataError)."""
from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np

from fedmpi.data.errors import DataError


class LineError(DataError):
    """A bad line of a text table: 'PATH line N: reason'."""

    def __init__(self, path, line: int, reason: str):
        super().__init__(f"{path} line {line}", reason)
        self.line = line


def require_file(path: Path, what: str) -> Path:
    if not Path(path).is_file():
        raise DataError(path, f"not found ({what})")
    return Path(path)


def read_rows(path: Path, fields: int, what: str, comment: str | None = None):
    """(line number, [fields]) for every non-empty line; a line with another field count is an error."""
    require_file(path, what)
    with open(path, "r", encoding="utf-8", errors="replace") as f:
        for number, line in enumerate(f, start=1):
            if comment and line.startswith(comment):
                continue
            parts = line.split()
            if not parts:
                continue
            if len(parts) != fields:
                raise LineError(path, number, f"expected {fields} fields ({what}), got {len(parts)}")
            yield number, parts


def as_number(path, number: int, text: str, kind=int):
    try:
        return kind(text)
    except ValueError:
        raise LineError(path, number, f"{text!r} is not {'an integer' if kind is int else 'a number'}") from None


def read_int_columns(path: Path, columns: int, what: str, block_bytes: int = 1 << 24) -> np.ndarray:
    """int64 [N, columns] from a large file of integer rows (15.6 M lines for IJB-C's pairs), parsed in
    blocks with numpy; on a bad line the block is re-read line by line to name it."""
    require_file(path, what)
    blocks, first_line = [], 1
    with open(path, "rb") as f:
        while True:
            block = f.read(block_bytes)
            if not block:
                break
            block += f.readline()  # end the block at a line end
            values = _parse_block(block, columns)
            if values is None:
                _locate_bad_line(path, block.splitlines(), first_line, columns, what)
            blocks.append(values)
            first_line += block.count(b"\n")
    return np.concatenate(blocks) if blocks else np.zeros((0, columns), np.int64)


_WHITESPACE = np.zeros(256, bool)
_WHITESPACE[[9, 10, 11, 12, 13, 32]] = True


def _parse_block(block: bytes, columns: int) -> np.ndarray | None:
    """[rows, columns] int64, or None when a line has another field count or a field is not an integer."""
    raw = np.frombuffer(block, np.uint8)
    space = _WHITESPACE[raw]
    field_starts = ~space
    field_starts[1:] &= space[:-1]
    line_of_field = np.searchsorted(np.flatnonzero(raw == 10), np.flatnonzero(field_starts))
    per_line = np.bincount(line_of_field)
    if not np.isin(per_line, (0, columns)).all():
        return None
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)   # older numpy warns where it stops parsing
            values = np.fromstring(block, dtype=np.int64, sep=" ")
    except ValueError:                                            # newer numpy raises there
        return None
    if len(values) != len(line_of_field):
        return None
    return values.reshape(-1, columns)


def _locate_bad_line(path, lines: list[bytes], first_line: int, columns: int, what: str):
    for offset, line in enumerate(lines):
        parts = line.split()
        if parts and len(parts) != columns:
            raise LineError(path, first_line + offset, f"expected {columns} fields ({what}), got {len(parts)}")
        for part in parts:
            as_number(path, first_line + offset, part.decode(errors="replace"))
    raise LineError(path, first_line, "unreadable block")  # not reached: some line above is bad


def nonblank_line_numbers(path: Path, rows) -> list[int]:
    """Line numbers (1-based) of the given row indices among the file's non-empty lines (for error messages)."""
    wanted, found = sorted(set(int(r) for r in rows)), {}
    row = -1
    with open(path, "rb") as f:
        for number, line in enumerate(f, start=1):
            if line.split():
                row += 1
                if row in wanted:
                    found[row] = number
                    if len(found) == len(wanted):
                        break
    return [found[int(r)] for r in rows]
