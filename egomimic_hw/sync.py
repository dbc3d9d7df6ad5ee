"""Observation synchronizer: builds an observation only from fresh, mutually consistent streams.

Why a library: the policy node and the recorder both need "the newest camera frames and arm
state, taken at about the same time", and both must refuse rather than act on a stale input
(a frozen camera feeding a policy is an arm moving on old information). The core takes stamps
and `now_ns` as arguments and reads no clock, so every edge case is a deterministic unit test.

Policy (approximate time, latest first):
1. `update(stream, stamp_ns, value)` keeps the newest message per stream. With
   `history_depth > 1` it keeps that many recent messages per stream (ring).
2. `build(now_ns)` refuses (ok False, `stale` names the stream) when a stream has no message,
   when its newest message is older than its `max_age_s`, or when its stamp lies ahead of
   `now_ns` by more than `tolerance_s` (a clock jump: stamps from another timeline).
3. The reference stamp is the OLDEST of the newest stamps (the laggiest stream). With
   `history_depth == 1` each stream contributes its newest message; with a history, each
   stream contributes its message nearest to the reference that is still within its age
   limit (so 100 Hz arm state is matched to the capture time of a 30 Hz frame).
4. The chosen stamps must agree: newest minus oldest <= `tolerance_s`; otherwise it refuses
   and names the stream with the oldest chosen stamp (the one holding the others back).
No observation is ever built from a message older than its stream's limit.

Edge cases, decided here once:
- Out of order: a message older than the newest one of its stream is dropped and counted
  (DDS best-effort can reorder across processes; a late frame must not replace a newer one).
- Clock jump backwards (sim time reset, bag loop, wall clock stepped): a message older than
  the stream's newest by more than CLOCK_JUMP_FACTOR x that stream's `max_age_s` (and at least
  CLOCK_JUMP_MIN_S) starts a new timeline for it (a merely late message, e.g. one delayed by a
  loaded machine, is out of order, not a new timeline: it must not wipe valid history):
  the history is cleared and the message kept, and counted. Until every stream has crossed
  to the new timeline, the old ones show as "ahead of now" and `build` refuses.
- Equal stamps: the later arrival replaces the earlier (a republished message).
Stamps are integers in ns (ROS time); ages in the reasons are printed in ms.
"""

from __future__ import annotations

import math
import threading
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from egomimic_hw.errors import ConfigError

NS_PER_S = 1_000_000_000


CLOCK_JUMP_FACTOR = 10
CLOCK_JUMP_MIN_S = 1.0
"""A backwards step larger than max(factor x max_age, min) is a new timeline, not a late message."""


@dataclass(frozen=True)
class SyncResult:
    """The outcome of one build.

    ok: every stream fresh and the stamps agree; only then are `values`/`stamps` filled for
    every stream. stale: the stream that prevented the build (None when ok). reason: one line
    for logs and diagnostics, e.g. "front_1 is 140.2 ms old (limit 100.0 ms)".
    """

    ok: bool
    values: dict[str, Any] = field(default_factory=dict)
    stamps: dict[str, int] = field(default_factory=dict)
    stale: str | None = None
    reason: str = ""

    @property
    def stamp_ns(self) -> int:
        """The observation's time: the newest of its inputs (Observation.stamp_ns convention)."""
        if not self.ok:
            raise ValueError(f"no observation was built: {self.reason}")
        return max(self.stamps.values())


