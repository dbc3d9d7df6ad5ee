"""Declare node parameters from a config dataclass: defaults live in the dataclass, not YAML.

Each field becomes a parameter with its type and default; a field's docstring-like metadata
`help` becomes the parameter description. Building the dataclass runs its validation, so a
bad value in a YAML file is refused with the dataclass's message.
"""

from __future__ import annotations

import dataclasses
import typing

from rcl_interfaces.msg import ParameterDescriptor

SCALARS = (bool, int, float, str)


def declare_config(node, cls, prefix: str = "", skip: tuple[str, ...] = (), **fixed):
    """Declare `cls`'s scalar/tuple fields as `<prefix><field>` parameters; return `cls(...)`."""
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
        desc = ParameterDescriptor(description=f.metadata.get("help", f"{cls.__name__}.{f.name}"))
        value = node.declare_parameter(prefix + f.name, default, desc).value
        if hints.get(f.name) is float and isinstance(value, int):
            value = float(value)
        if isinstance(value, list):
            value = tuple(value)
        kwargs[f.name] = value
    return cls(**kwargs)
