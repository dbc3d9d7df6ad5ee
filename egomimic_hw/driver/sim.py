"""A simulated X5 joint controller that behaves like the ARX SDK's `Arx5JointController`.

A product feature, not a mock: users without a robot, `make run` and the tests drive exactly
this, so it obeys the SDK's rules (upstream controller_base.cpp):
- a 500 Hz loop (dt 0.002 s) interpolating linearly from the current output command to the
  target at its stamp (`now + preview`); past the stamp it holds the target forever;
- every loop clips the output: joint speed to `joint_vel_max * dt`, joint position to the limits,
  gripper to its range and `gripper_vel_max * dt`;
- latched emergency (the SDK's damping loop that never returns): implausible measured state
  (joints beyond limits +- pi, gripper below -0.017 m) or `inject_emergency`; after that,
  commands are ignored and the joints only settle where damping leaves them.
Timing knobs the SDK has in reality and tests need to rehearse: command latency (CAN + driver)
and first-order motor tracking lag; sensor noise on the measured joints.

The loop is integrated lazily: `read(now_s)` / `command(..., now_s)` advance the state in 2 ms
substeps up to `now_s`. That is the same sequence of clipped steps the SDK's thread makes, at
no CPU cost while nobody looks, and deterministic for a given seed and call sequence.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from egomimic_hw.description import GRIPPER_EMERGENCY_BELOW_M, JOINTS_PER_ARM, SDK_LOOP_DT_S, X5_LIMITS, ArmLimits
from egomimic_hw.driver.base import ArmReading
from egomimic_hw.errors import ConfigError

_maximum, _minimum, _abs = np.maximum, np.minimum, np.abs
_max, _any = np.maximum.reduce, np.logical_or.reduce

MAX_CATCH_UP_S = 2.0
"""A read after a long pause (debugger, suspended VM) integrates at most this much time in
substeps; the rest is skipped as if the loop had been idle at its target."""


@dataclass(frozen=True)
class SimConfig:
    """Parameters of the simulated controller (defaults: an ideal-ish healthy X5)."""

    initial_joints_rad: tuple[float, ...] = field(
        default=(0.0, 1.0, 1.0, -0.3, 0.0, 0.0),
        metadata={"help": "where the simulated arm starts, rad (6 joints; all-zero is the folded home pose)"},
    )
    """A non-singular work pose inside the limits."""
    initial_gripper_m: float = field(default=0.04, metadata={"help": "where the simulated gripper starts, m"})
    loop_dt_s: float = field(default=SDK_LOOP_DT_S, metadata={"help": "the SDK loop period, s (500 Hz)"})
    command_latency_s: float = field(
        default=0.0, metadata={"help": "delay between a command and the SDK loop seeing it, s (CAN + driver)"}
    )
    tracking_time_constant_s: float = field(
        default=0.004,
        metadata={"help": "first-order lag of the measured joints behind the output command, s (PD tracking)"},
    )
    joint_noise_std_rad: float = field(
        default=2e-5,
        metadata={"help": "Gaussian noise on the measured joints, rad (encoder quantization is ~1e-4 rad)"},
    )
    emergency_after_s: float = field(
        default=0.0, metadata={"help": "rehearsal: latch the SDK emergency this long after start, s (0 = never)"}
    )
    """So operators and tests can see what a real emergency does to the graph (joint_states
    stop, diagnostics ERROR)."""
    gripper_min_m: float = field(default=-0.012, metadata={"help": "the patched SDK's gripper command floor, m"})
    limits: ArmLimits = field(default_factory=lambda: X5_LIMITS)

    def __post_init__(self) -> None:
        if len(self.initial_joints_rad) != JOINTS_PER_ARM:
            raise ConfigError(f"initial_joints_rad needs {JOINTS_PER_ARM} values, got {self.initial_joints_rad}")
        q = np.asarray(self.initial_joints_rad)
        if np.any(q < self.limits.pos_min) or np.any(q > self.limits.pos_max):
            raise ConfigError(f"initial_joints_rad {self.initial_joints_rad} outside the joint limits")
        for name in ("loop_dt_s",):
            if not getattr(self, name) > 0:
                raise ConfigError(f"{name} must be > 0, got {getattr(self, name)}")
        for name in ("command_latency_s", "tracking_time_constant_s", "joint_noise_std_rad", "emergency_after_s"):
            if not getattr(self, name) >= 0:
                raise ConfigError(f"{name} must be >= 0, got {getattr(self, name)}")


class SimArx5Controller:
    """Simulated `Arx5JointController` for one arm (see module docstring for the rules)."""

    def __init__(self, config: SimConfig = SimConfig(), *, seed: int = 0):
        self.config = config
        self._rng = np.random.default_rng(seed)
        lim = config.limits
        self._pos_min = np.append(lim.pos_min, config.gripper_min_m)
        self._pos_max = np.append(lim.pos_max, lim.gripper_width_m)
        self._step_max = np.append(lim.vel_max, lim.gripper_speed_max_m_s) * config.loop_dt_s
        self._step_min = -self._step_max
        self._implausible_below = lim.pos_min - np.pi  # the SDK's emergency: joints beyond the limits +- pi
        self._implausible_above = lim.pos_max + np.pi
        start = np.append(np.asarray(config.initial_joints_rad, float), config.initial_gripper_m)
        self._output = start.copy()  # what the SDK loop sends to the motors
        self._measured = start.copy()
        self._velocity = np.zeros(JOINTS_PER_ARM + 1)
        # Linear interpolation segment (t0, x0) -> (t1, x1), as the SDK's interpolator holds it.
        self._seg = (0.0, start.copy(), 0.0, start.copy())
        self._pending: list[tuple[float, np.ndarray, float]] = []  # (visible_at, target, stamp)
        self._t = 0.0
        self._noise_t: float | None = None  # the substep time the current noise belongs to
        self._noise = np.zeros(JOINTS_PER_ARM)
        self.fault = ""
        self.loop_steps = 0
        self.clipped_steps = 0
        """Substeps in which the speed or position clip changed the output (what the SDK did)."""
        self._gain: dict[float, float] = {}  # first-order tracking gain per substep length

    @property
    def home_joints_rad(self) -> np.ndarray:
        """`home` brings the simulated arm back to where it started (a new simulated trial)."""
        return np.asarray(self.config.initial_joints_rad, float)

    @property
    def home_gripper_m(self) -> float:
        return float(self.config.initial_gripper_m)

    # -- SDK-like API -------------------------------------------------------------------------
    def command(self, joints_rad, gripper_m: float, now_s: float, preview_s: float) -> None:
        target = np.append(np.asarray(joints_rad, dtype=float), float(gripper_m))
        if target.shape != (JOINTS_PER_ARM + 1,) or not np.all(np.isfinite(target)):
            raise ConfigError(f"joint target must be {JOINTS_PER_ARM} finite joints + gripper, got {target}")
        self._advance(now_s)
        self._pending.append((now_s + self.config.command_latency_s, target, now_s + preview_s))

    def read(self, now_s: float) -> ArmReading:
        self._advance(now_s)
        if self._noise_t != self._t:  # a new measurement; a second read of the same one reads the same values
            self._noise = self._rng.normal(0.0, self.config.joint_noise_std_rad, JOINTS_PER_ARM)
            self._noise_t = self._t
        noise = self._noise
        return ArmReading(
            stamp_s=self._t,
            joints_rad=self._measured[:JOINTS_PER_ARM] + noise,
            joint_velocities_rad_s=self._velocity[:JOINTS_PER_ARM].copy(),
            gripper_m=float(self._measured[JOINTS_PER_ARM]),
            fault=self.fault,
            measured_at_s=self._t,  # the last 2 ms substep: the sim clock is the caller's clock
        )

    def inject_emergency(self, why: str) -> None:
        """Latch the SDK's emergency state (tests and fault rehearsals)."""
        if not self.fault:
            self.fault = why

    def close(self) -> None:
        self._pending.clear()

    # -- the 500 Hz loop ----------------------------------------------------------------------
    def _advance(self, now_s: float) -> None:
        dt = self.config.loop_dt_s
        if now_s - self._t > MAX_CATCH_UP_S:
            self._t = now_s - MAX_CATCH_UP_S
        while self._t + dt <= now_s + 1e-12:
            self._t += dt
            self._loop_once(self._t, dt)

    def _loop_once(self, t: float, dt: float) -> None:
        # 500 substeps a second per arm: bare ufuncs with `out`, not the np.* wrappers or array
        # methods that go through Python (a third of the driver's state loop was these lines).
        self.loop_steps += 1
        while self._pending and self._pending[0][0] <= t:
            _, target, stamp = self._pending.pop(0)
            if not self.fault:
                self._seg = (t, self._output.copy(), max(stamp, t), target)
        if self.fault:
            # Damping: the motors stop tracking; the output follows what is measured.
            self._output = self._measured.copy()
            self._velocity[:] = 0.0
            return
        t0, x0, t1, x1 = self._seg
        alpha = 1.0 if t1 <= t0 else min(max((t - t0) / (t1 - t0), 0.0), 1.0)
        desired = x1 - x0
        desired *= alpha
        desired += x0
        step = desired - self._output
        _maximum(step, self._step_min, out=step)
        _minimum(step, self._step_max, out=step)
        step += self._output
        _maximum(step, self._pos_min, out=step)
        new_output = _minimum(step, self._pos_max, out=step)
        off = new_output - desired
        if _max(_abs(off, out=off)) > 1e-12:
            self.clipped_steps += 1
        self._output = new_output
        gain = self._gain.get(dt)
        if gain is None:
            tau = self.config.tracking_time_constant_s
            gain = self._gain[dt] = 1.0 if tau <= 0 else 1.0 - float(np.exp(-dt / tau))
        previous = self._measured
        measured = new_output - previous
        measured *= gain
        measured += previous
        self._measured = measured
        velocity = measured - previous
        velocity /= dt
        self._velocity = velocity
        self._check_emergency()

    def _check_emergency(self) -> None:
        if 0 < self.config.emergency_after_s <= self._t and not self.fault:
            self.fault = f"emergency rehearsal (sim.emergency_after_s = {self.config.emergency_after_s} s)"
        q = self._measured[:JOINTS_PER_ARM]
        if _any(q < self._implausible_below) or _any(q > self._implausible_above):
            self.fault = "joint position implausible (beyond limits +- pi)"
        elif self._measured[JOINTS_PER_ARM] < GRIPPER_EMERGENCY_BELOW_M:
            self.fault = f"gripper below {GRIPPER_EMERGENCY_BELOW_M} m"
