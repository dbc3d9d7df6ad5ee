"""EVA bimanual state and action encodings shared by every learned family.

Why here and not in a family: the layout is a property of the data (what episodes store and
what a checkpoint was trained on), not of the architecture, and decoding it wrongly moves an
arm somewhere plausible but wrong. So there is one copy, named, with its width checked.

State `state_ee_pose` (20,) per frame: per arm `[xyz(3), rot6d(6), gripper(1)]`, left then
right, dataset frame (docs/eva.md "Policies"); rot6d = the first two COLUMNS of R.
Action `actions_cartesian` (H, 20): per arm `[xyz_rel(3), rot6d_rel(6), gripper(1)]`, the
wrist-relative encoding of egomimic_hw.frames (relative to the pose at the QUERY tick),
grippers at indices 9 and 19. Poses are `[x, y, z, qw, qx, qy, qz]`; grippers 0 closed, 1 open.
"""

from __future__ import annotations

import numpy as np

from egomimic_hw.description import ARMS, CONTROL_RATE_HZ, Arm
from egomimic_hw.embodiment import Embodiment
from egomimic_hw.errors import PoseError
from egomimic_hw.frames import WRIST_RELATIVE_WIDTH, wrist_relative_decode, wrist_relative_encode
from egomimic_hw.rotations import as_array_of_shape, mat_to_rot6d, quat_to_mat
from egomimic_policy.interface import Chunk, Observation
from egomimic_policy.normalization import KeyStats, NormMode, NormStats, key_stats_from_range

STATE_KEY = "state_ee_pose"
ACTION_KEY = "actions_cartesian"
EMBODIMENT = Embodiment.EVA_BIMANUAL
ACTION_LAYOUT = "eva_bimanual_wrist_rel_20"
"""PolicySpec.action_layout of every family here: the encoding `decode_action_chunk` inverts."""

ARM_WIDTH = WRIST_RELATIVE_WIDTH + 1
"""Per arm: 9 pose values + 1 gripper."""
STATE_DIM = ACTION_DIM = 2 * ARM_WIDTH


def arm_columns(arm: Arm) -> slice:
    """The 10 columns of `arm` in a 20-wide state or action row (left first)."""
    start = 0 if arm is Arm.LEFT else ARM_WIDTH
    return slice(start, start + ARM_WIDTH)


def gripper_column(arm: Arm) -> int:
    """9 (left) or 19 (right)."""
    return arm_columns(arm).stop - 1


def _arm_state(pose, gripper, what: str) -> np.ndarray:
    p = as_array_of_shape(pose, (7,), f"{what} pose")
    g = float(gripper)
    if not np.isfinite(g):
        raise PoseError(f"{what} gripper must be finite, got {gripper!r}")
    out = np.empty(p.shape[:-1] + (ARM_WIDTH,))
    out[..., :3] = p[..., :3]
    out[..., 3:9] = mat_to_rot6d(quat_to_mat(p[..., 3:], strict=True))
    out[..., 9] = g
    return out


def state_ee_pose(left_pose, left_gripper, right_pose, right_gripper) -> np.ndarray:
    """(20,) state row of one frame from dataset-frame poses and normalized grippers."""
    return np.concatenate([_arm_state(left_pose, left_gripper, "left"), _arm_state(right_pose, right_gripper, "right")])


def encode_action_chunk(
    current: dict[Arm, np.ndarray], targets: dict[Arm, np.ndarray], grippers: dict[Arm, np.ndarray]
) -> np.ndarray:
    """(H, 20) training target: absolute target poses (H, 7) and grippers (H,) per arm, relative
    to `current[arm]` (the pose at the frame the chunk starts from)."""
    cols = []
    for arm in ARMS:
        rel = wrist_relative_encode(current[arm], targets[arm])
        g = np.asarray(grippers[arm], dtype=np.float64).reshape(rel.shape[:-1] + (1,))
        cols.append(np.concatenate([rel, g], axis=-1))
    return np.concatenate(cols, axis=-1)


