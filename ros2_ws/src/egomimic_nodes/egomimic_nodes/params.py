"""Declare node parameters from a config dataclass: defaults live in the dataclass, not YAML.

Each field becomes a parameter with its type and default; a field's docstring-like metadata
`help` becomes the parameter description. Building the dataclass runs its validation, so a
bad value in a YAML file is refused with the dataclass's message.

The parameters are read-only: a node builds its config once, at start, so a `ros2 param set`
that it would silently ignore (a gate limit, a workspace box) is refused instead. A float
parameter also takes an integer (`rate_hz: 100` in YAML), converted.
"""

from __future__ import annotations

import dataclasses
import typing

from rcl_interfaces.msg import ParameterDescriptor

from egomimic_hw.errors import ConfigError

SCALARS = (bool, int, float, str)


def declare_config(node, cls, prefix: str = "", skip: tuple[str, ...] = (), **fixed):
    """Declare `cls`'s scalar/tuple fields as read-only `<prefix><field>` parameters; return
    `cls(...)`."""
    kwargs = dict(fixed)
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        if f.name in skip or f.name in fixed:
            continue
        default = f.default if f.default is not dataclasses.MISSING else (
            f.default_factory() if f.default_factory is not dataclasses.MISSING else None
        )
        if isinstance(default, tuple):
            default = [float(x) for x in default]
        elif not isinstance(default, SCALARS):
            continue
        is_float = hints.get(f.name) is float
        desc = ParameterDescriptor(description=f.metadata.get("help", f"{cls.__name__}.{f.name}"), read_only=True,
                                   dynamic_typing=is_float)  # a float also takes an integer, converted below
        value = node.declare_parameter(prefix + f.name, default, desc).value
        if is_float:
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise ConfigError(f"parameter {prefix + f.name}: expected a number, got {value!r}")
            value = float(value)
        if isinstance(value, list):
            value = tuple(value)
        kwargs[f.name] = value
    return cls(**kwargs)
