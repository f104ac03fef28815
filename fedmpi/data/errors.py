"""The one error type for bad data files: it always names the file and, where there is one, the record."""
from __future__ import annotations


class DataError(ValueError):
    """A data file that cannot be read as its format says: `path`, `record` (key or None) and `reason`."""

    def __init__(self, path, reason: str, record=None):
        self.path = str(path)
        self.record = record
        self.reason = reason
        where = self.path if record is None else f"{self.path} record {record}"
        super().__init__(f"{where}: {reason}")
