"""Reason codes of rejections and faults (docs/interfaces.md). Never reuse one for another meaning.

Codes added beyond docs/interfaces.md carry a docstring saying what they mean.
"""

import enum


class Reason(str, enum.Enum):
    NONFINITE = "NONFINITE"
    SHAPE = "SHAPE"
    BAD_QUATERNION = "BAD_QUATERNION"
    """Added: a quaternion whose norm is off 1 beyond tolerance (or zero) is not a rotation."""
    FRAME = "FRAME"
    STALE_COMMAND = "STALE_COMMAND"
    """Command stamp too old, too far in the future, not after the last accepted one, or no
    command received for command_timeout_s."""
    STALE_STATE = "STALE_STATE"
    STATE_IMPLAUSIBLE = "STATE_IMPLAUSIBLE"
    """Added: a measured joint state that cannot be true (outside the limits beyond a margin,
    faster than the joints can move, stamp going backwards) or that comes from a publisher other
    than the arm's driver. It is refused, never used as a reference or a hold target."""
    STALE_CAMERA = "STALE_CAMERA"
    """A required camera is not OK or silent, or the command answers an observation too old."""
    TRANSLATION_JUMP = "TRANSLATION_JUMP"
    """Command vs MEASURED EE position beyond max_translation_step_m."""
    ROTATION_JUMP = "ROTATION_JUMP"
    """Command vs MEASURED EE orientation beyond max_rotation_step_rad (geodesic, sign-free)."""
    TRANSLATION_RATE = "TRANSLATION_RATE"
    """Added: command vs the PREVIOUS ACCEPTED command beyond the per-step speed limit."""
    ROTATION_RATE = "ROTATION_RATE"
    """Added: command vs the previous accepted command beyond the per-step angular limit."""
    COMMAND_RATE = "COMMAND_RATE"
    """Added: more command stamps per window than max_command_rate_hz allows (a flood)."""
    WORKSPACE = "WORKSPACE"
    JOINT_LIMIT = "JOINT_LIMIT"
    JOINT_STEP = "JOINT_STEP"
    IK_FAILED = "IK_FAILED"
    GRIPPER_RANGE = "GRIPPER_RANGE"
    START_TOO_FAR = "START_TOO_FAR"
    NODE_LOST = "NODE_LOST"
    ESTOP = "ESTOP"
    INTERNAL_ERROR = "INTERNAL_ERROR"
    """Added: an exception inside the gate; it holds rather than crash."""
