"""Monotonic deadlines for loops that run at a fixed rate in their own thread: the synthetic
and replay cameras' capture loops and the driver's state loop.

Why a thread and not an executor timer: an rclpy timer costs a pass of the Python executor per
period (its wait set is rebuilt every time: about half of a 100 Hz driver's CPU, measured with
EGOMIMIC_PROFILE_DIR), and its period drifts with whatever else that executor runs.
"""

from __future__ import annotations

import threading
import time

from egomimic_hw.errors import ConfigError


class Pacer:
    """Monotonic frame deadlines at `rate_hz`; `wait()` sleeps until the next one (or returns
    False on timeout or once `stop()` was called). Late by more than a period: skip ahead."""

    def __init__(self, rate_hz: float, start_monotonic: float | None = None):
        if not 0 < rate_hz <= 1000:
            raise ConfigError(f"rate_hz must be in (0, 1000], got {rate_hz}")
        self.period_s = 1.0 / rate_hz
        self._next = time.monotonic() if start_monotonic is None else start_monotonic
        self.last_due: float | None = None
        """The deadline the last successful `wait()` or `take_due()` took (monotonic s)."""
        self._stopped = threading.Event()

    def wait_until(self, deadline: float, timeout_s: float) -> bool:
        remaining = deadline - time.monotonic()
        if remaining > timeout_s:
            self._stopped.wait(timeout_s)
            return False
        return not self._stopped.wait(max(0.0, remaining))

    def wait(self, timeout_s: float) -> bool:
        if not self.wait_until(self._next, timeout_s):
            return False
        self._advance(time.monotonic())
        return True

    def take_due(self, now: float) -> bool:
        """For a loop that waits on something else meanwhile: True (and the next deadline set)
        when the current deadline has passed at `now`."""
        if now < self._next or self.stopped:
            return False
        self._advance(now)
        return True

    def _advance(self, now: float) -> None:
        self.last_due = self._next
        self._next += self.period_s
        if self._next < now:
            self._next = now + self.period_s

    @property
    def next_deadline(self) -> float:
        """The monotonic time `wait()` waits for."""
        return self._next

    def stop(self) -> None:
        self._stopped.set()

    @property
    def stopped(self) -> bool:
        return self._stopped.is_set()
