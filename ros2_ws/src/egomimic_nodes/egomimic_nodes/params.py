"""Declare node parameters from a config dataclass: defaults live in the dataclass, not YAML.

Each field becomes a parameter with its type and default. A field's metadata says the rest:
`help` becomes the parameter description (what `ros2 param describe` shows), and
`range=(lo, hi)` becomes the descriptor's floating-point or integer range, which rclpy
enforces when the node starts (a YAML value outside it is refused, naming the parameter).
Building the dataclass then runs its own validation, so a bad value is refused with the
dataclass's message. `field_meta()` writes that metadata.

The parameters are read-only: a node builds its config once, at start, so a `ros2 param set`
that it would silently ignore (a gate limit, a workspace box) is refused instead. A float
parameter also takes an integer (`rate_hz: 100` in YAML), converted.
"""

from __future__ import annotations

import dataclasses
import typing

from rclpy.exceptions import InvalidParameterTypeException, InvalidParameterValueException
from rcl_interfaces.msg import FloatingPointRange, IntegerRange, ParameterDescriptor

from egomimic_hw.errors import ConfigError

SCALARS = (bool, int, float, str)


def field_meta(help_: str, range_: tuple[float, float] | None = None) -> dict:
    """The metadata of a config field: `help` (the parameter description) and an optional
    inclusive `range` (lo, hi), e.g. `field(default=30.0, metadata=field_meta("Hz", (1, 1000)))`."""
    meta: dict = {"help": help_}
    if range_ is not None:
        lo, hi = range_
        if not lo <= hi:
            raise ValueError(f"range {range_!r}: lo must be <= hi")
        meta["range"] = (lo, hi)
    return meta


def descriptor(cls, f: dataclasses.Field, is_float: bool, is_int: bool) -> ParameterDescriptor:
    """The read-only descriptor of field `f` of `cls`: help text and range from its metadata."""
    desc = ParameterDescriptor(description=f.metadata.get("help", f"{cls.__name__}.{f.name}"), read_only=True,
                               dynamic_typing=is_float)  # a float also takes an integer, converted below
    range_ = f.metadata.get("range")
    if range_ is not None:
        lo, hi = range_
        if is_float:
            desc.floating_point_range = [FloatingPointRange(from_value=float(lo), to_value=float(hi), step=0.0)]
        elif is_int:
            desc.integer_range = [IntegerRange(from_value=int(lo), to_value=int(hi), step=1)]
        desc.additional_constraints = f"{lo} <= value <= {hi}"
    return desc


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
        is_int = hints.get(f.name) is int
        desc = descriptor(cls, f, is_float, is_int)
        try:
            value = node.declare_parameter(prefix + f.name, default, desc).value
        except (InvalidParameterValueException, InvalidParameterTypeException) as exc:
            raise ConfigError(f"parameter {prefix + f.name}: {exc}") from None
        if is_float:
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise ConfigError(f"parameter {prefix + f.name}: expected a number, got {value!r}")
            value = float(value)
        range_ = f.metadata.get("range")
        if range_ is not None and isinstance(value, (int, float)) and not range_[0] <= value <= range_[1]:
            # rclpy checks the range of a value of the declared type; an integer given for a float is checked here
            raise ConfigError(f"parameter {prefix + f.name}: {value!r} is outside [{range_[0]}, {range_[1]}]")
        if isinstance(value, list):
            value = tuple(value)
        kwargs[f.name] = value
    return cls(**kwargs)
