"""The errors of backend choice. A leaf: imports nothing of ours, so every provider can raise
them without knowing the policy that catches them."""


class BackendError(RuntimeError):
    """The requested backend cannot serve this call."""


class MonaiUnavailable(BackendError):
    """MONAI, or its compiled routines, cannot be used in this environment.

    ``str(err)`` says why and how to build them; ``err.short`` says why in a few words (for
    the fallback warning of users who never asked for MONAI).
    """

    def __init__(self, message, short):
        super().__init__(message)
        self.short = short
