"""A joint command's values in the arm's order, by name.

sensor_msgs/JointState names its values and promises no order, so a publisher may list the
joints in any order; the driver works in the arm's (`Arm.joint_names`: joint1..joint6, gripper).
No names means the arm's order. Names that are not exactly the arm's, each once, are refused:
guessing which value belongs to which joint is how the wrong joint moves.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def in_arm_order(positions, names: Sequence[str], arm_names: Sequence[str]) -> tuple[np.ndarray, str]:
    """(`positions` reordered from `names` to `arm_names`, "") or (the values as given, why the
    names are refused). Values whose count differs from the names' are left as given, for the
    driver's shape check to refuse as malformed."""
    values = np.asarray(positions, dtype=float)
    names, arm_names = list(names), list(arm_names)
    if not names or names == arm_names:
        return values, ""
    if sorted(names) != sorted(arm_names):
        return values, f"joint names {names} do not match {arm_names}"
    if values.shape != (len(names),):
        return values, ""
    index = {name: i for i, name in enumerate(names)}
    return values[[index[name] for name in arm_names]], ""
