"""The one error a configuration problem raises."""


class ConfigError(ValueError):
    """A configuration problem; the message names the key path."""
