"""`main()` plumbing shared by every node: init, spin, and a clean exit on SIGINT/SIGTERM."""

from __future__ import annotations

import sys

import rclpy
from rclpy.executors import ExternalShutdownException, SingleThreadedExecutor

USAGE = """usage: python -m {module} [--help] --ros-args [-r __ns:=/eva] [-r __node:=NAME] [-p NAME:=VALUE ...]
                        [--params-file FILE.yaml]

Parameters, their defaults and units: the YAML files in egomimic_bringup/config (eva_sim.yaml,
eva_arx5.yaml) and the config dataclasses named above; at runtime `ros2 param list` / `describe`.
The usual way to start the whole graph: `egomimic-launch eva_bimanual.launch.py --help`."""


def wants_help(argv: list[str]) -> bool:
    """`--help`/`-h` among the arguments before `--ros-args` (ROS arguments are never ours)."""
    ours = argv[1:argv.index("--ros-args")] if "--ros-args" in argv else argv[1:]
    return "--help" in ours or "-h" in ours


def print_help(factory) -> None:
    module = sys.modules.get(factory.__module__)
    name = getattr(module, "__spec__", None).name if module is not None and module.__spec__ else factory.__module__
    print((module.__doc__ or "").strip() if module is not None else "")
    print()
    print(USAGE.format(module=name))


def make_executor():
    """SingleThreadedExecutor. rclpy's experimental EventsExecutor cut CPU per node, but in our
    runs a lifecycle node under it hung at 100 % CPU in `configure`: not for a robot driver."""
    return SingleThreadedExecutor()


def run_node(factory, args=None) -> int:
    """Create the node with `factory()`, spin until shutdown, call its `on_exit()` if any."""
    argv = list(args if args is not None else sys.argv)
    if wants_help(argv):
        print_help(factory)
        return 0
    rclpy.init(args=argv)
    node = None
    code = 0
    try:
        node = factory()
        executor = make_executor()
        executor.add_node(node)
        executor.spin()
    except (KeyboardInterrupt, ExternalShutdownException):
        pass
    except Exception as exc:  # noqa: BLE001 - report, exit non-zero, let the launcher react
        print(f"[FATAL] {type(exc).__name__}: {exc}", file=sys.stderr, flush=True)
        code = 1
    finally:
        if node is not None:
            on_exit = getattr(node, "on_exit", None)
            if on_exit is not None:
                try:
                    on_exit()
                except Exception as exc:  # noqa: BLE001
                    print(f"[ERROR] on_exit: {exc}", file=sys.stderr, flush=True)
            node.destroy_node()
        rclpy.try_shutdown()
    return code
