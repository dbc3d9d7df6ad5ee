"""egomimic-bag: describe, replay and repair the rosbag2 (MCAP) bags that bag:=true records.

  egomimic-bag info BAG      what `ros2 bag info` prints: files, size, duration, start and end,
                             messages, and per topic its type, count and serialization format
  egomimic-bag play BAG      republish every message with the original timing: raw bytes as
                             recorded (never deserialized), on each topic with the QoS its
                             publishers offered, and /clock (rosgraph_msgs/Clock) with the bag's
                             time, so nodes with use_sim_time follow the bag
  egomimic-bag repair BAG    after a kill -9 or a power loss (no metadata.yaml, an MCAP file
                             without its summary): rewrite every message that reached the disk
                             into a complete bag; the original is kept as <name>.mcap.truncated
  egomimic-bag regress BAG   the replay regression: the bag's joint states, camera health and
                             policy actions through the frames conversion and the safety gate, on
                             the bag's clock; exit 0 when every gate decision and transition is the
                             recording's (frames and joint targets within tolerance), else 3 and
                             the differences, first one first (egomimic_launch/replay.py)

A bag is the directory (rosbag2_<UTC start time>, under bag_dir: out/bags by default). On a ROS 2
install, `ros2 bag info BAG` and `ros2 bag play BAG` read the same bags (rosbag2's MCAP storage
plugin; the types must be installed there, egomimic_msgs included).
"""

from __future__ import annotations

import argparse
import signal
import sys
import time
from importlib import import_module

from egomimic_data.bags import BagError, info_text, open_reader, repair
from egomimic_launch.environment import apply_to_this_process

CLOCK_TOPIC = "/clock"
EXIT_ERROR = 1
EXIT_DIFFERS = 3


def _parse_remaps(items: list[str]) -> dict[str, str]:
    remaps = {}
    for item in items:
        source, sep, target = item.partition(":=")
        if not sep or not source or not target:
            raise argparse.ArgumentTypeError(f"--remap {item!r}: expected FROM:=TO (full topic names)")
        remaps[source] = target
    return remaps


def _message_class(type_name: str):
    pkg, _, name = type_name.split("/")
    try:
        return getattr(import_module(f"{pkg}.msg"), name)
    except (ImportError, AttributeError):
        raise BagError(f"message type {type_name} is not installed here; cannot publish it") from None


def _qos(conn):
    """The first offered QoS recorded for the connection (rclpy's), else reliable depth 10."""
    from rclpy.qos import DurabilityPolicy, HistoryPolicy, QoSProfile, ReliabilityPolicy

    profiles = getattr(conn.ext, "offered_qos_profiles", None) or []
    if not profiles:
        return QoSProfile(depth=10)
    q = profiles[0]
    return QoSProfile(
        history=HistoryPolicy.KEEP_ALL if q.history.name == "KEEP_ALL" else HistoryPolicy.KEEP_LAST,
        depth=max(1, int(q.depth)),
        reliability=ReliabilityPolicy.BEST_EFFORT
        if q.reliability.name == "BEST_EFFORT"
        else ReliabilityPolicy.RELIABLE,
        durability=DurabilityPolicy.TRANSIENT_LOCAL
        if q.durability.name == "TRANSIENT_LOCAL"
        else DurabilityPolicy.VOLATILE,
    )


class Stop:
    def __init__(self):
        self.requested = False

    def __call__(self, _signum, _frame) -> None:
        self.requested = True


def _wait_for_subscribers(publishers: dict, timeout_s: float, stop) -> list[str]:
    """Wait until every publisher has matched a subscriber, at most `timeout_s`; the topics that
    have none then. Why: a new process's discovery of an existing one took 60 ms or 2.3 s on this
    machine (bench/join_latency.py), so a fixed delay either wastes time or loses the first
    seconds of a bag to a subscriber that is about to match."""
    deadline = time.monotonic() + timeout_s
    while True:
        unmatched = sorted({p.topic_name for p in publishers.values() if p.get_subscription_count() == 0})
        if not unmatched or stop.requested or time.monotonic() >= deadline:
            return unmatched
        time.sleep(0.02)