class ObservationSynchronizer:
    """Latest-message store per stream with freshness and agreement checks. Thread-safe:
    subscription callbacks call `update` while a timer calls `build`."""

    def __init__(self, max_age_s: dict[str, float], tolerance_s: float, *, history_depth: int = 1):
        if not max_age_s:
            raise ConfigError("max_age_s must name at least one stream, e.g. {'front_1': 0.1}")
        for stream, age in max_age_s.items():
            if not isinstance(stream, str) or not stream:
                raise ConfigError(f"stream names must be non-empty strings, got {stream!r}")
            if not (isinstance(age, (int, float)) and math.isfinite(age) and age > 0):
                raise ConfigError(f"max_age_s[{stream!r}] must be a finite number > 0 s, got {age!r}")
        if not (isinstance(tolerance_s, (int, float)) and math.isfinite(tolerance_s) and tolerance_s >= 0):
            raise ConfigError(f"tolerance_s must be a finite number >= 0 s, got {tolerance_s!r}")
        if not (isinstance(history_depth, int) and history_depth >= 1):
            raise ConfigError(f"history_depth must be an integer >= 1, got {history_depth!r}")
        self._max_age_ns = {s: int(round(a * NS_PER_S)) for s, a in max_age_s.items()}
        self._tolerance_ns = int(round(tolerance_s * NS_PER_S))
        self._history: dict[str, deque[tuple[int, Any]]] = {s: deque(maxlen=history_depth) for s in max_age_s}
        self._lock = threading.Lock()
        self.out_of_order = dict.fromkeys(max_age_s, 0)
        """Messages dropped because a newer one of the same stream was already held."""
        self.clock_jumps = dict.fromkeys(max_age_s, 0)
        """Backward stamp steps larger than the stream's max age (a new timeline started)."""

    @property
    def streams(self) -> tuple[str, ...]:
        return tuple(self._history)

    def update(self, stream: str, stamp_ns: int, value: Any) -> None:
        """Offer one message. Unknown streams raise ConfigError (a wiring mistake, not data)."""
        history = self._history.get(stream)
        if history is None:
            raise ConfigError(f"unknown stream {stream!r}; configured: {list(self._history)}")
        stamp_ns = int(stamp_ns)
        jump_ns = max(CLOCK_JUMP_FACTOR * self._max_age_ns[stream], int(CLOCK_JUMP_MIN_S * 1e9))
        with self._lock:
            if history:
                newest = history[-1][0]
                if stamp_ns == newest:
                    history[-1] = (stamp_ns, value)
                    return
                if stamp_ns < newest:
                    if newest - stamp_ns > jump_ns:
                        self.clock_jumps[stream] += 1
                        history.clear()
                    else:
                        self.out_of_order[stream] += 1
                        return
            history.append((stamp_ns, value))

    def reset(self) -> None:
        """Forget every message (a new episode, or after a known time source change)."""
        with self._lock:
            for history in self._history.values():
                history.clear()

    def build(self, now_ns: int) -> SyncResult:
        """Assemble one observation at `now_ns` (the caller's clock, same time base as stamps)."""
        now_ns = int(now_ns)
        with self._lock:
            newest: dict[str, int] = {}
            for stream, history in self._history.items():
                if not history:
                    return SyncResult(False, stale=stream, reason=f"no message yet on {stream}")
                stamp = history[-1][0]
                age = now_ns - stamp
                limit = self._max_age_ns[stream]
                if age > limit:
                    return SyncResult(
                        False, stale=stream, reason=f"{stream} is {age / 1e6:.1f} ms old (limit {limit / 1e6:.1f} ms)"
                    )
                if -age > self._tolerance_ns:
                    return SyncResult(
                        False,
                        stale=stream,
                        reason=f"{stream} stamp is {-age / 1e6:.1f} ms ahead of now "
                        f"(tolerance {self._tolerance_ns / 1e6:.1f} ms): clock jump or foreign time base",
                    )
                newest[stream] = stamp
            reference = min(newest.values())
            chosen: dict[str, tuple[int, Any]] = {}
            for stream, history in self._history.items():
                oldest_allowed = now_ns - self._max_age_ns[stream]
                best = history[-1]
                for stamp, value in history:
                    if stamp >= oldest_allowed and abs(stamp - reference) < abs(best[0] - reference):
                        best = (stamp, value)
                chosen[stream] = best
        stamps = {s: c[0] for s, c in chosen.items()}
        spread = max(stamps.values()) - min(stamps.values())
        if spread > self._tolerance_ns:
            laggard = min(stamps, key=lambda s: stamps[s])
            leader = max(stamps, key=lambda s: stamps[s])
            return SyncResult(
                False,
                stale=laggard,
                reason=f"stamps disagree by {spread / 1e6:.1f} ms (tolerance {self._tolerance_ns / 1e6:.1f} ms): "
                f"{laggard} lags {leader}",
            )
        return SyncResult(True, values={s: c[1] for s, c in chosen.items()}, stamps=stamps, reason="ok")
