"""Read a checkpoint written by upstream EgoVerse's trainer, without executing it.

Upstream saves its Hydra config inside the Lightning checkpoint as OmegaConf objects
(`hyper_parameters.config_tree`), so `torch.load(weights_only=True)` refuses the file, and a
plain `torch.load` would run whatever a pickle names. This module unpickles through an allow
list: tensors and storages, the builtin containers, `collections.OrderedDict`/`defaultdict`,
`typing.Any`, and the five OmegaConf classes a Lightning checkpoint holds, which are rebuilt as
inert records and turned into plain dicts and lists (with `${...}` interpolations resolved). Any
other global is refused by name. omegaconf itself is not needed.

The result is plain data: `prepare` can store it in the cache, where the policy node reads it
with `weights_only=True` like every other artifact.
"""

from __future__ import annotations

import os
import pickle
import re
from pathlib import Path
from typing import Any

import torch

from egomimic_policy.checkpoints.errors import CheckpointError

ALLOWED_GLOBALS: frozenset[tuple[str, str]] = frozenset(
    {
        ("collections", "OrderedDict"),
        ("collections", "defaultdict"),
        ("builtins", "dict"),
        ("builtins", "list"),
        ("builtins", "tuple"),
        ("builtins", "set"),
        ("builtins", "int"),
        ("builtins", "float"),
        ("builtins", "str"),
        ("builtins", "bool"),
        ("__builtin__", "dict"),
        ("__builtin__", "list"),
        ("__builtin__", "long"),
        ("__builtin__", "int"),
        ("torch._utils", "_rebuild_tensor_v2"),
        ("torch._utils", "_rebuild_parameter"),
        ("torch", "Size"),
    }
)
"""Globals an upstream checkpoint may name besides the OmegaConf ones (torch maps storages itself)."""

OMEGACONF_CLASSES = {
    ("omegaconf.dictconfig", "DictConfig"),
    ("omegaconf.listconfig", "ListConfig"),
    ("omegaconf.nodes", "AnyNode"),
    ("omegaconf.base", "Metadata"),
    ("omegaconf.base", "ContainerMetadata"),
}
"""What a Lightning checkpoint's saved Hydra config consists of."""


class _Record:
    """An OmegaConf object as pickled: its class name and its __dict__, nothing callable."""

    kind = ""

    def __setstate__(self, state: Any) -> None:
        # OmegaConf pickles (dict_state, slots) for some classes and a dict for others.
        if isinstance(state, tuple) and len(state) == 2 and state[0] is None:
            state = state[1]
        self.state = state if isinstance(state, dict) else {"_value": state}


_RECORDS = {name: type(name, (_Record,), {"kind": name}) for _, name in OMEGACONF_CLASSES}
ANY = object()
"""What `typing.Any` (an OmegaConf type annotation) unpickles to."""


class _AllowListUnpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        if (module, name) in OMEGACONF_CLASSES:
            return _RECORDS[name]
        if (module, name) == ("typing", "Any"):
            return ANY
        if (module, name) in ALLOWED_GLOBALS:
            module = "builtins" if module == "__builtin__" else module
            if name == "long":
                return int
            return super().find_class(module, name)
        raise pickle.UnpicklingError(
            f"refused to unpickle global {module}.{name}: not on the allow list of an upstream checkpoint"
        )


class _AllowListPickle:
    """The `pickle_module` torch.load takes: our Unpickler, the rest from pickle."""

    Unpickler = _AllowListUnpickler
    __name__ = "egomimic_allow_list_pickle"

    @staticmethod
    def load(file, **kwargs):  # torch calls Unpickler, not load, for zip files; kept for legacy files
        return _AllowListUnpickler(file, **kwargs).load()


