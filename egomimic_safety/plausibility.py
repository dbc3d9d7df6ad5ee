"""Is a measured joint state physically possible? Checked before anything trusts it.

A measurement is what the gate compares commands against and what a HOLD commands, so a
measurement that is wrong (a spoofing publisher, a corrupted encoder read, a replayed stream)
would make the safety layer itself drive the arm. A sample is implausible when:
- a joint lies outside the X5 limits by more than `limit_margin_rad` (the SDK clips every
  command to its limits, so only tracking overshoot and noise can take a real arm past them);
- a joint moved faster than `speed_factor` x its speed limit since the previous plausible
  sample, plus `noise_rad` (the SDK clips the commanded speed to the limit; the factor leaves
  room for tracking overshoot, the noise term for encoder noise and quantization);
- its stamp is not after the previous plausible sample's (a replayed or second stream);
- it is not finite or has the wrong shape.
The reference for the next sample is always the last *plausible* one, so one bad sample does
not make the following good ones look like jumps. Pure logic: the gate and the driver each keep
one monitor per arm.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from egomimic_hw.description import JOINTS_PER_ARM, X5_LIMITS, ArmLimits
from egomimic_hw.errors import ConfigError


@dataclass(frozen=True)
class PlausibilityConfig:
    limit_margin_rad: float = 0.05
    """A measured joint may lie this far outside its limit (tracking overshoot at a limit the
    SDK clips to, plus noise); further out is implausible. 0.05 rad is 2.9 deg, 10x the largest
    overshoot seen in the simulated step tests and far below the SDK's own emergency (limit +- pi)."""
    speed_factor: float = 1.5
    """Measured joint speed between two samples may reach this multiple of the joint's speed
    limit (the SDK clips commanded speed to 1.0x; overshoot of the PD tracking stays below it)."""
    noise_rad: float = 2e-3
    """Added to the allowed change between two samples: encoder noise and quantization (the X5's
    encoders resolve ~1e-4 rad; the sim's noise is 2e-5 rad std)."""
    limits: ArmLimits = X5_LIMITS

    def __post_init__(self) -> None:
        for name in ("limit_margin_rad", "speed_factor", "noise_rad"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
                raise ConfigError(f"plausibility {name} must be a finite number >= 0, got {value!r}")
        if self.speed_factor < 1.0:
            raise ConfigError(
                f"plausibility speed_factor must be >= 1 (the arm may reach its speed limit), got {self.speed_factor}"
            )


@dataclass(frozen=True)
class Sample:
    stamp_s: float
    joints_rad: np.ndarray


class StateMonitor:
    """Plausibility of one arm's measured joints over time (see the module docstring)."""

    def __init__(self, config: PlausibilityConfig = PlausibilityConfig()):
        self.config = config
        self.last: Sample | None = None
        """The last plausible sample (None before the first)."""
        self.implausible = 0
        self.last_problem = ""

    def check(self, joints_rad, stamp_s: float) -> str:
        """'' when the sample is plausible (it becomes the new reference), else why not (the
        reference is kept)."""
        problem = self._problem(joints_rad, stamp_s)
        if problem:
            self.implausible += 1
            self.last_problem = problem
            return problem
        self.last = Sample(float(stamp_s), np.asarray(joints_rad, dtype=float)[:JOINTS_PER_ARM].copy())
        return ""

    def judge(self, joints_rad, stamp_s: float) -> str:
        """Like check(), but never changes the reference: for samples that cannot become one
        (from a publisher not yet identified) yet must still be refused loudly when impossible."""
        return self._problem(joints_rad, stamp_s)

    def _problem(self, joints_rad, stamp_s: float) -> str:
        try:
            q = np.asarray(joints_rad, dtype=float)
            t = float(stamp_s)
        except (TypeError, ValueError) as exc:
            return f"not numbers: {exc}"
        if q.shape != (JOINTS_PER_ARM,):
            return f"expected {JOINTS_PER_ARM} joints, got shape {q.shape}"
        if not (np.all(np.isfinite(q)) and math.isfinite(t)):
            return f"non-finite sample {q.tolist()} at {t}"
        cfg, lim = self.config, self.config.limits
        outside = (q < lim.pos_min - cfg.limit_margin_rad) | (q > lim.pos_max + cfg.limit_margin_rad)
        if outside.any():
            beyond = np.maximum(lim.pos_min - q, q - lim.pos_max)
            j = int(np.argmax(np.where(outside, beyond, -np.inf)))
            return (
                f"joint{j + 1} measured {q[j]:.3f} rad, {beyond[j]:.3f} rad outside its limits "
                f"[{lim.pos_min[j]:.3f}, {lim.pos_max[j]:.3f}] (margin {cfg.limit_margin_rad} rad)"
            )
        if self.last is None:
            return ""
        dt = t - self.last.stamp_s
        if dt == 0.0:
            # A second read of the same measurement (the SDK loop had not run again): plausible
            # when it differs by noise only. It still becomes the reference (same instant).
            step = float(np.max(np.abs(q - self.last.joints_rad)))
            if step > cfg.noise_rad:
                return f"two samples stamped {t:.6f} differ by {step:.4f} rad (noise allowance {cfg.noise_rad} rad)"
            return ""
        if dt < 0:
            return f"stamp {t:.6f} is before the previous sample's {self.last.stamp_s:.6f}"
        allowed = lim.vel_max * cfg.speed_factor * dt + cfg.noise_rad
        step = np.abs(q - self.last.joints_rad)
        j = int(np.argmax(step / allowed))
        if step[j] > allowed[j]:
            return (
                f"joint{j + 1} moved {step[j]:.3f} rad in {dt * 1e3:.1f} ms ({step[j] / dt:.1f} rad/s; "
                f"allowed {allowed[j]:.3f} rad: {cfg.speed_factor} x {lim.vel_max[j]} rad/s + {cfg.noise_rad} rad)"
            )
        return ""


def clamp_to_limits(joints_rad, margin_rad: float = 0.0, limits: ArmLimits = X5_LIMITS) -> np.ndarray:
    """Joints clipped into [min + margin, max - margin]: a hold target may never lie outside."""
    q = np.asarray(joints_rad, dtype=float)[:JOINTS_PER_ARM]
    return np.clip(q, limits.pos_min + margin_rad, limits.pos_max - margin_rad)
