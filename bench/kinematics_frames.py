"""Per-call cost (microseconds) of FK, IK and the frame/rotation conversions, beside references.

What is measured, each row one operation, "ours" beside a reference doing the same job:
  - kinematics: `ArmKinematics.forward` / `.inverse` (egomimic_hw.kinematics) against the raw
    `arx5_interface.Arx5Solver` calls they wrap, given their native input precomputed (pose_6d
    for IK), so ours/raw is the wrapper's whole overhead: input validation, pose_6d <-> quaternion
    conversion and, for IK, the FK residual check. IK is seeded with the measured joints, as the
    gate does: `ik_step` targets a pose one policy step away (joints +-0.02 rad), `ik_far` one
    +-0.3 rad away (more solver iterations). `fk` is also timed against raw FK + scipy's Euler ->
    quaternion, i.e. what a scipy-based wrapper would cost.
  - kinematics backends side by side: `ArmKinematics(backend="pinocchio")` against
    `ArmKinematics(backend="sdk")` on the same inputs (ours/ref > 1: Pinocchio is slower); FK
    must agree to 1e-9, IK rows count a disagreement when one backend reaches a target and the
    other does not. Also Pinocchio's wrapper against its raw FK. Without the SDK (Python != 3.11)
    only the Pinocchio rows run.
  - frames / rotations: hardware <-> dataset pose conversion, quaternion <-> matrix, Euler
    (intrinsic ZYX), rot6d, pose <-> 4x4, geodesic angle and the wrist-relative encode/decode
    (when egomimic_hw.frames has it), single pose and batched (--batch, default 1000), against
    `scipy.spatial.transform.Rotation` doing the same conversion.
How: every op cycles through a pool of distinct random inputs (fixed seed); after --warmup calls,
ours and the reference are timed call by call (time.perf_counter_ns) in alternating blocks
(--rounds), so load from other processes on a shared machine hits both sides alike.
Before timing, every pair is checked to agree numerically on the whole pool (quaternions sign-
free, Euler angles modulo 2 pi); a disagreeing pair is printed as FAIL and the exit code is 1:
a fast but wrong path cannot look good.
How to read: `ours/ref` is the p50 ratio (> 1: ours is slower). Batched rows are per call of N
poses (per pose = us / N). `timer floor` is the cost of timing an empty call; single-call rows
within a few times of it are dominated by Python call overhead. The physical budget for scale:
the gate runs at 30 Hz (33 ms per tick, two arms), the drivers at 100 Hz (10 ms per tick).
Run: `.venv/bin/python bench/kinematics_frames.py [--out out/bench/kinematics_frames.json]`.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from scipy.spatial.transform import Rotation

from egomimic_hw import frames, rotations
from egomimic_hw.description import EEF_LINK
from egomimic_hw.errors import BackendUnavailable
from egomimic_hw.kinematics import ArmKinematics, SdkArm, pose6d_from_pose
from egomimic_hw.pinocchio_kinematics import urdf_text

WORK_JOINTS_RAD = np.array([0.0, 1.0, 1.0, -0.3, 0.0, 0.0])
"""The simulated arms' start pose (egomimic_hw.driver.sim): non-singular, inside the limits."""

JOINT_SPREAD_RAD = 0.3
"""Measured joints are drawn around the work pose within this (as the kinematics unit tests)."""

STEP_SEED_RAD = 0.02
"""`ik_step`: the seed (measured joints) is this far per joint from the solution, about one 30 Hz
policy step of a moving arm."""

FAR_SEED_RAD = 0.3
"""`ik_far`: a seed this far per joint from the solution."""

POOL = 256
"""Distinct inputs per op, cycled; enough that no branch predictor or cache sees one value."""


@dataclass
class Case:
    """One row: ours and a reference doing the same job on the same inputs."""

    name: str
    n: int
    ours: Callable
    ref: Callable
    ref_label: str
    inputs: list
    ref_inputs: list | None = None
    check: Callable | None = None
    """check(ours_out, ref_out) -> max abs difference (after sign/wrap handling)."""
    tolerance: float = 1e-9
    result: dict = field(default_factory=dict)


# -- numerical agreement helpers -------------------------------------------------------------------
def quat_diff(a, b) -> float:
    """Max abs difference of quaternions, q and -q counted equal."""
    a, b = np.asarray(a, float), np.asarray(b, float)
    same = np.abs(a - b).max(axis=-1)
    flipped = np.abs(a + b).max(axis=-1)
    return float(np.max(np.minimum(same, flipped)))


