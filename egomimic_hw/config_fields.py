"""What a config dataclass says about its fields, checked once for every config.

A field's metadata carries its `help` (what a node shows as the parameter's description) and,
where one applies, its inclusive `range` (lo, hi). The ROS layer turns both into parameter
descriptors; a config built without ROS (tests, tools, another launcher) gets the same range
check here, so a value is refused the same way whoever builds the config.
"""

from __future__ import annotations

import dataclasses

from egomimic_hw.errors import ConfigError


def check_ranges(config) -> None:
    """Refuse a field outside its metadata `range`, naming it (what rclpy does for a parameter)."""
    for f in dataclasses.fields(config):
        bounds = f.metadata.get("range")
        value = getattr(config, f.name)
        if bounds is not None and not bounds[0] <= value <= bounds[1]:
            raise ConfigError(f"{f.name} must be in [{bounds[0]}, {bounds[1]}], got {value!r}")
