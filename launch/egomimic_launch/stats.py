"""Pure statistics of observed streams (no ROS): rates, latency percentiles, tracking error."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

import numpy as np


@dataclass
class StreamStats:
    topic: str
    nominal_hz: float
    count: int
    rate_hz: float
    latency_p50_ms: float
    latency_p99_ms: float
    max_gap_s: float = float("nan")
    """The longest time between two arrivals inside the window (nan: fewer than two)."""
    max_source_gap_s: float = float("nan")
    """The longest time between two publications (DDS source timestamps) inside the window."""
    max_source_gap_end_s: float = float("nan")
    """The source timestamp (s, system clock) that ended that longest gap: when it happened, to
    tell one producer's stall from the whole machine's (every stream's gap at the same time)."""
    missed: int = 0
    """Publications inside the window that this observer never received (the gaps in the writer's
    sequence numbers). A gap across a missed publication is the observer's, not the writer's, and
    does not count as a source gap; a missed one makes the rate look lower than the writer's."""

    @property
    def rate_error(self) -> float:
        return abs(self.rate_hz - self.nominal_hz) / self.nominal_hz if self.nominal_hz else 0.0


LATENCY_BIN_S = 1e-4
"""Latency percentiles are read from a histogram of 0.1 ms bins..."""
LATENCY_RANGE_S = (-1.0, 3.0)
"""...from -1 s (a stamp for a tick ahead, e.g. policy/action) to 3 s; beyond, the end bins."""
RECENT_S = 5.0
"""Arrivals kept for the progress line's recent rate and for a look back at a moment
(StreamAccumulator.moment: the second before a HOLD)."""


@dataclass
class MomentStats:
    """One stream in a short span of time, judged by its writer's clock (the DDS source
    timestamps): what the producer did then, whatever delayed the observer."""

    count: int
    max_gap_s: float
    """The longest time without a publication in the span, its ends included (the span's length: none)."""
    write_latency_max_s: float
    """The most any of its messages was written after its header stamp (nan: none). For a stream
    that carries an upstream stamp (command/proposed carries the policy's tick) this is the whole
    path up to its writer."""


class StreamAccumulator:
    """One stream's statistics in bounded memory, whatever the run's length: the count, first and
    last arrival, the worst gap between arrivals and between publications (the DDS source
    timestamps: the producer's own gaps, whatever delayed this observer), and a latency
    histogram. Only arrivals inside the window count (steady state, not start-up);
    `set_window()` restarts the accounting. A ten-minute soak must not grow the observer."""

    def __init__(self, topic: str, nominal_hz: float):
        self.topic, self.nominal_hz = topic, nominal_hz
        self.recent: deque[tuple[float, float, float]] = deque()
        """(arrival, latency, source) of the last RECENT_S seconds of arrivals, source nan when unknown."""
        lo, hi = LATENCY_RANGE_S
        self._bins = np.zeros(int(round((hi - lo) / LATENCY_BIN_S)), dtype=np.int64)
        self.set_window(float("-inf"), float("inf"))

    def set_window(self, begin_s: float, end_s: float = float("inf")) -> None:
        self.window = (begin_s, end_s)
        self.count = 0
        self.first_s = self.last_s = self.last_source_s = float("nan")
        self.max_gap_s = self.max_source_gap_s = self.max_source_gap_end_s = float("nan")
        self.missed = 0
        self._bins[:] = 0

    def end_window(self, end_s: float) -> None:
        self.window = (self.window[0], end_s)

    def add(self, arrival_s: float, latency_s: float, source_s: float | None = None, missed: int = 0) -> None:
        """One arrival; `missed`: how many of the writer's publications came between the previous
        arrival and this one and never arrived (taken.SequenceGaps)."""
        recent = self.recent
        recent.append((arrival_s, latency_s, source_s if source_s is not None else float("nan")))
        while recent[0][0] < arrival_s - RECENT_S:
            recent.popleft()
        if not self.window[0] <= arrival_s <= self.window[1]:
            return
        if self.count:
            self.missed += missed
            self.max_gap_s = np.fmax(self.max_gap_s, arrival_s - self.last_s)
            if source_s is not None and self.last_source_s == self.last_source_s and not missed:
                gap = source_s - self.last_source_s
                if not gap <= self.max_source_gap_s:  # the first gap too (nan compares False)
                    self.max_source_gap_s, self.max_source_gap_end_s = gap, source_s
        else:
            self.first_s = arrival_s
        self.last_s = arrival_s
        self.last_source_s = source_s if source_s is not None else float("nan")
        self.count += 1
        k = int((latency_s - LATENCY_RANGE_S[0]) / LATENCY_BIN_S)
        self._bins[min(max(k, 0), len(self._bins) - 1)] += 1

    def latency_percentile_ms(self, q: float) -> float:
        """The q-th percentile (0..100) of the latencies, to the bin (0.1 ms); nan when empty."""
        if not self.count:
            return float("nan")
        k = int(np.searchsorted(np.cumsum(self._bins), q / 100.0 * self.count, side="left"))
        return (LATENCY_RANGE_S[0] + (k + 0.5) * LATENCY_BIN_S) * 1e3

    def recent_rate(self, now_s: float, window_s: float = 2.0) -> float:
        return sum(1 for t, _, _ in self.recent if now_s - t <= window_s) / window_s

    def moment(self, begin_s: float, end_s: float) -> MomentStats:
        """The publications of [begin_s, end_s] (source timestamps, system clock) among the recent
        arrivals: a look back at a moment less than RECENT_S old. Arrivals without a source
        timestamp are not counted."""
        sources, writes = [], []
        for arrival_s, latency_s, source_s in self.recent:
            if begin_s <= source_s <= end_s:  # nan never is
                sources.append(source_s)
                writes.append(source_s - (arrival_s - latency_s))  # source - header stamp
        if not sources:
            return MomentStats(0, end_s - begin_s, float("nan"))
        edges = np.concatenate(([begin_s], np.sort(sources), [end_s]))
        return MomentStats(len(sources), float(np.diff(edges).max()), float(max(writes)))

    def stats(self) -> StreamStats:
        span = self.last_s - self.first_s if self.count >= 2 else 0.0
        rate = (self.count - 1) / span if span > 0 else 0.0
        return StreamStats(
            self.topic,
            self.nominal_hz,
            self.count,
            float(rate),
            self.latency_percentile_ms(50),
            self.latency_percentile_ms(99),
            float(self.max_gap_s),
            float(self.max_source_gap_s),
            float(self.max_source_gap_end_s),
            self.missed,
        )


@dataclass
class TrackingStats:
    arm: str
    commanded_span_m: float
    """Diagonal of the commanded positions' bounding box: how much motion was asked for."""
    rms_error_m: float
    """RMS of measured minus commanded position, at the lag that fits best."""
    lag_s: float
    samples: int


def tracking_stats(
    arm: str, cmd_t: list[float], cmd_xyz: list, meas_t: list[float], meas_xyz: list, max_lag_s: float = 0.6
) -> TrackingStats:
    """How closely the measured EE positions follow the commanded ones (same frame).

    The controller reaches each target `preview` later, so the measured path is compared with
    the commanded path shifted by the lag (searched over [0, max_lag_s]) that fits best.
    """
    ct, cx = np.asarray(cmd_t, float), np.asarray(cmd_xyz, float).reshape(-1, 3)
    mt, mx = np.asarray(meas_t, float), np.asarray(meas_xyz, float).reshape(-1, 3)
    if len(ct) < 10 or len(mt) < 10:
        return TrackingStats(arm, 0.0, float("inf"), 0.0, 0)
    span = float(np.linalg.norm(cx.max(0) - cx.min(0)))  # bounding-box diagonal
    best = (float("inf"), 0.0, 0)
    for lag in np.arange(0.0, max_lag_s + 1e-9, 0.01):
        tq = ct + lag
        ok = (tq >= mt[0]) & (tq <= mt[-1])
        if ok.sum() < 10:
            continue
        interp = np.column_stack([np.interp(tq[ok], mt, mx[:, k]) for k in range(3)])
        rms = float(np.sqrt(np.mean(np.sum((interp - cx[ok]) ** 2, axis=1))))
        if rms < best[0]:
            best = (rms, float(lag), int(ok.sum()))
    return TrackingStats(arm, span, best[0], best[1], best[2])