def play(args) -> int:
    import rclpy
    from rclpy.qos import QoSProfile
    from rclpy.signals import SignalHandlerOptions
    from rosgraph_msgs.msg import Clock

    remaps = _parse_remaps(args.remap)
    reader = open_reader(args.bag)
    conns = [c for c in reader.connections if not args.topics or c.topic in args.topics]
    missing = sorted(set(args.topics or ()) - {c.topic for c in reader.connections})
    if missing:
        print(f"egomimic-bag: not in the bag: {missing}; it has {sorted({c.topic for c in reader.connections})}")
        return EXIT_ERROR
    if not conns or reader.message_count == 0:
        print("egomimic-bag: nothing to play")
        return EXIT_ERROR
    classes = {conn.id: _message_class(conn.msgtype) for conn in conns}
    stop = Stop()
    signal.signal(signal.SIGINT, stop)
    signal.signal(signal.SIGTERM, stop)
    apply_to_this_process()  # the same DDS environment as egomimic-launch's (LOCALHOST unless set)
    context = rclpy.Context()
    rclpy.init(args=["--ros-args", "--disable-external-lib-logs"], context=context,
               signal_handler_options=SignalHandlerOptions.NO)  # fmt: skip
    node = rclpy.create_node(args.node_name, context=context, start_parameter_services=False)
    publishers = {
        conn.id: node.create_publisher(classes[conn.id], remaps.get(conn.topic, conn.topic), _qos(conn))
        for conn in conns
    }
    clock_pub = node.create_publisher(Clock, CLOCK_TOPIC, QoSProfile(depth=1)) if args.clock_hz > 0 else None
    clock_period_s = 1.0 / args.clock_hz if args.clock_hz > 0 else float("inf")
    start_ns = reader.start_time + int(args.start_offset * 1e9)
    played = 0
    wall_start = time.monotonic()
    try:
        if args.wait_for_subscribers > 0:
            unmatched = _wait_for_subscribers(publishers, args.wait_for_subscribers, stop)
            if unmatched:
                print(
                    f"egomimic-bag: no subscriber after {args.wait_for_subscribers:g} s on {unmatched}: playing anyway"
                )
        time.sleep(args.delay)  # discovery: let subscribers match the new publishers
        while not stop.requested:
            wall0 = time.monotonic()
            next_clock = wall0

            def bag_now_ns(now: float, wall0: float = wall0) -> int:
                return start_ns + int((now - wall0) * args.rate * 1e9)

            for conn, stamp_ns, data in reader.messages(connections=conns, start=start_ns):
                target = wall0 + (stamp_ns - start_ns) / 1e9 / args.rate
                while not stop.requested:
                    now = time.monotonic()
                    if clock_pub is not None and now >= next_clock:
                        msg = Clock()
                        bag_ns = min(bag_now_ns(now), stamp_ns)
                        msg.clock.sec, msg.clock.nanosec = divmod(bag_ns, 1_000_000_000)
                        clock_pub.publish(msg)
                        next_clock += clock_period_s
                    if now >= target:
                        break
                    time.sleep(max(0.0, min(target, next_clock) - now))
                if stop.requested:
                    break
                publishers[conn.id].publish(bytes(data))
                played += 1
            if not args.loop:
                break
    finally:
        elapsed = time.monotonic() - wall_start
        print(f"egomimic-bag: played {played} messages in {elapsed:.1f} s" + (" (stopped)" if stop.requested else ""))
        reader.close()
        node.destroy_node()
        rclpy.try_shutdown(context=context)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="egomimic-bag", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    sub = parser.add_subparsers(dest="command", required=True)
    p_info = sub.add_parser("info", help="describe a bag (as ros2 bag info)")
    p_info.add_argument("bag", help="the bag directory")
    p_play = sub.add_parser(
        "play",
        help="republish a bag with its timing, and /clock",
        description="Republish a bag's messages (raw bytes, recorded QoS) at their recorded times, and /clock "
        "at --clock-hz with the bag's time (nodes with use_sim_time:=true follow it).",
    )
    p_play.add_argument("bag", help="the bag directory")
    p_play.add_argument("--rate", type=float, default=1.0, help="time scale: 2 plays twice as fast (default 1)")
    p_play.add_argument(
        "--start-offset", type=float, default=0.0, metavar="S", help="skip the bag's first S seconds (default 0)"
    )
    p_play.add_argument("--topics", nargs="+", metavar="TOPIC", help="play only these topics (full names)")
    p_play.add_argument(
        "--remap", action="append", default=[], metavar="FROM:=TO", help="publish topic FROM as TO (repeatable)"
    )
    p_play.add_argument("--loop", action="store_true", help="start over at the end, until interrupted")
    p_play.add_argument(
        "--clock-hz", type=float, default=100.0, help="rate of /clock (0: do not publish it; default 100)"
    )
    p_play.add_argument(
        "--delay", type=float, default=0.5, metavar="S", help="wait S seconds for subscribers first (default 0.5)"
    )
    p_play.add_argument(
        "--wait-for-subscribers",
        type=float,
        default=0.0,
        metavar="S",
        help="first wait until every played topic has a subscriber, at most S seconds (default 0: do not wait)",
    )
    p_play.add_argument("--node-name", default="egomimic_bag_player", help=argparse.SUPPRESS)
    p_repair = sub.add_parser(
        "repair",
        help="recover a bag whose recorder was killed",
        description="Rewrite the messages of a crashed recording (no metadata.yaml, no MCAP summary) into a "
        "complete bag in place; the original file is kept as <name>.mcap.truncated. A complete bag is left alone.",
    )
    p_repair.add_argument("bag", help="the bag directory")
    p_regress = sub.add_parser(
        "regress",
        help="replay a bag through the frames conversion and the safety gate, compare with the recording",
        description="Feed the bag's joint states, camera health and policy actions through the frames conversion "
        "and the safety gate on the bag's clock, and compare the gate's decisions and transitions (and the "
        "converted commands and forwarded joints, within tolerance) with what the recording holds. Exit 0 when "
        f"identical, {EXIT_DIFFERS} with the differences, {EXIT_ERROR} when the bag cannot be replayed.",
    )
    p_regress.add_argument("bag", help="the bag directory")
    p_regress.add_argument(
        "--params",
        metavar="FILE",
        help="the gate's ROS parameter file during the recording (default: replay.yaml beside the bag's metadata.yaml)",
    )
    p_regress.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="change one gate parameter for the replay (repeatable), e.g. max_translation_step_m=0.001",
    )
    p_regress.add_argument("--namespace", default="eva", help="the robot namespace of the recording (default eva)")
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    try:
        if args.command == "info":
            print(info_text(args.bag))
            return 0
        if args.command == "play":
            if args.rate <= 0:
                parser.error("--rate must be > 0")
            try:
                _parse_remaps(args.remap)
            except argparse.ArgumentTypeError as exc:
                parser.error(str(exc))
            return play(args)
        if args.command == "regress":
            from egomimic_launch.replay import iter_overrides, replay

            report = replay(args.bag, args.params, args.namespace, iter_overrides(args.set))
            print(report.text())
            return 0 if report.ok else EXIT_DIFFERS
        result = repair(args.bag)
        if result.kept is None:
            print(f"{result.path}: complete, nothing to repair ({result.messages} messages)")
        else:
            print(
                f"{result.path}: recovered {result.messages} messages on {len(result.topics)} topics "
                f"(original kept as {result.kept.name}"
                + (f"; read stopped at: {result.stopped_at}" if result.stopped_at else "")
                + ")"
            )
        return 0
    except BagError as exc:
        print(f"egomimic-bag: {exc}", file=sys.stderr)
        return EXIT_ERROR


if __name__ == "__main__":
    raise SystemExit(main())
