"""A parameter file (params_file:=) checked against the graph before any process starts.

ROS 2 applies a YAML parameter file quietly: a selector that matches no node (`/**/driver_leftt`)
and a key no node declares (`max_translaton_step_m`) are ignored, so a misspelled safety limit
is a limit silently not applied. Here every selector must match a node of this graph, every key
must be a parameter one of those nodes declares (the node's PARAMETERS: its config dataclasses),
every value must have the parameter's type (a quoted "50.0" is text, not a number) and lie in its
documented range. Each problem is one line; the launcher refuses to start on any.

`differing_limits` lists the safety gate's limits that differ from their defaults, for the log.
With unsafe_limits:=true a gate limit above its range's maximum is no problem but one of
`unsafe_values` (lower bounds and types still hold); `unsafe_limits` itself is refused in a
file: only the launch argument sets it, where the log shows it.
"""

from __future__ import annotations

import dataclasses
import importlib
import math
import re
import typing
from collections.abc import Iterable
from pathlib import Path

import yaml

ROS_PARAMETERS = "ros__parameters"
STANDARD = ("use_sim_time", "start_type_description_service")
"""Parameters every rclpy node declares itself."""
STANDARD_PREFIXES = ("qos_overrides.",)


@dataclasses.dataclass(frozen=True)
class Declared:
    """One parameter a node declares: its name pattern (`<cam>` stands for a camera) and field."""

    pattern: re.Pattern
    name: str
    owner: type
    field: dataclasses.Field
    hint: object


def node_class(module: str):
    """The node class of a node module: the one with PARAMETERS defined in it."""
    mod = importlib.import_module(module)
    for value in vars(mod).values():
        if isinstance(value, type) and value.__module__ == mod.__name__ and "PARAMETERS" in vars(value):
            return value
    return None


def declared_parameters(module: str) -> list[Declared]:
    cls = node_class(module)
    out = []
    for config, prefix, skip in getattr(cls, "PARAMETERS", ()):
        hints = typing.get_type_hints(config)
        for f in dataclasses.fields(config):
            if f.name in skip:
                continue
            name = prefix + f.name
            pattern = re.compile(re.escape(name).replace(re.escape("<cam>"), r"[A-Za-z0-9_]+") + r"\Z")
            out.append(Declared(pattern, name, config, f, hints.get(f.name)))
    return out


def _selector_regex(selector: str) -> tuple[re.Pattern, bool]:
    """(regex, absolute): `/**` any namespaces, `*` one level; a selector without a leading `/`
    names the node itself."""
    absolute = selector.startswith("/")
    parts = []
    for token in re.split(r"(\*\*|\*)", selector):
        parts.append(".*" if token == "**" else "[^/]*" if token == "*" else re.escape(token))
    return re.compile("".join(parts) + r"\Z"), absolute


def _flatten(params: dict, prefix: str = "") -> Iterable[tuple[str, object]]:
    for key, value in params.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            yield from _flatten(value, name + ".")
        else:
            yield name, value


def _type_problem(value, hint) -> str:
    """'' when `value` fits a parameter typed `hint`; else what is wrong."""
    args = typing.get_args(hint)
    if hint is bool:
        return "" if isinstance(value, bool) else f"{value!r} is not true/false"
    if hint is int:
        return "" if isinstance(value, int) and not isinstance(value, bool) else f"{value!r} is not an integer"
    if hint is float or (args and set(args) == {float, type(None)}):
        if isinstance(value, str):
            return f"{value!r} is text, expected a number (remove the quotes)"
        if value is None and args:
            return ""
        return "" if isinstance(value, int | float) and not isinstance(value, bool) else f"{value!r} is not a number"
    if hint is str:
        return "" if isinstance(value, str) else f"{value!r} is not text (quote it)"
    if typing.get_origin(hint) is tuple:
        if not isinstance(value, list):
            return f"{value!r} is not a list"
        item = args[0] if args else object
        if item is float and any(isinstance(v, bool) or not isinstance(v, int | float) for v in value):
            return f"{value!r} is not a list of numbers"
        if item is str and any(not isinstance(v, str) for v in value):
            return f"{value!r} is not a list of text"
    return ""


