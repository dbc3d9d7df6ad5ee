"""The DDS environment every run gets unless the caller set it: discovery stays on this
machine, a domain id is set, and the shipped Fast DDS profile carries large images."""

from __future__ import annotations

import os
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
FASTDDS_PROFILE = REPO_ROOT / "config" / "fastdds_local.xml"
DEFAULT_DOMAIN_ID = "42"
DDS_VARIABLES = ("ROS_AUTOMATIC_DISCOVERY_RANGE", "ROS_DOMAIN_ID", "FASTDDS_DEFAULT_PROFILES_FILE", "PYTHONUNBUFFERED")
"""What every run gets unless its caller set it (both launchers, and the nodes through them)."""


def ros_environment(base: dict[str, str] | None = None, *, use_profile: bool = True) -> dict[str, str]:
    env = dict(os.environ if base is None else base)
    env.setdefault("ROS_AUTOMATIC_DISCOVERY_RANGE", "LOCALHOST")
    env.setdefault("ROS_DOMAIN_ID", DEFAULT_DOMAIN_ID)
    if use_profile:
        env.setdefault("FASTDDS_DEFAULT_PROFILES_FILE", str(FASTDDS_PROFILE))
    env.setdefault("PYTHONUNBUFFERED", "1")
    return env


def apply_to_this_process(*, use_profile: bool = True) -> dict[str, str]:
    """Set the same variables in os.environ (before rclpy.init reads them)."""
    env = ros_environment(use_profile=use_profile)
    for key in DDS_VARIABLES:
        if key in env:
            os.environ[key] = env[key]
    return env
