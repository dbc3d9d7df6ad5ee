"""security:=true (SROS2): what must hold before a secured graph starts, checked in one pass so
that each problem is one line and nothing starts (the nodes would otherwise each fail to create
their participant, or, without Enforce, join in the clear).

- The Fast DDS the nodes load has the DDS Security plugins. The PyPI wheels' libfastdds is built
  without them (no "PKI-DH" in the library): on a pip install DDS between machines cannot be
  authenticated, and security:=true is refused with that reason. A ROS install's Fast DDS has them.
- ROS_SECURITY_KEYSTORE names a keystore holding an enclave for every node and for the launcher
  (`egomimic-launch ... security:=true --print-enclaves` lists them for `ros2 security create_enclave`).
"""

from __future__ import annotations

import mmap
import os
import sys
from pathlib import Path

PLUGIN_MARK = b"PKI-DH"
"""The builtin authentication plugin's class id; a libfastdds built without DDS Security lacks it."""
KEYSTORE_ENV = "ROS_SECURITY_KEYSTORE"


def fastdds_library(env: dict[str, str] | None = None) -> Path | None:
    """The libfastdds the nodes load: the venv's (pip wheels install it in <prefix>/lib), else the
    first one on LD_LIBRARY_PATH or under an AMENT_PREFIX_PATH entry (a ROS install)."""
    env = os.environ if env is None else env
    dirs = [Path(sys.prefix) / "lib"]
    dirs += [Path(d) for d in env.get("LD_LIBRARY_PATH", "").split(os.pathsep) if d]
    dirs += [Path(d) / "lib" for d in env.get("AMENT_PREFIX_PATH", "").split(os.pathsep) if d]
    for d in dirs:
        found = sorted(d.glob("libfastdds.so*")) if d.is_dir() else []
        if found:
            return found[0]
    return None


def has_security_plugins(library: Path) -> bool:
    with open(library, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as data:
        return data.find(PLUGIN_MARK) >= 0


def problems(graph, env: dict[str, str], library: Path | None = None) -> list[str]:
    """One line per reason a secured `graph` cannot start here ([] when it can, or when
    security:=false). `library`: the Fast DDS to judge (default: fastdds_library())."""
    if not graph.secured:
        return []
    library = library if library is not None else fastdds_library(env)
    if library is None:
        return ["security:=true: no libfastdds found (the venv's lib, LD_LIBRARY_PATH, AMENT_PREFIX_PATH)"]
    if not has_security_plugins(library):
        return [
            f"security:=true: this Fast DDS ({library}) is built without the DDS Security plugins (pip wheels "
            "are): DDS cannot be authenticated here. Run the graph from a ROS install for SROS2, or keep "
            "ROS_AUTOMATIC_DISCOVERY_RANGE=LOCALHOST (README 'DDS between machines')"
        ]
    keystore = env.get(KEYSTORE_ENV, "")
    if not keystore:
        return [f"security:=true: set {KEYSTORE_ENV} to the keystore (README 'DDS between machines')"]
    root = Path(keystore).expanduser()
    if not (root / "enclaves").is_dir():
        return [f"security:=true: {KEYSTORE_ENV}={keystore} is not a keystore (no enclaves/ in it)"]
    missing = [e for e in graph.enclaves() if not (root / "enclaves" / e.strip("/")).is_dir()]
    if missing:
        return [
            f"security:=true: the keystore {keystore} has no enclave {', '.join(missing)} "
            f"(ros2 security create_enclave {keystore} <enclave>)"
        ]
    return []
