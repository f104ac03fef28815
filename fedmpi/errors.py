"""The errors every layer may raise, at the bottom of the package so that any layer can (comm, config, the rules)."""


class ConfigError(ValueError):
    """A configuration problem; the message names the key path."""