def pose_diff(a, b) -> float:
    a, b = np.asarray(a, float), np.asarray(b, float)
    return max(float(np.abs(a[..., :3] - b[..., :3]).max()), quat_diff(a[..., 3:], b[..., 3:]))


def plain_diff(a, b) -> float:
    return float(np.abs(np.asarray(a, float) - np.asarray(b, float)).max())


def angle_diff(a, b) -> float:
    d = np.asarray(a, float) - np.asarray(b, float)
    return float(np.abs((d + np.pi) % (2 * np.pi) - np.pi).max())


# -- scipy references (what the same job costs with Rotation) --------------------------------------
M_ROT = Rotation.from_matrix(frames.DS_FROM_HW)
M_ROT_INV = M_ROT.inv()


def sp_quat(q_wxyz) -> Rotation:
    return Rotation.from_quat(q_wxyz, scalar_first=True)


def sp_as_quat(r: Rotation) -> np.ndarray:
    return r.as_quat(canonical=True, scalar_first=True)


def sp_convert_pose(pose, m: Rotation) -> np.ndarray:
    pose = np.asarray(pose)
    return np.concatenate([pose[..., :3], sp_as_quat(m * sp_quat(pose[..., 3:]))], axis=-1)


def sp_rot6d(m) -> np.ndarray:
    return np.concatenate([m[..., :, 0], m[..., :, 1]], axis=-1)


def sp_rot6d_to_rotation(v) -> Rotation:
    """scipy has no 6D type: complete the frame with a cross product, let from_matrix orthonormalize."""
    a, b = v[..., :3], v[..., 3:]
    return Rotation.from_matrix(np.stack([a, b, np.cross(a, b)], axis=-1))


def sp_pose_to_matrix(pose) -> np.ndarray:
    pose = np.asarray(pose)
    t = np.zeros(pose.shape[:-1] + (4, 4))
    t[..., :3, :3] = sp_quat(pose[..., 3:]).as_matrix()
    t[..., :3, 3] = pose[..., :3]
    t[..., 3, 3] = 1.0
    return t


def sp_matrix_to_pose(t) -> np.ndarray:
    return np.concatenate([t[..., :3, 3], sp_as_quat(Rotation.from_matrix(t[..., :3, :3]))], axis=-1)


def sp_wrist_encode(current, targets) -> np.ndarray:
    rc_inv = sp_quat(current[3:]).inv()
    xyz = rc_inv.apply(targets[..., :3] - current[:3])
    rel = (rc_inv * sp_quat(targets[..., 3:])).as_matrix()
    return np.concatenate([xyz, sp_rot6d(rel)], axis=-1)


def sp_wrist_decode(current, encoded) -> np.ndarray:
    rc = sp_quat(current[3:])
    xyz = current[:3] + rc.apply(encoded[..., :3])
    return np.concatenate([xyz, sp_as_quat(rc * sp_rot6d_to_rotation(encoded[..., 3:]))], axis=-1)


# -- input pools --------------------------------------------------------------------------------
def random_quats(rng, shape) -> np.ndarray:
    q = rng.normal(size=shape + (4,))
    return rotations.canonical_quat(q / np.linalg.norm(q, axis=-1, keepdims=True))


def random_poses(rng, shape) -> np.ndarray:
    return np.concatenate([rng.uniform(-0.5, 0.5, shape + (3,)), random_quats(rng, shape)], axis=-1)


def random_ypr(rng, shape) -> np.ndarray:
    """Pitch kept 0.15 rad off +-pi/2: at gimbal lock yaw/roll split is arbitrary in both libraries."""
    ypr = rng.uniform(-np.pi, np.pi, shape + (3,))
    ypr[..., 1] = rng.uniform(-np.pi / 2 + 0.15, np.pi / 2 - 0.15, shape)
    return ypr