def decode_action_chunk(current: dict[Arm, np.ndarray], actions) -> dict[Arm, tuple[np.ndarray, np.ndarray]]:
    """Absolute dataset-frame targets per arm: (poses (H, 7), grippers (H,)).

    Every row decodes against `current[arm]`, the pose captured in the observation the chunk
    answers. Grippers: non-finite raises; finite values are clamped to [0, 1] (upstream Fold
    codec: residue outside [0, 1] is numerical, the sampler bounds the rest).
    """
    a = np.asarray(actions, dtype=np.float64)
    if a.ndim != 2 or a.shape[1] != ACTION_DIM:
        raise PoseError(f"action chunk must be (H, {ACTION_DIM}), got {a.shape}")
    if not np.all(np.isfinite(a)):
        raise PoseError("action chunk has non-finite values")
    out = {}
    for arm in ARMS:
        cols = a[:, arm_columns(arm)]
        poses = wrist_relative_decode(current[arm], cols[:, :WRIST_RELATIVE_WIDTH])
        out[arm] = (poses, np.clip(cols[:, WRIST_RELATIVE_WIDTH], 0.0, 1.0))
    return out


def chunk_answering(observation: Observation, actions) -> Chunk:
    """The chunk answering `observation`: wrist-relative `actions` (H, 20) decoded against the
    poses captured in it (the query tick's), one row per control period."""
    current = {
        Arm.LEFT: np.asarray(observation.left_pose, dtype=np.float64),
        Arm.RIGHT: np.asarray(observation.right_pose, dtype=np.float64),
    }
    decoded = decode_action_chunk(current, actions)
    return Chunk(
        observation_stamp_ns=int(observation.stamp_ns),
        period_s=1.0 / CONTROL_RATE_HZ,
        left_pose=decoded[Arm.LEFT][0],
        right_pose=decoded[Arm.RIGHT][0],
        left_gripper=decoded[Arm.LEFT][1],
        right_gripper=decoded[Arm.RIGHT][1],
    )


# --- neutral norm stats for untrained (rehearsal) models -------------------------------------

NEUTRAL_STATE_XYZ_M = 0.6
"""State xyz range [-0.6, 0.6] m: about the X5's reach around its base."""
NEUTRAL_ACTION_XYZ_M = 0.003
"""Action xyz_rel range [-3, 3] mm. An untrained model's rows are noise-like, so consecutive rows
can differ by the whole range: 6 mm per 33 ms row is 0.18 m/s, well inside the gate's per-step
rate limit (0.6 m/s), so `policy:=fold` rehearses the whole pipeline on the simulated robot
(a tremor of a few mm) instead of being refused by the gate on its first command."""
NEUTRAL_ACTION_ROT6D = 0.008
"""Action rot6d_rel range identity +- 0.008 (about 0.5 degree) for the same reason."""
NEUTRAL_ACTION_GRIPPER = (0.45, 0.55)
"""Action gripper range: a narrow band around half open, so the gripper does not chatter."""

_IDENTITY_ROT6D = np.array([1.0, 0.0, 0.0, 0.0, 1.0, 0.0])


def _per_arm(low_arm: np.ndarray, high_arm: np.ndarray) -> KeyStats:
    return key_stats_from_range(np.tile(low_arm, 2), np.tile(high_arm, 2))


def neutral_norm_stats(mode: NormMode | str = NormMode.QUANTILE) -> NormStats:
    """The documented default stats of an untrained model (no data to compute them from).

    State: xyz in +-NEUTRAL_STATE_XYZ_M, rot6d in [-1, 1], gripper in [0, 1].
    Action: xyz_rel in +-NEUTRAL_ACTION_XYZ_M, rot6d_rel in identity +-NEUTRAL_ACTION_ROT6D,
    gripper in NEUTRAL_ACTION_GRIPPER; so a model output in [-1, 1] decodes to small moves around the query pose.
    """
    s_lo = np.concatenate([np.full(3, -NEUTRAL_STATE_XYZ_M), np.full(6, -1.0), [0.0]])
    s_hi = np.concatenate([np.full(3, NEUTRAL_STATE_XYZ_M), np.full(6, 1.0), [1.0]])
    a_lo = np.concatenate(
        [np.full(3, -NEUTRAL_ACTION_XYZ_M), _IDENTITY_ROT6D - NEUTRAL_ACTION_ROT6D, [NEUTRAL_ACTION_GRIPPER[0]]]
    )
    a_hi = np.concatenate(
        [np.full(3, NEUTRAL_ACTION_XYZ_M), _IDENTITY_ROT6D + NEUTRAL_ACTION_ROT6D, [NEUTRAL_ACTION_GRIPPER[1]]]
    )
    return NormStats(
        mode=NormMode.parse(mode),
        stats={int(EMBODIMENT): {STATE_KEY: _per_arm(s_lo, s_hi), ACTION_KEY: _per_arm(a_lo, a_hi)}},
    )