def load_upstream(path: str | os.PathLike) -> dict:
    """The checkpoint as plain data: OmegaConf containers are dicts and lists, interpolations
    resolved. Raises CheckpointError naming what was refused or missing."""
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"checkpoint {str(path)!r} does not exist or is not a file")
    try:
        raw = torch.load(path, map_location="cpu", weights_only=False, pickle_module=_AllowListPickle)
    except pickle.UnpicklingError as exc:
        raise CheckpointError(f"{path}: {exc}") from exc
    except (RuntimeError, EOFError, OSError, ValueError) as exc:
        raise CheckpointError(f"{path}: not a readable torch checkpoint ({exc})") from exc
    if not isinstance(raw, dict):
        raise CheckpointError(f"{path}: top level is a {type(raw).__name__}, not a Lightning checkpoint dict")
    return plain(raw)


def plain(value: Any) -> Any:
    """Rebuilt OmegaConf records -> dicts, lists and scalars, with `${...}` resolved against the
    config's root (the container saved without a parent); other containers recursively
    (OrderedDict and defaultdict become dicts); tensors untouched."""
    if isinstance(value, _Record):
        converted = _unwrap(value)
        if value.kind in ("DictConfig", "ListConfig") and value.state.get("_parent") is None:
            return _resolve(converted, converted)
        return converted
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [plain(v) for v in value]
    if isinstance(value, tuple):
        return tuple(plain(v) for v in value)
    return value


def _unwrap(value: Any) -> Any:
    if isinstance(value, _Record):
        content = value.state.get("_content", value.state.get("_val"))
        if value.kind == "DictConfig":
            if content is None or isinstance(content, str):  # None, "???" or an unresolved "${...}"
                return content
            return {k: _unwrap(v) for k, v in content.items()}
        if value.kind == "ListConfig":
            if content is None or isinstance(content, str):
                return content
            return [_unwrap(v) for v in content]
        if value.kind == "AnyNode":
            return _unwrap(value.state.get("_val"))
        raise CheckpointError(f"an OmegaConf {value.kind} outside a config tree")
    return plain(value)


INTERPOLATION = re.compile(r"\$\{([^${}]*)\}")


def _resolve(value: Any, root: Any, path: tuple = (), depth: int = 0) -> Any:
    if depth > 32:
        raise CheckpointError(f"config interpolation too deep (a cycle?) at {'.'.join(map(str, path))}")
    if isinstance(value, dict):
        return {k: _resolve(v, root, (*path, k), depth) for k, v in value.items()}
    if isinstance(value, list):
        return [_resolve(v, root, (*path, i), depth) for i, v in enumerate(value)]
    if not isinstance(value, str) or "${" not in value:
        return value
    whole = INTERPOLATION.fullmatch(value)
    if whole:  # "${a.b}" takes the referenced value with its type
        return _resolve(_lookup(whole.group(1), root, path), root, path, depth + 1)
    return INTERPOLATION.sub(lambda m: str(_resolve(_lookup(m.group(1), root, path), root, path, depth + 1)), value)


def _lookup(expr: str, root: Any, path: tuple) -> Any:
    """`a.b.c` from the root, or `.x` / `..x` relative to the node's parent (OmegaConf's rules);
    resolvers such as `oc.env:` are refused (a checkpoint must not read this machine's state)."""
    if ":" in expr:
        raise CheckpointError(f"config interpolation ${{{expr}}} uses a resolver; only references are supported")
    if expr.startswith("."):
        dots = len(expr) - len(expr.lstrip("."))
        node_path = list(path[: max(len(path) - dots, 0)])
        keys = node_path + [k for k in expr[dots:].split(".") if k]
    else:
        keys = expr.split(".")
    node = root
    for key in keys:
        if isinstance(node, dict) and key in node:
            node = node[key]
        elif isinstance(node, list) and str(key).isdigit() and int(key) < len(node):
            node = node[int(key)]
        else:
            raise CheckpointError(f"config interpolation ${{{expr}}} at {'.'.join(map(str, path))}: {key!r} not found")
    return node
