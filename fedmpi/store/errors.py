"""The error of the store: a checkpoint that cannot be resumed from."""
from fedmpi.errors import ConfigError


class ResumeError(ConfigError):
    """A checkpoint that cannot be resumed from (missing, incomplete, or written by another kind of run)."""
