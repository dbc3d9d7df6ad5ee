"""The launch steps both launchers take, beyond starting processes: wait until a node is in the
ROS graph, arm once the graph has settled, and e-stop when a required node dies.

`egomimic-launch` calls these functions in its own process. The ROS 2 launch file
(egomimic_bringup/launch/eva_bimanual.launch.py) cannot run Python between its actions, so it runs
each step as a short process in its event chain:

    python -m egomimic_launch.steps wait-node  --name NODE --namespace NS [--timeout S]
    python -m egomimic_launch.steps arm        --namespace NS
    python -m egomimic_launch.steps estop      --namespace NS --reason TEXT

(with security:=true each also gets `--enclave /<ns>/egomimic_launcher` before the step).

Exit status 0 when the step succeeded, 1 when it did not (each prints one line saying why), 2 on
bad arguments. `ros2 launch` then arms, waits and e-stops as `egomimic-launch` does, from the
same code.
"""

from __future__ import annotations

import argparse
import os
import sys
import threading
import time
from collections.abc import Callable

NODE_START_TIMEOUT_S = 30.0
"""How long a started node may take to appear in the ROS graph."""
ARM_TIMEOUT_S = 10.0
"""How long arming is retried once the graph has settled (the gate refuses while a stream is
not yet fresh)."""
ARM_RETRY_S = 0.2
ESTOP_TIMEOUT_S = 1.0
ESTOP_SETTLE_S = 0.5
"""After an e-stop, the time the hold gets to reach the drivers before anything is stopped."""


def wait_for_node(client, name: str, namespace: str, timeout_s: float = NODE_START_TIMEOUT_S, alive=lambda: True):
    """True once /namespace/name is in the graph; False at the timeout or when `alive()` turns false."""
    return client.wait_for_node(name, namespace, timeout_s, alive)


def auto_arm(
    client, namespace: str, *, stop: threading.Event | None = None, log: Callable[[str], object] = print
) -> tuple[bool, str]:
    """Wait for a settled ROS graph (egomimic_nodes.graph_settle: no arming while discovery still
    runs), then call safety/arm until it succeeds or ARM_TIMEOUT_S passes; (ok, the gate's answer)."""
    from egomimic_nodes import topics
    from egomimic_nodes.graph_settle import wait_settled

    settled, waited = wait_settled(client.node, stop=stop)
    log(
        f"[launch] ROS graph {'settled' if settled else 'still changing'} after {waited:.1f} s "
        "(arming waits for discovery: egomimic_nodes.graph_settle)"
    )
    arm_until = time.monotonic() + ARM_TIMEOUT_S
    ok, msg = False, "not tried (stopping)"
    while time.monotonic() < arm_until and not (stop is not None and stop.is_set()):
        ok, msg = client.trigger(topics.SAFETY_ARM.resolve(namespace))
        if ok:
            break
        if stop is not None:
            stop.wait(ARM_RETRY_S)
        else:
            time.sleep(ARM_RETRY_S)
    log(f"[launch] auto_arm: {'ok' if ok else 'FAILED'}: {msg}")
    return ok, msg


def estop(client, namespace: str) -> tuple[bool, str]:
    """Tell the gate to latch an e-stop (it then commands the joints measured at that moment: the
    arms hold, motors on), then give the hold ESTOP_SETTLE_S to reach the drivers; (ok, detail)."""
    from egomimic_nodes import topics

    ok, msg = client.trigger(topics.SAFETY_ESTOP.resolve(namespace), timeout_s=ESTOP_TIMEOUT_S)
    detail = f"safety/estop: {msg}" if ok else f"gate unreachable ({msg}); drivers hold on their own watchdog"
    time.sleep(ESTOP_SETTLE_S)
    return ok, detail


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m egomimic_launch.steps",
        description="one launch step, as the ROS 2 launch file runs it (see the module docstring)",
    )
    parser.add_argument("--enclave", default="", help="SROS2 enclave of this step's participant (security:=true)")
    sub = parser.add_subparsers(dest="step", required=True)
    wait = sub.add_parser("wait-node", help="exit 0 once the node is in the ROS graph")
    wait.add_argument("--name", required=True)
    wait.add_argument("--namespace", required=True)
    wait.add_argument("--timeout", type=float, default=NODE_START_TIMEOUT_S, metavar="S")
    arm = sub.add_parser("arm", help="wait for a settled graph, then call safety/arm (retried)")
    arm.add_argument("--namespace", required=True)
    stop = sub.add_parser("estop", help="call safety/estop, then let the hold reach the drivers")
    stop.add_argument("--namespace", required=True)
    stop.add_argument("--reason", default="", help="printed with the result (why the e-stop)")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    from egomimic_launch.environment import apply_to_this_process

    apply_to_this_process()
    from egomimic_launch.ros_client import LauncherClient  # rclpy after the environment is set

    client = LauncherClient(f"egomimic_launch_{args.step.replace('-', '_')}_{os.getpid()}", enclave=args.enclave)
    try:
        if args.step == "wait-node":
            ok = wait_for_node(client, args.name, args.namespace, args.timeout)
            print(
                f"[launch] {args.name} {'up' if ok else f'did not appear in the ROS graph within {args.timeout:.0f} s'}",
                flush=True,
            )
        elif args.step == "arm":
            ok, _ = auto_arm(client, args.namespace, log=lambda line: print(line, flush=True))
        else:
            ok, detail = estop(client, args.namespace)
            print(f"[launch] SAFE STOP ({args.reason or 'requested'}): {detail}", flush=True)
    finally:
        client.close()
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
