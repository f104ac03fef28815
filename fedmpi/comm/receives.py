"""Point-to-point receives whose arrival the round loop can poll (no torch.distributed calls here)."""
from __future__ import annotations

import threading


class ReceivesInBackground:
    """gloo's point-to-point receives, waited on by a thread of their own: a gloo receive's `is_completed()`
    stays False until `wait()` is called, so a server polling for its uploads (the silo's adaptive FV between
    polls) would never see them land. `wait()` re-raises what the thread's wait raised."""

    def __init__(self, works: list):
        self.error: BaseException | None = None
        self._thread = threading.Thread(target=self._wait_all, args=(works,), name="uploads", daemon=True)
        self._thread.start()

    def _wait_all(self, works: list) -> None:
        try:
            for work in works:
                work.wait()
        except BaseException as exc:       # handed to the round loop's thread by wait()
            self.error = exc

    def is_completed(self) -> bool:
        return not self._thread.is_alive()

    def wait(self) -> None:
        self._thread.join()
        if self.error is not None:
            raise self.error
