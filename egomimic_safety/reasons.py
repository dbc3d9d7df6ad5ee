"""Reason codes of rejections and faults (INTERFACES.md). Never reuse one for another meaning."""

import enum


class Reason(str, enum.Enum):
    NONFINITE = "NONFINITE"
    SHAPE = "SHAPE"
    BAD_QUATERNION = "BAD_QUATERNION"
    """Added: a quaternion whose norm is off 1 beyond tolerance (or zero) is not a rotation."""
    FRAME = "FRAME"
    STALE_COMMAND = "STALE_COMMAND"
    STALE_STATE = "STALE_STATE"
    STALE_CAMERA = "STALE_CAMERA"
    TRANSLATION_JUMP = "TRANSLATION_JUMP"
    ROTATION_JUMP = "ROTATION_JUMP"
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
