"""The errors every layer may raise, at the bottom of the package so that any layer can (comm, config, the rules)."""


class ConfigError(ValueError):
    """A configuration problem; the message names the key path."""


EXIT_DIVERGED = 3   # the exit status of a run stopped by `Diverged`


class Diverged(SystemExit):
    """The run cannot go on: the global model or a training loss is no longer finite, or no upload of a round can
    be used (fedmpi/aggregation/upload_check.py). The message is one line, printed by the failure guard as
    `rank R (role): message`; the job ends with EXIT_DIVERGED. `names_uploads`: the message already says which
    uploads are to blame."""
    status = EXIT_DIVERGED

    def __init__(self, message: str, names_uploads: bool = False):
        super().__init__(message)
        self.names_uploads = names_uploads
