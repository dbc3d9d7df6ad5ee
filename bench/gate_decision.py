"""Safety gate timing: decision time per command, and fault-to-HOLD over DDS.

1. Decision time (in process, pure gate): `SafetyGate.propose` on commands near the measured
   pose for both arms (structure, Cartesian, IK through the ARX SDK solver, joint checks),
   p50/p99/max in microseconds and as a fraction of the 33.3 ms control period. Baseline: the
   two IK calls alone (the floor: the gate cannot be cheaper than IK for both arms), printed
   as the ratio gate / IK.
2. Fault to HOLD (real processes over DDS): the simulated graph (egomimic-launch, policy:=none)
   with this process as the policy; per trial: arm, stream at 30 Hz, then a NaN command
   (content fault) or stop streaming (silence fault). Time = the gate's status stamp minus the
   fault instant (same machine clock), and to receipt here. Physical limit for silence: the
   command timeout (90 ms) + one watchdog period (10 ms).
Writes JSON to --out. Run: `.venv/bin/python bench/gate_decision.py --out out/bench/gate_decision.json`
(--commands N, --trials N, --domain ID; DDS stays on localhost).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def percentiles(xs) -> dict:
    a = np.asarray(xs, dtype=float)
    return {
        "p50": float(np.percentile(a, 50)),
        "p99": float(np.percentile(a, 99)),
        "max": float(a.max()),
        "n": int(a.size),
    }


def bench_decision(n: int) -> dict:
    from egomimic_hw.description import ARMS
    from egomimic_hw.kinematics import ArmKinematics
    from egomimic_safety.checks import ArmCommand, ArmMeasurement
    from egomimic_safety.config import GateConfig
    from egomimic_safety.gate import GateState, Proposal, SafetyGate, Send

    kin = {arm: ArmKinematics() for arm in ARMS}
    q0 = np.array([0.0, 1.0, 1.0, -0.3, 0.0, 0.0])
    config = GateConfig(required_cameras=())
    gate = SafetyGate(config, kin)
    t = 0.0
    q = {a: q0.copy() for a in ARMS}
    gate_us, ik_us = [], []
    center = {a: kin[a].forward(q0) for a in ARMS}

    def measure():
        for a in ARMS:
            gate.update_measurement(a, ArmMeasurement(q[a].copy(), 0.5, kin[a].forward(q[a]), t), t)

    measure()
    gate.request_arm(t, t)
    for i in range(n + config.shadow_commands):
        t += 1.0 / 30.0
        phase = 2 * np.pi * i / 180.0  # a 4 cm circle in 6 s, like the scripted policy
        arms = {}
        for a in ARMS:
            pose = center[a].copy()
            pose[1] += 0.04 * np.sin(phase)
            pose[2] += 0.04 * (np.cos(phase) - 1.0)
            arms[a] = ArmCommand(a.hw_frame, pose, 0.5)
        proposal = Proposal(t, arms)
        t0 = time.perf_counter_ns()
        decision = gate.propose(proposal, t, t)
        gate_us.append((time.perf_counter_ns() - t0) / 1e3)
        t0 = time.perf_counter_ns()
        for a in ARMS:
            kin[a].inverse(arms[a].pose, q[a])
        ik_us.append((time.perf_counter_ns() - t0) / 1e3)
        if decision.send is Send.FORWARD:  # a perfect driver: the arms go where they were commanded
            q = {a: decision.targets[a][:6].copy() for a in ARMS}
        measure()
        if gate.state not in (GateState.ARMED, GateState.ARMING):
            raise RuntimeError(f"bench motion was refused: {gate.detail}")
    gate_us, ik_us = gate_us[config.shadow_commands :], ik_us[config.shadow_commands :]
    g, k = percentiles(gate_us), percentiles(ik_us)
    period_us = 1e6 / 30.0
    return {
        "gate_us": g,
        "ik_both_arms_us": k,
        "ratio_gate_over_ik_p50": g["p50"] / k["p50"],
        "fraction_of_period_p50": g["p50"] / period_us,
        "fraction_of_period_p99": g["p99"] / period_us,
        "forwarded": gate.forwarded,
    }


def bench_fault_to_hold(trials: int) -> dict:
    from egomimic_hw.description import ARMS
    from tests.faults.rig import Rig

    tmp = Path(tempfile.mkdtemp(prefix="bench-gate-"))
    rig = Rig(tmp, ())
    results = {"nan": [], "nan_recv": [], "silence": [], "silence_recv": []}
    try:
        if not rig.wait_ready(90):
            raise RuntimeError(f"graph did not come up; see {tmp / 'launch.log'}")
        for i in range(trials):
            for kind in ("nan", "silence"):
                rig.stop_stream()
                if rig.state() in ("HOLD", "ESTOP"):
                    rig.call("reset")
                deadline = t_arm = time.time()
                deadline += 5.0
                while not rig.call("arm")[0] and time.time() < deadline:
                    time.sleep(0.1)
                rig.start_stream({a: rig.measured_pose(a) for a in ARMS})
                if not rig.wait_state({"ARMED"}, t_arm, 3.0):
                    raise RuntimeError(f"did not arm: {rig.statuses[-1]}")
                time.sleep(0.2 + 0.033 * (i % 3) / 3)
                if kind == "nan":
                    t_fault = rig.inject_once(lambda m: setattr(m, "right_gripper", float("nan")))
                else:
                    t_fault = rig.stop_stream()
                s = rig.wait_state({"HOLD"}, t_fault - 0.001, 3.0)
                if s is None:
                    raise RuntimeError(f"{kind}: no HOLD")
                results[kind].append((s.stamp_s - t_fault) * 1e3)
                results[kind + "_recv"].append((s.recv_s - t_fault) * 1e3)
    finally:
        rig.close()
    return {k: percentiles(v) for k, v in results.items()}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=REPO / "out/bench/gate_decision.json")
    ap.add_argument("--commands", type=int, default=2000)
    ap.add_argument("--trials", type=int, default=10)
    ap.add_argument("--domain", type=int, default=int(os.environ.get("ROS_DOMAIN_ID", "42")))
    a = ap.parse_args()
    os.environ["ROS_AUTOMATIC_DISCOVERY_RANGE"] = "LOCALHOST"
    os.environ["ROS_DOMAIN_ID"] = str(a.domain)
    os.environ.setdefault("FASTDDS_DEFAULT_PROFILES_FILE", str(REPO / "config/fastdds_local.xml"))

    d = bench_decision(a.commands)
    g, k = d["gate_us"], d["ik_both_arms_us"]
    print(
        f"gate decision (both arms, IK incl.), {g['n']} commands: p50 {g['p50']:.0f} us  p99 {g['p99']:.0f} us  "
        f"max {g['max']:.0f} us"
    )
    print(
        f"  fraction of the 33.3 ms period: p50 {d['fraction_of_period_p50'] * 100:.2f} %  p99 {d['fraction_of_period_p99'] * 100:.2f} %"
    )
    print(
        f"  baseline IK alone (both arms): p50 {k['p50']:.0f} us  p99 {k['p99']:.0f} us; gate / IK = {d['ratio_gate_over_ik_p50']:.2f}x"
    )
    h = bench_fault_to_hold(a.trials) if a.trials > 0 else {}
    for kind, floor in (("nan", None), ("silence", 100.0)):
        if kind in h:
            s, r = h[kind], h[kind + "_recv"]
            extra = (
                f"  (limit by design: timeout 90 ms + watchdog 10 ms = {floor:.0f} ms; p99/limit {s['p99'] / floor:.2f})"
                if floor
                else ""
            )
            print(
                f"fault -> HOLD over DDS, {kind:<7} ({s['n']} trials): gate stamp p50 {s['p50']:.1f} ms  p99 {s['p99']:.1f} ms  "
                f"max {s['max']:.1f} ms; received here p99 {r['p99']:.1f} ms{extra}"
            )
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(json.dumps({"decision": d, "fault_to_hold_ms": h}, indent=1))
    print(f"written to {a.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
