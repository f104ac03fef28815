"""The one error the protocol raises: a round that must not be unmasked, or a participant that broke it."""


class ProtocolError(RuntimeError):
    """One line naming the participant or the stage at fault; the round is not unmasked."""
