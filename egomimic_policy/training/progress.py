"""The training progress line: step, loss, steps/s, on stderr.

On a terminal one line is rewritten in place (`\\r`) at most every `min_interval_s`, so a fast
loop does not spend its time printing; elsewhere (a log file, CI) a plain line every `every`
steps, since `\\r` would pile thousands of updates into one unreadable line. The clock is passed
in, so tests drive it by hand.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import TextIO


class Progress:
    def __init__(
        self,
        total_steps: int,
        *,
        stream: TextIO | None = None,
        every: int = 10,
        min_interval_s: float = 0.2,
        clock: Callable[[], float] = time.monotonic,
        tty: bool | None = None,
    ):
        self.total = int(total_steps)
        self.stream = stream if stream is not None else sys.stderr
        self.every = max(1, int(every))
        self.min_interval_s = min_interval_s
        self.clock = clock
        isatty = getattr(self.stream, "isatty", None)
        self.tty = bool(isatty()) if tty is None and isatty is not None else bool(tty)
        self._t0 = clock()
        self._step0: int | None = None
        self._last_print = -float("inf")
        self._open_line = False

    def steps_per_s(self, step: int) -> float:
        """Mean rate since the first update (a resumed run counts from where it resumed)."""
        if self._step0 is None:
            return 0.0
        elapsed = self.clock() - self._t0
        return (step - self._step0) / elapsed if elapsed > 0 else 0.0

    def start(self, step: int) -> None:
        self._t0, self._step0 = self.clock(), int(step)

    def line(self, step: int, loss: float) -> str:
        return f"step {step}/{self.total}  loss {loss:.4f}  {self.steps_per_s(step):.2f} steps/s"

    def update(self, step: int, loss: float) -> None:
        """After optimizer step `step` (1-based count of steps done) with its loss."""
        if self._step0 is None:
            self.start(step - 1)
        now = self.clock()
        last = step >= self.total
        if self.tty:
            if last or now - self._last_print >= self.min_interval_s:
                self.stream.write("\r" + self.line(step, loss).ljust(60))
                self.stream.flush()
                self._last_print, self._open_line = now, True
        elif last or step % self.every == 0:
            self.stream.write(self.line(step, loss) + "\n")
            self.stream.flush()

    def message(self, text: str) -> None:
        """A line of its own (a checkpoint written), without breaking the progress line."""
        self.close()
        self.stream.write(text + "\n")
        self.stream.flush()

    def close(self) -> None:
        if self._open_line:
            self.stream.write("\n")
            self.stream.flush()
            self._open_line = False