def frame_cases(rng, batch: int) -> list[Case]:
    cases: list[Case] = []
    for n in (1, batch):
        shape = () if n == 1 else (n,)
        sfx = "" if n == 1 else f" [N={n}]"
        pool = POOL if n == 1 else 8  # batched inputs are big; a few distinct arrays suffice
        quats = [random_quats(rng, shape) for _ in range(pool)]
        mats = [rotations.quat_to_mat(q) for q in quats]
        poses = [random_poses(rng, shape) for _ in range(pool)]
        yprs = [random_ypr(rng, shape) for _ in range(pool)]
        mats_ypr = [rotations.ypr_to_mat(a) for a in yprs]
        rot6ds = [rotations.mat_to_rot6d(m) for m in mats]
        tfs = [frames.pose_to_matrix(p) for p in poses]
        cases += [
            Case(
                "pose_ds_from_hw" + sfx,
                n,
                frames.pose_ds_from_hw,
                lambda p: sp_convert_pose(p, M_ROT),
                "M * from_quat -> as_quat",
                poses,
                check=pose_diff,
            ),
            Case(
                "pose_hw_from_ds" + sfx,
                n,
                frames.pose_hw_from_ds,
                lambda p: sp_convert_pose(p, M_ROT_INV),
                "M^T * from_quat -> as_quat",
                poses,
                check=pose_diff,
            ),
            Case(
                "quat_to_mat" + sfx,
                n,
                rotations.quat_to_mat,
                lambda q: sp_quat(q).as_matrix(),
                "from_quat().as_matrix()",
                quats,
                check=plain_diff,
            ),
            Case(
                "mat_to_quat" + sfx,
                n,
                rotations.mat_to_quat,
                lambda m: sp_as_quat(Rotation.from_matrix(m)),
                "from_matrix().as_quat()",
                mats,
                check=quat_diff,
            ),
            Case(
                "ypr_to_mat" + sfx,
                n,
                rotations.ypr_to_mat,
                lambda a: Rotation.from_euler("ZYX", a).as_matrix(),
                "from_euler('ZYX').as_matrix()",
                yprs,
                check=plain_diff,
            ),
            Case(
                "mat_to_ypr" + sfx,
                n,
                rotations.mat_to_ypr,
                lambda m: Rotation.from_matrix(m).as_euler("ZYX"),
                "from_matrix().as_euler('ZYX')",
                mats_ypr,
                check=angle_diff,
            ),
            Case(
                "rot6d_to_mat" + sfx,
                n,
                rotations.rot6d_to_mat,
                lambda v: sp_rot6d_to_rotation(v).as_matrix(),
                "from_matrix([a,b,axb]).as_matrix()",
                rot6ds,
                check=plain_diff,
            ),
            Case(
                "quat_to_rot6d" + sfx,
                n,
                lambda q: rotations.mat_to_rot6d(rotations.quat_to_mat(q)),
                lambda q: sp_rot6d(sp_quat(q).as_matrix()),
                "from_quat().as_matrix() cols",
                quats,
                check=plain_diff,
            ),
            Case(
                "rot6d_to_quat" + sfx,
                n,
                lambda v: rotations.mat_to_quat(rotations.rot6d_to_mat(v)),
                lambda v: sp_as_quat(sp_rot6d_to_rotation(v)),
                "from_matrix([a,b,axb]).as_quat()",
                rot6ds,
                check=quat_diff,
            ),
            Case(
                "pose_to_matrix" + sfx,
                n,
                frames.pose_to_matrix,
                sp_pose_to_matrix,
                "from_quat().as_matrix() + xyz",
                poses,
                check=plain_diff,
            ),
            Case(
                "matrix_to_pose" + sfx,
                n,
                frames.matrix_to_pose,
                sp_matrix_to_pose,
                "from_matrix().as_quat() + xyz",
                tfs,
                check=pose_diff,
            ),
            Case(
                "geodesic_angle" + sfx,
                n,
                lambda ab: rotations.geodesic_angle(*ab),
                lambda ab: (Rotation.from_matrix(ab[0]).inv() * Rotation.from_matrix(ab[1])).magnitude(),
                "(inv(A) * B).magnitude()",
                list(zip(mats, mats[1:] + mats[:1])),
                check=plain_diff,
            ),
        ]
        if hasattr(frames, "wrist_relative_encode") and hasattr(frames, "wrist_relative_decode"):
            currents = [random_poses(rng, ()) for _ in range(pool)]
            pairs = list(zip(currents, poses))
            encoded = [frames.wrist_relative_encode(c, t) for c, t in pairs]
            cases += [
                Case(
                    "wrist_relative_encode" + sfx,
                    n,
                    lambda ct: frames.wrist_relative_encode(*ct),
                    lambda ct: sp_wrist_encode(*ct),
                    "inv(Rc).apply, inv(Rc) * Rt",
                    pairs,
                    check=plain_diff,
                ),
                Case(
                    "wrist_relative_decode" + sfx,
                    n,
                    lambda ce: frames.wrist_relative_decode(*ce),
                    lambda ce: sp_wrist_decode(*ce),
                    "Rc.apply, Rc * from_matrix([a,b,axb])",
                    list(zip(currents, encoded)),
                    check=pose_diff,
                ),
            ]
    return cases


