"""Every Python thread's stack in the node's log when a periodic loop stops for too long.

Why: a fresh-clone run saw the policy's control tick not run for 810 ms while its thread used 3
ms of CPU: it was blocked, not busy, and the late-tick warning that follows cannot say on what
(by then every thread has moved on). The stacks must be printed while the stall is still going
on, even when the thread that holds the GIL is stuck in a C call (an import's dlopen, a blocking
write), so no Python code may be needed to print them.

How: a one-shot interval timer of the kernel (setitimer ITIMER_REAL), re-armed at every pass of
the loop (one system call, about 2 us), whose SIGALRM is handled by faulthandler's C handler
(faulthandler.register: it writes every thread's stack without the GIL, with SA_RESTART). It
fires only when a pass is `threshold_s` late, and then once.

Not faulthandler.dump_traceback_later: each call of it starts a new watchdog thread and joins
the previous one while holding the GIL, so every pass of the loop waited for a thread to be
scheduled. In the sim graph with the observers on, that join took 2.6 ms of a control tick that
came 12 ms late (perf sched, 2026-12-07).

One per process: the timer and the signal are the process's. The launcher's own stop dump
(egomimic_launch.cli.StopStallDump) is a different process.
"""

from __future__ import annotations

import faulthandler
import signal
import sys


class StallDump:
    def __init__(self, threshold_s: float, file=None):
        if not threshold_s > 0:
            raise ValueError(f"threshold_s must be > 0, got {threshold_s}")
        self.threshold_s = threshold_s
        faulthandler.register(signal.SIGALRM, file=file or sys.stderr, all_threads=True, chain=False)
        self._armed = False

    def arm(self) -> None:
        """Call at every pass of the loop: the previous deadline is replaced by a new one."""
        signal.setitimer(signal.ITIMER_REAL, self.threshold_s)
        self._armed = True

    def close(self) -> None:
        if self._armed:
            signal.setitimer(signal.ITIMER_REAL, 0)
            self._armed = False
        faulthandler.unregister(signal.SIGALRM)
