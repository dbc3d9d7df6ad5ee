"""What docker/compose.yaml names inside the images: paths, ports, environment variables.

One reading of the compose file for both checks of it: the unit test
(tests/unit/test_docker_files.py) holds the names against the Dockerfile and the code without
building anything, and `make docker-check` (docker/check.sh) tests the paths in the built images.

    python docker/compose_facts.py paths robot    # one container path per line
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import yaml

COMPOSE = Path(__file__).resolve().parent / "compose.yaml"
INTERPOLATION = re.compile(r"\$\{([A-Z_][A-Z0-9_]*)(?::?[-?][^}]*)?\}")
DEFAULT = re.compile(r"\$\{[A-Z_][A-Z0-9_]*:?-([^}]*)\}")


def load(path: Path = COMPOSE) -> dict:
    return yaml.safe_load(path.read_text())


def interpolate_defaults(text: str) -> str:
    """`${VAR:-default}` -> default: the value when nothing is set on the host."""
    return DEFAULT.sub(lambda m: m.group(1), text)


def variables(path: Path = COMPOSE) -> set[str]:
    """Host-side variables the file interpolates."""
    return set(INTERPOLATION.findall(path.read_text()))


def volume_targets(service: dict) -> list[str]:
    """Container paths of the service's volumes (short syntax `source:target[:mode]`)."""
    out = []
    for volume in service.get("volumes", []):
        spec = interpolate_defaults(volume if isinstance(volume, str) else f"x:{volume['target']}")
        out.append(spec.split(":")[1])
    return out


def _words(service: dict) -> list[str]:
    words = [interpolate_defaults(str(w)) for w in service.get("command", [])]
    test = service.get("healthcheck", {}).get("test", [])
    return words + [interpolate_defaults(str(w)) for w in test[1:]]


def absolute_paths(service: dict) -> list[str]:
    """Absolute paths the command and health check name (also as `arg:=/path`), not URLs."""
    out = []
    for word in _words(service):
        value = word.split(":=", 1)[1] if ":=" in word else word
        if value.startswith("/"):
            out.append(value)
    return out


def image_paths(service: dict) -> list[str]:
    """Paths that must exist in the service's image: volume targets, and every other absolute
    path the service names unless a volume brings it (a file in a mounted folder is the host's)."""
    mounts = volume_targets(service)
    named = [p for p in absolute_paths(service) if not any(p == m or p.startswith(m + "/") for m in mounts)]
    return sorted(set(mounts + named))


def mounted_files(service: dict) -> list[str]:
    """Paths the service names inside a mounted folder: that folder must exist in the image."""
    mounts = volume_targets(service)
    return [p for p in absolute_paths(service) if any(p.startswith(m + "/") for m in mounts)]


def tcp_ports(service: dict) -> list[int]:
    """Ports of the tcp:// addresses the command and health check name."""
    return [int(m) for w in _words(service) for m in re.findall(r"tcp://[^\s/]*:(\d+)", w)]


def published_ports(service: dict) -> list[tuple[str, int, int]]:
    """(host address, host port, container port) of `ports` in the short syntax."""
    out = []
    for entry in service.get("ports", []):
        address, host, container = interpolate_defaults(str(entry)).rsplit(":", 2)
        out.append((address, int(host), int(container)))
    return out


def main(argv: list[str]) -> int:
    if len(argv) != 2 or argv[0] != "paths":
        print("usage: compose_facts.py paths SERVICE", file=sys.stderr)
        return 2
    print("\n".join(image_paths(load()["services"][argv[1]])))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