def kinematics_pools(rng, lo, hi) -> tuple[list, dict]:
    """Joint solutions around the work pose and, per IK label, seeds that far from them."""
    solutions = [
        np.clip(WORK_JOINTS_RAD + rng.uniform(-JOINT_SPREAD_RAD, JOINT_SPREAD_RAD, 6), lo, hi) for _ in range(POOL)
    ]
    seeds = {
        label: [np.clip(q + rng.uniform(-spread, spread, 6), lo, hi) for q in solutions]
        for label, spread in (("ik_step", STEP_SEED_RAD), ("ik_far", FAR_SEED_RAD))
    }
    return solutions, seeds


def sdk_cases(kin: ArmKinematics, solutions, seeds) -> list[Case]:
    """The SDK wrapper against the raw `Arx5Solver` calls it makes."""
    solver = SdkArm().solver  # the raw SDK object, for the baseline
    targets = [kin.forward(q) for q in solutions]
    targets6d = [pose6d_from_pose(t) for t in targets]

    def raw_fk_as_pose(q):
        return pose_from_pose6d_scipy(solver.forward_kinematics(q))

    cases = [
        Case(
            "fk (wrapper vs raw)",
            1,
            kin.forward,
            solver.forward_kinematics,
            "raw Arx5Solver FK (pose_6d)",
            solutions,
            check=lambda ours, raw: pose_diff(ours, pose_from_pose6d_scipy(raw)),
        ),
        Case(
            "fk (wrapper vs raw+scipy)",
            1,
            kin.forward,
            raw_fk_as_pose,
            "raw FK + scipy from_euler -> quat",
            solutions,
            check=pose_diff,
        ),
    ]
    for label, label_seeds in seeds.items():
        cases.append(
            Case(
                f"{label} (wrapper vs raw)",
                1,
                lambda ts: kin.inverse(*ts),
                lambda ts: solver.inverse_kinematics(*ts),
                "raw Arx5Solver IK (pose_6d in)",
                list(zip(targets, label_seeds)),
                ref_inputs=list(zip(targets6d, label_seeds)),
                check=lambda ours, raw: plain_diff(ours.joints_rad, raw[1]),
            )
        )
    return cases


def backend_cases(pin_kin: ArmKinematics, sdk_kin: ArmKinematics | None, solutions, seeds) -> list[Case]:
    """Pinocchio against the SDK (both through ArmKinematics), and against its own raw FK."""
    import pinocchio

    model = pinocchio.buildModelFromXML(urdf_text())
    data, frame = model.createData(), model.getFrameId(EEF_LINK)

    def raw_fk(q):
        pinocchio.forwardKinematics(model, data, q)
        return pinocchio.updateFramePlacement(model, data, frame)

    cases = [
        Case(
            "fk pinocchio (wrapper vs raw)",
            1,
            pin_kin.forward,
            raw_fk,
            "raw pinocchio FK (SE3)",
            solutions,
            check=lambda ours, raw: pose_diff(ours, frames.matrix_to_pose(raw.homogeneous)),
        )
    ]
    if sdk_kin is None:
        return cases
    cases.append(
        Case(
            "fk pinocchio vs sdk",
            1,
            pin_kin.forward,
            sdk_kin.forward,
            "ArmKinematics(backend='sdk')",
            solutions,
            check=pose_diff,
        )
    )
    targets = [sdk_kin.forward(q) for q in solutions]
    for label, label_seeds in seeds.items():
        cases.append(
            Case(
                f"{label} pinocchio vs sdk",
                1,
                lambda ts: pin_kin.inverse(*ts),
                lambda ts: sdk_kin.inverse(*ts),
                "ArmKinematics(backend='sdk')",
                list(zip(targets, label_seeds)),
                check=lambda ours, ref: float(ours.ok != ref.ok),
                tolerance=0.0,
            )
        )
    return cases


def pose_from_pose6d_scipy(p6) -> np.ndarray:
    """SDK pose_6d `[x, y, z, roll, pitch, yaw]` -> `[x, y, z, qw, qx, qy, qz]` with scipy."""
    quat = sp_as_quat(Rotation.from_euler("ZYX", [p6[5], p6[4], p6[3]]))
    return np.concatenate([p6[:3], quat])


