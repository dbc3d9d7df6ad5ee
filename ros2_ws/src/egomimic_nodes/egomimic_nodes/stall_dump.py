"""Every Python thread's stack in the node's log when a periodic loop stops for too long.

Why: a fresh-clone run saw the policy's control tick not run for 810 ms while its thread used 3
ms of CPU: it was blocked, not busy, and the late-tick warning that follows cannot say on what
(by then every thread has moved on). faulthandler's watchdog is a C thread that needs no GIL, so
it prints the stacks while the stall is still going on, even when the thread that holds the GIL
is stuck in a C call (an import's dlopen, a blocking write). Re-armed at every pass of the loop
(about 10 us of CPU); it fires only when a pass is `threshold_s` late, and then once.
"""

from __future__ import annotations

import faulthandler
import sys


class StallDump:
    def __init__(self, threshold_s: float):
        self.threshold_s = threshold_s
        self._armed = False

    def arm(self) -> None:
        """Call at every pass of the loop: the previous deadline is replaced by a new one."""
        faulthandler.dump_traceback_later(self.threshold_s, repeat=False, file=sys.stderr, exit=False)
        self._armed = True

    def close(self) -> None:
        if self._armed:
            faulthandler.cancel_dump_traceback_later()
            self._armed = False
