"""`egomimic-operator`: a terminal console for the running graph (works over SSH).

Modules: `model` (plain snapshot of what is shown, no DDS), `link` (the graph's topics and
services, one rclpy node), `app` (the textual UI: renders snapshots, maps keys to calls).
"""

from __future__ import annotations

import argparse
from pathlib import Path

DESCRIPTION = """\
Terminal console for the EVA graph: the safety gate's state and last reason, stream rates and
ages, the policy's queue depth and inference latency, the recorder's state and episode length,
and the disk space left. Works in any terminal, over SSH too.

keys: a arm, d disarm, e E-STOP (at once, no confirmation), r reset (HOLD/ESTOP -> DISARMED),
      s start recording (asks for the task name, sets the recorder's task_name, calls
      recorder/start), x stop recording, q quit.

Safe to lose: the console holds no control path. It only calls the graph's services
(safety/arm|disarm|estop|reset, recorder/start|stop, the recorder's task_name parameter) and
reads its topics; it publishes nothing. Quitting it, closing the SSH session or killing it
changes nothing: the gate stays in whatever state it is in, and the arms keep doing what the
gate allows.

DDS: the same environment as egomimic-launch (ROS_DOMAIN_ID, ROS_AUTOMATIC_DISCOVERY_RANGE and
the shipped Fast DDS profile unless set): run it with the ROS_DOMAIN_ID of the graph.
"""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="egomimic-operator", description=DESCRIPTION, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--namespace", default="eva", help="robot namespace of the graph (default: %(default)s)")
    parser.add_argument(
        "--record-dir",
        type=Path,
        default=None,
        help="the recorder's record_dir on this machine: disk space left is read there while the recorder's "
        "status does not carry it (no recorder running); default: shown only from the recorder's status",
    )
    args = parser.parse_args(argv)

    from egomimic_launch.environment import apply_to_this_process

    apply_to_this_process()  # before rclpy reads the environment

    from egomimic_launch.operator.app import OperatorApp
    from egomimic_launch.operator.link import GraphLink
    from egomimic_launch.operator.model import OperatorModel

    link = GraphLink(OperatorModel(args.namespace, record_dir=args.record_dir))
    try:
        OperatorApp(link).run()
    finally:
        link.close()
    return 0