def check(path: str | Path, graph) -> list[str]:
    """Every problem of the parameter file at `path` for `graph`, one line each ([] when none)."""
    where = f"params_file {path}"
    try:
        data = yaml.safe_load(Path(path).read_text())
    except (OSError, yaml.YAMLError) as exc:
        return [f"{where}: not readable YAML ({exc.__class__.__name__}: {str(exc).splitlines()[0]})"]
    if data is None:
        return []
    if not isinstance(data, dict):
        return [f"{where}: expected a map of node selectors, e.g. /**/safety_gate: {{ros__parameters: {{...}}}}"]
    nodes = {spec.name: spec for spec in graph.nodes}
    declared = {name: declared_parameters(spec.module) for name, spec in nodes.items()}
    problems = []
    for selector, body in data.items():
        if not isinstance(selector, str):
            problems.append(f"{where}: selector {selector!r} is not text")
            continue
        if not isinstance(body, dict) or not isinstance(body.get(ROS_PARAMETERS), dict) or len(body) != 1:
            problems.append(f"{where}: {_shown(selector)}: expected {{{ROS_PARAMETERS}: {{name: value, ...}}}}")
            continue
        regex, absolute = _selector_regex(selector)
        matched = [
            name for name in nodes if regex.match(f"/{graph.namespace}/{name}".replace("//", "/") if absolute else name)
        ]
        if not matched:
            problems.append(f"{where}: {_shown(selector)} matches no node of this graph ({', '.join(nodes)})")
            continue
        for key, value in _flatten(body[ROS_PARAMETERS]):
            if key in STANDARD or key.startswith(STANDARD_PREFIXES):
                continue
            owners = [(n, d) for n in matched for d in declared[n] if d.pattern.match(key)]
            if not owners:
                near = sorted({d.name for n in matched for d in declared[n]}, key=lambda d: _distance(d, key))[:3]
                problems.append(
                    f"{where}: {_shown(selector)}: no parameter {key!r} on {', '.join(matched)} (did you mean {', '.join(near)}?)"
                )
                continue
            if key == "unsafe_limits":
                problems.append(
                    f"{where}: {_shown(selector)}: unsafe_limits: set it with the launch argument unsafe_limits:=true"
                )
                continue
            found = []  # every node the selector reaches checks the value: /** sets a key for all
            for _, d in owners:
                wrong = _type_problem(value, d.hint)
                range_ = None if wrong else _outside(d, value)
                # range_ only for a number: unsafe_limits lifts a gate limit's finite maximum
                lifted = bool(range_) and graph.unsafe_limits and d.owner.__name__ == "GateConfig"
                if range_ and not (lifted and math.isfinite(value) and value > range_[1]):
                    wrong = f"{value!r} is outside [{range_[0]}, {range_[1]}]"
                if wrong and wrong not in found:
                    found.append(wrong)
            problems += [f"{where}: {_shown(selector)}: {_shown(key)}: {wrong}" for wrong in found]
    return problems


def _shown(text: str) -> str:
    """A selector or key as a problem line shows it: quoted when it holds a control character,
    so that each problem stays one line."""
    return text if text.isprintable() else repr(text)


def _outside(d: Declared, value) -> tuple | None:
    """The field's range when a number `value` lies outside it (a non-finite one always does,
    unsafe_limits or not: the gate refuses it at start), else None."""
    range_ = d.field.metadata.get("range")
    if range_ is None or not isinstance(value, int | float) or isinstance(value, bool):
        return None
    return None if math.isfinite(value) and range_[0] <= value <= range_[1] else range_


def _gate_values(path: str | Path, graph) -> Iterable[tuple[str, object, Declared]]:
    """(key, value, declared) for each safety-gate parameter the file sets."""
    data = yaml.safe_load(Path(path).read_text()) or {}
    gate = next((spec for spec in graph.nodes if spec.name == "safety_gate"), None)
    if gate is None or not isinstance(data, dict):
        return
    for selector, body in data.items():
        regex, absolute = _selector_regex(str(selector))
        target = f"/{graph.namespace}/{gate.name}".replace("//", "/") if absolute else gate.name
        if not regex.match(target) or not isinstance(body, dict):
            continue
        for key, value in _flatten(body.get(ROS_PARAMETERS) or {}):
            for d in declared_parameters(gate.module):
                if d.pattern.match(key):
                    yield key, value, d


def unsafe_values(path: str | Path, graph) -> list[str]:
    """'name value (safe maximum hi)' for each gate limit the file sets above its range: what
    unsafe_limits:=true lets through, for the start-up log."""
    out = []
    for key, value, d in _gate_values(path, graph):
        range_ = _outside(d, value)
        if range_ and math.isfinite(value) and value > range_[1]:
            out.append(f"{key} {value!r} (safe maximum {range_[1]})")
    return out


def differing_limits(path: str | Path, graph) -> list[str]:
    """'name default -> value' for each safety-gate parameter the file sets to a non-default value."""
    return [
        f"{key} {d.field.default!r} -> {value!r}"
        for key, value, d in _gate_values(path, graph)
        if d.field.default is not dataclasses.MISSING and value != d.field.default
    ]


def _distance(a: str, b: str) -> int:
    """Levenshtein distance: the closest declared names to a misspelled key."""
    prev = list(range(len(b) + 1))
    for i, ca in enumerate(a, 1):
        cur = [i]
        for j, cb in enumerate(b, 1):
            cur.append(min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (ca != cb)))
        prev = cur
    return prev[-1]
