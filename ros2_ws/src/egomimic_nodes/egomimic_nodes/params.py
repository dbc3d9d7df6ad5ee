"""Declare node parameters from a config dataclass: defaults live in the dataclass, not YAML.

Each field becomes a parameter with its type and default. A field's metadata says the rest:
- `help`: the parameter description (what `ros2 param describe` shows);
- `range=(lo, hi)`: the descriptor's floating-point or integer range, which rclpy enforces when
  the node starts (a YAML value outside it is refused, naming the parameter);
- `runtime=True`: the one kind of parameter a node applies while it runs (e.g. a camera's
  injected fault); the node then handles the change itself;
- `any_type=True`: a string field that also takes a number (a camera serial or a device index,
  which YAML and `-p` read as integers), converted to str.
Building the dataclass then runs its own validation, so a bad value is refused with the
dataclass's message. `field_meta()` writes that metadata.

Types: bool, int, float, str; `tuple[float, ...]` and `tuple[str, ...]` (typed arrays, so an
empty YAML list is accepted); `float | None` with default None (a double declared without a
value: None until one is given).

The other parameters are read-only: a node builds its config once, at start, so a `ros2 param
set` that it would silently ignore (a gate limit, a workspace box) is refused instead. A float
parameter also takes an integer (`rate_hz: 100` in YAML), converted.
"""

from __future__ import annotations

import dataclasses
import textwrap
import types
import typing

from rcl_interfaces.msg import FloatingPointRange, IntegerRange, ParameterDescriptor, ParameterType
from rclpy.exceptions import InvalidParameterTypeException, InvalidParameterValueException
from rclpy.parameter import Parameter

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


@dataclasses.dataclass(frozen=True)
class _Kind:
    """How one field is declared and read back."""

    default: object
    """The parameter's default (Parameter.Type.DOUBLE for an optional float: no value)."""
    is_float: bool = False
    is_int: bool = False
    array_type: int | None = None
    """ParameterType of a typed array (its declared type, so an empty list is accepted)."""
    optional: bool = False


def _kind(hint, default) -> _Kind | None:
    """What to declare for a field typed `hint` with `default`; None: not a parameter."""
    args = typing.get_args(hint)
    if typing.get_origin(hint) in (typing.Union, types.UnionType) and set(args) == {float, type(None)}:
        if default is not None:
            raise ConfigError(f"an optional float must default to None, got {default!r}")
        return _Kind(Parameter.Type.DOUBLE, is_float=True, optional=True)
    if isinstance(default, tuple):
        if args and args[0] is str:
            return _Kind([str(x) for x in default], array_type=ParameterType.PARAMETER_STRING_ARRAY)
        return _Kind([float(x) for x in default], array_type=ParameterType.PARAMETER_DOUBLE_ARRAY)
    if isinstance(default, SCALARS):
        return _Kind(default, is_float=hint is float, is_int=hint is int)
    return None


def _default(f: dataclasses.Field):
    """The field's default value (its factory's product), None without one."""
    if f.default is not dataclasses.MISSING:
        return f.default
    return f.default_factory() if f.default_factory is not dataclasses.MISSING else None


def descriptor(cls, f: dataclasses.Field, kind: _Kind, lift_upper: bool = False) -> ParameterDescriptor:
    """The descriptor of field `f` of `cls`: help, range, read-only unless `runtime`. With
    `lift_upper` (the gate's unsafe_limits) the range goes from the descriptor (rclpy would refuse
    a value above it) and declare_config checks the lower bound alone."""
    any_type = bool(f.metadata.get("any_type"))
    desc = ParameterDescriptor(
        description=f.metadata.get("help", f"{cls.__name__}.{f.name}"),
        read_only=not f.metadata.get("runtime", False),
        dynamic_typing=(kind.is_float and not kind.optional) or any_type,
    )
    if kind.array_type is not None:
        desc.type = kind.array_type
    range_ = f.metadata.get("range")
    if range_ is not None and lift_upper:
        desc.additional_constraints = f"{range_[0]} <= value (unsafe_limits: the safe maximum {range_[1]} is lifted)"
    elif range_ is not None:
        lo, hi = range_
        if kind.is_float:
            desc.floating_point_range = [FloatingPointRange(from_value=float(lo), to_value=float(hi), step=0.0)]
        elif kind.is_int:
            desc.integer_range = [IntegerRange(from_value=int(lo), to_value=int(hi), step=1)]
        desc.additional_constraints = f"{lo} <= value <= {hi}"
    return desc


def declare_config(node, cls, prefix: str = "", skip: tuple[str, ...] = (), lift_upper: bool = False, **fixed):
    """Declare `cls`'s fields as `<prefix><field>` parameters (module docstring); return
    `cls(...)` built from their values and `fixed`. `lift_upper`: accept values above each
    field's range (lower bounds and types still hold): the gate's unsafe_limits."""
    kwargs = dict(fixed)
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        if f.name in skip or f.name in fixed:
            continue
        default = _default(f)
        kind = _kind(hints.get(f.name), default)
        if kind is None:
            continue
        name = prefix + f.name
        try:
            param = node.declare_parameter(name, kind.default, descriptor(cls, f, kind, lift_upper))
        except (InvalidParameterValueException, InvalidParameterTypeException) as exc:
            raise ConfigError(f"parameter {name}: {exc}") from None
        value = param.value if param.type_ != Parameter.Type.NOT_SET else None
        if kind.optional and value is None:
            kwargs[f.name] = None
            continue
        if kind.array_type is not None and value is None:
            value = ()  # a YAML `[]` reaches rclpy as "not set"
        if f.metadata.get("any_type"):
            value = str(value)
        elif kind.is_float:
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise ConfigError(f"parameter {name}: expected a number, got {value!r}")
            value = float(value)
        range_ = f.metadata.get("range")
        if (
            range_ is not None
            and isinstance(value, (int, float))
            and not range_[0] <= value <= (float("inf") if lift_upper else range_[1])
        ):
            # rclpy checks the range of a value of the declared type; an integer given for a float is checked here
            raise ConfigError(f"parameter {name}: {value!r} is outside [{range_[0]}, {range_[1]}]")
        if isinstance(value, list):
            value = tuple(value)
        kwargs[f.name] = value
    return cls(**kwargs)


def describe_config(cls, prefix: str = "", skip: tuple[str, ...] = ()) -> list[str]:
    """The parameters declare_config would declare from `cls`, for a node's --help: name, type,
    default, range and help, one entry each."""
    hints = typing.get_type_hints(cls)
    lines = []
    for f in dataclasses.fields(cls):
        if f.name in skip:
            continue
        default = _default(f)
        kind = _kind(hints.get(f.name), default)
        if kind is None:
            continue
        hint = hints.get(f.name)
        type_name = str(hint).replace("typing.", "") if typing.get_args(hint) else getattr(hint, "__name__", str(hint))
        shown = "unset" if kind.optional else repr(list(default) if isinstance(default, tuple) else default)
        range_ = f.metadata.get("range")
        extra = (f", range [{range_[0]}, {range_[1]}]" if range_ else "") + (
            ", settable at runtime" if f.metadata.get("runtime") else ""
        )
        lines.append(f"  {prefix}{f.name} ({type_name}, default {shown}{extra})")
        text = f.metadata.get("help", "")
        if text:
            lines += textwrap.wrap(text, width=100, initial_indent="      ", subsequent_indent="      ")
    return lines
