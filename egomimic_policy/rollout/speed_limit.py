"""Hold the commanded end-effector speed under the gate's limits before the gate sees it.

Why: a learned policy's chunk is a sample, and a sample's rows can be uneven. The shipped box
policy plans a step of 0.83 m/s now and then (28 mm in one 33 ms row; its expert never passed
0.2 m/s), and the gate answers a step beyond 0.6 m/s x dt with a latched TRANSLATION_RATE HOLD:
right for a producer gone wrong, wrong for a plan that is only a little uneven. So the executor
holds each published step to the limits (LeRobot's `max_relative_target` does the same in
front of its robots), with a margin below the gate's, and counts every tick it changed. The
gate still checks every step and still holds on one it refuses: this stage makes the policy's
output what the gate accepts, it does not replace the gate.

The step is measured as the gate measures it (egomimic_safety.checks): the distance between the
two commands' positions (the dataset and hardware frames share positions: egomimic_hw.frames)
and the geodesic angle between their orientations (the frames' fixed rotation leaves it
unchanged), against speed x dt with dt the difference of the
two ticks' stamps, capped at `max_dt_s` (the gate caps at 2 periods). A clamped step moves along
the straight line (position) and the shortest arc (orientation) toward the target, so a plan
that runs ahead is followed at the limit and met again where it slows.

A plan that does not slow is a fault, not an uneven row: a policy gone wrong (seen once in
`make run`: 137 limited ticks in a row, then a pose the IK could not reach). Followed at the
limit it would keep the arm moving toward wherever it went, with the gate's speed check no
longer able to see it. So the lag is bounded: once an output is further than `max_lag_m` or
`max_lag_rad` from what the plan asked for at that instant, the limiter is `runaway` (latched
until reset, with the reason) and its caller stops publishing; the gate then holds on the
silence (STALE_COMMAND) as for a dead policy, and the drivers hold 100 ms after the last command.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from egomimic_hw.pose_step import step_size, step_toward

NS_PER_S = 1_000_000_000


def limit_step(prev: np.ndarray, pose: np.ndarray, max_step_m: float, max_angle_rad: float) -> np.ndarray | None:
    """`pose` ([x, y, z, qw, qx, qy, qz], quaternions of any nonzero norm: a model's raw rows)
    moved back toward `prev` until its step from `prev` is at most `max_step_m` and
    `max_angle_rad`; None when it already is (the caller keeps `pose` itself, bit for bit)."""
    dist, angle = step_size(prev, pose)
    if dist <= max_step_m and angle <= max_angle_rad:
        return None
    return step_toward(prev, pose, dist, angle, max_step_m, max_angle_rad)


@dataclass
class SpeedLimiter:
    """Each arm's previous output and its time; `apply` limits the next against them. Built by
    ExecutorConfig.speed_limiter(), where the defaults and their ranges are."""

    max_speed_m_s: float
    max_angular_speed_rad_s: float
    max_dt_s: float
    max_lag_m: float
    max_lag_rad: float

    def __post_init__(self) -> None:
        self._prev: tuple[int, np.ndarray, np.ndarray] | None = None
        self.limited = 0
        """Calls that changed a pose."""
        self.runaway = ""
        """Why the plan ran further ahead than the lag bounds ("" while it has not; latched)."""

    def reset(self) -> None:
        """Forget the previous output and a runaway: the next pose passes as it is (the gate
        judges a first command against the measured pose, not a previous one)."""
        self._prev = None
        self.runaway = ""

    def apply(self, now_ns: int, left: np.ndarray, right: np.ndarray) -> tuple[np.ndarray, np.ndarray, bool]:
        """(left, right, changed): the poses for `now_ns`, each step held to the limits."""
        prev, changed = self._prev, False
        if prev is not None:
            dt = min(max(now_ns - prev[0], 0) / NS_PER_S, self.max_dt_s)
            max_step, max_angle = self.max_speed_m_s * dt, self.max_angular_speed_rad_s * dt
            out = []
            for name, previous, pose in (("left", prev[1], left), ("right", prev[2], right)):
                limited = limit_step(previous, pose, max_step, max_angle)
                if limited is not None:
                    changed = True
                    self._check_lag(name, limited, pose)
                out.append(pose if limited is None else limited)
            left, right = out
        self.limited += changed
        self._prev = (now_ns, left, right)
        return left, right, changed

    def _check_lag(self, arm: str, out: np.ndarray, plan: np.ndarray) -> None:
        lag_m, lag_rad = step_size(out, plan)
        if not self.runaway and (lag_m > self.max_lag_m or lag_rad > self.max_lag_rad):
            self.runaway = (
                f"{arm}: the plan ran {lag_m * 1e3:.0f} mm / {lag_rad:.2f} rad ahead of the speed limits "
                f"({self.max_speed_m_s:g} m/s, {self.max_angular_speed_rad_s:g} rad/s; lag bounds "
                f"{self.max_lag_m * 1e3:.0f} mm / {self.max_lag_rad:g} rad)"
            )
