"""Pure statistics of observed streams (no ROS): rates, latency percentiles, tracking error."""

from __future__ import annotations

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

    @property
    def rate_error(self) -> float:
        return abs(self.rate_hz - self.nominal_hz) / self.nominal_hz if self.nominal_hz else 0.0


def stream_stats(topic: str, nominal_hz: float, arrivals_s: list[float], latencies_s: list[float],
                 window: tuple[float, float]) -> StreamStats:
    """Rate over the messages that arrived inside `window` (steady state, not start-up)."""
    t = np.asarray(arrivals_s, dtype=float)
    lat = np.asarray(latencies_s, dtype=float)
    inside = (t >= window[0]) & (t <= window[1])
    t_in, lat_in = t[inside], lat[inside]
    rate = (len(t_in) - 1) / (t_in[-1] - t_in[0]) if len(t_in) >= 2 and t_in[-1] > t_in[0] else 0.0
    p50, p99 = (np.percentile(lat_in, [50, 99]) * 1e3) if len(lat_in) else (np.nan, np.nan)
    gap = float(np.max(np.diff(t_in))) if len(t_in) >= 2 else float("nan")
    return StreamStats(topic, nominal_hz, int(len(t_in)), float(rate), float(p50), float(p99), gap)


@dataclass
class TrackingStats:
    arm: str
    commanded_span_m: float
    """Diagonal of the commanded positions' bounding box: how much motion was asked for."""
    rms_error_m: float
    """RMS of measured minus commanded position, at the lag that fits best."""
    lag_s: float
    samples: int


def tracking_stats(arm: str, cmd_t: list[float], cmd_xyz: list, meas_t: list[float], meas_xyz: list,
                   max_lag_s: float = 0.6) -> TrackingStats:
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
