"""The model's observation window: the observations of the preceding control ticks.

A model with `obs_steps` frames (PolicySpec.obs_steps) was trained on frames one control period
apart, so the window holds one synchronized observation per TICK, not per query: with a
2-frame window the model sees frames t-1 and t as in training, not the frame of its previous
query (about 1 s old when it replans every 30 ticks). The tick records, the executor's worker
reads when a query is due; both may run at once, hence the lock.

A window holds one frame per period: walking back from the current observation, a recorded one
closer than MIN_SPACING_PERIODS to its newer neighbour is the same tick's frame (the query built
its observation a few ms after the tick recorded one), not the previous tick's, and is skipped.
The tick records after it has sent its action and woken the worker, so a query may also come
first; the window then ends with the previous tick's frame, as it should.
A window never spans a gap: walking back from the current observation, a recorded one more
than GAP_PERIODS periods older than its newer neighbour ends it (inputs were stale in between,
so the frames between are missing). The window is then shorter, as at episode start, and the
model pads by repeating the oldest.
"""

from __future__ import annotations

import threading
from collections import deque
from dataclasses import replace

from egomimic_policy.interface import Observation

GAP_PERIODS = 2
MIN_SPACING_PERIODS = 0.5
"""Neighbours closer than this many periods are the same tick's frame, not consecutive ticks."""
"""Neighbours further apart than this many control periods are not consecutive ticks: one
period apart by design, up to two when a tick runs late or the inputs' stamps jitter."""


class ObservationHistory:
    """The last `obs_steps - 1` observations before the current one, handed to the model with it."""

    def __init__(self, obs_steps: int, period_ns: int):
        if period_ns <= 0:
            raise ValueError(f"period_ns must be > 0, got {period_ns}")
        self.depth = max(0, int(obs_steps) - 1)
        """Past observations the model takes (0: the current one only, nothing is recorded; a
        spec that says less than one frame, as a remote server may, is taken as one)."""
        self.period_ns = period_ns
        # One more than the depth: the newest recorded frame is usually the current tick's own,
        # which the current observation replaces; the depth frames before it are the history.
        self._window: deque[Observation] = deque(maxlen=self.depth + 1)
        self._lock = threading.Lock()

    def record(self, observation: Observation) -> None:
        """Keep this tick's observation; the same observation again (no input changed since
        the previous tick) is kept once. Nothing is kept when the model takes no history."""
        if not self.depth:
            return
        with self._lock:
            if not self._window or self._window[-1].stamp_ns != observation.stamp_ns:
                self._window.append(observation)

    def attach(self, current: Observation) -> Observation:
        """`current` with the recorded observations before it as its `history` (oldest first,
        consecutive ticks only, at most `depth`)."""
        if not self.depth:
            return current
        with self._lock:
            past = [h for h in self._window if h.stamp_ns < current.stamp_ns]
        history: list[Observation] = []
        for h in reversed(past):  # newest first; stop at a gap
            newer = history[0].stamp_ns if history else current.stamp_ns
            if newer - h.stamp_ns < MIN_SPACING_PERIODS * self.period_ns:
                continue  # the same tick's frame as its newer neighbour
            if newer - h.stamp_ns > GAP_PERIODS * self.period_ns:
                break
            history.insert(0, h)
        return replace(current, history=tuple(history[-self.depth :]))

    def clear(self) -> None:
        """Forget every recorded observation (policy/reset: a new episode starts)."""
        with self._lock:
            self._window.clear()

    def __len__(self) -> int:
        with self._lock:
            return len(self._window)
