"""Per-stream counts of one recorded episode: received, dropped, duplicated, max gap, latency.

What each count means (the same words in the episode's `recording_stats` attribute, the
recorder's status and its /diagnostics):
- received: samples of the stream that reached the recorder while the episode was open.
- dropped: samples the recorder had and the episode does not carry when it should have.
  A camera: frames received that no written step carries (a step skipped, a step lost to a
  full writer queue, a frame superseded before it was used). Arm state and commands are
  subsampled by design (100 Hz joint states into 30 Hz steps), so for them only what could
  never be used counts: a sample older than one already held (out of order), a pose whose
  joint_states sample of the same stamp never came (it could not be paired).
- duplicated: steps that carry the same sample as the step before (a camera frame recorded
  twice, a command that did not change its stamp).
- max gap: the longest interval between two consecutive sample stamps, in ms: a source that
  stalled shows here even when nothing was dropped on the recorder's side.
- latency: reception time minus the sample's stamp (ms, p50 over the newest LATENCY_KEEP
  samples, and the maximum): transport plus the source's own delay.
Stamps and reception times are ns of one clock (ROS time = the system clock outside simulation).
"""

from __future__ import annotations

from collections import deque
from dataclasses import asdict, dataclass

import numpy as np

LATENCY_KEEP = 1024
"""Latencies kept per stream for the p50 (about 30 s of a 30 Hz stream): bounded memory however
long the episode."""


@dataclass(frozen=True)
class StreamCounts:
    received: int
    dropped: int
    duplicated: int
    max_gap_ms: float
    latency_p50_ms: float
    latency_max_ms: float

    def as_dict(self) -> dict[str, int | float]:
        """JSON-ready, rounded to 0.01 ms."""
        out: dict[str, int | float] = {}
        for key, value in asdict(self).items():
            out[key] = round(value, 2) if isinstance(value, float) else int(value)
        return out


class StreamStats:
    """The counts of one stream; `reset()` starts a new episode. Not thread-safe: the one thread
    that feeds the recorder owns it (snapshots are taken by the same thread)."""

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self.received = 0
        self.dropped = 0
        self.duplicated = 0
        self._last_stamp_ns: int | None = None
        self._max_gap_ns = 0
        self._latencies_ns: deque[int] = deque(maxlen=LATENCY_KEEP)
        self._max_latency_ns = 0

    def sample(self, stamp_ns: int, received_ns: int) -> None:
        """One sample reached the recorder (counted whether or not it is used)."""
        self.received += 1
        if self._last_stamp_ns is not None and stamp_ns > self._last_stamp_ns:
            self._max_gap_ns = max(self._max_gap_ns, stamp_ns - self._last_stamp_ns)
        if self._last_stamp_ns is None or stamp_ns > self._last_stamp_ns:
            self._last_stamp_ns = stamp_ns
        latency = received_ns - stamp_ns
        self._latencies_ns.append(latency)
        self._max_latency_ns = max(self._max_latency_ns, latency)

    def counts(self) -> StreamCounts:
        p50 = float(np.median(self._latencies_ns)) if self._latencies_ns else 0.0
        return StreamCounts(
            received=self.received,
            dropped=self.dropped,
            duplicated=self.duplicated,
            max_gap_ms=self._max_gap_ns / 1e6,
            latency_p50_ms=p50 / 1e6,
            latency_max_ms=self._max_latency_ns / 1e6 if self._latencies_ns else 0.0,
        )
