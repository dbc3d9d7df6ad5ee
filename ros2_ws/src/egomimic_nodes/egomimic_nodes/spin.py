"""`main()` plumbing shared by every node: init, spin, and a clean exit on SIGINT/SIGTERM."""

from __future__ import annotations

import sys

import rclpy
from rclpy.executors import ExternalShutdownException, SingleThreadedExecutor



def make_executor():
    """SingleThreadedExecutor. rclpy's experimental EventsExecutor cut CPU per node, but in our
    runs a lifecycle node under it hung at 100 % CPU in `configure`: not for a robot driver."""
    return SingleThreadedExecutor()


def run_node(factory, args=None) -> int:
    """Create the node with `factory()`, spin until shutdown, call its `on_exit()` if any."""
    rclpy.init(args=args if args is not None else sys.argv)
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