# -- timing -------------------------------------------------------------------------------------
def time_block(fn, inputs, start: int, count: int, out: list) -> None:
    clock, n = time.perf_counter_ns, len(inputs)
    for i in range(start, start + count):
        x = inputs[i % n]
        t0 = clock()
        fn(x)
        out.append(clock() - t0)


def summarize(ns: list, n: int) -> dict:
    us = np.asarray(ns, float) / 1e3
    return {
        "calls": len(us),
        "p50_us": float(np.percentile(us, 50)),
        "p99_us": float(np.percentile(us, 99)),
        "mean_us": float(us.mean()),
        "per_pose_ns_p50": float(np.percentile(us, 50)) * 1e3 / n,
    }


def run_case(c: Case, calls: int, warmup: int, rounds: int) -> None:
    ref_inputs = c.ref_inputs if c.ref_inputs is not None else c.inputs
    diff = max(c.check(c.ours(x), c.ref(y)) for x, y in zip(c.inputs, ref_inputs))
    for i in range(warmup):
        c.ours(c.inputs[i % len(c.inputs)])
        c.ref(ref_inputs[i % len(ref_inputs)])
    ours_ns, ref_ns = [], []
    per_round = max(1, calls // rounds)
    for r in range(rounds):
        sides = [(c.ours, c.inputs, ours_ns), (c.ref, ref_inputs, ref_ns)]
        for fn, inputs, out in sides if r % 2 == 0 else sides[::-1]:
            time_block(fn, inputs, r * per_round, per_round, out)
    ours, ref = summarize(ours_ns, c.n), summarize(ref_ns, c.n)
    c.result = {
        "op": c.name,
        "n": c.n,
        "ours": ours,
        "ref": ref,
        "ref_impl": c.ref_label,
        "ratio_p50": ours["p50_us"] / ref["p50_us"],
        "ratio_mean": ours["mean_us"] / ref["mean_us"],
        "max_abs_diff": diff,
        "tolerance": c.tolerance,
        "agree": bool(diff <= c.tolerance),
    }


def timer_floor_us(calls: int) -> float:
    out: list = []
    time_block(lambda x: None, [None], 0, calls, out)
    return float(np.percentile(np.asarray(out, float) / 1e3, 50))


def print_table(rows: list[dict]) -> None:
    head = (
        f"{'op':<34} {'ours p50':>9} {'p99':>9} {'mean':>9} | {'ref p50':>9} {'p99':>9} {'mean':>9} | "
        f"{'ours/ref':>8} {'max|diff|':>9}  reference"
    )
    print(head)
    print("-" * len(head))
    for r in rows:
        o, f = r["ours"], r["ref"]
        flag = "" if r["agree"] else "  FAIL: disagree"
        print(
            f"{r['op']:<34} {o['p50_us']:>9.2f} {o['p99_us']:>9.2f} {o['mean_us']:>9.2f} | "
            f"{f['p50_us']:>9.2f} {f['p99_us']:>9.2f} {f['mean_us']:>9.2f} | "
            f"{r['ratio_p50']:>7.2f}x {r['max_abs_diff']:>9.1e}  {r['ref_impl']}{flag}"
        )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__.split("\n")[0],
        epilog=__doc__.split("\n", 2)[2],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    ap.add_argument("--calls", type=int, default=3000, help="timed calls per side for single-pose and kinematics rows")
    ap.add_argument("--batched-calls", type=int, default=100, help="timed calls per side for batched rows")
    ap.add_argument("--batch", type=int, default=1000, help="poses per call in batched rows")
    ap.add_argument("--warmup", type=int, default=100, help="untimed calls per side before timing")
    ap.add_argument("--rounds", type=int, default=10, help="alternating ours/ref blocks the calls are split into")
    ap.add_argument("--only", default="", help="run only rows whose name contains this (e.g. 'ik', 'N=')")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default="out/bench/kinematics_frames.json", help="JSON result path")
    a = ap.parse_args(argv)
    for name in ("calls", "batched_calls", "batch", "rounds"):
        if getattr(a, name) < 1:
            ap.error(f"--{name.replace('_', '-')} must be >= 1")
    if a.warmup < 0:
        ap.error("--warmup must be >= 0")

    rng = np.random.default_rng(a.seed)
    pin_kin = ArmKinematics(backend="pinocchio")
    try:
        sdk_kin = ArmKinematics(backend="sdk")
    except BackendUnavailable as exc:
        sdk_kin = None
        print(f"note: no SDK here ({exc}); only the Pinocchio kinematics rows run")
    solutions, seeds = kinematics_pools(rng, pin_kin.joint_pos_min, pin_kin.joint_pos_max)
    cases = [] if sdk_kin is None else sdk_cases(sdk_kin, solutions, seeds)
    cases += backend_cases(pin_kin, sdk_kin, solutions, seeds) + frame_cases(rng, a.batch)
    if not (hasattr(frames, "wrist_relative_encode") and hasattr(frames, "wrist_relative_decode")):
        print("note: egomimic_hw.frames has no wrist_relative_encode/decode yet; those rows are skipped")
    cases = [c for c in cases if a.only in c.name]
    floor = timer_floor_us(2000)
    t_start = time.perf_counter()
    for c in cases:
        batched = c.n > 1
        run_case(c, a.batched_calls if batched else a.calls, a.warmup // 10 if batched else a.warmup, a.rounds)
    elapsed = time.perf_counter() - t_start
    rows = [c.result for c in cases]

    ik_ok = {}
    for case in (c for c in cases if c.name.startswith("ik") and "pinocchio vs sdk" in c.name):
        label = case.name.split()[0]
        ik_ok[f"{label} pinocchio"] = float(np.mean([case.ours(x).ok for x in case.inputs]))
        ik_ok[f"{label} sdk"] = float(np.mean([case.ref(x).ok for x in case.inputs]))

    print(
        f"per-call cost in us (p50 / p99 / mean) after warm-up; {a.calls} calls per side single, "
        f"{a.batched_calls} batched (N={a.batch}); ours vs reference, alternating in {a.rounds} blocks"
    )
    print_table(rows)
    ok_rates = ", ".join(f"{k} {v:.1%}" for k, v in ik_ok.items())
    print(
        f"timer floor (empty call): {floor:.3f} us"
        + (f"; IK ok-rate (residual check passed): {ok_rates}" if ik_ok else "")
    )
    wrapper = {
        r["op"].split()[0]: r["ours"]["p50_us"] - r["ref"]["p50_us"] for r in rows if "raw Arx5Solver" in r["ref_impl"]
    }
    if wrapper:
        print(
            "wrapper overhead over the raw SDK call (p50 us): " + ", ".join(f"{k} +{v:.1f}" for k, v in wrapper.items())
        )
    budget = 1e6 / 30.0
    backends = {r["op"]: r for r in rows if r["op"].endswith("pinocchio vs sdk")}
    if backends:
        print(
            "pinocchio vs sdk (p50 us, pinocchio/sdk): "
            + ", ".join(
                f"{op.split()[0]} {r['ours']['p50_us']:.1f} vs {r['ref']['p50_us']:.1f} ({r['ratio_p50']:.2f}x)"
                for op, r in backends.items()
            )
        )
    ik_row = next((r for r in rows if r["op"] == "ik_step pinocchio vs sdk"), None)
    if ik_row is not None:  # both backends from the same interleaved row, so the same load hit both
        shares = {
            backend: 2 * ik_row[side]["p99_us"] / budget for backend, side in (("pinocchio", "ours"), ("sdk", "ref"))
        }
        print(
            f"physical budget: 2 x ik_step p99 = {shares['pinocchio']:.1%} (pinocchio), {shares['sdk']:.1%} (sdk) "
            f"of one 30 Hz gate tick ({budget / 1e3:.1f} ms)"
        )
    print(f"({elapsed:.1f} s of timing)")

    out = Path(a.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(
        json.dumps(
            {
                "rows": rows,
                "timer_floor_us": floor,
                "ik_ok_rate": ik_ok,
                "wrapper_overhead_p50_us": wrapper,
                "settings": {k: v for k, v in vars(a).items() if k != "out"},
                "machine": {
                    "python": sys.version.split()[0],
                    "numpy": np.__version__,
                    "platform": platform.platform(),
                    "loadavg": list(os.getloadavg()),
                },
            },
            indent=2,
        )
    )
    print(f"wrote {out}")
    bad = [r["op"] for r in rows if not r["agree"]]
    if bad:
        print(f"FAIL: ours and the reference disagree on: {', '.join(bad)}", file=sys.stderr)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
